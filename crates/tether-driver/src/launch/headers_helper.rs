//! A remote server's `headersHelper` (Claude Code's key): a program whose stdout is a JSON
//! object of headers, for short-lived corporate tokens. Its headers are added to the server's
//! own (replacing one of the same name) on every request of the Streamable HTTP transport and
//! of the hand-off bridge; the program runs before the first request, again when its headers
//! are about to expire ([`fresh_for`]: a JWT's `exp` less [`EXPIRY_MARGIN`], at most an
//! hour; else [`REFRESH_AFTER`]), and at once when the server answers 401 (one retry per request).
//! Requests that need fresh headers at the same moment share one run.
//!
//! The program runs without a shell (its words were split when the config was read; nothing
//! is expanded), stdin closed, stderr passed through (its messages are the user's), with
//! tether's environment plus `TETHER_MCP_SERVER_NAME` and `TETHER_MCP_SERVER_URL` (and
//! Claude Code's `CLAUDE_CODE_MCP_SERVER_NAME`/`_URL`, so helpers written for it work; the URL
//! only when it holds no secret). It must end within [`HELPER_TIMEOUT`] with status 0 and at
//! most [`MAX_OUTPUT`] bytes of output. Every value it gives is a secret: registered for
//! masking in logs, marked sensitive, and never shown in an error (errors name headers only).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use reqwest::header::{HeaderName, HeaderValue};
use serde_json::Value;
use tether_clock::Clock;
use tether_config::SecretValue;
use tokio::io::AsyncReadExt as _;

/// How long the program may run.
pub const HELPER_TIMEOUT: Duration = Duration::from_secs(10);
/// The most it may write to stdout.
pub const MAX_OUTPUT: usize = 64 * 1024;
/// How long headers without a readable expiry are used before the program runs again.
pub const REFRESH_AFTER: Duration = Duration::from_secs(5 * 60);
/// How long before a JWT's `exp` the program runs again.
pub const EXPIRY_MARGIN: Duration = Duration::from_secs(60);
/// The least time headers are used, however close their expiry (a program that hands out
/// an almost expired token is not run for every request).
const MIN_FRESH: Duration = Duration::from_secs(5);
/// The most time headers are used, however far their expiry.
const MAX_FRESH: Duration = Duration::from_secs(60 * 60);

/// Why the program gave no headers. Never holds what it wrote.
#[derive(Debug, thiserror::Error)]
#[error("the headersHelper of server '{server}' ({program}) {problem}")]
pub struct HelperError {
    server: String,
    program: String,
    problem: String,
}

/// Headers the program gave, and until when they are used.
struct Fetched {
    headers: Vec<(HeaderName, HeaderValue)>,
    fresh_until: Instant,
    generation: u64,
}

/// One remote server's `headersHelper` and the headers it gave last.
pub struct HeadersHelper {
    server: String,
    /// The server's URL, when it holds no secret (for the program's environment).
    url: Option<String>,
    words: Vec<String>,
    clock: Arc<dyn Clock>,
    fetched: std::sync::Mutex<Option<Arc<Fetched>>>,
    /// Held while the program runs.
    running: tokio::sync::Mutex<()>,
    runs: AtomicU64,
}

impl std::fmt::Debug for HeadersHelper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeadersHelper")
            .field("server", &self.server)
            .field("program", &self.words.first())
            .finish_non_exhaustive()
    }
}

impl HeadersHelper {
    /// The helper `words` (a program and its arguments) of `server`, whose URL is `url` when it
    /// holds no secret.
    pub fn new(server: &str, url: Option<&str>, words: Vec<String>, clock: Arc<dyn Clock>) -> Self {
        Self {
            server: server.to_owned(),
            url: url.map(str::to_owned),
            words,
            clock,
            fetched: std::sync::Mutex::new(None),
            running: tokio::sync::Mutex::new(()),
            runs: AtomicU64::new(0),
        }
    }

    /// The helper of `server`, if its config has one (the server's URL passed on only when
    /// it holds no secret), on the system clock.
    pub fn of(server: &tether_config::RenderedServer) -> Option<Arc<Self>> {
        let words = server.options.headers_helper.clone()?;
        let url = match &server.transport {
            tether_config::RenderedTransport::Remote { url, .. } if !url.is_sensitive() => {
                Some(url.expose())
            }
            _ => None,
        };
        Some(Arc::new(Self::new(
            &server.name,
            url.as_deref(),
            words,
            tether_clock::system(),
        )))
    }

