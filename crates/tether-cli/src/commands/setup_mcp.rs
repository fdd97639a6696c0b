//! `tether setup-mcp` (the setup tools over stdio) and `tether secrets submit` (a value for
//! one of its pages, typed on a terminal).
//!
//! A running setup server announces its page's address in `$TETHER_HOME/setup-mcp/PID`
//! (mode 0600, removed on exit), so `secrets submit NONCE` can find it. The file holds the
//! address only; nonces and values stay in the server's memory.

use std::io::{IsTerminal, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use rmcp::ServiceExt;
use tether_config::SecretValue;
use tether_registry::Registries;
use zeroize::Zeroizing;

use crate::cli::SetupMcpArgs;
use crate::exit::{FAILED, OK, UsageError};
use crate::setup_mcp::refs::{IDLE_TTL, Refs};
use crate::setup_mcp::{Settings, SetupServer, page};
use crate::{secrets, settings};

/// The directory where running setup servers announce their page.
fn pages_dir() -> anyhow::Result<PathBuf> {
    Ok(settings::data_dir()?.join("setup-mcp"))
}

/// Removes the announcement file when the server ends.
struct Announcement(PathBuf);

impl Drop for Announcement {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn announce(address: std::net::SocketAddr) -> anyhow::Result<Announcement> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let dir = pages_dir()?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(std::process::id().to_string());
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("writing {}", path.display()))?;
    writeln!(file, "{address}").with_context(|| format!("writing {}", path.display()))?;
    Ok(Announcement(path))
}

/// `tether setup-mcp`.
pub async fn setup_mcp(args: &SetupMcpArgs) -> anyhow::Result<u8> {
    let registries = Registries::new(settings::registry_settings(false)?)?;
    let refs = Arc::new(Refs::new(IDLE_TTL));
    let settings = |address: std::net::SocketAddr| Settings {
        registries,
        test_timeout_secs: args.timeout,
        elicitation_timeout: Duration::from_secs(args.elicitation_timeout.max(1)),
        page_base: format!("http://{address}"),
    };
    if let (Some(listen), Some(token_file)) = (args.listen, &args.token_file) {
        return http::serve(listen, token_file, refs, settings).await;
    }
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .context("opening the secret entry page on 127.0.0.1")?;
    let address = page::serve(listener, refs.clone())?;
    let _announcement = announce(address)?;
    tracing::info!("secret entry page on http://{address}");
    let server = SetupServer::new(settings(address), refs);
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .context("starting the MCP session on stdin/stdout")?;
    let work = running.waiting();
    match super::until_signal(work).await? {
        Ok(_) => Ok(OK),
        Err(signal) => Err(signal.into()),
    }
}

/// `--listen`: Streamable HTTP at `/mcp` behind a bearer token, the entry pages beside it.
mod http {
    use std::net::SocketAddr;
    use std::path::Path;
    use std::sync::Arc;

    use anyhow::Context;
    use axum::Router;
    use axum::extract::{Request, State};
    use axum::http::{StatusCode, header};
    use axum::middleware::{self, Next};
    use axum::response::{IntoResponse, Response};
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
    use tether_config::SecretValue;

    use super::announce;
    use crate::exit::{OK, UsageError};
    use crate::setup_mcp::page::{self, Admission};
    use crate::setup_mcp::refs::Refs;
    use crate::setup_mcp::{Settings, SetupServer};

    /// The path of the MCP endpoint.
    pub const MCP_PATH: &str = "/mcp";

    struct Gate {
        admission: Admission,
        token: SecretValue,
    }

    /// Equal in time independent of where they differ.
    fn same(a: &[u8], b: &[u8]) -> bool {
        a.len() == b.len() && a.iter().zip(b).fold(0_u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }

    /// Host must be this listener; an Origin, when sent, too; then the bearer token.
    async fn admit(State(gate): State<Arc<Gate>>, request: Request, next: Next) -> Response {
        let headers = request.headers();
        if !gate.admission.host_ok(headers) {
            return (StatusCode::MISDIRECTED_REQUEST, "unexpected Host header\n").into_response();
        }
        if headers.contains_key(header::ORIGIN) && !gate.admission.origin_ok(headers) {
            return (StatusCode::FORBIDDEN, "foreign Origin\n").into_response();
        }
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default();
        if !same(presented.as_bytes(), gate.token.expose().as_bytes()) {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "a bearer token is required (the one in --token-file)\n",
            )
                .into_response();
        }
        next.run(request).await
    }

