//! tether's driver: turns the MCP specs of an agent run into running MCP servers, or into a
//! rendered server map for a third-party harness.
//!
//! 1. [`McpSpec::parse`] reads each `--mcp VALUE` (UUID, file, inline JSON);
//!    [`specs_to_server_map`] / [`server_map_to_specs`] convert to and from a task config.
//! 2. [`Resolver::resolve`] resolves local-first: local store, else the managed client.
//! 3. [`ResolvedMcpSpecs::render`] applies secrets in memory (the same way for every server).
//! 4. Either hand the rendered servers to a harness, or [`McpRuntime::start`] them.
//!
//! ```no_run
//! # async fn demo() -> Result<(), tether_driver::DriverError> {
//! use std::sync::Arc;
//! use tether_config::{ProcessEnv, Secrets};
//! use tether_driver::{McpRuntime, McpSpec, NoLocalInstallations, Resolver, StartOptions};
//!
//! let specs = vec![McpSpec::parse(r#"{"echo":{"command":"tether-test-mcp"}}"#)?];
//! let resolved = Resolver::new(Arc::new(NoLocalInstallations), None).resolve(&specs).await?;
//! let servers = resolved.render(&Secrets::new(), &ProcessEnv);
//! let runtime = McpRuntime::start(servers, &StartOptions::default(), []).await?;
//! println!("{:?}", runtime.reports());
//! runtime.shutdown().await;
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

mod error;
mod launch;
mod refresh;
mod resolve;
mod spec;

pub use error::DriverError;
pub use launch::{
    ENV_WHITELIST, McpRuntime, STDERR_TAIL_BYTES, ServerReport, ServerStatus, StartOptions,
    TERMINATE_GRACE, ToolInfo,
};
pub use refresh::{RefreshOutcome, RefreshPolicy, Refresher};
pub use resolve::{
    EPHEMERAL_ID_NAMESPACE, EphemeralInstallation, LocalInstallation, LocalInstallations,
    ManagedLease, NoLocalInstallations, ResolvedMcpSpecs, Resolver, require_resolved,
};
pub use spec::{McpSpec, SpecSource, server_map_to_specs, specs_to_server_map};