    /// How many times the program has run.
    pub fn runs(&self) -> u64 {
        self.runs.load(Ordering::SeqCst)
    }

    fn last(&self) -> Option<Arc<Fetched>> {
        self.fetched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The headers to send now, and their generation (for [`HeadersHelper::renew`]); runs the
    /// program first when there are none yet or they are no longer fresh.
    pub async fn current(&self) -> Result<(u64, Vec<(HeaderName, HeaderValue)>), HelperError> {
        if let Some(fetched) = self.last()
            && self.clock.now() < fetched.fresh_until
        {
            return Ok((fetched.generation, fetched.headers.clone()));
        }
        let _running = self.running.lock().await;
        if let Some(fetched) = self.last()
            && self.clock.now() < fetched.fresh_until
        {
            return Ok((fetched.generation, fetched.headers.clone()));
        }
        let fetched = self.run().await?;
        Ok((fetched.generation, fetched.headers.clone()))
    }

    /// After the server refused headers of `generation` (401): runs the program again, unless
    /// another request already did.
    pub async fn renew(&self, generation: u64) -> Result<(), HelperError> {
        let _running = self.running.lock().await;
        if self.last().is_some_and(|f| f.generation != generation) {
            return Ok(());
        }
        tracing::debug!(server = %self.server, "headers refused (401); running the headersHelper again");
        self.run().await.map(drop)
    }

    fn failed(&self, problem: impl Into<String>) -> HelperError {
        HelperError {
            server: self.server.clone(),
            program: self.words.first().cloned().unwrap_or_default(),
            problem: problem.into(),
        }
    }

    /// Runs the program and keeps what it gave.
    async fn run(&self) -> Result<Arc<Fetched>, HelperError> {
        let generation = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        let output = self.output().await?;
        let headers = self.parse(&output)?;
        let now = self.clock.now();
        let fresh = fresh_for(&headers, self.clock.now_utc().unix_timestamp());
        let fetched = Arc::new(Fetched {
            headers,
            fresh_until: now + fresh,
            generation,
        });
        *self
            .fetched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::clone(&fetched));
        Ok(fetched)
    }

    async fn output(&self) -> Result<zeroize::Zeroizing<Vec<u8>>, HelperError> {
        let Some((program, args)) = self.words.split_first() else {
            return Err(self.failed("names no program"));
        };
        let mut command = tokio::process::Command::new(program);
        command
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .env("TETHER_MCP_SERVER_NAME", &self.server)
            .env("CLAUDE_CODE_MCP_SERVER_NAME", &self.server)
            .kill_on_drop(true);
        if let Some(url) = &self.url {
            command
                .env("TETHER_MCP_SERVER_URL", url)
                .env("CLAUDE_CODE_MCP_SERVER_URL", url);
        }
        let mut child = command
            .spawn()
            .map_err(|error| self.failed(format!("could not be started: {error}")))?;
        let mut stdout = child
            .stdout
            .take()
            .ok_or_else(|| self.failed("gave no output pipe"))?;
        let work = async {
            let mut output = zeroize::Zeroizing::new(Vec::new());
            (&mut stdout)
                .take(MAX_OUTPUT as u64 + 1)
                .read_to_end(&mut output)
                .await
                .map_err(|error| self.failed(format!("output could not be read: {error}")))?;
            drop(stdout);
            let status = child
                .wait()
                .await
                .map_err(|error| self.failed(format!("could not be waited for: {error}")))?;
            Ok::<_, HelperError>((output, status))
        };
        let (output, status) =
            tokio::time::timeout(HELPER_TIMEOUT, work)
                .await
                .map_err(|_| {
                    self.failed(format!(
                        "did not finish within {} s; it was stopped",
                        HELPER_TIMEOUT.as_secs()
                    ))
                })??;
        if !status.success() {
            return Err(self.failed(format!("exited with {status}")));
        }
        if output.len() > MAX_OUTPUT {
            return Err(self.failed(format!("wrote more than {MAX_OUTPUT} bytes")));
        }
        Ok(output)
    }

