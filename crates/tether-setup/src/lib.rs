//! `tether setup-mcp`: an MCP server with the five `mcp_setup_*` tools that let any agent set
//! up an MCP server from the registry while the secrets never pass through the model: the
//! agent holds only `secret://` refs ([`refs`]); the values are typed by the person on a
//! loopback page ([`page`], or sent with `tether secrets submit`: [`submit`]) and go from
//! there to the test-connect and the secret store.
//!
//! The tools are built on the registry client and on `tether add`'s core in `tether-install`
//! (the choice of package, the launch config, the scratch test-connect, the atomic install),
//! called, not copied. What they need of the program around them — the local store, a
//! progress display, stored OAuth tokens — comes through a [`Host`].
//!
//! Two transports: stdio ([`serve_stdio`], with the page alone on a random loopback port:
//! [`page::serve`]) and Streamable HTTP on loopback ([`serve_http`]: `/mcp` behind a bearer
//! token, the pages beside it on the same port). Every listener admits through
//! `tether_http::Admission`.
//!
//! ```no_run
//! # async fn demo(settings: tether_setup::Settings) -> Result<(), tether_setup::SetupError> {
//! use std::sync::Arc;
//! use tether_setup::refs::{IDLE_TTL, Refs};
//!
//! let refs = Arc::new(Refs::new(IDLE_TTL));
//! let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
//!     .await
//!     .map_err(tether_setup::SetupError::Serve)?;
//! let key = tether_setup::submit::AnnouncementKey::generate()
//!     .map_err(|e| tether_setup::SetupError::Serve(std::io::Error::other(e)))?;
//! let page = tether_setup::page::serve(listener, refs.clone(), key)
//!     .map_err(tether_setup::SetupError::Serve)?;
//! eprintln!("entry page on http://{page}");
//! tether_setup::serve_stdio(tether_setup::SetupServer::new(settings, refs)).await
//! # }
//! ```

mod error;
pub mod page;
pub mod refs;
mod rounds;
mod server;
pub mod submit;

use std::sync::Arc;

use axum::Router;
use rmcp::ServiceExt as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tether_config::SecretValue;
use tether_http::{Admission, OriginRule};

pub use error::SetupError;
pub use server::{
    ConnectArgs, GetArgs, Host, RequestSecretArgs, SearchArgs, Settings, SetupServer,
};

/// The path of the MCP endpoint of [`serve_http`].
pub const MCP_PATH: &str = "/mcp";

/// Serves `server` to the MCP client on stdin/stdout until it closes the session.
pub async fn serve_stdio(server: SetupServer) -> Result<(), SetupError> {
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|error| SetupError::Handshake(Box::new(error)))?;
    // How the session ended (the client closed it, or the task was cancelled) is not a failure.
    let _ = running.waiting().await;
    Ok(())
}

/// How long an agent's MCP session may stay idle before it is closed: as long as a secret
/// reference it was given lives unused ([`refs::IDLE_TTL`], 15 minutes) plus a minute, so a
/// user who takes their time on the secret page does not cost the agent its session (rmcp's
/// default is 5 minutes).
pub const SESSION_IDLE: std::time::Duration =
    refs::IDLE_TTL.saturating_add(std::time::Duration::from_secs(60));

/// Serves `server` at [`MCP_PATH`] on `listener` (rmcp's Streamable HTTP, with sessions, so
/// elicitation works) and the entry pages of `refs` beside it (proving `key`, the key of their
/// announcement), until the listener fails.
///
/// `/mcp` admits as `tether_http::Admission` says, with [`OriginRule::IfPresent`] (an MCP client
/// sends no Origin; a browser page on another site always does) and `Authorization: Bearer
/// token`; the pages admit by their own rule and have no token (the browser has none).
/// Dropping the future ends every session.
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    token: SecretValue,
    server: SetupServer,
    refs: Arc<refs::Refs>,
    key: submit::AnnouncementKey,
) -> Result<(), SetupError> {
    let address = listener.local_addr().map_err(SetupError::Serve)?;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let _end_sessions = shutdown.clone().drop_guard();
    let config = StreamableHttpServerConfig::default().with_cancellation_token(shutdown.clone());
    let body = tether_http::json_rpc::BodyCheck {
        limit: config.max_request_body_bytes,
        parses: |bytes| {
            serde_json::from_slice::<rmcp::model::ClientJsonRpcMessage>(bytes)
                .map(drop)
                .map_err(|error| error.to_string())
        },
    };
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(SESSION_IDLE);
    let service =
        StreamableHttpService::new(move || Ok(server.clone()), Arc::new(sessions), config);
    let admission = Admission::for_address(address);
    let mcp_admission = admission
        .clone()
        .with_bearer(token)
        .with_origin_rule(OriginRule::IfPresent);
    let mcp = Router::new()
        .nest_service(MCP_PATH, service)
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(body),
            tether_http::json_rpc::check_body,
        ))
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(mcp_admission),
            tether_http::admit,
        ));
    let app = mcp
        .merge(page::router(refs, admission, key))
        .fallback(page::not_found);
    axum::serve(listener, app).await.map_err(SetupError::Serve)
}
