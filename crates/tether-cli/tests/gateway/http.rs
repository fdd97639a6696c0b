//! `tether serve --listen`, Streamable HTTP: the token, the Host check, loopback only, and
//! sessions (their cap, their idle expiry, DELETE, a client that goes away mid-call).

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_needs_the_token_checks_the_host_and_closes_a_session_on_delete() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let gateway = http_gateway(dir.path(), &[]);
    let token = gateway.token.clone().expect("a generated token on stderr");
    assert_eq!(token.len(), 64);
    let http = reqwest::Client::new();
    let url = &gateway.url;

    let anonymous = post(&http, url, None, None, &initialize_body())
        .send()
        .await
        .expect("posting without a token");
    assert_eq!(anonymous.status().as_u16(), 401);
    let wrong = post(&http, url, Some("not-the-token"), None, &initialize_body())
        .send()
        .await
        .expect("posting a wrong token");
    assert_eq!(wrong.status().as_u16(), 401);

    // DNS rebinding: a page on evil.example resolving to 127.0.0.1 sends its own Host/Origin;
    // a page on another loopback port names that port. Neither names this listener: 421.
    let port = url
        .trim_start_matches("http://127.0.0.1:")
        .split('/')
        .next()
        .and_then(|port| port.parse::<u16>().ok())
        .expect("the listening URL names a port on 127.0.0.1");
    for host in [
        "evil.example".to_owned(),
        format!("evil.example:{port}"),
        format!("127.0.0.1:{}", port.wrapping_add(1)),
        "127.0.0.1".to_owned(),
    ] {
        let rebound = post(&http, url, Some(&token), None, &initialize_body())
            .header("Host", &host)
            .send()
            .await
            .expect("posting with a foreign Host");
        assert_eq!(rebound.status().as_u16(), 421, "Host: {host}");
    }
    let named = post(&http, url, Some(&token), None, &initialize_body())
        .header("Host", format!("localhost:{port}"))
        .send()
        .await
        .expect("posting with Host localhost");
    assert!(named.status().is_success(), "{named:?}");
    let _ = named.text().await;
    let foreign_origin = post(&http, url, Some(&token), None, &initialize_body())
        .header("Origin", "http://evil.example")
        .send()
        .await
        .expect("posting with a foreign Origin");
    assert_eq!(foreign_origin.status().as_u16(), 403);

    let initialized = post(&http, url, Some(&token), None, &initialize_body())
        .send()
        .await
        .expect("initializing");
    assert!(initialized.status().is_success(), "{initialized:?}");
    let session = initialized
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("an Mcp-Session-Id")
        .to_owned();
    let _ = initialized.text().await;
    let notified = post(
        &http,
        url,
        Some(&token),
        Some(&session),
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .send()
    .await
    .expect("notifying initialized");
    assert!(notified.status().is_success(), "{notified:?}");
    let listed = post(
        &http,
        url,
        Some(&token),
        Some(&session),
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    )
    .send()
    .await
    .expect("tools/list")
    .text()
    .await
    .expect("reading tools/list");
    assert!(listed.contains("test__echo"), "{listed}");

    let deleted = delete_session(&http, url, Some(&token), &session)
        .send()
        .await
        .expect("deleting the session");
    assert!(deleted.status().is_success(), "{deleted:?}");
    assert_session_gone(&http, url, Some(&token), &session).await;
}

/// A DELETE of `session` at `url`, with `token` when there is one.
fn delete_session(
    http: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    session: &str,
) -> reqwest::RequestBuilder {
    let delete = http
        .delete(url)
        .header("Mcp-Session-Id", session)
        .header("Mcp-Protocol-Version", "2025-06-18");
    match token {
        Some(token) => delete.bearer_auth(token),
        None => delete,
    }
}

