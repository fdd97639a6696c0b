//! tether-server as real processes on loopback: the admin CLI, GraphQL through the workspace's
//! own client, the proxy through the driver's MCP runtime, the store on disk, and the schema.

#![allow(clippy::expect_used, reason = "test helpers fail loudly")]

mod admin;
mod config;
mod everything;
mod hostile;
mod lifecycle;
mod metrics;
mod pg;
mod proxy;
mod replicas;
mod schema;
mod support;
mod tls;
