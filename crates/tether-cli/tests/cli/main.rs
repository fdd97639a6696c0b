//! The `tether` binary end to end: every command and error class, with real MCP server
//! processes. Each test gets its own TETHER_HOME and a clean managed-server environment.

mod commands;
mod dialects;
mod harness;
mod log_mask;
mod secrets;
mod support;
