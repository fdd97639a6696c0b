//! `Gateway::start`: the gateway serves at once while its servers start, and each server joins
//! when it is ready. The servers are real processes (the workspace's test server) held back
//! or failed on the test's signal (a file it creates); the retry backoff is waited on a clock
//! the test moves.

#![allow(
    clippy::expect_used,
    reason = "a test binary: helpers outside #[test] functions panic on setup failure too"
)]

mod support;

use std::time::Duration;

use serde_json::json;
use tether_driver::StartOptions;
use tether_gateway::{Gateway, Upstream};
use tether_testkit::mcp_client::{
    ListChanges, ListWatcher, WatchingClient, answer_of, gateway_status, next_list_change,
    spawn_call, tool_names, until_status,
};
use tether_testkit::{ManualClock, test_server_bin};

const LIMIT: Duration = Duration::from_secs(30);

/// A client of `gateway` over an in-process pipe, and its list-change notifications.
async fn connect(gateway: &Gateway) -> (WatchingClient, ListChanges, tokio::task::JoinHandle<()>) {
    let (watcher, changes) = ListWatcher::new();
    let (client, serving) = support::serve_client(gateway, watcher).await;
    (client, changes, serving)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_back_server_joins_later_and_a_call_to_it_waits() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let release = dir.path().join("release");
    let session = support::fast_and_held_back(&release, &[], ManualClock::new()).await;
    let mut start = StartOptions::default();
    let upstream = Upstream::wire(&mut start);
    let gateway = Gateway::start(session, support::gateway_options(start, Some(upstream)));

    // initialize is answered while `slow` is held back (the file does not exist yet), and
    // announces list changes.
    let (client, mut changes, serving) = connect(&gateway).await;
    let info = client.peer_info().expect("an initialize answer");
    let capabilities = serde_json::to_value(&info.capabilities).expect("capabilities");
    assert_eq!(capabilities["tools"]["listChanged"], true, "{capabilities}");
    assert!(!release.exists());

    let slow = gateway_status(&client, "slow").await;
    assert_eq!(slow["state"], "pending", "{slow}");
    until_status(&client, "fast", LIMIT, |entry| entry["state"] == "ready").await;
    let names = tool_names(&client).await;
    assert!(names.contains(&"fast__echo".to_owned()), "{names:?}");
    assert!(
        !names.iter().any(|name| name.starts_with("slow__")),
        "{names:?}"
    );

    // A call to the pending server, issued before it is released, waits for it.
    let call = spawn_call(&client, "slow__echo", json!({"text": "waited"}));
    until_status(&client, "slow", LIMIT, |entry| entry["waiting_calls"] == 1).await;
    assert!(!call.is_finished(), "the call must wait for the server");

    // Released: it joins, every client hears of it, and its tools are listed.
    while changes.try_recv().is_ok() {}
    std::fs::write(&release, "").expect("releasing the slow server");
    next_list_change(&mut changes, LIMIT).await;
    let names = tool_names(&client).await;
    assert!(names.contains(&"slow__echo".to_owned()), "{names:?}");
    let answer = answer_of(call, LIMIT).await;
    assert!(
        format!("{:?}", answer.content).contains("waited"),
        "{answer:?}"
    );
    let slow = gateway_status(&client, "slow").await;
    assert_eq!(slow["state"], "ready", "{slow}");
    assert_eq!(slow["tools"], 3, "{slow}");

    close(gateway, client, serving).await;
}

