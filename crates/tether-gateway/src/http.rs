//! Streamable HTTP at `/mcp` on a loopback address, behind a bearer token.
//!
//! Every request is admitted by `tether_http::admit`, the rule of every listener tether opens:
//! `Host` must name this listener, its port included (421 otherwise: DNS rebinding), an
//! `Origin`, when one is sent, must be this listener too (403), and the bearer token must be
//! given unless the gateway runs `--no-auth` (401). Then rmcp checks its own host and origin
//! lists (looser, so they refuse nothing admitted) and the MCP session.
//!
//! Before rmcp, [`per_request`] does what rmcp does not:
//! - a POST whose `Content-Type` is JSON must hold one JSON-RPC message MCP knows: 400 with a
//!   JSON-RPC error body otherwise (`tether_http::json_rpc`; rmcp answers 415, which says the
//!   content type was wrong);
//! - sessions: rmcp's own idle timer is off (it counted only messages, so it dropped a session
//!   whose one call ran past it, the answer with it). (A 2026-07-28 request, with no session,
//!   opens none and is not counted.) A session is closed once it had no
//!   request for [`HttpOptions::session_idle`] *and* no call running, measured on the
//!   session's clock; at most [`HttpOptions::max_sessions`] are open, and an `initialize`
//!   beyond gets 503 with a JSON-RPC error saying so;
//! - a client that goes away (closes the connection) before its call's answer was written
//!   cancels the call: the server gets `notifications/cancelled`, as when the client sends it;
//! - DELETE with an `Mcp-Session-Id` closes that session after draining it: new calls in it are
//!   refused, and the DELETE is answered when the calls it has running ended (at most
//!   [`DRAIN_LIMIT`], or the call timeout when shorter; calls still running then are cancelled).

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::serve::ListenerExt as _;
use futures_util::StreamExt as _;
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_server::SessionManager as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tether_clock::Clock;
use tether_config::SecretValue;
use tether_http::json_rpc;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::clients::{ClientGone, Clients, RequestGuard};
use crate::error::GatewayError;
use crate::handler::GatewayHandler;
use crate::shared::Shared;

/// The path the MCP endpoint is served at.
pub const MCP_PATH: &str = "/mcp";

/// The longest a DELETE waits for its session's running calls.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(30);

/// The default of [`HttpOptions::session_idle`]: 30 minutes.
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(30 * 60);

/// The default of [`HttpOptions::max_sessions`].
pub const DEFAULT_MAX_SESSIONS: u32 = 100;

const SESSION_HEADER: &str = "mcp-session-id";

/// JSON-RPC's implementation-defined server error: the cap's refusal.
const SERVER_ERROR: i64 = -32000;

/// How the Streamable HTTP endpoint keeps its sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpOptions {
    /// A session with no request for this long, and no call running, is closed: its next
    /// request gets 404 and the client initializes again (`--session-idle`).
    pub session_idle: Duration,
    /// The most sessions open at once; an `initialize` beyond gets 503 (`--max-sessions`).
    pub max_sessions: u32,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            session_idle: DEFAULT_SESSION_IDLE,
            max_sessions: DEFAULT_MAX_SESSIONS,
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The open sessions as the gateway keeps them: when each was last used, the cap.
struct Sessions {
    manager: Arc<LocalSessionManager>,
    options: HttpOptions,
    clock: Arc<dyn Clock>,
    /// Per session the gateway opened: when a request of it last began or ended.
    seen: Mutex<HashMap<String, Instant>>,
    /// Held while an `initialize` is checked against the cap.
    admitting: tokio::sync::Mutex<()>,
    /// `initialize` requests admitted and not yet answered: each may open a session.
    opening: Mutex<usize>,
}

/// An admitted `initialize`: counted against the cap until it was answered.
struct Opening(Arc<Sessions>);

impl Drop for Opening {
    fn drop(&mut self) {
        let mut opening = lock(&self.0.opening);
        *opening = opening.saturating_sub(1);
    }
}

impl Sessions {
    /// Admits an `initialize` unless the open sessions (and those being opened) are at the cap.
    async fn admit(self: &Arc<Self>) -> Option<Opening> {
        let _admitting = self.admitting.lock().await;
        let open = self.manager.sessions.read().await.len();
        let mut opening = lock(&self.opening);
        if open.saturating_add(*opening)
            >= usize::try_from(self.options.max_sessions).unwrap_or(usize::MAX)
        {
            return None;
        }
        *opening += 1;
        Some(Opening(Arc::clone(self)))
    }

    /// `session` was opened, or used, now.
    fn opened(&self, session: &str) {
        lock(&self.seen).insert(session.to_owned(), self.clock.now());
    }

    /// `session` is used now (a session the gateway does not hold is not remembered).
    fn touch(&self, session: &str) {
        if let Some(seen) = lock(&self.seen).get_mut(session) {
            *seen = self.clock.now();
        }
    }

