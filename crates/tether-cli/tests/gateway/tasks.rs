//! Tasks (SEP-2663) through `tether serve`, in front of the conformance-mode test server,
//! whose task fixtures (`tasks.rs` there) run as rmcp's server-side tasks: a client with Tasks
//! gets the server's tasks held by the gateway (results, questions, cancellation, protocol
//! errors, a server that dies under a task), a task is found only by the connection that made
//! it, and a session client without Tasks gets a task-only tool's final result (the bridge).

use rmcp::model::{
    ClientCapabilities, ClientConfig, ClientRequest, GetTaskParams, GetTaskRequest, Implementation,
    ServerResult,
};

use super::*;

const TASKS: &str = "io.modelcontextprotocol/tasks";

/// The conformance-mode test server, under a program name of its own (`conf-tasks-mcp`, a
/// link in `dir`) so that a test can find its process.
fn conformance_spec(dir: &Path) -> (PathBuf, String) {
    let program = dir.join("conf-tasks-mcp");
    std::os::unix::fs::symlink(test_server_bin(), &program).expect("linking the test server");
    let spec = format!(
        r#"{{"conf": {{"command": {}, "args": ["--conformance"]}}}}"#,
        json_str(&program.to_string_lossy())
    );
    (program, spec)
}

/// A stateless 2026-07-28 request, declaring Tasks when `tasks`: its answer.
async fn ask(
    http: &reqwest::Client,
    url: &str,
    id: u64,
    method: &str,
    params: Value,
    tasks: bool,
) -> Value {
    ask_as(http, url, None, id, method, params, tasks).await
}

/// [`ask`] with `Authorization: Bearer TOKEN`.
async fn ask_as(
    http: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    id: u64,
    method: &str,
    mut params: Value,
    tasks: bool,
) -> Value {
    let mut capabilities = json!({"elicitation": {"form": {}}});
    if tasks {
        capabilities["extensions"] = json!({ TASKS: {} });
    }
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "tasks-test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    });
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let mut request = post(http, url, token, None, &body)
        .header("Mcp-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", method);
    let name = body["params"]["name"].as_str();
    let name = name
        .or_else(|| body["params"]["taskId"].as_str())
        .or_else(|| body["params"]["uri"].as_str());
    if let Some(name) = name {
        request = request.header("Mcp-Name", name);
    }
    super::modern::answer_of(request, id, method).await
}

