//! [`HttpManagedMcpClient`]: the managed MCP client over HTTPS (reqwest, rustls).

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;

use reqwest::header::{ACCEPT, HeaderValue};
use tracing::{debug, info};
use uuid::Uuid;
use zeroize::Zeroizing;

use crate::batch;
use crate::client::{DEFAULT_CONCURRENCY, ManagedMcpClient};
use crate::config::ManagedMcpClientConfig;
use crate::env::api_key_from_env;
use crate::error::{DecodeReason, ManagedMcpError, TransportErrorKind};
use crate::operation;
use crate::redact;
use crate::response::{self, Failure};
use crate::retry::{self, RetryPolicy};
use tether_secret::SecretValue;

/// The largest response body read; a larger one is a [`DecodeReason::TooLarge`] error.
pub const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// How much of an error response's body is read for the excerpt.
const ERROR_BODY_READ_BYTES: usize = 4 * 1024;

/// Settings of an [`HttpManagedMcpClient`]. Start from [`HttpClientSettings::new`] (or
/// [`HttpClientSettings::from_env`]) and change fields as needed.
///
/// `Debug` shows the endpoint without user info or query and masks the API key.
#[derive(Clone)]
pub struct HttpClientSettings {
    /// The GraphQL endpoint, `http` or `https`, without user info (credentials belong in
    /// `api_key`).
    pub endpoint: reqwest::Url,
    /// Sent as `Authorization: Bearer <key>` when set; no `Authorization` header otherwise.
    pub api_key: Option<SecretValue>,
    /// The `User-Agent` header; defaults to [`HttpClientSettings::default_user_agent`].
    pub user_agent: String,
    /// Limit on establishing a connection (TCP and TLS).
    pub connect_timeout: Duration,
    /// Limit on one whole attempt: connect, send, and read the full response.
    pub timeout: Duration,
    /// Attempts and backoff for transient failures.
    pub retry: RetryPolicy,
    /// How many uids [`ManagedMcpClient::resolve_many`] resolves at once (at least 1).
    pub concurrency: usize,
    /// Limit on a whole resolution, retries and backoff included: one uid for
    /// [`ManagedMcpClient::create_managed_mcp_client_config`], every uid together for
    /// [`ManagedMcpClient::resolve_many`]. No retry starts that could not finish in time.
    pub deadline: Duration,
    /// How many uids [`ManagedMcpClient::resolve_many`] sends in one GraphQL operation (one
    /// aliased field each); 1 sends one operation per uid. A server that refuses a batch gets
    /// halves, and the size it took is kept for the client's life.
    pub batch_size: usize,
}

impl HttpClientSettings {
    /// Default [`HttpClientSettings::connect_timeout`].
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
    /// Default [`HttpClientSettings::timeout`].
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
    /// Default [`HttpClientSettings::deadline`].
    pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(30);
    /// Default [`HttpClientSettings::batch_size`].
    pub const DEFAULT_BATCH_SIZE: usize = 32;

    /// Defaults for `endpoint`, without an API key.
    #[must_use]
    pub fn new(endpoint: reqwest::Url) -> Self {
        Self {
            endpoint,
            api_key: None,
            user_agent: Self::default_user_agent(),
            connect_timeout: Self::DEFAULT_CONNECT_TIMEOUT,
            timeout: Self::DEFAULT_TIMEOUT,
            retry: RetryPolicy::default(),
            concurrency: DEFAULT_CONCURRENCY,
            deadline: Self::DEFAULT_DEADLINE,
            batch_size: Self::DEFAULT_BATCH_SIZE,
        }
    }

    /// Defaults for `endpoint`, with the API key read by [`crate::api_key_from_env`]
    /// (`TETHER_API_KEY` or `TETHER_API_KEY_FILE`).
    pub fn from_env(endpoint: reqwest::Url) -> Result<Self, ManagedMcpError> {
        Ok(Self {
            api_key: api_key_from_env()?,
            ..Self::new(endpoint)
        })
    }

    /// `tether/<version of this crate>`.
    #[must_use]
    pub fn default_user_agent() -> String {
        format!("tether/{}", env!("CARGO_PKG_VERSION"))
    }
}