    fn forget(&self, session: &str) {
        lock(&self.seen).remove(session);
    }

    /// Closes every session idle for `session_idle` with no call running; returns how long
    /// until the next one could be due.
    async fn close_idle(&self, clients: &Clients) -> Duration {
        let limit = self.options.session_idle;
        let open: HashSet<String> = self
            .manager
            .sessions
            .read()
            .await
            .keys()
            .map(ToString::to_string)
            .collect();
        let now = self.clock.now();
        let mut next = limit;
        let mut idle = Vec::new();
        {
            let mut seen = lock(&self.seen);
            // Closed meanwhile by rmcp (the client's transport closed) or by a DELETE.
            seen.retain(|session, _| open.contains(session));
            for (session, last) in seen.iter() {
                if clients.running_in(session) > 0 {
                    continue;
                }
                let quiet = now.saturating_duration_since(*last);
                if quiet >= limit {
                    idle.push(session.clone());
                } else {
                    next = next.min(limit - quiet);
                }
            }
            for session in &idle {
                seen.remove(session);
            }
        }
        for session in idle {
            tracing::info!(
                "closing a Streamable HTTP session idle for {} s",
                limit.as_secs_f64()
            );
            if let Err(error) = self.manager.close_session(&session.into()).await {
                tracing::debug!(%error, "closing an idle session");
            }
        }
        next
    }
}

/// What every request's middleware shares.
struct HttpState {
    shared: Arc<Shared>,
    sessions: Arc<Sessions>,
    /// What a POST body must be (rmcp's size limit, rmcp's message type).
    body: json_rpc::BodyCheck,
}

