//! Driver tests: resolution against a real store and a fake managed client, and launching
//! real MCP server processes (our `tether-test-mcp`, and `@modelcontextprotocol/server-everything`
//! from the npm registry).

#![allow(
    clippy::expect_used,
    reason = "a test binary: helpers outside #[test] functions panic on setup failure too"
)]

mod builder;
mod headers_helper;
mod launch;
mod lifetime;
mod modern;
mod refresh;
mod resolve;
mod sandbox;
mod session;
mod support;