/// The managed MCP client over HTTP. One `reqwest::Client` (and its connection pool) serves
/// every call; cheap to share behind an `Arc`.
pub struct HttpManagedMcpClient {
    http: reqwest::Client,
    endpoint: reqwest::Url,
    /// Kept to mask it in server text; sent via `authorization`.
    api_key: Option<SecretValue>,
    /// `Bearer <key>`, built once and marked sensitive.
    authorization: Option<HeaderValue>,
    retry: RetryPolicy,
    concurrency: usize,
    deadline: Duration,
    /// The largest batch to send: the configured size, lowered when a server refuses one.
    batch_limit: AtomicUsize,
}

impl HttpManagedMcpClient {
    /// Validates `settings` and builds the client. Fails with [`ManagedMcpError::Config`] when
    /// the endpoint is not `http(s)`, a limit is zero, the API key is not a valid header value,
    /// or the TLS stack cannot be set up.
    pub fn new(settings: HttpClientSettings) -> Result<Self, ManagedMcpError> {
        let HttpClientSettings {
            endpoint,
            api_key,
            user_agent,
            connect_timeout,
            timeout,
            retry,
            concurrency,
            deadline,
            batch_size,
        } = settings;
        let config = |reason: &str| ManagedMcpError::Config {
            reason: reason.to_owned(),
        };
        if !matches!(endpoint.scheme(), "http" | "https") {
            return Err(config("the endpoint URL must use http or https"));
        }
        if !endpoint.username().is_empty() || endpoint.password().is_some() {
            return Err(config(
                "the endpoint URL must not carry credentials; set the API key instead",
            ));
        }
        if retry.max_attempts == 0 {
            return Err(config("max attempts must be at least 1"));
        }
        if concurrency == 0 {
            return Err(config("concurrency must be at least 1"));
        }
        if batch_size == 0 {
            return Err(config("batch size must be at least 1"));
        }
        if connect_timeout.is_zero() || timeout.is_zero() || deadline.is_zero() {
            return Err(config("timeouts must be greater than zero"));
        }
        let authorization = match &api_key {
            Some(key) => {
                let bearer = Zeroizing::new(format!("Bearer {}", key.expose()));
                let mut value = HeaderValue::from_str(&bearer).map_err(|_| {
                    config("the API key contains characters not allowed in an HTTP header")
                })?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        let http = reqwest::Client::builder()
            .user_agent(user_agent)
            .connect_timeout(connect_timeout)
            .timeout(timeout)
            // A redirect would carry the request (and its bearer token) elsewhere: surface
            // it as an HTTP error instead.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|error| ManagedMcpError::Config {
                reason: format!("cannot build the HTTP client: {error}"),
            })?;
        Ok(Self {
            http,
            endpoint,
            api_key,
            authorization,
            retry,
            concurrency,
            deadline,
            batch_limit: AtomicUsize::new(batch_size),
        })
    }

    /// Known secrets to mask in server text.
    fn secrets(&self) -> Vec<&SecretValue> {
        self.api_key.iter().collect()
    }

    /// One HTTP exchange for `uid`: send the operation, classify the answer.
    async fn attempt(
        &self,
        uid: Uuid,
        attempt: u32,
        operation: &impl serde::Serialize,
    ) -> Result<ManagedMcpClientConfig, Failure> {
        let body = self.exchange(&uid, attempt, operation).await?;
        response::decode(uid, &body, &self.secrets())
    }

