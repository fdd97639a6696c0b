//! The `tether` binary end to end: every command and error class, with real MCP server
//! processes. Each test gets its own TETHER_HOME and a clean managed-server environment.

#![allow(
    clippy::expect_used,
    reason = "test helpers outside #[test] fns say what they were doing when they fail"
)]

mod add;
mod bridge;
mod by_name;
mod commands;
mod dialects;
mod export_file;
mod first_use;
mod harness;
mod http_package;
mod lifetime;
mod log_mask;
mod managed_timeout;
mod oauth;
mod placeholders;
mod registries;
mod registry;
mod remote_failures;
mod sandbox;
mod secrets;
mod smithery_add;
mod stored;
mod support;
mod timeouts;
