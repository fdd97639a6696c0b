//! The reference managed MCP server: the server side of `schema/managed_mcp.graphql`.
//!
//! A team runs it to hand its members managed MCP servers without handing them upstream
//! credentials:
//!
//! - an admin adds installations ([`NewInstallation::from_spec`]: one server of tether's config
//!   format plus server-held secrets, sealed at rest with AES-256-GCM) and API keys;
//! - `createManagedMcpClientConfig` returns a COMMAND installation's config with the server's
//!   values rendered in, or, for a URL installation, a proxy URL and a run-scoped token;
//! - `/mcp-proxy/{uid}` forwards Streamable HTTP to the upstream, adding its credentials.
//!
//! The binary (`src/main.rs`) holds the CLI: `serve` and `admin`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), tether_server::ServerError> {
//! use tether_server::{BoundServer, DatabaseUrl, MasterKey, ServeOptions};
//!
//! let server = BoundServer::bind(ServeOptions {
//!     listen: "127.0.0.1:0".parse().unwrap_or_else(|_| unreachable!()),
//!     database: DatabaseUrl::parse("sqlite:///var/lib/tether-server")?,
//!     public_url: None,
//!     proxy_token_ttl: tether_server::DEFAULT_PROXY_TOKEN_TTL,
//!     key: MasterKey::from_text(&std::env::var("TETHER_SERVER_KEY").unwrap_or_default())?,
//!     limits: tether_server::limits::Limits::default(),
//!     rate: tether_server::rate::RateSettings::default(),
//!     metrics_listen: None,
//!     metrics_public: false,
//! })
//! .await?;
//! println!("listening on http://{}", server.local_addr());
//! server.run(async { let _ = tokio::signal::ctrl_c().await; }).await
//! # }
//! ```

#![deny(missing_docs)]

mod app;
pub mod crypto;
mod env;
mod error;
mod graphql;
mod installation;
pub mod limits;
mod metrics;
mod model;
mod proxy;
pub mod rate;
mod service;
mod state;
pub mod store;

pub use app::{BoundServer, SHUTDOWN_GRACE, ServeOptions};
pub use crypto::MasterKey;
pub use env::{INSECURE_DEV_KEY_WARNING, master_key_from, master_key_from_env};
pub use error::{InstallationError, KeyError, ServeError, ServerError, StoreError};
pub use graphql::sdl;
pub use installation::{DEFAULT_TEAM, NewInstallation, reseal, validate_team};
pub use metrics::{METRICS_CONTENT_TYPE, ServerMetrics};
pub use model::TransportKind;
pub use proxy::MAX_PROXY_REQUEST_BYTES;
pub use service::{DEFAULT_PROXY_TOKEN_TTL, PROXY_AUTHORIZATION_HEADER, PROXY_PATH_PREFIX};
pub use store::{
    ApiKeySummary, AuditEvent, DATABASE_FILE, DatabaseUrl, InstallationSummary, Storage,
};