    /// Sends `operation` (for `what`: a uid or a batch, in logs) and returns a 2xx body.
    async fn exchange(
        &self,
        what: &(dyn fmt::Display + Sync),
        attempt: u32,
        operation: &impl serde::Serialize,
    ) -> Result<Zeroizing<Vec<u8>>, Failure> {
        let uid = what;
        let started = Instant::now();
        let mut request = self
            .http
            .post(self.endpoint.clone())
            .header(ACCEPT, "application/json")
            .json(operation);
        if let Some(authorization) = &self.authorization {
            request = request.header(reqwest::header::AUTHORIZATION, authorization.clone());
        }
        let mut response = request.send().await.map_err(|error| {
            let kind = classify(&error);
            debug!(%uid, attempt, elapsed_ms = elapsed_ms(started), ?kind, "managed MCP request failed");
            Failure::Transport(kind)
        })?;
        let status = response.status();
        debug!(%uid, attempt, status = status.as_u16(), elapsed_ms = elapsed_ms(started), "managed MCP endpoint answered");

        if !status.is_success() {
            let retry_after = retry::retry_after(response.headers());
            let head = read_body(&mut response, ERROR_BODY_READ_BYTES, Overflow::Truncate)
                .await
                .unwrap_or_default();
            return Err(Failure::Status {
                status: status.as_u16(),
                retry_after,
                body_excerpt: redact::excerpt(&String::from_utf8_lossy(&head), &self.secrets()),
            });
        }
        read_body(&mut response, MAX_RESPONSE_BYTES, Overflow::Fail).await
    }

    /// `failure` as the error for `uid`: a 401 says when no API key is configured.
    fn error_for(&self, failure: Failure, uid: Uuid, attempts: u32) -> ManagedMcpError {
        let mut error = failure.into_error(uid, attempts);
        if let ManagedMcpError::Http {
            status: 401,
            missing_api_key,
            ..
        } = &mut error
        {
            *missing_api_key = self.api_key.is_none();
        }
        error
    }

    /// Resolves `uid` with retries, giving up at `deadline` (shared by a whole
    /// `resolve_many`): an attempt still running then is dropped, and no retry starts whose
    /// backoff would end after it.
    async fn resolve_until(
        &self,
        uid: Uuid,
        deadline: Instant,
    ) -> Result<ManagedMcpClientConfig, ManagedMcpError> {
        let operation = operation::build(uid);
        let started = Instant::now();
        let mut attempt = 1;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let outcome = match tokio::time::timeout(
                remaining,
                self.attempt(uid, attempt, &operation),
            )
            .await
            {
                Ok(outcome) => outcome,
                Err(_) => {
                    debug!(%uid, attempt, elapsed_ms = elapsed_ms(started), "managed MCP resolution deadline reached");
                    return Err(ManagedMcpError::Deadline {
                        uid,
                        deadline: self.deadline,
                        attempts: attempt,
                    });
                }
            };
            match outcome {
                Ok(config) => {
                    debug!(%uid, attempt, elapsed_ms = elapsed_ms(started), "managed MCP client config resolved");
                    return Ok(config);
                }
                Err(failure)
                    if failure.is_transient()
                        && attempt < self.retry.max_attempts
                        && Instant::now() < deadline =>
                {
                    let delay = self.retry.delay_before(attempt, failure.retry_after());
                    if Instant::now() + delay >= deadline {
                        debug!(%uid, attempt, status = failure.status(), elapsed_ms = elapsed_ms(started), "no time left for another attempt before the deadline");
                        return Err(failure.into_error(uid, attempt));
                    }
                    info!(
                        %uid,
                        attempt,
                        status = failure.status(),
                        elapsed_ms = elapsed_ms(started),
                        delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                        "transient failure; retrying managed MCP request"
                    );
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                Err(failure) => {
                    debug!(%uid, attempt, status = failure.status(), elapsed_ms = elapsed_ms(started), "managed MCP resolution failed");
                    return Err(self.error_for(failure, uid, attempt));
                }
            }
        }
    }
}

