//! MCP 2026-07-28 clients (no `initialize`: `server/discover`, then stateless requests) through
//! `tether serve`, in front of server-everything, which speaks 2025-11-25: the gateway lists
//! and calls its tools, and turns its `elicitation/create` into an `InputRequiredResult`
//! round trip whose `requestState` is sealed (a tampered or reused state is refused).

use rmcp::model::ProtocolVersion;
use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _};

use super::*;

fn discover() -> ClientLifecycleMode {
    ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    }
}

/// Lists until server-everything's elicitation tool is offered (it registers it once its
/// client, tether, declared elicitation), then calls `ev__echo` and the elicitation tool; the
/// client answers the elicitation through rmcp's round-trip driver.
async fn lists_calls_and_elicits(
    client: &RunningService<RoleClient, FullClient>,
    handler: &FullClient,
) {
    let info = client.peer_info().expect("the server's discover answer");
    assert_eq!(info.protocol_version, ProtocolVersion::V_2026_07_28);
    tool_listed(client, "ev__trigger-elicitation-request").await;
    let echoed = call(client, "ev__echo", json!({"message": "modern hello"})).await;
    assert!(text_of(&echoed).contains("modern hello"), "{echoed}");
    let elicited = call(client, "ev__trigger-elicitation-request", json!({})).await;
    assert!(
        text_of(&elicited).contains("- Name: Gateway Tester"),
        "{elicited}"
    );
    let answered = handler.asked();
    assert_eq!(answered, ["elicitation/create"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_07_28_client_over_stdio_lists_calls_and_answers_an_elicitation() {
    let Some((_dir, transport)) = everything_over_stdio() else {
        return;
    };
    let handler = FullClient::capable();
    let client = handler
        .clone()
        .serve_with_lifecycle(transport, discover())
        .await
        .expect("server/discover over stdio");
    lists_calls_and_elicits(&client, &handler).await;
    client.cancel().await.expect("closing the client");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_07_28_client_over_http_lists_calls_and_answers_an_elicitation() {
    let Some(spec) = everything_spec() else {
        return;
    };
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let gateway = http_gateway_of(dir.path(), &spec, &["--no-auth"]);
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(gateway.url.clone());
    let handler = FullClient::capable();
    let client = handler
        .clone()
        .serve_with_lifecycle(transport, discover())
        .await
        .expect("server/discover over HTTP");
    lists_calls_and_elicits(&client, &handler).await;
    client.cancel().await.expect("closing the client");
}

/// One JSON-RPC request of a 2026-07-28 client over HTTP (no session): its response's
/// message, read from a JSON body or from the event stream's data lines.
async fn stateless(
    http: &reqwest::Client,
    url: &str,
    id: u64,
    method: &str,
    params: Value,
) -> Value {
    answer_of(stateless_request(http, url, id, method, params), id, method).await
}

/// A stateless 2026-07-28 request, not yet sent.
fn stateless_request(
    http: &reqwest::Client,
    url: &str,
    id: u64,
    method: &str,
    mut params: Value,
) -> reqwest::RequestBuilder {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
    });
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let mut request = post(http, url, None, None, &body)
        .header("Mcp-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", method);
    if let Some(name) = body["params"]["name"].as_str() {
        request = request.header("Mcp-Name", name);
    }
    request
}

/// The answer with `id` to a sent request, JSON or an event stream.
pub(super) async fn answer_of(request: reqwest::RequestBuilder, id: u64, method: &str) -> Value {
    let response = request.send().await.expect("posting a request");
    let text = response.text().await.expect("reading the answer");
    let messages: Vec<Value> = if text.trim_start().starts_with('{') {
        vec![serde_json::from_str(&text).expect("a JSON answer")]
    } else {
        text.lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str(data.trim()).ok())
            .collect()
    };
    messages
        .into_iter()
        .find(|message: &Value| message["id"] == json!(id))
        .unwrap_or_else(|| panic!("no answer to {method} in {text:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_elicitation_is_a_sealed_round_trip_that_refuses_a_tampered_or_reused_state() {
    let Some(spec) = everything_spec() else {
        return;
    };
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let gateway = http_gateway_of(dir.path(), &spec, &["--no-auth"]);
    let http = reqwest::Client::new();
    let url = gateway.url.as_str();
    let listed = stateless(&http, url, 1, "tools/list", json!({})).await;
    assert_eq!(listed["result"]["resultType"], "complete", "{listed}");
    assert_eq!(listed["result"]["cacheScope"], "private", "{listed}");
    // server-everything declares tools.listChanged: its list may change at any moment.
    assert_eq!(listed["result"]["ttlMs"], 0, "{listed}");
    eventually(
        "server-everything's elicitation tool being listed",
        async || {
            let listed = stateless(&http, url, 1, "tools/list", json!({})).await;
            listed["result"]["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|tool| tool["name"] == "ev__trigger-elicitation-request")
        },
    )
    .await;

    let tool = json!({"name": "ev__trigger-elicitation-request", "arguments": {}});
    let first = stateless(&http, url, 2, "tools/call", tool.clone()).await;
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    let requests = result["inputRequests"].as_object().expect("inputRequests");
    assert_eq!(requests.len(), 1, "{first}");
    let (key, request) = requests.iter().next().expect("one input request");
    assert_eq!(request["method"], "elicitation/create", "{first}");
    let state = result["requestState"].as_str().expect("a requestState");
    let answer = json!({key: {"action": "accept", "content": {"name": "Round Tripper"}}});

    let mut tampered = tool.clone();
    tampered["inputResponses"] = answer.clone();
    tampered["requestState"] = json!(format!("{state}x"));
    let refused = stateless(&http, url, 3, "tools/call", tampered).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");

    // The same state for another tool: bound to the tool it was issued for.
    let mut elsewhere = json!({"name": "ev__echo", "arguments": {"message": "x"}});
    elsewhere["inputResponses"] = answer.clone();
    elsewhere["requestState"] = json!(state);
    let refused = stateless(&http, url, 4, "tools/call", elsewhere).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");

    let mut retry = tool.clone();
    retry["inputResponses"] = answer;
    retry["requestState"] = json!(state);
    let done = stateless(&http, url, 5, "tools/call", retry.clone()).await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert!(
        text_of(&done["result"]).contains("- Name: Round Tripper"),
        "{done}"
    );
    let reused = stateless(&http, url, 6, "tools/call", retry).await;
    assert_eq!(reused["error"]["code"], -32602, "{reused}");
}

/// A 2026-07-28 client of `tether serve --bare-names` (stdio) in front of the conformance-mode
/// test server (2025-11-25 only).
async fn conformance_behind_gateway(
    handler: FullClient,
) -> (tempfile::TempDir, RunningService<RoleClient, FullClient>) {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let spec = format!(
        r#"{{"conf": {{"command": {}, "args": ["--conformance"]}}}}"#,
        json_str(&test_server_bin().to_string_lossy())
    );
    let args = ["serve", "--bare-names", "--mcp", &spec];
    let (transport, _) = TokioChildProcess::builder(tether_command(dir.path(), &args))
        .stderr(Stdio::null())
        .spawn()
        .expect("starting tether serve");
    let client = handler
        .serve_with_lifecycle(transport, discover())
        .await
        .expect("server/discover over stdio");
    (dir, client)
}

/// Three requests a server sends at once are all answered by the client (the suite's
/// multiple-input-requests scenario checks they come in one round), under the server's own
/// tool names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_a_server_sends_at_once_are_all_answered_under_bare_names() {
    let handler = FullClient::capable();
    let (_dir, client) = conformance_behind_gateway(handler.clone()).await;
    tool_listed(&client, "test_input_required_result_multiple_inputs").await;
    let done = call(
        &client,
        "test_input_required_result_multiple_inputs",
        json!({}),
    )
    .await;
    let text = text_of(&done);
    assert!(text.contains(SAMPLED), "{done}");
    assert!(text.contains("Gateway Tester"), "{done}");
    assert!(text.contains(ROOT), "{done}");
    let mut answered = handler.asked();
    answered.sort();
    assert_eq!(
        answered,
        ["elicitation/create", "roots/list", "sampling/createMessage"]
    );
    client.cancel().await.expect("closing the client");
}

/// A server asking for a capability the client's request did not declare fails the call with
/// -32021, naming the capability in the error's data; the client is not asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capability_the_request_did_not_declare_fails_the_call_with_32021() {
    let handler = FullClient::default();
    let (_dir, client) = conformance_behind_gateway(handler.clone()).await;
    let refused = client
        .call_tool(CallToolRequestParams::new("test_missing_capability"))
        .await
        .expect_err("the call needs sampling");
    let rmcp::ServiceError::McpError(error) = refused else {
        panic!("not a JSON-RPC error: {refused}");
    };
    assert_eq!(error.code.0, -32021, "{error:?}");
    assert_eq!(
        error.data,
        Some(json!({"requiredCapabilities": {"sampling": {}}})),
        "{error:?}"
    );
    assert!(handler.asked().is_empty());
    client.cancel().await.expect("closing the client");
}

/// A 2026-07-28 request opens no session, so the session cap does not refuse it: with the one
/// session allowed open, a stateless `tools/list` is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateless_requests_are_not_counted_against_the_session_cap() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let gateway = http_gateway(dir.path(), &["--no-auth", "--max-sessions", "1"]);
    let http = reqwest::Client::new();
    let opened = post(&http, &gateway.url, None, None, &initialize_body())
        .send()
        .await
        .expect("initialize");
    assert!(
        opened.headers().contains_key("mcp-session-id"),
        "{opened:?}"
    );
    let refused = post(&http, &gateway.url, None, None, &initialize_body())
        .send()
        .await
        .expect("a second initialize");
    assert_eq!(refused.status(), 503, "the cap is reached");
    let listed = stateless(&http, &gateway.url, 2, "tools/list", json!({})).await;
    assert_eq!(listed["result"]["resultType"], "complete", "{listed}");
    // The test server declares no listChanged and is started: its list may be kept a minute.
    assert_eq!(listed["result"]["ttlMs"], 60_000, "{listed}");
    assert!(
        listed["result"]["tools"]
            .as_array()
            .is_some_and(|tools| tools.iter().any(|tool| tool["name"] == "test__echo")),
        "{listed}"
    );
}

/// Over `tether serve --listen`, a client's `traceparent` HTTP header is continued by the
/// exported request span (same trace id, the client's span as parent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_traceparent_header_continues_the_clients_trace() {
    const CLIENT_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
    const CLIENT_SPAN: &str = "b7ad6b7169203331";
    let receiver = tether_testkit::otlp::OtlpReceiver::start()
        .await
        .expect("starting the OTLP receiver");
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let spec = test_spec();
    let gateway = http_gateway_with_env(
        dir.path(),
        &spec,
        &["--no-auth"],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    let http = reqwest::Client::new();
    let call = json!({"name": "test__echo", "arguments": {"text": "traced"}});
    let request = stateless_request(&http, &gateway.url, 1, "tools/call", call)
        .header("traceparent", format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"));
    let done = answer_of(request, 1, "tools/call").await;
    assert!(text_of(&done["result"]).contains("traced"), "{done}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let span = loop {
        let spans = receiver.spans();
        if let Some(span) = spans.iter().find(|s| s.name == "tools/call") {
            break span.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no tools/call span within 30 s: {spans:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(span.trace_id, CLIENT_TRACE, "{span:?}");
    assert_eq!(span.parent_span_id, CLIENT_SPAN, "{span:?}");
}
