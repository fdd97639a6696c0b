//! Driver tests: resolution against a real store and a fake managed client, and launching
//! real MCP server processes (our `tether-test-mcp`, and `@modelcontextprotocol/server-everything`
//! from the npm registry).

mod launch;
mod lifetime;
mod refresh;
mod resolve;
mod session;
mod support;
