//! Tool search reads what a server says of itself (its instructions): of two servers with the
//! same tools, a request naming one server's product finds that server's tool first. Real
//! processes: the workspace's test server twice, one with instructions of its own.

#![allow(
    clippy::expect_used,
    reason = "a test binary: helpers outside #[test] functions panic on setup failure too"
)]

mod support;

use std::time::Duration;

use serde_json::json;
use tether_driver::StartOptions;
use tether_gateway::Gateway;
use tether_gateway::tool_search::{ToolMode, ToolSearch};
use tether_testkit::mcp_client::{answer_of, spawn_call};
use tether_testkit::{ManualClock, test_server_bin};

const LIMIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_naming_a_servers_product_finds_that_servers_tool() {
    let program = test_server_bin().to_string_lossy().into_owned();
    let about: &[&str] = &[
        "--instructions",
        "Zanzibar ledger: the team's bookkeeping service; its add sums two amounts.",
    ];
    let session = support::session_of_servers(
        &[("alpha", &program, about), ("beta", &program, &[])],
        ManualClock::new(),
    )
    .await;
    let mut options = support::gateway_options(StartOptions::default(), None);
    options.tool_search = ToolSearch {
        mode: ToolMode::Search,
        ..ToolSearch::default()
    };
    let gateway = Gateway::start(session, options);
    assert!(gateway.ready_within(LIMIT).await);
    let (client, serving) = support::serve_client(&gateway, ()).await;
    let found = spawn_call(
        &client,
        "tether__find_tools",
        json!({"query": "add two numbers in the Zanzibar ledger", "limit": 2}),
    );
    let found = answer_of(found, LIMIT)
        .await
        .structured_content
        .expect("structured content");
    assert_eq!(found["tools"][0]["name"], "alpha__add", "{found}");
    client.cancel().await.expect("closing the client");
    let _ = serving.await;
    gateway.shutdown().await;
}
