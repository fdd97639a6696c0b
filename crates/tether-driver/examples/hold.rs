//! Starts the MCP servers of one inline spec, prints their process groups, and holds them
//! until SIGTERM or SIGINT, then shuts them down: the signal handling `tether run` does, in
//! miniature. Used by the driver's process-lifetime tests.
//!
//! `cargo run -p tether-driver --example hold -- '{"s":{"command":"tether-test-mcp"}}'`

use std::sync::Arc;

use tether_config::{ProcessEnv, Secrets};
use tether_driver::{McpSpec, NoLocalInstallations, Resolver, Session, StartOptions};
use tokio::signal::unix::{SignalKind, signal};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let spec = std::env::args().nth(1).ok_or("usage: hold SPEC")?;
    let session = Session::resolve(
        Resolver::new(Arc::new(NoLocalInstallations), None),
        vec![McpSpec::parse(&spec)?],
        Secrets::new(),
        ProcessEnv,
    )
    .await?;
    let runtime = session.start(&StartOptions::default()).await?;
    // Listening before saying "ready": a signal sent the moment it is read must not find the
    // default action (death) still in place.
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    for pgid in runtime.process_groups() {
        println!("pgid {pgid}");
    }
    println!("ready");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    runtime.shutdown().await;
    Ok(())
}
