//! Streamable HTTP at `/mcp` on a loopback address, behind a bearer token.
//!
//! Every request is admitted by `tether_http::admit`, the rule of every listener tether opens:
//! `Host` must name this listener, its port included (421 otherwise: DNS rebinding), an
//! `Origin`, when one is sent, must be this listener too (403), and the bearer token must be
//! given unless the gateway runs `--no-auth` (401). Then rmcp checks its own host and origin
//! lists (looser, so they refuse nothing admitted) and the MCP session.
//! DELETE with an `Mcp-Session-Id` closes that session after draining it: new calls in it are
//! refused, and the DELETE is answered when the calls it has running ended (at most
//! [`DRAIN_LIMIT`], or the call timeout when shorter; calls still running then are cancelled).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::serve::ListenerExt as _;
use futures_util::StreamExt as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tether_config::SecretValue;
use tokio_util::sync::CancellationToken;

use crate::error::GatewayError;
use crate::handler::{GatewayHandler, Shared};

/// The path the MCP endpoint is served at.
pub const MCP_PATH: &str = "/mcp";

/// The longest a DELETE waits for its session's running calls.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(30);

/// Serves `shared` on `listener` until `shutdown` is cancelled.
pub(crate) async fn serve(
    shared: Arc<Shared>,
    listener: tokio::net::TcpListener,
    token: Option<SecretValue>,
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
    let for_sessions = Arc::clone(&shared);
    let service = StreamableHttpService::new(
        move || Ok(GatewayHandler::new(Arc::clone(&for_sessions))),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let mut admission = tether_http::Admission::for_address(address)
        .with_origin_rule(tether_http::OriginRule::IfPresent);
    if let Some(token) = token {
        admission = admission.with_bearer(token);
    }
    let router = Router::new()
        .nest_service(MCP_PATH, service)
        .layer(middleware::from_fn_with_state(shared, drain_on_delete))
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

/// A DELETE of a session waits until the responses the session is being sent ended (its
/// running calls answered; bounded) before rmcp closes it. Every POST of a session is counted
/// until its response's body was sent.
async fn drain_on_delete(
    State(shared): State<Arc<Shared>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(session) = request
        .headers()
        .get("mcp-session-id")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
    else {
        return next.run(request).await;
    };
    if request.method() == Method::GET {
        // The session's own event stream lasts as long as the session: not a call.
        return next.run(request).await;
    }
    if request.method() != Method::DELETE {
        let guard = shared.clients.http_request(&session);
        let (parts, body) = next.run(request).await.into_parts();
        // The guard goes with the body: dropped once the whole response was written.
        let body = body.into_data_stream().map(move |chunk| {
            let _ = &guard;
            chunk
        });
        return Response::from_parts(parts, Body::from_stream(body));
    }
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