impl HttpManagedMcpClient {
    /// Resolves `uids` in batches of the current limit, at most `concurrency` batches at a
    /// time; results in input order.
    fn resolve_in_batches<'a>(
        &'a self,
        uids: &'a [Uuid],
        deadline: Instant,
    ) -> futures_util::future::BoxFuture<'a, Vec<Result<ManagedMcpClientConfig, ManagedMcpError>>>
    {
        let size = self.batch_limit.load(Ordering::Relaxed).max(1);
        let chunks: Vec<Vec<Uuid>> = uids.chunks(size).map(<[Uuid]>::to_vec).collect();
        Box::pin(async move {
            let batches: Vec<Vec<_>> = futures_util::stream::iter(chunks)
                .map(|chunk| async move { self.resolve_batch(&chunk, deadline).await })
                .buffered(self.concurrency.max(1))
                .collect()
                .await;
            batches.into_iter().flatten().collect()
        })
    }

    /// Resolves one batch in one operation, with the single call's retry policy for a failure
    /// of the whole request. A batch the server refuses (an error without a path, or HTTP
    /// 400/413) is resolved again in halves, and the half size is kept for later batches; a
    /// batch of one is a single call.
    async fn resolve_batch(
        &self,
        uids: &[Uuid],
        deadline: Instant,
    ) -> Vec<Result<ManagedMcpClientConfig, ManagedMcpError>> {
        if let [uid] = uids {
            return vec![self.resolve_until(*uid, deadline).await];
        }
        let label = format!("batch of {}", uids.len());
        let operation = batch::build(uids);
        let started = Instant::now();
        let mut attempt = 1;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let Ok(outcome) =
                tokio::time::timeout(remaining, self.exchange(&label, attempt, &operation)).await
            else {
                debug!(
                    uids = uids.len(),
                    attempt,
                    elapsed_ms = elapsed_ms(started),
                    "managed MCP resolution deadline reached"
                );
                return uids
                    .iter()
                    .map(|uid| {
                        Err(ManagedMcpError::Deadline {
                            uid: *uid,
                            deadline: self.deadline,
                            attempts: attempt,
                        })
                    })
                    .collect();
            };
            let failure = match outcome {
                Ok(body) => match batch::split(&body, uids.len()) {
                    Ok(bodies) => {
                        debug!(
                            uids = uids.len(),
                            attempt,
                            elapsed_ms = elapsed_ms(started),
                            "managed MCP batch answered"
                        );
                        let secrets = self.secrets();
                        return uids
                            .iter()
                            .zip(bodies)
                            .map(|(uid, body)| {
                                response::decode(*uid, &body, &secrets)
                                    .map_err(|failure| self.error_for(failure, *uid, attempt))
                            })
                            .collect();
                    }
                    Err(refused) => {
                        debug!(
                            uids = uids.len(),
                            messages = refused.messages.len(),
                            "the managed MCP server refused a batch; splitting it"
                        );
                        return self.resolve_halves(uids, deadline).await;
                    }
                },
                Err(Failure::Status {
                    status: 400 | 413, ..
                }) => {
                    debug!(
                        uids = uids.len(),
                        "the managed MCP server refused a batch by status; splitting it"
                    );
                    return self.resolve_halves(uids, deadline).await;
                }
                Err(failure) => failure,
            };
            if failure.is_transient()
                && attempt < self.retry.max_attempts
                && Instant::now() < deadline
            {
                let delay = self.retry.delay_before(attempt, failure.retry_after());
                if Instant::now() + delay < deadline {
                    info!(
                        uids = uids.len(),
                        attempt,
                        status = failure.status(),
                        delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                        "transient failure; retrying the managed MCP batch"
                    );
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                    continue;
                }
            }
            return uids
                .iter()
                .map(|uid| Err(self.error_for(failure.clone(), *uid, attempt)))
                .collect();
        }
    }

    /// After a refusal: batches of half the size (kept for the client's life).
    async fn resolve_halves(
        &self,
        uids: &[Uuid],
        deadline: Instant,
    ) -> Vec<Result<ManagedMcpClientConfig, ManagedMcpError>> {
        let half = uids.len().div_ceil(2).min(uids.len() - 1).max(1);
        self.batch_limit.fetch_min(half, Ordering::Relaxed);
        self.resolve_in_batches(uids, deadline).await
    }
}

#[async_trait::async_trait]
impl ManagedMcpClient for HttpManagedMcpClient {
    async fn create_managed_mcp_client_config(
        &self,
        uid: Uuid,
    ) -> Result<ManagedMcpClientConfig, ManagedMcpError> {
        self.resolve_until(uid, Instant::now() + self.deadline)
            .await
    }

    fn max_concurrency(&self) -> usize {
        self.concurrency
    }

    /// Like the trait's default, with one deadline for every uid together, and the uids sent
    /// in batches of up to [`HttpClientSettings::batch_size`] (one operation each).
    async fn resolve_many(
        &self,
        uids: &[Uuid],
    ) -> Vec<Result<ManagedMcpClientConfig, ManagedMcpError>> {
        let deadline = Instant::now() + self.deadline;
        self.resolve_in_batches(uids, deadline).await
    }
}

