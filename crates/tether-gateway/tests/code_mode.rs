//! Code mode (`--tool-mode code`) on a real gateway in front of real test servers over stdio:
//! what `tools/list` offers, `tether__find_tools`' declarations, a script's calls taking a
//! direct call's path (audit, masking, withheld names), its limits, and a client's
//! cancellation stopping the run and the server's call under way.

#![allow(
    clippy::expect_used,
    reason = "a test binary: helpers outside #[test] functions panic on setup failure too"
)]

mod support;

use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use serde_json::{Value, json};
use tether_driver::StartOptions;
use tether_gateway::tool_search::{ToolMode, ToolSearch};
use tether_gateway::{AuditLog, Gateway};
use tether_testkit::{ManualClock, test_server_bin};

const LIMIT: Duration = Duration::from_secs(30);

/// A gateway in code mode over the test server twice (`t`, and `slow`, whose `echo` waits a
/// minute and records its cancellation in `cancelled`), auditing to `audit`, with `limits`.
async fn code_gateway(dir: &std::path::Path, limits: tether_code::Limits) -> Gateway {
    let program = test_server_bin().to_string_lossy().into_owned();
    let record = dir.join("cancelled").to_string_lossy().into_owned();
    let slow: [&str; 4] = ["--slow-echo", "60000", "--record-cancellations", &record];
    let session = support::session_of_servers(
        &[("t", &program, &[]), ("slow", &program, &slow)],
        ManualClock::new(),
    )
    .await;
    let mut options = support::gateway_options(StartOptions::default(), None);
    options.audit = Some(AuditLog::create(&dir.join("audit.jsonl")).expect("the audit log"));
    options.tool_search = ToolSearch {
        mode: ToolMode::Code,
        code: limits,
        ..ToolSearch::default()
    };
    let gateway = Gateway::start(session, options);
    assert!(gateway.ready_within(LIMIT).await);
    gateway
}

fn run_code(code: &str) -> CallToolRequestParams {
    let arguments = json!({ "code": code });
    CallToolRequestParams::new("tether__run_code")
        .with_arguments(arguments.as_object().cloned().unwrap_or_default())
}

fn texts(result: &CallToolResult) -> Vec<String> {
    result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|text| text.text.clone()))
        .collect()
}

