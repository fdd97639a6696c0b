//! A crashed server is restarted after the supervisor's backoff, measured on the session's
//! clock: 250 ms after a first crash, twice that after a crash within a minute of the last
//! start, and 250 ms again once the server had stayed up a minute. The test moves the clock;
//! the processes are real.

#![allow(
    clippy::expect_used,
    reason = "a test binary: helpers outside #[test] functions panic on setup failure too"
)]

mod support;

use std::time::Duration;

use rmcp::ServiceExt as _;
use rmcp::service::{RoleClient, RunningService};
use tether_driver::StartOptions;
use tether_gateway::{Gateway, Upstream};
use tether_testkit::{ManualClock, processes_with, test_server_bin};

/// Waits (at most 20 s, then panics) until `server` is ready after `restarts` restarts.
async fn ready_after(client: &RunningService<RoleClient, ()>, server: &str, restarts: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let entry = tether_testkit::mcp_client::gateway_status(client, server).await;
        if entry["state"] == "ready" && entry["restarts"] == restarts {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not ready after {restarts} restarts: {entry}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// SIGKILLs the one process running `program`.
fn crash(program: &str) {
    let pids = processes_with(program);
    assert_eq!(pids.len(), 1, "processes of {program}: {pids:?}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pids[0]),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("killing the server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_wait_the_backoff_on_the_sessions_clock() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    // A name of its own, so that its process can be told from every other test server.
    let program = dir.path().join("crashy-mcp");
    std::os::unix::fs::symlink(test_server_bin(), &program).expect("linking the test server");
    let program = program.to_string_lossy().into_owned();
    let clock = ManualClock::new();
    let session = support::session_of("crashy", &program, clock.clone()).await;
    let mut start = StartOptions::default();
    let upstream = Upstream::wire(&mut start);
    let runtime = session.start(&start).await.expect("starting");
    let gateway = Gateway::new(
        session,
        runtime,
        support::gateway_options(start, Some(upstream)),
    )
    .await;
    let (ours, theirs) = tokio::io::duplex(1 << 16);
    let (reader, writer) = tokio::io::split(ours);
    let serving = {
        let gateway = gateway.clone();
        tokio::spawn(async move { gateway.serve_io(reader, writer).await })
    };
    let client =
        ().serve(tokio::io::split(theirs))
            .await
            .expect("initializing through the gateway");
    let restarting = async |restarts: u64| {
        let entry = tether_testkit::mcp_client::gateway_status(&client, "crashy").await;
        assert_eq!(entry["state"], "restarting", "{entry}");
        assert_eq!(entry["restarts"], restarts, "{entry}");
    };

    // First crash: the restart waits 250 ms on the clock.
    crash(&program);
    clock.sleeping(1, Duration::from_secs(20)).await;
    restarting(0).await;
    clock.advance(Duration::from_millis(249));
    restarting(0).await;
    clock.advance(Duration::from_millis(1));
    ready_after(&client, "crashy", 1).await;

    // A crash within a minute of that start carries on from the delay reached: 500 ms.
    clock.advance(Duration::from_secs(30));
    crash(&program);
    clock.sleeping(1, Duration::from_secs(20)).await;
    clock.advance(Duration::from_millis(499));
    restarting(1).await;
    clock.advance(Duration::from_millis(1));
    ready_after(&client, "crashy", 2).await;

    // A server that stayed up a minute starts over at 250 ms.
    clock.advance(Duration::from_secs(60));
    crash(&program);
    clock.sleeping(1, Duration::from_secs(20)).await;
    restarting(2).await;
    clock.advance(Duration::from_millis(250));
    ready_after(&client, "crashy", 3).await;

    client.cancel().await.expect("closing the client");
    let _ = serving.await;
    gateway.shutdown().await;
}
