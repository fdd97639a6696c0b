//! Streamable HTTP serving at `/mcp`, with an optional bearer-token check in front.

use std::{net::SocketAddr, sync::Arc};

use anyhow::Context as _;
use axum::{
    Router,
    extract::{Request, State},
    http::{HeaderValue, StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    serve::ListenerExt as _,
};
use rmcp::transport::{
    StreamableHttpServerConfig, StreamableHttpService,
    streamable_http_server::session::local::LocalSessionManager,
};
use tokio::io::AsyncWriteExt as _;
use tokio_util::sync::CancellationToken;

/// The path the MCP endpoint is served at.
pub const MCP_PATH: &str = "/mcp";

/// `--oauth`: the authorization server in front of `/mcp`.
pub struct OAuthOptions {
    /// How long an access token lives.
    pub ttl: std::time::Duration,
    /// `--oauth-cimd`.
    pub client_metadata_documents: bool,
}

/// Serves `server` on `address` until SIGINT or SIGTERM.
///
/// Once bound, prints `listening on http://ADDRESS/mcp` as the only line on stdout.
/// With `expected_bearer`, a request without `Authorization: Bearer <expected_bearer>` gets 401.
pub async fn serve<S: rmcp::ServerHandler + Clone>(
    address: SocketAddr,
    server: S,
    expected_bearer: Option<String>,
    oauth: Option<OAuthOptions>,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("binding {address}"))?;
    let bound = listener.local_addr().context("reading the bound address")?;

    let shutdown = CancellationToken::new();
    let config = StreamableHttpServerConfig::default().with_cancellation_token(shutdown.clone());
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let mut router = Router::new().nest_service(MCP_PATH, service);
    if let Some(token) = expected_bearer {
        let expected = HeaderValue::try_from(format!("Bearer {token}"))
            .context("the bearer token is not a valid header value")?;
        router = router.layer(middleware::from_fn_with_state(
            Arc::new(expected),
            require_bearer,
        ));
    }

    if let Some(oauth) = oauth {
        let auth = crate::oauth::AuthServer::new(
            format!("http://{bound}"),
            format!("http://{bound}{MCP_PATH}"),
            oauth.ttl,
            oauth.client_metadata_documents,
        );
        router = router
            .layer(middleware::from_fn_with_state(
                Arc::clone(&auth),
                crate::oauth::require_token,
            ))
            .merge(crate::oauth::routes(auth));
    }

    let mut stdout = tokio::io::stdout();
    stdout
        .write_all(format!("listening on http://{bound}{MCP_PATH}\n").as_bytes())
        .await
        .context("writing the listening line")?;
    stdout.flush().await.context("flushing stdout")?;
    tracing::info!(%bound, "serving streamable HTTP");

    // Without TCP_NODELAY the small writes of a streamed response wait for the peer's delayed
    // ACK (~40 ms on Linux) on a reused connection, which a proxy in front of it always hits.
    let listener = listener.tap_io(|stream| {
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY");
        }
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            shutdown_signal().await;
            shutdown.cancel();
        })
        .await
        .context("serving HTTP")
}

async fn require_bearer(
    State(expected): State<Arc<HeaderValue>>,
    request: Request,
    next: Next,
) -> Response {
    if request.headers().get(header::AUTHORIZATION) == Some(expected.as_ref()) {
        return next.run(request).await;
    }
    tracing::warn!("rejecting a request without the expected bearer token");
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer realm=\"tether-test-mcp\"")],
        "missing or wrong bearer token\n",
    )
        .into_response()
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = interrupt => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; only SIGINT stops the server");
                let _ = interrupt.await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}
