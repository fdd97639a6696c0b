//! Requests from servers to the client (sampling, elicitation, roots) over stdio and HTTP, and
//! the client capabilities the gateway declares to its servers (`--client-capabilities`).

use super::*;

/// `tether serve` in front of server-everything over stdio (as `ev`) for `handler`, once the
/// tools it registers for a capable client are listed.
async fn everything_for(
    handler: FullClient,
) -> Option<(tempfile::TempDir, RunningService<RoleClient, FullClient>)> {
    let (dir, client) = everything_behind_gateway(handler).await?;
    // server-everything registers these after its initialize, when its client (tether)
    // declared the capabilities; the gateway follows its list_changed.
    sampling_tool_listed(&client).await;
    Some((dir, client))
}

/// Waits until the gateway lists server-everything's sampling tool.
async fn sampling_tool_listed(client: &RunningService<RoleClient, FullClient>) {
    tool_listed(client, "ev__trigger-sampling-request").await;
}

/// server-everything's tool that asks its client to sample, called through the gateway.
async fn trigger_sampling(client: &RunningService<RoleClient, FullClient>) -> Value {
    let arguments = json!({"prompt": "say hi", "maxTokens": 5});
    call(client, "ev__trigger-sampling-request", arguments).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_elicitation_and_roots_from_a_server_reach_the_client_that_declared_them() {
    let handler = FullClient::capable();
    let Some((_dir, client)) = everything_for(handler.clone()).await else {
        return;
    };
    let sampled = trigger_sampling(&client).await;
    assert_ne!(sampled["isError"], json!(true), "{sampled}");
    assert!(text_of(&sampled).contains(SAMPLED), "{sampled}");

    let elicited = call(&client, "ev__trigger-elicitation-request", json!({})).await;
    assert!(
        text_of(&elicited).contains("- Name: Gateway Tester"),
        "{elicited}"
    );

    let roots = call(&client, "ev__get-roots-list", json!({})).await;
    assert!(text_of(&roots).contains(ROOT), "{roots}");
    let answered = handler.asked();
    for method in ["sampling/createMessage", "elicitation/create", "roots/list"] {
        assert!(answered.iter().any(|m| m == method), "{answered:?}");
    }
    client.cancel().await.expect("closing the client");
}

/// `tether serve --listen` (no token) in front of server-everything over stdio (as `ev`), an
/// rmcp client `handler` connected over HTTP, once the sampling tool it registers for a
/// capable client (over HTTP, tether declares every capability) is listed.
async fn everything_over_http(
    handler: FullClient,
) -> Option<(
    tempfile::TempDir,
    HttpGateway,
    RunningService<RoleClient, FullClient>,
)> {
    let spec = everything_spec()?;
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let gateway = http_gateway_of(dir.path(), &spec, &["--no-auth"]);
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(gateway.url.clone());
    let client = handler
        .serve(transport)
        .await
        .expect("connecting over HTTP");
    sampling_tool_listed(&client).await;
    Some((dir, gateway, client))
}

/// Over HTTP the servers start before any client and are told every capability; a server
/// asking a client that did not declare it gets a clear error, and the client is not asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_asking_a_client_that_cannot_sample_gets_a_clear_error() {
    let handler = FullClient::default();
    let Some((_dir, _gateway, client)) = everything_over_http(handler.clone()).await else {
        return;
    };
    let refused = trigger_sampling(&client).await;
    assert_eq!(refused["isError"], json!(true), "{refused}");
    assert!(
        text_of(&refused).contains("declared the 'sampling' capability"),
        "{refused}"
    );
    assert!(handler.asked().is_empty());
    client.cancel().await.expect("closing the client");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_reaches_a_client_over_streamable_http() {
    let handler = FullClient::capable();
    let Some((_dir, _gateway, client)) = everything_over_http(handler.clone()).await else {
        return;
    };
    // The server's request goes back over the HTTP session of the client whose call it serves.
    let sampled = trigger_sampling(&client).await;
    assert!(text_of(&sampled).contains(SAMPLED), "{sampled}");
    let answered = handler.asked();
    assert!(
        answered.iter().any(|m| m == "sampling/createMessage"),
        "{answered:?}"
    );
    client.cancel().await.expect("closing the client");
}

/// What `srv__client_capabilities` (the test server's report of what its client, the
/// gateway, declared) answers through `tether serve ARGS` over stdio for `handler`.
/// `tether ARGS` (a `serve` over stdio) with TETHER_HOME in `dir`, its stderr dropped, and
/// `handler` connected to it as its client.
async fn serve_stdio_with<H: rmcp::ClientHandler>(
    dir: &Path,
    args: &[&str],
    handler: H,
) -> RunningService<RoleClient, H> {
    let (transport, _) = TokioChildProcess::builder(tether_command(dir, args))
        .stderr(Stdio::null())
        .spawn()
        .expect("starting tether serve");
    handler.serve(transport).await.expect("initializing")
}

async fn declared_over_stdio(handler: FullClient, extra: &[&str]) -> Value {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let spec = format!(
        r#"{{"srv": {{"command": {}, "args": ["--capabilities-tool"]}}}}"#,
        json_str(&test_server_bin().to_string_lossy())
    );
    let mut args = vec!["serve", "--mcp", &spec];
    args.extend_from_slice(extra);
    let client = serve_stdio_with(dir.path(), &args, handler).await;
    let answer = call(&client, "srv__client_capabilities", json!({})).await;
    client.cancel().await.expect("closing the client");
    serde_json::from_str(&text_of(&answer)).expect("the declared capabilities as JSON")
}

/// An upstream that speaks only MCP 2026-07-28 (`tether-test-mcp --modern-only`, no
/// `initialize`) behind `tether serve`: its tools are offered, and the elicitation it asks for
/// in an `InputRequiredResult` reaches the gateway's client as an ordinary
/// `elicitation/create`, whose answer completes the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_only_upstreams_input_request_reaches_the_client_as_an_elicitation() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let upstream = json!({"command": test_server_bin(), "args": ["--modern-only"]});
    let spec = json!({ "modern": upstream }).to_string();
    let handler = FullClient::capable();
    let client = serve_stdio_with(dir.path(), &["serve", "--mcp", &spec], handler.clone()).await;
    let names = tool_names(&client).await;
    assert!(
        names.iter().any(|name| name == "modern__ask_name"),
        "{names:?}"
    );
    let added = call(&client, "modern__add", json!({"a": 40, "b": 2})).await;
    assert_eq!(text_of(&added), "42");
    let greeted = call(&client, "modern__ask_name", json!({})).await;
    assert_eq!(text_of(&greeted), "hello Gateway Tester", "{greeted}");
    let answered = handler.answered.lock().expect("the answered list").clone();
    assert_eq!(answered, ["elicitation/create"]);
    client.cancel().await.expect("closing the client");
}