fn audit_lines(dir: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("audit.jsonl"))
        .expect("reading the audit log")
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_calls_many_tools_and_only_its_answer_reaches_the_client() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let gateway = code_gateway(dir.path(), tether_code::Limits::default()).await;
    let (client, serving) = support::serve_client(&gateway, ()).await;

    // tools/list: the run tool, the search tool, tether_status; the run tool declares the
    // tools when they fit.
    let listed = client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = listed.iter().map(|tool| tool.name.as_ref()).collect();
    assert_eq!(
        names,
        ["tether__run_code", "tether__find_tools", "tether_status"]
    );
    let description = listed[0].description.as_deref().unwrap_or_default();
    assert!(
        description.contains("t__add(args: { /** The first addend. */ a: number; /** The second addend. */ b: number }): Promise<string>"),
        "{description}"
    );

    // find_tools answers with declarations.
    let found = client
        .call_tool(
            CallToolRequestParams::new("tether__find_tools").with_arguments(
                json!({"query": "add two integers", "limit": 1})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            ),
        )
        .await
        .expect("find_tools");
    let found = found.structured_content.expect("structured content");
    assert_eq!(found["tools"][0]["name"], "t__add", "{found}");
    assert!(
        found["tools"][0]["declaration"]
            .as_str()
            .is_some_and(|d| d.starts_with("/** Add two integers")),
        "{found}"
    );

    // Twenty calls, summed in the script: one number comes back, and the log.
    let result = client
        .call_tool(run_code(
            "const sums = await Promise.all(Array.from({length: 20}, (_, i) => tools.t__add({a: i, b: 1})));
             console.log('calls', sums.length);
             return sums.map(Number).reduce((x, y) => x + y, 0);",
        ))
        .await
        .expect("run_code");
    assert_eq!(result.is_error, Some(false), "{:?}", texts(&result));
    assert_eq!(texts(&result), ["210", "calls 20\n"]);

    // A tool error is an Error the script catches; an unknown name too.
    let caught = client
        .call_tool(run_code(
            "let said = [];
             try { await tools.t__add({a: 'x', b: 1}); } catch (e) { said.push('add failed'); }
             try { await tools.t__nothing({}); } catch (e) { said.push(e.message); }
             return said;",
        ))
        .await
        .expect("run_code");
    let said: Vec<String> = serde_json::from_str(&texts(&caught)[0]).expect("JSON");
    assert_eq!(said[0], "add failed");
    assert!(said[1].contains("no tool named 't__nothing'"), "{said:?}");

    // What the script makes that looks like a credential is masked like any result.
    let leaked = client
        .call_tool(run_code(
            "const echoed = await tools.t__echo({text: 'ok'}); return echoed + ' AKIA' + 'Q3EXAMPLE7ZZ2WXY';",
        ))
        .await
        .expect("run_code");
    let text = texts(&leaked).join("");
    assert!(!text.contains("AKIAQ3EXAMPLE7ZZ2WXY"), "{text}");
    assert!(text.contains("[secret: aws-access-key-id]"), "{text}");

    // An uncaught error names its line; the run is a tool error, not a protocol error.
    let thrown = client
        .call_tool(run_code("const a = 1;\nundefinedFunction();"))
        .await
        .expect("run_code");
    assert_eq!(thrown.is_error, Some(true));
    let text = texts(&thrown).join("");
    assert!(
        text.contains("ReferenceError") && text.contains("(line 2)"),
        "{text}"
    );

    client.cancel().await.expect("closing the client");
    let _ = serving.await;
    gateway.shutdown().await;

    // One audit line per tool call of a script, one per run.
    let audit = audit_lines(dir.path());
    let adds = audit.iter().filter(|line| line["target"] == "add").count();
    assert_eq!(adds, 21, "20 sums and the failed one");
    let runs = audit
        .iter()
        .filter(|line| line["target"] == "tether__run_code")
        .count();
    assert_eq!(runs, 4);
    let text = serde_json::to_string(&audit).expect("JSON");
    assert!(!text.contains("AKIAQ3EXAMPLE7ZZ2WXY"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_past_its_limits_ends_and_the_next_run_answers() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let limits = tether_code::Limits {
        time: Duration::from_millis(500),
        calls: 5,
        ..tether_code::Limits::default()
    };
    let gateway = code_gateway(dir.path(), limits).await;
    let (client, serving) = support::serve_client(&gateway, ()).await;
    let endless = client
        .call_tool(run_code("while (true) {}"))
        .await
        .expect("run_code");
    assert_eq!(endless.is_error, Some(true));
    assert!(
        texts(&endless).join("").contains("time limit of 0.5 s"),
        "{:?}",
        texts(&endless)
    );
    let many = client
        .call_tool(run_code(
            "for (let i = 0; i < 100; i++) await tools.t__add({a: i, b: 0}); return 'all';",
        ))
        .await
        .expect("run_code");
    assert!(
        texts(&many).join("").contains("made its 5 tool calls"),
        "{:?}",
        texts(&many)
    );
    let next = client
        .call_tool(run_code("return await tools.t__add({a: 1, b: 2});"))
        .await
        .expect("run_code");
    assert_eq!(texts(&next), ["3"]);
    client.cancel().await.expect("closing the client");
    let _ = serving.await;
    gateway.shutdown().await;
}

/// The client gives up on a run whose script waits for a server's slow call: the run ends,
/// the server is told (it records the cancellation), and the next run answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_run_cancels_its_calls_under_way() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let gateway = code_gateway(dir.path(), tether_code::Limits::default()).await;
    let (client, serving) = support::serve_client(&gateway, ()).await;
    let record = dir.path().join("cancelled");
    let upstream = tether_testkit::test_server_with(&record.to_string_lossy());
    let before = tether_testkit::bytes_read(upstream);
    let handle = client
        .peer()
        .clone()
        .send_cancellable_request(
            rmcp::model::ClientRequest::CallToolRequest(rmcp::model::Request::new(run_code(
                "return await tools.slow__echo({text: 'patience'});",
            ))),
            rmcp::service::PeerRequestOptions::no_options(),
        )
        .await
        .expect("sending run_code");
    // The script's call is under way once the slow server read it.
    eventually("the script's call reaching the server", || {
        tether_testkit::bytes_read(upstream) != before
    })
    .await;
    tokio::time::timeout(LIMIT, handle.cancel(Some("the user gave up".to_owned())))
        .await
        .expect("cancelling in time")
        .expect("cancelling");
    eventually("the server's echo being cancelled", || {
        std::fs::read_to_string(&record).is_ok_and(|text| text.contains("echo cancelled: patience"))
    })
    .await;
    let next = client
        .call_tool(run_code("return 'still here';"))
        .await
        .expect("run_code");
    assert_eq!(texts(&next), ["still here"]);
    client.cancel().await.expect("closing the client");
    let _ = serving.await;
    gateway.shutdown().await;
}

/// Waits, a bounded while, polling every 5 ms, for `done` (an event in another process).
async fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {what} within {LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