/// `tasks/get` of `task_id` until its status is `status` or terminal (at most 20 s).
async fn until(http: &reqwest::Client, url: &str, task_id: &str, status: &str) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let got = ask(http, url, 90, "tasks/get", json!({"taskId": task_id}), true).await;
        let now = got["result"]["status"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if now == status || ["completed", "failed", "cancelled"].contains(&now.as_str()) {
            return got["result"].clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "task {task_id} still {got} after 20 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A task created by `tools/call` `tool` with `arguments`: its id.
async fn created(http: &reqwest::Client, url: &str, tool: &str, arguments: Value) -> String {
    let answer = ask(
        http,
        url,
        10,
        "tools/call",
        json!({"name": tool, "arguments": arguments}),
        true,
    )
    .await;
    let result = &answer["result"];
    assert_eq!(result["resultType"], "task", "{answer}");
    assert!(result.get("result").is_none(), "{answer}");
    assert!(
        result["ttlMs"].as_u64().is_some_and(|ms| ms > 0),
        "{answer}"
    );
    assert!(result["pollIntervalMs"].as_u64().is_some(), "{answer}");
    result["taskId"].as_str().expect("a taskId").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_with_tasks_gets_the_servers_tasks_held_by_the_gateway() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let (_program, spec) = conformance_spec(dir.path());
    let gateway = http_gateway_of(dir.path(), &spec, &["--no-auth", "--bare-names"]);
    let (http, url) = (reqwest::Client::new(), gateway.url.as_str());

    // A tool that never makes a task answers in place.
    let greet = json!({"name": "greet", "arguments": {"name": "Ada"}});
    let greeted = ask(&http, url, 1, "tools/call", greet, true).await;
    assert_eq!(greeted["result"]["resultType"], "complete", "{greeted}");
    assert!(greeted["result"].get("taskId").is_none(), "{greeted}");
    assert_eq!(text_of(&greeted["result"]), "Hello, Ada!");

    // Completed: the result inlined on tasks/get, found right after the create.
    let id = created(
        &http,
        url,
        "slow_compute",
        json!({"seconds": 0.2, "label": "held"}),
    )
    .await;
    let at_once = ask(&http, url, 2, "tasks/get", json!({"taskId": id}), true).await;
    assert_eq!(at_once["result"]["taskId"], json!(id), "{at_once}");
    let done = until(&http, url, &id, "completed").await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(text_of(&done["result"]), "computed held", "{done}");

    // A question in the task, answered with tasks/update.
    let id = created(&http, url, "confirm_delete", json!({"filename": "f.txt"})).await;
    let asking = until(&http, url, &id, "input_required").await;
    assert_eq!(asking["status"], "input_required", "{asking}");
    let question = &asking["inputRequests"]["confirm"];
    assert_eq!(question["method"], "elicitation/create", "{asking}");
    assert!(
        question["params"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("f.txt"))
    );
    let answer = json!({"taskId": id, "inputResponses":
        {"confirm": {"action": "accept", "content": {"confirm": true}}}});
    let ack = ask(&http, url, 3, "tasks/update", answer, true).await;
    assert_eq!(ack["result"], json!({"resultType": "complete"}), "{ack}");
    let done = until(&http, url, &id, "completed").await;
    assert_eq!(text_of(&done["result"]), "deleted f.txt", "{done}");

    // Cancelled while it runs: passed on, settled as the server says.
    let id = created(&http, url, "slow_compute", json!({"seconds": 60})).await;
    let ack = ask(&http, url, 4, "tasks/cancel", json!({"taskId": id}), true).await;
    assert_eq!(ack["result"], json!({"resultType": "complete"}), "{ack}");
    assert_eq!(
        until(&http, url, &id, "cancelled").await["status"],
        "cancelled"
    );

    // A tool error is a completed task; a protocol error a failed one, with its error.
    let id = created(&http, url, "failing_job", json!({})).await;
    let done = until(&http, url, &id, "completed").await;
    assert_eq!(done["result"]["isError"], true, "{done}");
    let id = created(&http, url, "protocol_error_job", json!({})).await;
    let failed = until(&http, url, &id, "failed").await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert!(failed["error"]["code"].is_i64(), "{failed}");
    assert!(failed.get("result").is_none(), "{failed}");
    let message = failed["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("broke down"), "{failed}");

    // Without Tasks: a tool that can run in place does; one that cannot is -32021, naming
    // Tasks; the tasks methods are refused.
    let slow = json!({"name": "slow_compute", "arguments": {"seconds": 0}});
    let in_place = ask(&http, url, 5, "tools/call", slow, false).await;
    assert_eq!(in_place["result"]["resultType"], "complete", "{in_place}");
    let failing = json!({"name": "failing_job", "arguments": {}});
    let refused = ask(&http, url, 6, "tools/call", failing, false).await;
    assert_eq!(refused["error"]["code"], -32021, "{refused}");
    assert_eq!(
        refused["error"]["data"]["requiredCapabilities"]["extensions"][TASKS],
        json!({}),
        "{refused}"
    );
    let gated = ask(&http, url, 7, "tasks/get", json!({"taskId": id}), false).await;
    assert_eq!(gated["error"]["code"], -32021, "{gated}");
    let unknown = ask(
        &http,
        url,
        8,
        "tasks/get",
        json!({"taskId": "no-such-task"}),
        true,
    )
    .await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    let removed = ask(&http, url, 9, "tasks/result", json!({"taskId": id}), true).await;
    assert_eq!(removed["error"]["code"], -32601, "{removed}");
}

/// A client of a session (2025-11-25) that declared Tasks at `initialize`.
async fn session_with_tasks(url: &str) -> RunningService<RoleClient, ClientConfig> {
    let mut capabilities = ClientCapabilities::default();
    capabilities.extensions = Some([(TASKS.to_owned(), serde_json::Map::new())].into());
    let info = ClientConfig::new(capabilities, Implementation::new("tasks-session", "1"));
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url.to_owned());
    info.serve(transport).await.expect("initializing a session")
}

async fn session_get(
    client: &RunningService<RoleClient, ClientConfig>,
    id: &str,
) -> Result<ServerResult, rmcp::ServiceError> {
    let request = ClientRequest::GetTaskRequest(GetTaskRequest::new(GetTaskParams::new(id)));
    client.send_request(request).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_found_only_by_the_connection_that_created_it() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let (_program, spec) = conformance_spec(dir.path());
    let gateway = http_gateway_of(dir.path(), &spec, &["--no-auth", "--bare-names"]);
    let (http, url) = (reqwest::Client::new(), gateway.url.as_str());
    let mine = session_with_tasks(url).await;
    let other = session_with_tasks(url).await;

    let mut params = CallToolRequestParams::new("slow_compute");
    params.arguments = json!({"seconds": 60}).as_object().cloned();
    let answer = mine
        .send_request(ClientRequest::CallToolRequest(
            rmcp::model::CallToolRequest::new(params),
        ))
        .await
        .expect("tools/call");
    let ServerResult::CreateTaskResult(task) = answer else {
        panic!("not a task: {answer:?}");
    };
    let id = task.task.task_id;
    let ServerResult::GetTaskResult(own) = session_get(&mine, &id).await.expect("tasks/get") else {
        panic!("not a task's state");
    };
    assert_eq!(own.task.task.task_id, id);

    // Another session, and a stateless client, are told the task does not exist.
    let Err(rmcp::ServiceError::McpError(error)) = session_get(&other, &id).await else {
        panic!("another session saw the task");
    };
    assert_eq!(error.code.0, -32602, "{error:?}");
    let stateless = ask(&http, url, 1, "tasks/get", json!({"taskId": id}), true).await;
    assert_eq!(stateless["error"]["code"], -32602, "{stateless}");
    let cancel = ask(&http, url, 2, "tasks/cancel", json!({"taskId": id}), true).await;
    assert_eq!(cancel["error"]["code"], -32602, "{cancel}");

    // And a stateless client's task is not the session's.
    let theirs = created(&http, url, "slow_compute", json!({"seconds": 60})).await;
    assert!(session_get(&mine, &theirs).await.is_err());
    let ack = ask(
        &http,
        url,
        3,
        "tasks/cancel",
        json!({"taskId": theirs}),
        true,
    )
    .await;
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    mine.cancel().await.expect("closing a session");
    other.cancel().await.expect("closing a session");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_client_without_tasks_gets_a_task_only_tools_final_result() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let (_program, spec) = conformance_spec(dir.path());
    let args = ["serve", "--bare-names", "--mcp", &spec];
    let (transport, _) = TokioChildProcess::builder(tether_command(dir.path(), &args))
        .stderr(Stdio::null())
        .spawn()
        .expect("starting tether serve");
    let handler = FullClient::capable();
    let client = handler
        .clone()
        .serve(transport)
        .await
        .expect("initializing");
    tool_listed(&client, "failing_job").await;

    // The server runs it only as a task; the gateway follows the task for the client.
    let failed = call(&client, "failing_job", json!({})).await;
    assert_eq!(failed["isError"], true, "{failed}");
    assert!(text_of(&failed).contains("the job failed"), "{failed}");

    // Asked the user's name first (the client's own elicitation), then a task.
    let greeted = call(&client, "test_tool_with_task", json!({})).await;
    assert!(text_of(&greeted).contains("(from a task)"), "{greeted}");
    assert!(text_of(&greeted).contains("Gateway Tester"), "{greeted}");
    assert_eq!(handler.asked(), ["elicitation/create"]);
    client.cancel().await.expect("closing the client");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_task_whose_server_dies_fails_saying_so() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let (program, spec) = conformance_spec(dir.path());
    let gateway = http_gateway_of(dir.path(), &spec, &["--no-auth", "--bare-names"]);
    let (http, url) = (reqwest::Client::new(), gateway.url.as_str());
    let id = created(&http, url, "slow_compute", json!({"seconds": 60})).await;
    let running = pids_running(&program);
    assert_eq!(running.len(), 1, "{running:?}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(running[0]),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("killing the server");
    let failed = until(&http, url, &id, "failed").await;
    assert_eq!(failed["status"], "failed", "{failed}");
    let message = failed["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("'conf'"), "{failed}");
    assert!(message.contains("stopped or restarted"), "{failed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_clients_call_to_a_server_without_tasks_is_held_as_a_task() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let record = dir.path().join("cancellations.txt");
    let record_arg = record.to_string_lossy().into_owned();
    let server = ["--slow-echo", "300", "--record-cancellations", &record_arg];
    let always = http_gateway_for(dir.path(), &server, &["--no-auth", "--task-after", "0"]);
    let (http, url) = (reqwest::Client::new(), always.url.as_str());

    // --task-after 0: a task at once, whose result is the server's answer.
    let id = created(&http, url, "test__echo", json!({"text": "held"})).await;
    let done = until(&http, url, &id, "completed").await;
    assert_eq!(text_of(&done["result"]), "held", "{done}");

    // Cancelled: passed on to the server as the call's cancellation.
    let slow = tempfile::tempdir().expect("creating a temporary directory");
    let server = [
        "--slow-echo",
        "60000",
        "--record-cancellations",
        &record_arg,
    ];
    let slow_gateway = http_gateway_for(slow.path(), &server, &["--no-auth", "--task-after", "0"]);
    let slow_url = slow_gateway.url.as_str();
    let id = created(&http, slow_url, "test__echo", json!({"text": "never"})).await;
    let ack = ask(
        &http,
        slow_url,
        2,
        "tasks/cancel",
        json!({"taskId": id}),
        true,
    )
    .await;
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    assert_eq!(
        until(&http, slow_url, &id, "cancelled").await["status"],
        "cancelled"
    );
    eventually("the server's echo being cancelled", async || {
        std::fs::read_to_string(&record).is_ok_and(|text| text.contains("echo cancelled: never"))
    })
    .await;

    // Within the default 5 s, and for a client without Tasks: answered in place.
    let quick_dir = tempfile::tempdir().expect("creating a temporary directory");
    let quick = http_gateway_for(quick_dir.path(), &[], &["--no-auth"]);
    let echo = json!({"name": "test__echo", "arguments": {"text": "quick"}});
    let in_place = ask(&http, &quick.url, 3, "tools/call", echo.clone(), true).await;
    assert_eq!(in_place["result"]["resultType"], "complete", "{in_place}");
    assert_eq!(text_of(&in_place["result"]), "quick");
    let untasked = ask(&http, url, 4, "tools/call", echo, false).await;
    assert_eq!(untasked["result"]["resultType"], "complete", "{untasked}");
}

/// server-everything (no Tasks) asks its client during a call: for a client with Tasks the
/// call becomes a task at that first question, which the client answers through the task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_during_a_held_call_is_the_tasks_question() {
    let Some(spec) = everything_spec() else {
        return;
    };
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let gateway = http_gateway_of(dir.path(), &spec, &["--no-auth", "--task-after", "60"]);
    let (http, url) = (reqwest::Client::new(), gateway.url.as_str());
    eventually(
        "server-everything's elicitation tool being listed",
        async || {
            let listed = ask(&http, url, 1, "tools/list", json!({}), true).await;
            listed["result"]["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|tool| tool["name"] == "ev__trigger-elicitation-request")
        },
    )
    .await;
    let started = std::time::Instant::now();
    let id = created(&http, url, "ev__trigger-elicitation-request", json!({})).await;
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    let asking = until(&http, url, &id, "input_required").await;
    let questions = asking["inputRequests"].as_object().expect("inputRequests");
    assert_eq!(questions.len(), 1, "{asking}");
    let (key, question) = questions.iter().next().expect("a question");
    assert_eq!(question["method"], "elicitation/create", "{asking}");
    let answer = json!({"taskId": id, "inputResponses":
        {key: {"action": "accept", "content": {"name": "Task Answerer"}}}});
    let ack = ask(&http, url, 2, "tasks/update", answer, true).await;
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    let done = until(&http, url, &id, "completed").await;
    assert!(text_of(&done["result"]).contains("Task Answerer"), "{done}");
}

/// `tether call`, tether as the client: a tool its server runs only as a task is called again
/// declaring Tasks and followed to its end; `--as-task` declares them from the start.
#[test]
fn tether_call_follows_a_task_only_tools_task() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let (_program, spec) = conformance_spec(dir.path());
    let run = |args: &[&str]| {
        let mut all = vec!["call", "--mcp", &spec, "conf"];
        all.extend_from_slice(args);
        tether_in(dir.path())
            .command(&all)
            .output()
            .expect("running tether call")
    };
    let failed = run(&["failing_job"]);
    let stdout = String::from_utf8_lossy(&failed.stdout);
    assert!(stdout.contains("the job failed"), "{failed:?}");
    assert_eq!(failed.status.code(), Some(1), "{failed:?}");

    let computed = run(&[
        "slow_compute",
        "--args",
        r#"{"seconds": 0.2, "label": "as a task"}"#,
        "--as-task",
    ]);
    assert!(computed.status.success(), "{computed:?}");
    assert!(String::from_utf8_lossy(&computed.stdout).contains("computed as a task"));

    let broken = run(&["protocol_error_job", "--as-task"]);
    assert!(!broken.status.success(), "{broken:?}");
    assert!(
        String::from_utf8_lossy(&broken.stderr).contains("broke down"),
        "{broken:?}"
    );
}

/// `--token` twice: two callers. A 2026-07-28 client (no session) sees the cut results and the
/// tasks of requests made with its own token only; the other token is told they do not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tokens_are_two_callers_whose_results_and_tasks_stay_apart() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let spec = format!(
        r#"{{"test": {{"command": {}, "args": ["--big-tool", "--slow-echo", "200"]}}}}"#,
        json_str(&test_server_bin().to_string_lossy())
    );
    let extra = [
        "--token",
        "env:TOKEN_A",
        "--token",
        "env:TOKEN_B",
        "--task-after",
        "0",
        "--max-result-tokens",
        "1000",
    ];
    let envs = [("TOKEN_A", "caller-a-$HOME-{{x}}"), ("TOKEN_B", "caller-b")];
    let gateway = http_gateway_with_env(dir.path(), &spec, &extra, &envs);
    assert_eq!(gateway.token, None, "given tokens are never printed");
    let (http, url) = (reqwest::Client::new(), gateway.url.as_str());
    let (a, b) = (Some("caller-a-$HOME-{{x}}"), Some("caller-b"));

    let big = json!({"name": "test__big", "arguments": {"bytes": 100_000}});
    let cut = ask_as(&http, url, a, 1, "tools/call", big, false).await;
    let uri = cut["result"]["content"]
        .as_array()
        .and_then(|blocks| blocks.last())
        .and_then(|link| link["uri"].as_str())
        .unwrap_or_else(|| panic!("no link in {cut}"))
        .to_owned();
    let read = json!({"uri": uri});
    let own = ask_as(&http, url, a, 2, "resources/read", read.clone(), false).await;
    assert!(own["result"]["contents"][0]["text"].is_string(), "{own}");
    let other = ask_as(&http, url, b, 3, "resources/read", read, false).await;
    assert!(other.get("error").is_some(), "{other}");

    let echo = json!({"name": "test__echo", "arguments": {"text": "mine"}});
    let created = ask_as(&http, url, a, 4, "tools/call", echo, true).await;
    let id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"));
    let theirs = ask_as(&http, url, b, 5, "tasks/get", json!({"taskId": id}), true).await;
    assert_eq!(theirs["error"]["code"], -32602, "{theirs}");
    let mine = ask_as(&http, url, a, 6, "tasks/get", json!({"taskId": id}), true).await;
    assert_eq!(mine["result"]["taskId"], json!(id), "{mine}");

    // No token, or another one: refused before anything is read.
    let refused = post(
        &http,
        url,
        Some("caller-c"),
        None,
        &json!({"jsonrpc": "2.0", "id": 7, "method": "ping"}),
    )
    .send()
    .await
    .expect("posting");
    assert_eq!(refused.status().as_u16(), 401);
}
