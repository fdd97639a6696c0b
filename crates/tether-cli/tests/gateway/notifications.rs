//! What servers send unasked, passed on to the client: progress, log messages, list changes
//! (followed, pinned and filtered, never taking another server's name) and resource updates;
//! and resource templates read by the server that owns them.

use super::*;

/// A client that counts the progress notifications it receives, and the tokens they carry.
#[derive(Clone, Default)]
struct ProgressCounter {
    seen: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
}

impl rmcp::ClientHandler for ProgressCounter {
    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        let value = serde_json::to_value(&params).expect("serializing progress");
        self.seen.lock().expect("the progress list").push(value);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_of_a_long_call_reaches_the_client_under_its_own_token() {
    let counter = ProgressCounter::default();
    let Some((_dir, client)) = everything_behind_gateway(counter.clone()).await else {
        return;
    };
    let arguments = json!({"duration": 1, "steps": 4});
    let params = CallToolRequestParams::new("ev__trigger-long-running-operation")
        .with_arguments(arguments.as_object().cloned().unwrap_or_default());
    let result = client.call_tool(params).await.expect("the long call");
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let seen = counter.seen.lock().expect("the progress list").clone();
    assert!(seen.len() >= 3, "progress notifications: {seen:?}");
    // Every one carries the token this client's request had (rmcp numbers them from 0), not
    // the one tether gave its own request upstream.
    let tokens: std::collections::HashSet<String> = seen
        .iter()
        .map(|p| p["progressToken"].to_string())
        .collect();
    assert_eq!(tokens.len(), 1, "{seen:?}");
    assert!(
        seen.iter().all(|p| p["total"].as_f64() == Some(4.0)),
        "{seen:?}"
    );
    client.cancel().await.expect("closing the client");
}

/// Every progress notification a server sends before its answer reaches the client before the
/// answer, read as the lines `tether serve` writes (the conformance server's
/// `test_tool_with_progress` answers right after its third): three notifications, then the
/// result, call after call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_sent_before_an_answer_is_written_before_it() {
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let spec = format!(
        r#"{{"conf": {{"command": {}, "args": ["--conformance"]}}}}"#,
        json_str(&test_server_bin().to_string_lossy())
    );
    let mut serve = tether_command(dir.path(), &["serve", "--bare-names", "--mcp", &spec])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("starting tether serve");
    let mut stdin = serve.stdin.take().expect("piped stdin");
    let mut lines = tokio::io::BufReader::new(serve.stdout.take().expect("piped stdout")).lines();
    let messages = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "lines", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ];
    for round in 0..3 {
        let mut written = String::new();
        if round == 0 {
            for message in &messages {
                written.push_str(&format!("{message}\n"));
            }
        }
        let call = json!({"jsonrpc": "2.0", "id": 10 + round, "method": "tools/call", "params": {
            "name": "test_tool_with_progress", "_meta": {"progressToken": format!("p{round}")}}});
        written.push_str(&format!("{call}\n"));
        stdin
            .write_all(written.as_bytes())
            .await
            .expect("writing to tether serve");
        let mut progress = Vec::new();
        let answer = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                let line = lines
                    .next_line()
                    .await
                    .expect("reading tether serve")
                    .expect("tether serve ended");
                let message: Value = serde_json::from_str(&line).expect("a JSON-RPC line");
                if message["method"] == "notifications/progress" {
                    progress.push(message["params"]["progress"].as_f64());
                } else if message["id"] == 10 + round {
                    return message;
                }
            }
        })
        .await
        .expect("the call's answer");
        assert!(answer["result"]["isError"] != true, "{answer}");
        assert_eq!(
            progress,
            [Some(0.0), Some(50.0), Some(100.0)],
            "round {round}"
        );
    }
}

/// A client that records the log messages it receives.
#[derive(Clone, Default)]
struct LogRecorder {
    seen: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
}