    /// The headers of `output`: a JSON object whose values are strings, each a valid header.
    fn parse(&self, output: &[u8]) -> Result<Vec<(HeaderName, HeaderValue)>, HelperError> {
        let not_object = || {
            self.failed(
                "did not write a JSON object of headers (e.g. {\"Authorization\": \"Bearer …\"})",
            )
        };
        let Ok(Value::Object(object)) = serde_json::from_slice::<Value>(output) else {
            return Err(not_object());
        };
        let mut headers = Vec::with_capacity(object.len());
        for (name, value) in &object {
            let Value::String(text) = value else {
                return Err(
                    self.failed(format!("gave header '{name}' a value that is not a string"))
                );
            };
            let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                self.failed(format!("gave '{name}', which is not a valid header name"))
            })?;
            let secret = SecretValue::new(text.clone());
            tether_log::register([&secret]);
            let Ok(mut value) = HeaderValue::from_str(secret.expose()) else {
                return Err(self.failed(format!(
                    "gave header '{name}' a value with a character HTTP does not allow (a line break or control character)"
                )));
            };
            value.set_sensitive(true);
            headers.push((header, value));
        }
        Ok(headers)
    }
}

/// How long `headers` are used: until [`EXPIRY_MARGIN`] before the earliest `exp` of a JWT
/// among them (a value that is one, or `Bearer` and one), at least [`MIN_FRESH`] and at most
/// an hour; else [`REFRESH_AFTER`]. `now` is the wall clock in Unix seconds.
pub fn fresh_for(headers: &[(HeaderName, HeaderValue)], now: i64) -> Duration {
    let expiry = headers
        .iter()
        .filter_map(|(_, value)| jwt_expiry(value.to_str().ok()?))
        .min();
    let Some(expiry) = expiry else {
        return REFRESH_AFTER;
    };
    let left = u64::try_from(expiry.saturating_sub(now)).unwrap_or(0);
    Duration::from_secs(left)
        .saturating_sub(EXPIRY_MARGIN)
        .clamp(MIN_FRESH, MAX_FRESH)
}

/// The `exp` claim of `value` when it is a JWT (`Bearer` before it or not).
fn jwt_expiry(value: &str) -> Option<i64> {
    let token = value.strip_prefix("Bearer ").unwrap_or(value).trim();
    let mut parts = token.split('.');
    let (_header, payload, _signature) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: Value = serde_json::from_slice(&payload).ok()?;
    claims.get("exp")?.as_i64()
}

/// Sends a request with the helper's headers of this moment (`send` adds them to its own),
/// and once more with fresh ones when `unauthorized` finds the outcome a 401. Without a
/// helper, `send` gets none. A helper that fails gives `failed`'s outcome.
pub async fn send_with_helper<R, Send, Sending>(
    helper: Option<&HeadersHelper>,
    send: Send,
    unauthorized: impl Fn(&R) -> bool,
    failed: impl FnOnce(HelperError) -> R,
) -> R
where
    Send: Fn(Vec<(HeaderName, HeaderValue)>) -> Sending,
    Sending: Future<Output = R>,
{
    let Some(helper) = helper else {
        return send(Vec::new()).await;
    };
    let (generation, headers) = match helper.current().await {
        Ok(current) => current,
        Err(error) => return failed(error),
    };
    let outcome = send(headers).await;
    if !unauthorized(&outcome) {
        return outcome;
    }
    if let Err(error) = helper.renew(generation).await {
        tracing::warn!("{}", error);
        return outcome;
    }
    match helper.current().await {
        Ok((_, headers)) => send(headers).await,
        Err(error) => failed(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(exp: i64) -> String {
        let part = |json: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json);
        format!(
            "{}.{}.sig",
            part(r#"{"alg":"none"}"#),
            part(&format!(r#"{{"exp":{exp}}}"#))
        )
    }

    fn header(value: &str) -> Vec<(HeaderName, HeaderValue)> {
        vec![(
            HeaderName::from_static("authorization"),
            HeaderValue::from_str(value).expect("a header value"),
        )]
    }

    #[test]
    fn headers_are_fresh_until_a_minute_before_their_jwt_expires() {
        let now = 1_800_000_000;
        let fresh = |value: &str| fresh_for(&header(value), now);
        assert_eq!(
            fresh(&format!("Bearer {}", jwt(now + 600))),
            Duration::from_secs(540)
        );
        assert_eq!(fresh(&jwt(now + 120)), Duration::from_secs(60));
        // Almost or already expired: still a few seconds, not a run per request.
        assert_eq!(fresh(&jwt(now + 30)), MIN_FRESH);
        assert_eq!(fresh(&jwt(now - 30)), MIN_FRESH);
        // A long-lived token: an hour; no JWT at all: the refresh period.
        assert_eq!(fresh(&jwt(now + 86_400)), MAX_FRESH);
        assert_eq!(fresh("Bearer opaque-token"), REFRESH_AFTER);
        assert_eq!(fresh("a.b.c"), REFRESH_AFTER);
    }
}