/// A request in the closed `session` gets 404.
async fn assert_session_gone(
    http: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    session: &str,
) {
    let after = post(
        http,
        url,
        token,
        Some(session),
        &json!({"jsonrpc": "2.0", "id": 99, "method": "tools/list"}),
    )
    .send()
    .await
    .expect("tools/list after DELETE");
    assert_eq!(after.status().as_u16(), 404, "a closed session is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rmcp_client_calls_through_http_with_a_token_from_a_source() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "gateway-token-from-a-file\n").expect("writing the token");
    let source = format!("file:{}", token_file.display());
    let gateway = http_gateway(dir.path(), &["--token", &source]);
    assert_eq!(gateway.token, None, "a given token is never printed");
    let config =
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            gateway.url.clone(),
        )
        .auth_header("gateway-token-from-a-file");
    let client: Client = ()
        .serve(rmcp::transport::StreamableHttpClientTransport::from_config(
            config,
        ))
        .await
        .expect("connecting over HTTP");
    let result = call(&client, "test__echo", json!({"text": "over http"})).await;
    assert_eq!(text_of(&result), "over http");
    // rmcp's HTTP transport serializes the list per request; over stdio the gateway sends the
    // catalogue it serialized once (lines.rs): both clients get the same list.
    let over_http = client.list_all_tools().await.expect("tools/list over HTTP");
    client.cancel().await.expect("closing the client");
    let spec = format!(
        r#"{{"test": {{"command": {}, "args": []}}}}"#,
        json_str(&test_server_bin().to_string_lossy())
    );
    let (stdio, stderr) = serve_client(dir.path(), &spec, &[]).await;
    let over_stdio = stdio.list_all_tools().await.expect("tools/list over stdio");
    assert_eq!(
        serde_json::to_value(&over_stdio).expect("a list"),
        serde_json::to_value(&over_http).expect("a list")
    );
    assert!(over_stdio.iter().any(|tool| tool.name == "test__echo"));
    drop(stderr_of(stdio, stderr).await);
}

#[test]
fn only_loopback_addresses_are_served() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    for address in ["0.0.0.0:0", "192.0.2.1:80"] {
        let out = tether_in(dir.path())
            .command(&["serve", "--mcp", "{}", "--listen", address, "--no-auth"])
            .output()
            .expect("running tether serve");
        assert_eq!(out.status.code(), Some(2), "{address}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("loopback"), "{stderr}");
    }
}