impl rmcp::ClientHandler for LogRecorder {
    #[expect(
        deprecated,
        reason = "notifications/message of the protocol versions the test speaks"
    )]
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        let value = serde_json::to_value(&params).expect("serializing a log message");
        self.seen.lock().expect("the log list").push(value);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_log_messages_reach_the_client_named_by_server() {
    let recorder = LogRecorder::default();
    let Some((_dir, client)) = everything_behind_gateway(recorder.clone()).await else {
        return;
    };
    let info = client.peer_info().expect("the gateway's initialize answer");
    assert!(info.capabilities.logging.is_some(), "{info:?}");
    // server-everything sends one message at once when simulated logging is switched on.
    let params = CallToolRequestParams::new("ev__toggle-simulated-logging");
    client
        .call_tool(params)
        .await
        .expect("switching logging on");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while recorder.seen.lock().expect("the log list").is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "no log message arrived"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seen = recorder.seen.lock().expect("the log list").clone();
    assert!(
        seen.iter()
            .all(|m| m["logger"].as_str().is_some_and(|l| l.starts_with("ev"))),
        "{seen:?}"
    );
    client.cancel().await.expect("closing the client");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_tool_list_change_is_followed_pinned_filtered_and_passed_on() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let spec = format!(
        r#"{{"srv": {{"command": {}, "args": ["--grow-tools"]}}}}"#,
        json_str(&test_server_bin().to_string_lossy())
    );
    let handler = FullClient::default();
    let args = ["serve", "--mcp", &spec, "--exclude-tools", "srv__hidden*"];
    let (transport, _) = TokioChildProcess::builder(tether_command(dir.path(), &args))
        .stderr(Stdio::null())
        .spawn()
        .expect("starting tether serve");
    let client = handler
        .clone()
        .serve(transport)
        .await
        .expect("initializing");
    let info = client.peer_info().expect("the gateway's initialize answer");
    let tools_capability = serde_json::to_value(&info.capabilities.tools).expect("capabilities");
    assert_eq!(tools_capability["listChanged"], json!(true), "{info:?}");
    assert!(!tool_names(&client).await.contains(&"srv__grown".to_owned()));

    // The server adds a tool and says so: the gateway lists it again and tells the client.
    handler.grow_tool(&client, "grown").await;
    let names = tool_names(&client).await;
    assert!(names.contains(&"srv__grown".to_owned()), "{names:?}");
    assert_eq!(
        text_of(&call(&client, "srv__grown", json!({})).await),
        "grown answered"
    );
    // The new tool was pinned like those seen at start.
    let pins = std::fs::read_to_string(dir.path().join("home").join("pins.json"))
        .expect("reading the pins");
    let pins: Value = serde_json::from_str(&pins).expect("pins are JSON");
    assert!(pins["srv"]["grown"]["sha256"].is_string(), "{pins}");

    // The flags' filters apply to a tool added later too: it is known (a call names the
    // flag) but not offered, and since the offer did not change, the client is not told.
    call(&client, "srv__add_tool", json!({"name": "hidden_one"})).await;
    eventually("the hidden tool being known", async || {
        let refused = call(&client, "srv__hidden_one", json!({})).await;
        assert_eq!(refused["isError"], json!(true), "{refused}");
        text_of(&refused).contains("--exclude-tools")
    })
    .await;
    let names = tool_names(&client).await;
    assert!(!names.contains(&"srv__hidden_one".to_owned()), "{names:?}");
    assert_eq!(handler.tool_list_changes(), 1);
    client.cancel().await.expect("closing the client");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_update_reaches_the_client_that_subscribed() {
    let handler = FullClient::default();
    let Some((_dir, client)) = everything_behind_gateway(handler.clone()).await else {
        return;
    };
    let info = client.peer_info().expect("the gateway's initialize answer");
    let resources = serde_json::to_value(&info.capabilities.resources).expect("capabilities");
    assert_eq!(resources["subscribe"], json!(true), "{info:?}");
    let listed = client
        .list_all_resources()
        .await
        .expect("resources/list through the gateway");
    let uri = listed
        .first()
        .expect("server-everything lists resources")
        .uri
        .clone();
    #[expect(
        deprecated,
        reason = "resources/subscribe of the protocol versions the gateway speaks"
    )]
    client
        .subscribe(rmcp::model::SubscribeRequestParams::new(uri.clone()))
        .await
        .expect("subscribing through the gateway");
    // server-everything sends an update for every subscribed URI at once when switched on.
    call(&client, "ev__toggle-subscriber-updates", json!({})).await;
    eventually("a resources/updated for the client", async || {
        !handler.updated.lock().expect("the updates").is_empty()
    })
    .await;
    let updated = handler.updated.lock().expect("the updates").clone();
    assert!(updated.iter().all(|u| *u == uri), "{updated:?} vs {uri}");
    client.cancel().await.expect("closing the client");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_change_neither_takes_another_servers_name_nor_revives_an_excluded_tool() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    // `a` comes first in spec order, and its `b__c` sanitizes like `a__b`'s `c`.
    let spec = test_servers_spec(&[("a", &["--grow-tools"]), ("a__b", &["--grow-tools"])]);
    let (handler, client) = serve_full(dir.path(), &spec, &["--exclude-tools", "a__b__d"]).await;
    let changes = || handler.tool_list_changes();

    call(&client, "a__b__add_tool", json!({"name": "c"})).await;
    eventually("a__b__c being offered", async || {
        tool_names(&client).await.contains(&"a__b__c".to_owned())
    })
    .await;
    assert_eq!(
        text_of(&call(&client, "a__b__c", json!({})).await),
        "c answered"
    );

    // Server `a` now lists `b__c`: it gets a name of its own, and `a__b__c` still leads to
    // `a__b`'s tool.
    let before = changes();
    call(&client, "a__add_tool", json!({"name": "b__c"})).await;
    eventually("the list change being passed on", async || {
        changes() > before
    })
    .await;
    let names = tool_names(&client).await;
    assert!(names.contains(&"a__b__c_2".to_owned()), "{names:?}");
    assert_eq!(
        text_of(&call(&client, "a__b__c", json!({})).await),
        "c answered"
    );
    assert_eq!(
        text_of(&call(&client, "a__b__c_2", json!({})).await),
        "b__c answered"
    );

    // `a__b`'s `d` is excluded; `a` then lists `b__d`. The exclusion holds for `a__b`'s tool
    // whatever `a` lists, and `b__d` (whose unsuffixed name the pattern names) is left out too.
    call(&client, "a__b__add_tool", json!({"name": "d"})).await;
    eventually("a__b__d being known", async || {
        text_of(&call(&client, "a__b__d", json!({})).await).contains("--exclude-tools")
    })
    .await;
    call(&client, "a__add_tool", json!({"name": "b__d"})).await;
    eventually("a's b__d being known", async || {
        !text_of(&call(&client, "a__b__d_2", json!({})).await).contains("no tool named")
    })
    .await;
    for name in ["a__b__d", "a__b__d_2"] {
        let refused = call(&client, name, json!({})).await;
        assert_eq!(refused["isError"], json!(true), "{name}: {refused}");
        assert!(
            text_of(&refused).contains("--exclude-tools"),
            "{name}: {refused}"
        );
    }
    let names = tool_names(&client).await;
    assert!(
        !names.iter().any(|name| name.starts_with("a__b__d")),
        "{names:?}"
    );
    client.cancel().await.expect("closing the client");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_more_specific_template_of_a_later_server_does_not_capture_reads() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let spec = test_servers_spec(&[
        ("a", &["--resource-template", "mem://{id}"]),
        (
            "b",
            &[
                "--resource-template",
                "mem://secret{id}",
                "--resource-template",
                "mem://{+path}",
            ],
        ),
    ]);
    let (_, client) = serve_full(dir.path(), &spec, &[]).await;
    let templates = client
        .list_all_resource_templates()
        .await
        .expect("resources/templates/list through the gateway");
    assert_eq!(templates.len(), 3, "{templates:?}");
    let read = async |uri: &str| {
        let result = client
            .read_resource(ReadResourceRequestParams::new(uri.to_owned()))
            .await
            .unwrap_or_else(|e| panic!("reading {uri}: {e}"));
        serde_json::to_value(result).expect("serializing a result")["contents"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    // `a`'s template makes this URI (id = "secret%24HOME"); `b`'s more specific one could
    // too, but `a` comes first.
    let uri = "mem://secret%24HOME";
    assert_eq!(
        read(uri).await,
        format!("{uri} read by the server of mem://{{id}}")
    );
    // Only `b`'s `{+path}` can make a `/`: the read goes there.
    let uri = "mem://x/y";
    assert!(read(uri).await.ends_with("mem://{+path}"), "{uri}");
    client.cancel().await.expect("closing the client");
}
