//! The `tether` binary end to end: every command and error class, with real MCP server
//! processes. Each test gets its own TETHER_HOME and a clean managed-server environment.

#![allow(
    clippy::expect_used,
    reason = "a test binary: helpers outside #[test] functions panic on setup failure too"
)]

mod commands;
mod harness;
mod log_mask;
mod secrets;
mod support;