/// An initialized Streamable HTTP session at `gateway`: its `Mcp-Session-Id`.
async fn open_session(http: &reqwest::Client, gateway: &HttpGateway) -> String {
    let token = gateway.token.as_deref();
    let initialized = post(http, &gateway.url, token, None, &initialize_body())
        .send()
        .await
        .expect("initializing");
    let session = initialized
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("an Mcp-Session-Id")
        .to_owned();
    let _ = initialized.text().await;
    let notice = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    post(http, &gateway.url, token, Some(&session), &notice)
        .send()
        .await
        .expect("notifying initialized");
    session
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_waits_for_the_sessions_running_call_to_answer() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let gateway = http_gateway_for(dir.path(), &["--slow-echo", "1500"], &[]);
    let http = reqwest::Client::new();
    let session = open_session(&http, &gateway).await;
    let token = gateway.token.clone();

    // A call that takes 1.5 s, started before the DELETE.
    let echo = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "test__echo", "arguments": {"text": "answered before closing"}}});
    // The test server behind the gateway (its arguments are this test's own): the call is
    // running once it has read the request, which shows in the bytes it read from its stdin.
    let upstream = test_server_with("--slow-echo 1500");
    let read_by_upstream = || bytes_read(upstream);
    let before = read_by_upstream();
    let running = {
        let (http, url, token, session) = (
            http.clone(),
            gateway.url.clone(),
            token.clone(),
            session.clone(),
        );
        tokio::spawn(async move {
            let response = post(&http, &url, token.as_deref(), Some(&session), &echo)
                .send()
                .await
                .expect("posting the call");
            response.text().await.expect("reading the call's answer")
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while read_by_upstream() == before {
        assert!(
            std::time::Instant::now() < deadline,
            "the call never reached the test server"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let delete = delete_session(&http, &gateway.url, token.as_deref(), &session);
    let asked = std::time::Instant::now();
    let deleted = delete.send().await.expect("deleting the session");
    let waited = asked.elapsed();
    assert!(deleted.status().is_success(), "{deleted:?}");

    // The call was answered in full, not cut off (without the drain the body ends with no
    // answer), and the DELETE waited for it: the call had most of its 1.5 s left when it came.
    let body = running.await.expect("the call's task");
    assert!(body.contains("answered before closing"), "{body}");
    assert!(!body.contains("\"error\""), "{body}");
    assert!(
        waited >= Duration::from_millis(500),
        "the DELETE returned after {waited:?}, without waiting for the call"
    );

    // Then the session is gone.
    assert_session_gone(&http, &gateway.url, token.as_deref(), &session).await;
}

/// A `tools/call` of the test server's `echo` with `text`.
fn echo_call(id: u64, text: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "test__echo", "arguments": {"text": text}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_running_longer_than_the_idle_expiry_gets_its_answer() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    // The call takes 3 s; a session with no request for 1 s expires, unless a call runs.
    let gateway = http_gateway_for(
        dir.path(),
        &["--slow-echo", "3000"],
        &["--session-idle", "1"],
    );
    let http = reqwest::Client::new();
    let session = open_session(&http, &gateway).await;
    let token = gateway.token.as_deref();
    let call = echo_call(3, "answered after the idle expiry");
    let body = tokio::time::timeout(
        Duration::from_secs(30),
        post(&http, &gateway.url, token, Some(&session), &call)
            .send()
            .await
            .expect("posting the call")
            .text(),
    )
    .await
    .expect("the call's answer within 30 s")
    .expect("reading the call's answer");
    assert!(body.contains("answered after the idle expiry"), "{body}");
    assert!(!body.contains("\"error\""), "{body}");
    // The session lives on: the call's end counts as its last use.
    let listed = post(
        &http,
        &gateway.url,
        token,
        Some(&session),
        &json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}),
    )
    .send()
    .await
    .expect("tools/list after the call");
    assert_eq!(listed.status().as_u16(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_capped_and_an_idle_one_expires() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let gateway = http_gateway(dir.path(), &["--max-sessions", "1", "--session-idle", "1"]);
    let http = reqwest::Client::new();
    let token = gateway.token.as_deref();
    let first = open_session(&http, &gateway).await;

    // A second session is refused while the first is open: 503 and a JSON-RPC error.
    let refused = post(&http, &gateway.url, token, None, &initialize_body())
        .send()
        .await
        .expect("initializing a second session");
    assert_eq!(refused.status().as_u16(), 503);
    assert!(refused.headers().contains_key("retry-after"));
    let error: Value = refused.json().await.expect("a JSON-RPC error body");
    assert_eq!(error["jsonrpc"], "2.0");
    assert_eq!(error["error"]["code"], -32000);
    let message = error["error"]["message"].as_str().expect("a message");
    assert!(
        message.contains("1 sessions open, its limit (--max-sessions)"),
        "{message}"
    );

    // Once the first had no request for 1 s, it is closed and a new one opens.
    let mut second = None;
    eventually("a new session after the idle one expired", async || {
        let answer = post(&http, &gateway.url, token, None, &initialize_body())
            .send()
            .await
            .expect("initializing");
        second = answer
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        second.is_some()
    })
    .await;
    assert_ne!(second.as_deref(), Some(first.as_str()));
    assert_session_gone(&http, &gateway.url, token, &first).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_mid_call_cancels_the_call_upstream() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let record = dir.path().join("cancellations.txt");
    let record_arg = record.to_string_lossy().into_owned();
    let gateway = http_gateway_for(
        dir.path(),
        &[
            "--slow-echo",
            "60000",
            "--record-cancellations",
            &record_arg,
        ],
        &[],
    );
    let http = reqwest::Client::new();
    let session = open_session(&http, &gateway).await;
    let upstream = test_server_with(&record_arg);
    let before = bytes_read(upstream);
    let call = echo_call(5, "left behind");
    let response = post(
        &http,
        &gateway.url,
        gateway.token.as_deref(),
        Some(&session),
        &call,
    )
    .send()
    .await
    .expect("posting the call");
    assert_eq!(response.status().as_u16(), 200);
    // The call is running once the test server read it.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while bytes_read(upstream) == before {
        assert!(
            std::time::Instant::now() < deadline,
            "the call never reached the test server"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The client goes away: its connection closes with the answer unread.
    drop(response);
    let gone = std::time::Instant::now();
    eventually("the test server's echo being cancelled", async || {
        std::fs::read_to_string(&record)
            .is_ok_and(|text| text.contains("echo cancelled: left behind"))
    })
    .await;
    eprintln!(
        "cancelled upstream {:?} after the client left",
        gone.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_is_not_a_json_rpc_message_gets_400_with_a_json_rpc_error() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let gateway = http_gateway(dir.path(), &[]);
    let http = reqwest::Client::new();
    let token = gateway.token.as_deref();
    let session = open_session(&http, &gateway).await;
    for (body, code) in [
        ("not json", -32700),
        ("{\"jsonrpc\": \"2.0\", \"id\": 1,", -32700),
        ("[1, 2]", -32600),
        ("{\"hello\": \"world\"}", -32600),
        (
            "{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"tools/call\", \"params\": 7}",
            -32600,
        ),
    ] {
        for session in [None, Some(session.as_str())] {
            let answer = post_text(&http, &gateway.url, token, session, body.to_owned())
                .send()
                .await
                .expect("posting a malformed body");
            assert_eq!(answer.status().as_u16(), 400, "{body}");
            let error: Value = answer.json().await.expect("a JSON-RPC error body");
            assert_eq!(error["error"]["code"], code, "{body}: {error}");
        }
    }
    // A body that is not JSON by its type keeps 415.
    let answer = http
        .post(&gateway.url)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "text/plain")
        .bearer_auth(token.expect("a generated token"))
        .body(initialize_body().to_string())
        .send()
        .await
        .expect("posting text/plain");
    assert_eq!(answer.status().as_u16(), 415);
}
