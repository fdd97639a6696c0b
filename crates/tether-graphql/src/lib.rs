//! The managed MCP GraphQL client of tether.
//!
//! A managed MCP installation is known to a run only by its UUID. This crate asks the managed
//! server to mint a run-scoped config for it with the mutation `createManagedMcpClientConfig`
//! (schema: `schema/managed_mcp.graphql`, checked at compile time by cynic) and returns a
//! [`ManagedMcpClientConfig`] that lives in memory only.
//!
//! - [`ManagedMcpClient`] is the object-safe seam the driver holds as
//!   `Arc<dyn ManagedMcpClient>`; [`ManagedMcpClient::resolve_many`] resolves several uids
//!   concurrently (bounded) and returns results in input order.
//! - [`HttpManagedMcpClient`] implements it over reqwest with rustls, retrying transient
//!   failures (connect errors, timeouts, 429, 502, 503, 504) with jittered backoff.
//! - [`ManagedMcpError`] says what failed, for which uid, after how many attempts.
//! - Secrets (`mcpConfigJson`, `proxyToken`, `authorizationHeaderValue`, the API key) are held
//!   in [`SecretValue`]: zeroized on drop, masked by `Debug`, never logged or put in an error.
//!
//! **Invariant:** cynic and the GraphQL wire types stay inside this crate; callers see domain
//! types only.
//!
//! # Example
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use tether_graphql::{HttpClientSettings, HttpManagedMcpClient, ManagedMcpClient};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // The API key comes from TETHER_API_KEY or TETHER_API_KEY_FILE, never from argv.
//! let settings = HttpClientSettings::from_env("https://tether.example/graphql".parse()?)?;
//! let client: Arc<dyn ManagedMcpClient> = Arc::new(HttpManagedMcpClient::new(settings)?);
//!
//! let uids = [
//!     uuid::Uuid::parse_str("9b2f1a64-3c1e-4d4b-8a49-3e0c2d1f5a77")?,
//!     uuid::Uuid::parse_str("0e6b9f0a-51d2-4f3c-9c1e-7a4d8b2e6f10")?,
//! ];
//! for result in client.resolve_many(&uids).await {
//!     match result {
//!         // Hand the JSON to the launcher; `Debug` of `config` masks it.
//!         Ok(config) => println!("{:?} {:?}", config.uid, config.transport_kind),
//!         // "failed to resolve managed MCP server <uid>: <message>"
//!         Err(error) => eprintln!("{error}"),
//!     }
//! }
//! # Ok(())
//! # }
//! ```

mod batch;
mod client;
mod config;
mod env;
mod error;
mod http;
mod operation;
mod redact;
mod response;
mod retry;

pub use client::{DEFAULT_CONCURRENCY, ManagedMcpClient};
pub use config::{AuthorizationHeader, ManagedMcpClientConfig, TransportKind};
pub use env::api_key_from_env;
pub use error::{DecodeReason, ManagedMcpError, TransportErrorKind, UserFacingErrorKind};
pub use http::{HttpClientSettings, HttpManagedMcpClient, MAX_RESPONSE_BYTES};
pub use retry::RetryPolicy;
pub use tether_secret::SecretValue;