/// One call timeout covers the whole request: a call that waited for its server to join has
/// only what is left of the timeout for the server's answer, not a fresh one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wait_for_a_pending_server_counts_against_the_call_timeout() {
    const CALL_TIMEOUT: Duration = Duration::from_secs(6);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let release = dir.path().join("release");
    let release_arg = release.to_string_lossy().into_owned();
    let program = test_server_bin().to_string_lossy().into_owned();
    // Its echo never answers within the test.
    let args: &[&str] = &["--start-when-file", &release_arg, "--slow-echo", "600000"];
    let session =
        support::session_of_servers(&[("slow", &program, args)], ManualClock::new()).await;
    let mut start = StartOptions::default();
    let upstream = Upstream::wire(&mut start);
    let mut options = support::gateway_options(start, Some(upstream));
    options.call_timeout = CALL_TIMEOUT;
    let gateway = Gateway::start(session, options);
    let (client, mut changes, serving) = connect(&gateway).await;

    let call = spawn_call(&client, "slow__echo", json!({"text": "late"}));
    until_status(&client, "slow", LIMIT, |entry| entry["waiting_calls"] == 1).await;
    // The call is waiting: let a measurable part of its timeout pass (this is the scenario's
    // wait, not a synchronisation) before the server may start.
    let waiting = std::time::Instant::now();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    std::fs::write(&release, "").expect("releasing the slow server");
    let waited = waiting.elapsed();
    next_list_change(&mut changes, LIMIT).await;

    let answer = refusal_of(call).await;
    let text = format!("{:?}", answer.content);
    // The server was given what the wait left of the timeout ("no answer within 4.49 s").
    let given: f64 = text
        .split("no answer within ")
        .nth(1)
        .and_then(|rest| rest.split(" s").next())
        .and_then(|seconds| seconds.parse().ok())
        .unwrap_or_else(|| panic!("no timeout in the answer: {text}"));
    assert!(
        // (Shown with two decimals.)
        given > 0.0 && given <= (CALL_TIMEOUT - waited).as_secs_f64() + 0.01,
        "the server was given {given} s of a {CALL_TIMEOUT:?} call timeout after waiting {waited:?} for it: {text}"
    );

    close(gateway, client, serving).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_start_fails_is_retried_with_the_backoff_and_joins() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let allow = dir.path().join("allow");
    let allow_arg = allow.to_string_lossy().into_owned();
    let program = test_server_bin().to_string_lossy().into_owned();
    let clock = ManualClock::new();
    let session = support::session_of_servers(
        &[("flaky", &program, &["--exit-unless-file", &allow_arg])],
        clock.clone(),
    )
    .await;
    let mut start = StartOptions::default();
    let upstream = Upstream::wire(&mut start);
    let gateway = Gateway::start(session, support::gateway_options(start, Some(upstream)));
    let (client, mut changes, serving) = connect(&gateway).await;

    // The first start fails: the server stays, retrying, and waits 250 ms on the clock.
    let entry = until_status(&client, "flaky", LIMIT, |entry| {
        entry["state"] == "retrying"
    })
    .await;
    assert_eq!(entry["failed_starts"], 1, "{entry}");
    assert!(
        entry["error"]
            .as_str()
            .is_some_and(|e| e.contains("--exit-unless-file")),
        "{entry}"
    );
    // A call by the server's prefix waits through the failed starts, not failing at once.
    let call = spawn_call(&client, "flaky__add", json!({"a": 2, "b": 3}));
    until_status(&client, "flaky", LIMIT, |entry| entry["waiting_calls"] == 1).await;
    clock.sleeping(1, Duration::from_secs(20)).await;
    std::fs::write(&allow, "").expect("letting the server start");
    clock.advance(Duration::from_millis(249));
    assert_eq!(gateway_status(&client, "flaky").await["state"], "retrying");
    clock.advance(Duration::from_millis(1));

    next_list_change(&mut changes, LIMIT).await;
    let names = tool_names(&client).await;
    assert!(names.contains(&"flaky__add".to_owned()), "{names:?}");
    let answer = answer_of(call, LIMIT).await;
    assert!(format!("{:?}", answer.content).contains('5'), "{answer:?}");
    let entry = gateway_status(&client, "flaky").await;
    assert_eq!(entry["state"], "ready", "{entry}");
    assert!(gateway.ready_within(Duration::ZERO).await);

    close(gateway, client, serving).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_read_no_ready_server_can_answer_waits_for_the_pending_ones() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let release = dir.path().join("release");
    let release_arg = release.to_string_lossy().into_owned();
    let program = test_server_bin().to_string_lossy().into_owned();
    let session = support::session_of_servers(
        &[
            ("fast", &program, &["--resource-template", "fast://{id}"]),
            (
                "notes",
                &program,
                &[
                    "--resource-template",
                    "note://{id}",
                    "--start-when-file",
                    &release_arg,
                ],
            ),
        ],
        ManualClock::new(),
    )
    .await;
    let gateway = Gateway::start(
        session,
        support::gateway_options(StartOptions::default(), None),
    );
    let (client, _changes, serving) = connect(&gateway).await;
    until_status(&client, "fast", LIMIT, |entry| entry["state"] == "ready").await;

    // No ready server lists or templates note://1: the read waits for `notes`.
    let read = {
        let peer = client.peer().clone();
        tokio::spawn(async move {
            peer.read_resource(rmcp::model::ReadResourceRequestParams::new("note://1"))
                .await
        })
    };
    until_status(&client, "notes", LIMIT, |entry| entry["waiting_calls"] == 1).await;
    assert!(!read.is_finished(), "the read waits for the pending server");
    std::fs::write(&release, "").expect("releasing the notes server");
    let answer = tokio::time::timeout(LIMIT, read)
        .await
        .expect("the read ends")
        .expect("the read's task")
        .expect("the read");
    let text = serde_json::to_string(&answer).expect("a result");
    assert!(
        text.contains("note://1 read by the server of note://{id}"),
        "{text}"
    );

    close(gateway, client, serving).await;
}

