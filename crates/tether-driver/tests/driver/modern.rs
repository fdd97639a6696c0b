//! MCP 2026-07-28 upstream: a server that speaks only it (no `initialize`) is used through
//! `server/discover`, over stdio and Streamable HTTP; its `InputRequiredResult` is answered
//! by the holder (as a legacy server's own elicitation request is); a legacy server still
//! gets `initialize`, at once when it says it is legacy and within the probe's bound when it
//! ignores the probe.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tether_config::Secrets;
use tether_driver::{ClientRequests, McpRuntime, PROBE_BOUND, StartOptions};

use crate::launch::{http_server, start, stdio_server, tools};
use crate::support::{call, json_str};

const STEP: Duration = Duration::from_secs(60);

/// Options whose holder answers `elicitation/create` by accepting the name "Ada", counting the
/// requests it saw; anything else is refused.
fn answering_holder() -> (StartOptions, Arc<AtomicUsize>) {
    let asked = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&asked);
    let answer: ClientRequests = Arc::new(move |_server, method, params: Value| {
        let seen = Arc::clone(&seen);
        Box::pin(async move {
            if method != "elicitation/create" {
                return Err(tether_driver::RequestRefused {
                    code: -32601,
                    message: format!("{method} is not answered in this test"),
                });
            }
            assert_eq!(params["message"], "What is your name?", "{params}");
            seen.fetch_add(1, Ordering::SeqCst);
            Ok(json!({"action": "accept", "content": {"name": "Ada"}}))
        })
    });
    let options = StartOptions {
        client_requests: Some(answer),
        ..StartOptions::default()
    };
    (options, asked)
}

/// `ask_name` through both paths a holder uses (a direct call, a forwarded request), then a
/// plain tool; the server must be running as `name`.
async fn elicits_and_calls(runtime: &McpRuntime, name: &str, asked: &AtomicUsize) {
    assert_eq!(
        runtime.protocol_version(name).as_deref(),
        Some("2026-07-28")
    );
    let out = call(runtime, name, "ask_name", json!({})).await;
    assert_eq!(out["content"][0]["text"], "hello Ada", "{out}");
    let forwarded = runtime
        .forward(
            name,
            "tools/call",
            json!({"name": "ask_name", "arguments": {}}),
            STEP,
            std::future::pending(),
            None,
        )
        .await
        .expect("forwarding ask_name");
    assert_eq!(forwarded["content"][0]["text"], "hello Ada", "{forwarded}");
    assert_eq!(asked.load(Ordering::SeqCst), 2, "one elicitation per call");
    let out = call(runtime, name, "add", json!({"a": 40, "b": 2})).await;
    assert_eq!(out["content"][0]["text"], "42");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_only_server_over_stdio_is_used_through_discover() {
    let (options, asked) = answering_holder();
    let config = format!("{{{}}}", stdio_server("modern", &["--modern-only"]));
    let runtime = start(config, options, &Secrets::default())
        .await
        .expect("starting the server");
    assert_eq!(
        tools(&runtime.reports()[0].status),
        ["add", "echo", "env_check", "ask_name"]
    );
    elicits_and_calls(&runtime, "modern", &asked).await;
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_only_server_over_streamable_http_is_used_through_discover() {
    let (mut child, url) = http_server(&["--modern-only"], &[]).await;
    let (options, asked) = answering_holder();
    let config = format!(
        r#"{{"modern": {{"type": "http", "url": {}}}}}"#,
        json_str(&url)
    );
    let runtime = start(config, options, &Secrets::default())
        .await
        .expect("starting the server");
    assert!(tools(&runtime.reports()[0].status).contains(&"ask_name".to_owned()));
    elicits_and_calls(&runtime, "modern", &asked).await;
    runtime.shutdown().await;
    let _ = child.kill().await;
}

/// Without a holder, a modern server's request for input fails the call in words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_nobody_answers_fails_the_call_clearly() {
    let config = format!("{{{}}}", stdio_server("modern", &["--modern-only"]));
    let runtime = start(config, StartOptions::default(), &Secrets::default())
        .await
        .expect("starting the server");
    let err = runtime
        .call_tool("modern", "ask_name", None, STEP)
        .await
        .expect_err("nobody answers the elicitation");
    let text = err.to_string();
    assert!(text.contains("elicitation/create"), "{text}");
    runtime.shutdown().await;
}

/// A legacy server gets `initialize`: at once when it answers the probe as legacy (our test
/// server names only older revisions), and within the probe's bound when it ignores it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_servers_get_initialize_without_waiting_long() {
    for (args, limit) in [
        (&[][..], PROBE_BOUND),
        (&["--ignore-discover"][..], PROBE_BOUND * 3),
    ] {
        let config = format!("{{{}}}", stdio_server("legacy", args));
        let began = Instant::now();
        let runtime = start(config, StartOptions::default(), &Secrets::default())
            .await
            .expect("starting the server");
        let took = began.elapsed();
        assert_eq!(
            tools(&runtime.reports()[0].status),
            ["add", "echo", "env_check"]
        );
        assert_eq!(
            runtime.protocol_version("legacy").as_deref(),
            Some("2025-11-25"),
            "{args:?}"
        );
        // rmcp alone would wait 10 s for an ignored probe.
        assert!(took < limit, "{args:?}: startup took {took:?}");
        let out = call(&runtime, "legacy", "echo", json!({"text": "still here"})).await;
        assert_eq!(out["content"][0]["text"], "still here");
        runtime.shutdown().await;
    }
}
