//! `GatewayOptions::first_list_grace`: for a client that lists tools once, its first
//! `tools/list` waits for the servers still starting, so it does not begin with a silently
//! partial toolset; later lists answer at once. The servers are real processes (the
//! workspace's test server), one held back on the test's signal (a file it creates).

#![allow(
    clippy::expect_used,
    reason = "a test binary: helpers outside #[test] functions panic on setup failure too"
)]

mod support;

use std::time::Duration;

use tether_driver::StartOptions;
use tether_gateway::{Gateway, Upstream};
use tether_testkit::ManualClock;
use tether_testkit::mcp_client::{ListWatcher, until_status};

const LIMIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_list_waits_for_the_servers_to_join_and_later_lists_do_not() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let release = dir.path().join("release");
    let session = support::fast_and_held_back(&release, &[], ManualClock::new()).await;
    let mut start = StartOptions::default();
    let upstream = Upstream::wire(&mut start);
    let mut options = support::gateway_options(start, Some(upstream));
    options.first_list_grace = Some(LIMIT);
    let gateway = Gateway::start(session, options);
    let (watcher, _changes) = ListWatcher::new();
    let (client, serving) = support::serve_client(&gateway, watcher).await;

    // The first list waits for `slow` (shown as a request waiting for it).
    let peer = client.peer().clone();
    let first = tokio::spawn(async move { peer.list_all_tools().await });
    until_status(&client, "slow", LIMIT, |entry| entry["waiting_calls"] == 1).await;
    assert!(!first.is_finished(), "the first tools/list must wait");
    std::fs::write(&release, "").expect("releasing the slow server");
    let first = tokio::time::timeout(LIMIT, first)
        .await
        .expect("the first list within the limit")
        .expect("the list task")
        .expect("tools/list");
    let names: Vec<String> = first.iter().map(|tool| tool.name.to_string()).collect();
    assert!(names.contains(&"slow__echo".to_owned()), "{names:?}");
    assert!(names.contains(&"fast__echo".to_owned()), "{names:?}");

    // A later list answers at once, from the catalogue.
    let again = tokio::time::timeout(LIMIT, client.peer().list_all_tools())
        .await
        .expect("a later list within the limit")
        .expect("tools/list");
    assert_eq!(again.len(), first.len());

    client.cancel().await.expect("closing the client");
    let _ = serving.await;
    gateway.shutdown().await;
}