/// Closes `client`, waits for its connection to end, and stops `gateway`'s servers.
async fn close(gateway: Gateway, client: WatchingClient, serving: tokio::task::JoinHandle<()>) {
    client.cancel().await.expect("closing the client");
    let _ = serving.await;
    gateway.shutdown().await;
}

/// The answer `call` ended with, within [`LIMIT`]: a tool error.
async fn refusal_of(call: tether_testkit::mcp_client::RunningCall) -> rmcp::model::CallToolResult {
    let answer = match tokio::time::timeout(LIMIT, call).await {
        Ok(Ok(Ok(result))) => result,
        other => panic!("the call did not end within {LIMIT:?}: {other:?}"),
    };
    assert_eq!(answer.is_error, Some(true), "{answer:?}");
    answer
}

/// A gateway on `session` with pins in `pins`, lazy or not, in `mode`, and a client of it.
async fn pinned_gateway(
    session: tether_driver::Session,
    pins: &std::path::Path,
    lazy: bool,
    mode: tether_gateway::tool_search::ToolMode,
) -> (
    Gateway,
    WatchingClient,
    ListChanges,
    tokio::task::JoinHandle<()>,
) {
    let mut start = StartOptions::default();
    let upstream = Upstream::wire(&mut start);
    let mut options = support::gateway_options(start, Some(upstream));
    options.pins = Some(tether_gateway::PinStore::new(pins));
    options.tool_search.lazy = lazy;
    options.tool_search.mode = mode;
    let gateway = Gateway::start(session, options);
    let (client, changes, serving) = connect(&gateway).await;
    (gateway, client, changes, serving)
}