    fn read_token(path: &Path) -> anyhow::Result<SecretValue> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            UsageError::new(format!(
                "cannot read the token file {}: {e}",
                path.display()
            ))
        })?;
        let token = SecretValue::new(text.trim().to_owned());
        if token.expose().len() < 16 {
            return Err(UsageError::new(format!(
                "the token in {} is shorter than 16 characters; use a long random one (e.g. openssl rand -hex 32)",
                path.display()
            ))
            .into());
        }
        Ok(token)
    }

    /// Serves until SIGINT/SIGTERM.
    pub async fn serve(
        listen: SocketAddr,
        token_file: &Path,
        refs: Arc<Refs>,
        settings: impl FnOnce(SocketAddr) -> Settings,
    ) -> anyhow::Result<u8> {
        if !listen.ip().is_loopback() {
            return Err(UsageError::new(format!(
                "--listen {listen}: tether setup-mcp listens on a loopback address only (127.0.0.1 or ::1)"
            ))
            .into());
        }
        let token = read_token(token_file)?;
        tether_log::register([&token]);
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("binding {listen}"))?;
        let address = listener.local_addr().context("reading the bound address")?;
        let _announcement = announce(address)?;
        let admission = Admission::for_address(address);
        let server = SetupServer::new(settings(address), refs.clone());
        let shutdown = tokio_util::sync::CancellationToken::new();
        let service = StreamableHttpService::new(
            move || Ok(server.clone()),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default().with_cancellation_token(shutdown.clone()),
        );
        let gate = Arc::new(Gate {
            admission: admission.clone(),
            token,
        });
        let mcp = Router::new()
            .nest_service(MCP_PATH, service)
            .layer(middleware::from_fn_with_state(gate, admit));
        let app = mcp
            .merge(page::router(refs, admission))
            .fallback(page::not_found);
        eprintln!(
            "tether setup-mcp: MCP on http://{address}{MCP_PATH}, entry pages on http://{address}/secret/…"
        );
        let stopped = super::super::until_signal(axum::serve(listener, app).into_future()).await?;
        shutdown.cancel();
        match stopped {
            Ok(served) => {
                served.context("serving HTTP")?;
                Ok(OK)
            }
            Err(signal) => Err(signal.into()),
        }
    }
}

/// Percent-encodes `text` for a form body (everything but unreserved characters).
fn form_encode(text: &str) -> Zeroizing<String> {
    let mut out = Zeroizing::new(String::with_capacity(text.len() * 3));
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// POSTs `value` to `http://address/secret/nonce` as its own page would: the status code.
fn post(address: &str, nonce: &str, value: &SecretValue) -> std::io::Result<u16> {
    let mut stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut body = Zeroizing::new(String::from("value="));
    body.push_str(&form_encode(value.expose()));
    let head = format!(
        "POST /secret/{nonce} HTTP/1.1\r\nHost: {address}\r\nOrigin: http://{address}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    let status = String::from_utf8_lossy(&answer)
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    Ok(status)
}

/// `tether secrets submit NONCE|URL`.
pub fn submit(target: &str, from: Option<&str>) -> anyhow::Result<u8> {
    // A whole URL names its server; a bare nonce is tried on every running one.
    let (addresses, nonce) = match target.strip_prefix("http://") {
        Some(rest) => {
            let (address, path) = rest.split_once('/').unwrap_or((rest, ""));
            let nonce = path.strip_prefix("secret/").unwrap_or_default();
            (vec![address.to_owned()], nonce.to_owned())
        }
        None => {
            let mut addresses = Vec::new();
            if let Ok(entries) = std::fs::read_dir(pages_dir()?) {
                for entry in entries.flatten() {
                    if let Ok(text) = std::fs::read_to_string(entry.path()) {
                        addresses.push(text.trim().to_owned());
                    }
                }
            }
            (addresses, target.trim().to_owned())
        }
    };
    if nonce.is_empty() || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(UsageError::new(format!(
            "{target:?} is neither a page nonce (hex digits) nor a page URL http://127.0.0.1:PORT/secret/NONCE"
        ))
        .into());
    }
    if addresses.is_empty() {
        eprintln!("no tether setup-mcp is running for this TETHER_HOME; nothing was submitted");
        return Ok(FAILED);
    }
    let name = "the value";
    let value = match from {
        Some(source) => secrets::read_one("value", source)?,
        None if std::io::stdin().is_terminal() => secrets::ask("value", Some(name), true)?,
        None => secrets::read_stdin_all("value")?,
    };
    if value.is_empty() {
        return Err(UsageError::new("the value is empty; nothing was submitted").into());
    }
    for address in &addresses {
        match post(address, &nonce, &value) {
            Ok(200) => {
                eprintln!("submitted; the agent can go on");
                return Ok(OK);
            }
            Ok(status) => tracing::debug!("{address} answered {status} for the nonce"),
            Err(error) => tracing::debug!("{address}: {error}"),
        }
    }
    eprintln!(
        "no running tether setup-mcp has a page for that nonce (already used, expired, or never issued); ask the agent to request the value again"
    );
    Ok(FAILED)
}
