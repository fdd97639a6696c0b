//! The Streamable HTTP sessions' idle expiry is measured on the session's clock: the test moves
//! a clock of its own past the idle time, and no real idle time passes.

#![allow(
    clippy::expect_used,
    reason = "a test binary: helpers outside #[test] functions panic on setup failure too"
)]

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use tether_driver::StartOptions;
use tether_gateway::{Gateway, HttpOptions};
use tether_testkit::{ManualClock, test_server_bin};
use tokio_util::sync::CancellationToken;

/// An `initialize` POSTed to `url`: the status and the session it opened, if any.
async fn initialize(http: &reqwest::Client, url: &str) -> (u16, Option<String>) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}});
    let answer = http
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("posting an initialize");
    let session = answer
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let status = answer.status().as_u16();
    let _ = answer.text().await;
    (status, session)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_expires_when_the_sessions_clock_says_so() {
    let clock = ManualClock::new();
    let program = test_server_bin().to_string_lossy().into_owned();
    let session = support::session_of("test", &program, clock.clone()).await;
    let start = StartOptions::default();
    let runtime = session.start(&start).await.expect("starting");
    let gateway = Gateway::new(session, runtime, support::gateway_options(start, None)).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binding loopback");
    let url = format!(
        "http://{}/mcp",
        listener.local_addr().expect("the bound address")
    );
    let shutdown = CancellationToken::new();
    let options = HttpOptions {
        session_idle: Duration::from_secs(600),
        max_sessions: 1,
    };
    let serving = {
        let (gateway, shutdown) = (gateway.clone(), shutdown.clone());
        tokio::spawn(async move {
            gateway
                .serve_http(listener, Vec::new(), options, shutdown)
                .await
        })
    };
    let http = reqwest::Client::new();
    let began = Instant::now();

    let (status, first) = initialize(&http, &url).await;
    assert_eq!(status, 200);
    let first = first.expect("a session id");
    // The one session allowed is open: a second is refused until the first expires.
    assert_eq!(initialize(&http, &url).await, (503, None));

    // Ten idle minutes on the session's clock, none in real time: the first is closed.
    clock.advance(Duration::from_secs(600));
    let deadline = Instant::now() + Duration::from_secs(20);
    let second = loop {
        if let (200, Some(second)) = initialize(&http, &url).await {
            break second;
        }
        assert!(Instant::now() < deadline, "the idle session was not closed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_ne!(second, first);
    let listed = http
        .post(&url)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .header("Mcp-Session-Id", &first)
        .header("Mcp-Protocol-Version", "2025-06-18")
        .body(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string())
        .send()
        .await
        .expect("tools/list in the expired session");
    assert_eq!(listed.status().as_u16(), 404);
    assert!(
        began.elapsed() < Duration::from_secs(60),
        "{:?}",
        began.elapsed()
    );

    shutdown.cancel();
    let _ = serving.await;
    gateway.shutdown().await;
}