/// Serves `shared` on `listener` until `shutdown` is cancelled.
pub(crate) async fn serve(
    shared: Arc<Shared>,
    listener: tokio::net::TcpListener,
    tokens: Vec<SecretValue>,
    options: HttpOptions,
    shutdown: CancellationToken,
) -> Result<(), GatewayError> {
    let address = listener.local_addr().map_err(|source| GatewayError::Io {
        what: "reading the bound address".to_owned(),
        source,
    })?;
    let config = StreamableHttpServerConfig::default()
        .with_cancellation_token(shutdown.child_token())
        .with_allowed_hosts(["localhost", "127.0.0.1", "::1", "[::1]"])
        .with_allowed_origins(origins(address));
    let max_body = config.max_request_body_bytes;
    let mut manager = LocalSessionManager::default();
    // The gateway expires sessions itself (`Sessions::close_idle`), running calls counted.
    manager.session_config.keep_alive = None;
    let manager = Arc::new(manager);
    let sessions = Arc::new(Sessions {
        manager: Arc::clone(&manager),
        options,
        clock: shared.supervisor.clock(),
        seen: Mutex::new(HashMap::new()),
        admitting: tokio::sync::Mutex::new(()),
        opening: Mutex::new(0),
    });
    let for_sessions = Arc::clone(&shared);
    let service = StreamableHttpService::new(
        move || Ok(GatewayHandler::new(Arc::clone(&for_sessions))),
        manager,
        config,
    );
    let mut admission = tether_http::Admission::for_address(address)
        .with_origin_rule(tether_http::OriginRule::IfPresent);
    for token in tokens {
        admission = admission.with_bearer(token);
    }
    tokio::spawn(expire_idle(
        Arc::clone(&sessions),
        Arc::clone(&shared.clients),
        shutdown.child_token(),
    ));
    let state = Arc::new(HttpState {
        shared,
        sessions,
        body: json_rpc::BodyCheck {
            limit: max_body,
            parses: parses_as_mcp,
        },
    });
    let router = Router::new()
        .nest_service(MCP_PATH, service)
        .layer(middleware::from_fn_with_state(state, per_request))
        .layer(middleware::from_fn_with_state(
            Arc::new(admission),
            tether_http::admit,
        ));
    // Small streamed writes must not wait for the peer's delayed ACK.
    let listener = listener.tap_io(|stream| {
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY");
        }
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
        .map_err(|source| GatewayError::Io {
            what: format!("serving HTTP on {address}"),
            source,
        })
}

/// Closes idle sessions until `shutdown`, waking when the next one could be due.
async fn expire_idle(sessions: Arc<Sessions>, clients: Arc<Clients>, shutdown: CancellationToken) {
    let clock = Arc::clone(&sessions.clock);
    loop {
        let wait = sessions.close_idle(&clients).await;
        tokio::select! {
            () = clock.sleep(wait) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// The origins rmcp accepts: a browser page on this very port (tether_http's admission, which
/// runs first, accepts only this listener's own address and `localhost`).
fn origins(address: SocketAddr) -> Vec<String> {
    let port = address.port();
    vec![
        format!("http://127.0.0.1:{port}"),
        format!("http://localhost:{port}"),
        format!("http://[::1]:{port}"),
    ]
}

/// The body check, the session cap and expiry, the cancellation of a call whose client went
/// away, and the drain of a DELETE (see the module's documentation).
async fn per_request(State(http): State<Arc<HttpState>>, request: Request, next: Next) -> Response {
    let mut request = match json_rpc::checked(request, &http.body).await {
        Ok(request) => request,
        Err(refused) => return refused,
    };
    let session = request
        .headers()
        .get(SESSION_HEADER)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let Some(session) = session else {
        // A 2026-07-28 request has no session and opens none (rmcp serves it statelessly;
        // it must name its version in this header).
        let stateless = request
            .headers()
            .get("mcp-protocol-version")
            .and_then(|value| value.to_str().ok())
            .is_some_and(|version| version >= "2026-07-28");
        if request.method() != Method::POST || stateless {
            return next.run(request).await;
        }
        // An initialize: it opens a session, if there is room for one.
        let Some(_opening) = http.sessions.admit().await else {
            return too_many_sessions(http.sessions.options);
        };
        let response = next.run(request).await;
        if let Some(opened) = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|value| value.to_str().ok())
        {
            http.sessions.opened(opened);
        }
        return response;
    };
    http.sessions.touch(&session);
    match *request.method() {
        // The session's own event stream lasts as long as the session: not a call.
        Method::GET => next.run(request).await,
        Method::DELETE => {
            let shared = &http.shared;
            let limit = DRAIN_LIMIT.min(shared.call_timeout);
            let left = shared.clients.drain(&session, limit).await;
            if left > 0 {
                tracing::warn!(
                    "closing a session with {left} requests still running after {} s; they are cancelled",
                    limit.as_secs_f64()
                );
            }
            let response = next.run(request).await;
            shared.clients.closed(&session);
            http.sessions.forget(&session);
            response
        }
        _ => {
            let gone = CancellationToken::new();
            request.extensions_mut().insert(ClientGone(gone.clone()));
            let answering = Answering {
                count: Some(http.shared.clients.http_request(&session)),
                sessions: Arc::clone(&http.sessions),
                session,
                cut: Some(gone.drop_guard()),
            };
            let (parts, body) = next.run(request).await.into_parts();
            // Goes with the body: the whole answer written, or the client gone.
            let body = futures_util::stream::unfold(
                (body.into_data_stream(), answering),
                |(mut body, mut answering)| async move {
                    match body.next().await {
                        Some(chunk) => Some((chunk, (body, answering))),
                        None => {
                            answering.written();
                            None
                        }
                    }
                },
            );
            Response::from_parts(parts, Body::from_stream(body))
        }
    }
}

/// A POST of a session being answered: counted (for DELETE's drain and the idle expiry) until
/// its body was written or dropped; dropped before the end, the client is gone and the call
/// is cancelled.
struct Answering {
    count: Option<RequestGuard>,
    sessions: Arc<Sessions>,
    session: String,
    /// Cancels the request's [`ClientGone`] when dropped armed.
    cut: Option<DropGuard>,
}

impl Answering {
    /// The whole answer was written: nothing to cancel.
    fn written(&mut self) {
        if let Some(cut) = self.cut.take() {
            cut.disarm();
        }
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        // Seen now, before the count drops: the idle expiry never sees it ended but unseen.
        self.sessions.touch(&self.session);
        self.count.take();
    }
}

/// Whether `bytes` are one client message of MCP (what rmcp reads them as).
fn parses_as_mcp(bytes: &[u8]) -> Result<(), String> {
    serde_json::from_slice::<ClientJsonRpcMessage>(bytes)
        .map(drop)
        .map_err(|error| error.to_string())
}

/// The answer to an `initialize` when `max_sessions` are open: 503.
fn too_many_sessions(options: HttpOptions) -> Response {
    let mut response = json_rpc::error_response(
        StatusCode::SERVICE_UNAVAILABLE,
        SERVER_ERROR,
        &format!(
            "tether serve has {} sessions open, its limit (--max-sessions): close one (DELETE) \
             or retry once one has been idle for {} s",
            options.max_sessions,
            options.session_idle.as_secs()
        ),
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(5u32));
    response
}

/// Whether `address` may be listened on: loopback only (there is no TLS).
pub fn is_loopback(address: &SocketAddr) -> bool {
    address.ip().is_loopback()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_addresses_are_allowed() {
        for (address, allowed) in [
            ("127.0.0.1:0", true),
            ("[::1]:8080", true),
            ("0.0.0.0:8080", false),
            ("192.168.1.2:80", false),
        ] {
            let address: SocketAddr = address.parse().expect("parsing an address");
            assert_eq!(is_loopback(&address), allowed, "{address}");
        }
    }
}
