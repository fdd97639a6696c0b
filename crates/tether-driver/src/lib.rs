//! tether's driver: turns the MCP specs of an agent run into running MCP servers, or into a
//! rendered server map for a third-party harness.
//!
//! 1. [`SessionBuilder::read`] reads every `--mcp VALUE` once (a harness shorthand, an
//!    installation's name, a UUID, a file, inline JSON) and `--task FILE` into [`McpSpec`]s,
//!    each JSON spec parsed there and nowhere else; [`SessionBuilder::build`] opens the store
//!    and the managed client only when a spec needs them and asks its [`SpecHost`] for missing
//!    inputs and bearer tokens. [`McpSpec::parse`] reads one UUID, file or inline JSON;
//!    [`specs_to_server_map`] / [`server_map_to_specs`] convert to and from a task config.
//! 2. [`Session::resolve`] resolves local-first through a [`Resolver`] (local store, else
//!    the managed client) and applies the run's secrets in memory, the same way for every
//!    server. The session owns the run from then on.
//! 3. Either hand [`Session::servers`] to a harness, or [`Session::start`] them and
//!    [`Session::call`] their tools; a holder re-mints managed configs with
//!    [`Session::refresh_due`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), tether_driver::DriverError> {
//! use std::sync::Arc;
//! use std::time::Duration;
//! use tether_config::{ProcessEnv, Secrets};
//! use tether_driver::{McpSpec, NoLocalInstallations, Resolver, Session, StartOptions};
//!
//! let specs = vec![McpSpec::parse(r#"{"echo":{"command":"tether-test-mcp"}}"#)?];
//! let resolver = Resolver::new(Arc::new(NoLocalInstallations), None);
//! let session = Session::resolve(resolver, specs, Secrets::new(), ProcessEnv).await?;
//! let runtime = session.start(&StartOptions::default()).await?;
//! let arguments = serde_json::json!({"text": "hi"}).as_object().cloned();
//! let result = session
//!     .call(&runtime, "echo", "echo", arguments, Duration::from_secs(30))
//!     .await?;
//! println!("{result}");
//! runtime.shutdown().await;
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

#[cfg(target_os = "linux")]
mod build;
pub mod egress;
pub mod elicitation;
mod error;
pub mod folder_trust;
mod launch;
mod refresh;
mod resolve;
mod session;
mod spec;
pub mod supervisor;

pub use build::{SessionBuilder, SpecError, SpecHost};
pub use error::DriverError;
pub use launch::{
    BearerAuth, BearerSlot, ClientRequests, ENV_WHITELIST, HeadersHelper, HelperError,
    MAX_STEP_UPS, McpRuntime, NoticeSink, PACKAGE_RUNNER_FACTOR, PROBE_BOUND, Refusal,
    RequestRefused, STDERR_TAIL_BYTES, ServerNotice, ServerReport, ServerStatus, ServerTask,
    SseError, StartOptions, TASK_LOST_AFTER, TERMINATE_GRACE, TaskSeen, ToolInfo,
    answerable_capabilities, declare_tasks, inherited_env, package_runner, passed_on_capabilities,
    send_renewing, send_with_helper, sse_endpoint,
};
pub use refresh::{RefreshOutcome, RefreshPolicy, RemintOutcome};
pub use resolve::{
    EPHEMERAL_ID_NAMESPACE, EphemeralInstallation, LocalInstallation, LocalInstallations,
    ManagedLease, NoLocalInstallations, ResolvedMcpSpecs, Resolver, require_resolved,
};
pub use session::Session;
pub use spec::{McpSpec, SpecSource, server_map_to_specs, specs_to_server_map, used_inputs};