impl fmt::Debug for HttpManagedMcpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpManagedMcpClient")
            .field("endpoint", &redacted_endpoint(&self.endpoint))
            .field("api_key", &self.api_key)
            .field("retry", &self.retry)
            .field("concurrency", &self.concurrency)
            .field("deadline", &self.deadline)
            .field("batch_limit", &self.batch_limit.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for HttpClientSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self {
            endpoint,
            api_key,
            user_agent,
            connect_timeout,
            timeout,
            retry,
            concurrency,
            deadline,
            batch_size,
        } = self;
        f.debug_struct("HttpClientSettings")
            .field("endpoint", &redacted_endpoint(endpoint))
            .field("api_key", api_key)
            .field("user_agent", user_agent)
            .field("connect_timeout", connect_timeout)
            .field("timeout", timeout)
            .field("retry", retry)
            .field("concurrency", concurrency)
            .field("deadline", deadline)
            .field("batch_size", batch_size)
            .finish()
    }
}

/// The endpoint as scheme, host, port and path: user info and query may hold secrets.
fn redacted_endpoint(endpoint: &reqwest::Url) -> String {
    format!(
        "{}{}",
        endpoint.origin().ascii_serialization(),
        endpoint.path()
    )
}

/// What [`read_body`] does at the size limit.
#[derive(Clone, Copy)]
enum Overflow {
    /// Stop reading and keep what was read (error excerpts).
    Truncate,
    /// Fail with [`DecodeReason::TooLarge`].
    Fail,
}

/// Reads the body into a buffer that is zeroized on drop, including the buffers it outgrows.
async fn read_body(
    response: &mut reqwest::Response,
    limit: usize,
    overflow: Overflow,
) -> Result<Zeroizing<Vec<u8>>, Failure> {
    let expected = response
        .content_length()
        .and_then(|length| usize::try_from(length).ok())
        .unwrap_or(0);
    let mut body = Zeroizing::new(Vec::with_capacity(expected.min(limit)));
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|error| Failure::Transport(classify(&error)))?
    {
        let room = limit - body.len();
        if chunk.len() > room {
            if let Overflow::Fail = overflow {
                return Err(Failure::Decode(DecodeReason::TooLarge {
                    limit_bytes: limit,
                }));
            }
            append(&mut body, &chunk[..room]);
            break;
        }
        append(&mut body, &chunk);
    }
    Ok(body)
}

/// Appends without letting `Vec` reallocate: a grown buffer replaces the old one, which is
/// zeroized as it drops.
fn append(body: &mut Zeroizing<Vec<u8>>, bytes: &[u8]) {
    let needed = body.len() + bytes.len();
    if needed > body.capacity() {
        let mut grown = Zeroizing::new(Vec::with_capacity(needed.max(body.capacity() * 2)));
        grown.extend_from_slice(body);
        *body = grown;
    }
    body.extend_from_slice(bytes);
}

/// Classifies a reqwest error without keeping its message (which names the URL).
fn classify(error: &reqwest::Error) -> TransportErrorKind {
    if error.is_timeout() {
        TransportErrorKind::Timeout
    } else if is_tls(error) {
        TransportErrorKind::Tls
    } else if error.is_connect() {
        TransportErrorKind::Connect
    } else {
        TransportErrorKind::Other
    }
}

/// rustls failures reach us as an `io::Error` of kind `InvalidData`, possibly wrapped in
/// another `io::Error` (whose `source()` skips the wrapped error, so `get_ref` is followed).
fn is_tls(error: &reqwest::Error) -> bool {
    let mut next = std::error::Error::source(error);
    while let Some(cause) = next {
        next = match cause.downcast_ref::<std::io::Error>() {
            Some(io) if io.kind() == std::io::ErrorKind::InvalidData => return true,
            Some(io) => match io.get_ref() {
                Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
                None => cause.source(),
            },
            None => cause.source(),
        };
    }
    false
}

fn elapsed_ms(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}