/// `--lazy`: a server whose tools were pinned by an earlier run is not started; its pinned
/// tools are listed (and searched) until one is called — or found, in search mode — which
/// starts it. The server is the test server behind `sh`, which notes each start in a file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_server_offers_its_pinned_tools_and_starts_when_one_is_called_or_found() {
    use tether_gateway::tool_search::ToolMode;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let pins = dir.path().join("pins.json");
    let starts = dir.path().join("starts");
    let script = format!(
        "echo start >> '{}'; exec '{}'",
        starts.display(),
        test_server_bin().display()
    );
    let args: &[&str] = &["-c", &script];
    let servers = [("lazy", "sh", args)];
    let session = || support::session_of_servers(&servers, ManualClock::new());
    let started = || {
        std::fs::read_to_string(&starts)
            .unwrap_or_default()
            .lines()
            .count()
    };

    // A first run, not lazy, pins its tools.
    let (gateway, client, _changes, serving) =
        pinned_gateway(session().await, &pins, false, ToolMode::All).await;
    until_status(&client, "lazy", LIMIT, |entry| entry["state"] == "ready").await;
    let first = tool_names(&client).await;
    close(gateway, client, serving).await;
    assert_eq!(started(), 1);

    // Lazy: listed from the pins, not started, until a call.
    let (gateway, client, mut changes, serving) =
        pinned_gateway(session().await, &pins, true, ToolMode::All).await;
    assert_eq!(tool_names(&client).await, first);
    let entry = gateway_status(&client, "lazy").await;
    assert_eq!(entry["state"], "lazy", "{entry}");
    assert_eq!(entry["tools"], 3, "{entry}");
    assert_eq!(
        started(),
        1,
        "a lazy server started before it was asked for"
    );
    let answer = answer_of(
        spawn_call(&client, "lazy__echo", json!({"text": "woken"})),
        LIMIT,
    )
    .await;
    assert!(
        format!("{:?}", answer.content).contains("woken"),
        "{answer:?}"
    );
    assert_eq!(started(), 2);
    assert_eq!(gateway_status(&client, "lazy").await["state"], "ready");
    next_list_change(&mut changes, LIMIT).await;
    assert_eq!(
        tool_names(&client).await,
        first,
        "the pins were its real list"
    );
    close(gateway, client, serving).await;

    // Search mode: finding one of its tools starts it.
    let (gateway, client, _changes, serving) =
        pinned_gateway(session().await, &pins, true, ToolMode::Search).await;
    assert_eq!(gateway_status(&client, "lazy").await["state"], "lazy");
    let found = client
        .call_tool(
            rmcp::model::CallToolRequestParams::new("tether__find_tools").with_arguments(
                json!({"query": "echo text back"})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            ),
        )
        .await
        .expect("find_tools");
    let found = found.structured_content.expect("structured results");
    assert_eq!(found["tools"][0]["name"], "lazy__echo", "{found}");
    until_status(&client, "lazy", LIMIT, |entry| entry["state"] == "ready").await;
    assert_eq!(started(), 3);
    close(gateway, client, serving).await;
}

/// A lazy server's tool whose definition changed since it was pinned is offered (the pinned
/// copy) until the server starts; a call starts it, and is then refused like any changed tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_to_a_lazy_servers_changed_tool_starts_it_and_is_refused() {
    use tether_gateway::tool_search::ToolMode;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let pins = dir.path().join("pins.json");
    let program = test_server_bin().to_string_lossy().into_owned();
    let run = |description: &'static str| {
        let program = program.clone();
        async move {
            let args: &[&str] = &["--extra-tool", description];
            support::session_of_servers(&[("lazy", &program, args)], ManualClock::new()).await
        }
    };
    let (gateway, client, _changes, serving) =
        pinned_gateway(run("Adds nothing.").await, &pins, false, ToolMode::All).await;
    until_status(&client, "lazy", LIMIT, |entry| entry["state"] == "ready").await;
    close(gateway, client, serving).await;

    let (gateway, client, _changes, serving) = pinned_gateway(
        run("Adds nothing, now changed.").await,
        &pins,
        true,
        ToolMode::All,
    )
    .await;
    assert!(
        tool_names(&client)
            .await
            .contains(&"lazy__extra".to_owned())
    );
    let call = spawn_call(&client, "lazy__extra", json!({}));
    let answer = refusal_of(call).await;
    assert!(
        format!("{:?}", answer.content).contains("withheld"),
        "{answer:?}"
    );
    let entry = gateway_status(&client, "lazy").await;
    assert_eq!(entry["state"], "ready", "{entry}");
    assert_eq!(entry["withheld"], json!(["lazy__extra"]), "{entry}");
    close(gateway, client, serving).await;
}