/// Over stdio the gateway reads its client's initialize before starting the servers and
/// declares to them exactly what the client can answer, so a server offers no tool that needs
/// a capability nobody has; `--client-capabilities` sets it instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_stdio_the_servers_are_told_what_the_client_declared() {
    assert_eq!(
        declared_over_stdio(FullClient::capable(), &[]).await,
        json!({"sampling": {}, "elicitation": {"form": {}}, "roots": {"listChanged": true},
            "extensions": {"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}}})
    );
    assert_eq!(
        declared_over_stdio(FullClient::default(), &[]).await,
        json!({})
    );
    assert_eq!(
        declared_over_stdio(
            FullClient::capable(),
            &["--client-capabilities", "roots,sampling"]
        )
        .await,
        json!({"sampling": {}, "roots": {"listChanged": true}})
    );
    assert_eq!(
        declared_over_stdio(FullClient::default(), &["--client-capabilities", "all"]).await,
        json!({"sampling": {}, "elicitation": {"form": {}, "url": {}}, "roots": {"listChanged": true},
            "extensions": {"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}}})
    );
}

/// Over HTTP (clients come and go) the servers are told every capability by default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_the_servers_are_told_every_capability_by_default() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let spec = format!(
        r#"{{"srv": {{"command": {}, "args": ["--capabilities-tool"]}}}}"#,
        json_str(&test_server_bin().to_string_lossy())
    );
    for (extra, expected) in [
        (
            &[][..],
            json!({"sampling": {}, "elicitation": {"form": {}, "url": {}}, "roots": {"listChanged": true},
                "extensions": {"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}}}),
        ),
        (&["--client-capabilities", "none"][..], json!({})),
    ] {
        let mut args = vec!["--no-auth"];
        args.extend_from_slice(extra);
        let gateway = http_gateway_of(dir.path(), &spec, &args);
        let transport =
            rmcp::transport::StreamableHttpClientTransport::from_uri(gateway.url.clone());
        let client = FullClient::default()
            .serve(transport)
            .await
            .expect("connecting over HTTP");
        let answer = call(&client, "srv__client_capabilities", json!({})).await;
        let declared: Value = serde_json::from_str(&text_of(&answer)).expect("JSON");
        assert_eq!(declared, expected, "{extra:?}");
        client.cancel().await.expect("closing the client");
    }
}

/// `all` and `none` stand alone; the flag is the gateway's, so `run` needs `--gateway`.
#[test]
fn client_capabilities_that_cannot_be_combined_are_refused() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let out = tether_in(dir.path())
        .command(&["serve", "--mcp", "{}", "--client-capabilities", "all,roots"])
        .stdin(Stdio::null())
        .output()
        .expect("running tether serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("`all` cannot be combined"), "{stderr}");

    let out = tether_in(dir.path())
        .command(&[
            "run",
            "--mcp",
            "{}",
            "--client-capabilities",
            "roots",
            "--",
            "claude",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("running tether run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("add --gateway"), "{stderr}");
}
