//! Process-level tests of `tether-test-mcp`: the built binary, spoken to with rmcp's own clients.
//!
//! Each test starts its own server, bounds every step with a timeout and kills what it started.
//! The stdio tests also pin the rmcp client behaviour that `RMCP_NOTES.md` describes.

mod http;
mod stdio;
mod support;
