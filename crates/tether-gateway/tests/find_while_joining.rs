//! `tether__find_tools` asked right after the gateway started, while its servers are still
//! starting: it waits for their first starts (within the call timeout) and answers as it will
//! once they all joined; a server whose start failed is not waited for but named as still
//! starting. The servers are real processes (the workspace's test server) held back on the
//! test's signal (a file it creates).

#![allow(
    clippy::expect_used,
    reason = "a test binary: helpers outside #[test] functions panic on setup failure too"
)]

mod support;

use std::time::Duration;

use serde_json::json;
use tether_driver::StartOptions;
use tether_gateway::tool_search::{ToolMode, ToolSearch};
use tether_gateway::{Gateway, Upstream};
use tether_testkit::ManualClock;
use tether_testkit::mcp_client::{ListWatcher, answer_of, spawn_call, until_status};

const LIMIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_at_start_waits_for_first_starts_and_names_the_servers_still_starting() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let release = dir.path().join("release");
    let broken: &[&str] = &["--exit-early", "3"];
    let session =
        support::fast_and_held_back(&release, &[("broken", broken)], ManualClock::new()).await;
    let mut start = StartOptions::default();
    let upstream = Upstream::wire(&mut start);
    let mut options = support::gateway_options(start, Some(upstream));
    options.tool_search = ToolSearch {
        mode: ToolMode::Search,
        ..ToolSearch::default()
    };
    let gateway = Gateway::start(session, options);
    let (watcher, _changes) = ListWatcher::new();
    let (client, serving) = support::serve_client(&gateway, watcher).await;

    // Asked while `slow` is held back: the search waits for it.
    let query = json!({"query": "add two integers", "limit": 3});
    let first = spawn_call(&client, "tether__find_tools", query.clone());
    until_status(&client, "slow", LIMIT, |entry| entry["waiting_calls"] == 1).await;
    assert!(
        !first.is_finished(),
        "the search must wait for the first starts"
    );
    std::fs::write(&release, "").expect("releasing the slow server");
    let first = answer_of(first, LIMIT).await;
    let first = first.structured_content.expect("structured content");
    let found = support::found_names(&first);
    assert!(found.contains(&"slow__add".to_owned()), "{first}");
    assert!(found.contains(&"fast__add".to_owned()), "{first}");
    // The broken server failed its first start: not waited for, named as still starting.
    assert_eq!(first["starting"], json!(["broken"]), "{first}");
    assert!(
        first["note"]
            .as_str()
            .is_some_and(|note| note.contains("still starting")),
        "{first}"
    );

    // Later, with everything that will join joined: the same top three.
    until_status(&client, "slow", LIMIT, |entry| entry["state"] == "ready").await;
    let later = spawn_call(&client, "tether__find_tools", query);
    let later = answer_of(later, LIMIT)
        .await
        .structured_content
        .expect("structured content");
    assert_eq!(support::found_names(&later), found, "{later}");

    client.cancel().await.expect("closing the client");
    let _ = serving.await;
    gateway.shutdown().await;
}
