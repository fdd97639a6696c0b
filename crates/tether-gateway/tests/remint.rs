//! A managed config is re-minted while the gateway serves, before its proxy token expires; the
//! server whose rendering changed is started afresh from the new config, the old process
//! ends, and the client is told the tool list changed. The gateway's schedule runs on a clock
//! the test moves, so nothing waits for time to pass.

#![allow(
    clippy::expect_used,
    reason = "a test binary: helpers outside #[test] functions panic on setup failure too"
)]

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RoleClient;
use tether_config::{EmptyEnv, Secrets};
use tether_driver::{
    McpSpec, NoLocalInstallations, RefreshPolicy, Resolver, Session, StartOptions,
};
use tether_gateway::names::ToolFilter;
use tether_gateway::{Gateway, GatewayOptions, ScanPolicy, Upstream};
use tether_graphql::ManagedMcpClient;
use tether_testkit::managed::{Answer, FakeManaged};
use tether_testkit::{ManualClock, json_str, test_server_bin, wait_group_gone};
use uuid::Uuid;

/// The managed config: the test server with `tools` numbered tools, expiring `expires_in`
/// from now.
fn managed_config(tools: usize, expires_in: time::Duration) -> Answer {
    Answer::Config {
        json: format!(
            r#"{{"mcpServers":{{"managed":{{"command":{},"args":["--tools","{tools}"]}}}}}}"#,
            json_str(&test_server_bin().to_string_lossy()),
        ),
        expires_at: Some(time::OffsetDateTime::now_utc() + expires_in),
    }
}

/// A client that counts `tools/list_changed` and wakes whoever waits for one.
#[derive(Clone, Default)]
struct Counter(Arc<AtomicUsize>, Arc<tokio::sync::Notify>);

impl Counter {
    /// Waits (at most 20 s, then panics) until at least `count` notifications came.
    async fn reached(&self, count: usize) {
        let waited = tokio::time::timeout(Duration::from_secs(20), async {
            while self.0.load(Ordering::SeqCst) < count {
                self.1.notified().await;
            }
        })
        .await;
        assert!(waited.is_ok(), "fewer than {count} tools/list_changed");
    }
}

impl rmcp::ClientHandler for Counter {
    async fn on_tool_list_changed(&self, _context: rmcp::service::NotificationContext<RoleClient>) {
        self.0.fetch_add(1, Ordering::SeqCst);
        self.1.notify_one();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_managed_config_is_reminted_before_expiry_and_its_server_replaced() {
    let uid = Uuid::new_v4();
    let clock = ManualClock::new();
    // Two minutes from expiry: inside the five-minute window at once.
    let fake = Arc::new(FakeManaged::new(vec![(
        uid,
        managed_config(1, time::Duration::minutes(2)),
    )]));
    let managed: Arc<dyn ManagedMcpClient> = fake.clone();
    let resolver = Resolver::new(Arc::new(NoLocalInstallations), Some(managed));
    let session = Session::resolve(resolver, vec![McpSpec::Uuid(uid)], Secrets::new(), EmptyEnv)
        .await
        .expect("resolving the managed spec")
        .with_refresh_policy(RefreshPolicy {
            ahead: Duration::from_secs(300),
            min_interval: Duration::from_secs(1),
        })
        .with_clock(clock.clone());
    let mut start = StartOptions::default();
    let upstream = Upstream::wire(&mut start);
    let runtime = session.start(&start).await.expect("starting");
    let first_group = runtime.process_groups()[0];
    // The re-mint will answer with one more tool, an hour from expiry (then not due again).
    fake.set_answer(uid, managed_config(2, time::Duration::hours(1)));
    let gateway = Gateway::new(
        session,
        runtime,
        GatewayOptions {
            call_timeout: Duration::from_secs(60),
            audit: None,
            start,
            pins: None,
            scan: ScanPolicy::Warn,
            policies: HashMap::new(),
            filter: ToolFilter::default(),
            upstream: Some(upstream),
            masking_hook: None,
            budget: tether_gateway::ResultBudget::default(),
        },
    )
    .await;
    assert!(gateway.tool_names().contains(&"managed__tool_0".to_owned()));

    let (ours, theirs) = tokio::io::duplex(1 << 16);
    let (reader, writer) = tokio::io::split(ours);
    let serving = {
        let gateway = gateway.clone();
        tokio::spawn(async move { gateway.serve_io(reader, writer).await })
    };
    let counter = Counter::default();
    let client = counter
        .clone()
        .serve(tokio::io::split(theirs))
        .await
        .expect("initializing through the gateway");

    // The gateway looks again a second from now on its clock, and not before.
    clock.sleeping(1, Duration::from_secs(20)).await;
    assert_eq!(fake.calls(), 1, "re-minted before the clock moved");
    clock.advance(Duration::from_secs(1));
    counter.reached(1).await;
    let names: Vec<String> = client
        .list_all_tools()
        .await
        .expect("tools/list")
        .iter()
        .map(|tool| tool.name.to_string())
        .collect();
    assert!(names.contains(&"managed__tool_1".to_owned()), "{names:?}");
    let result = client
        .call_tool(CallToolRequestParams::new("managed__tool_1"))
        .await
        .expect("calling the new tool");
    let text = serde_json::to_value(&result).expect("a result")["content"][0]["text"].clone();
    assert_eq!(text, "tool_1 answered");
    assert_eq!(fake.calls(), 2, "one mint, one re-mint");
    let left = wait_group_gone(first_group, Duration::from_secs(10)).await;
    assert!(left.is_empty(), "the old server's processes: {left:?}");

    client.cancel().await.expect("closing the client");
    let _ = serving.await;
    gateway.shutdown().await;
}
