//! Launching real MCP servers: our test server over stdio and Streamable HTTP, and
//! `@modelcontextprotocol/server-everything` from the npm registry.

use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use tether_config::Secrets;
use tether_driver::{DriverError, McpRuntime, ServerStatus, StartOptions};
use tokio::io::AsyncBufReadExt;

use crate::support::{call, inline_session, json_str, test_server_bin, wait_group_gone};

/// A bound on every test step: nothing here may hang.
const STEP: Duration = Duration::from_secs(60);

pub(crate) fn stdio_server(name: &str, args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|a| json_str(a)).collect();
    format!(
        r#"{}: {{"command": {}, "args": [{}]}}"#,
        json_str(name),
        json_str(&test_server_bin().to_string_lossy()),
        args.join(",")
    )
}

pub(crate) async fn start(
    config: String,
    options: StartOptions,
    secrets: &Secrets,
) -> Result<McpRuntime, DriverError> {
    let session = inline_session(&config, secrets).await;
    tokio::time::timeout(STEP, session.start(&options))
        .await
        .unwrap_or_else(|_| panic!("startup did not finish within {STEP:?}"))
}

pub(crate) fn tools(status: &ServerStatus) -> Vec<String> {
    match status {
        ServerStatus::Ready { tools } => tools.iter().map(|t| t.name.clone()).collect(),
        ServerStatus::Failed { reason } => panic!("server failed: {reason}"),
        ServerStatus::Disabled => panic!("server disabled"),
    }
}

pub(crate) fn failure(status: &ServerStatus) -> String {
    match status {
        ServerStatus::Failed { reason } => reason.clone(),
        ServerStatus::Ready { .. } => panic!("server started but should have failed"),
        ServerStatus::Disabled => panic!("server disabled but should have failed"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_server_starts_lists_tools_and_gets_its_secret() {
    let secrets: Secrets = [("TOKEN", "sk-SENTINEL-\"quoted\\{{x}}")]
        .into_iter()
        .collect();
    let config = format!(
        r#"{{"echo": {{"command": {}, "env": {{"API_TOKEN": "{{{{TOKEN}}}}"}}}}}}"#,
        json_str(&test_server_bin().to_string_lossy())
    );
    let runtime = start(config, StartOptions::default(), &secrets)
        .await
        .expect("starting the servers");
    assert_eq!(
        tools(&runtime.reports()[0].status),
        ["add", "echo", "env_check"]
    );

    let echoed = call(&runtime, "echo", "echo", json!({"text": "hello"})).await;
    assert_eq!(echoed["content"][0]["text"], "hello");

    let check = call(&runtime, "echo", "env_check", json!({"name": "API_TOKEN"})).await;
    let text = check["content"][0]["text"].as_str().unwrap_or_default();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(text).ok(),
        Some(json!({"name": "API_TOKEN", "set": true}))
    );
    assert!(!check.to_string().contains("SENTINEL"));

    // The environment is cleared: a variable of ours does not reach the server.
    let home = call(
        &runtime,
        "echo",
        "env_check",
        json!({"name": "CARGO_MANIFEST_DIR"}),
    )
    .await;
    assert!(
        home["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("\"set\":false")
    );

    let unknown = runtime
        .call_tool("nope", "echo", None, STEP)
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert_eq!(
        unknown,
        "no running MCP server named 'nope' (running: echo)"
    );
    let pgids = runtime.process_groups();
    runtime.shutdown().await;
    for pgid in pgids {
        assert_eq!(
            wait_group_gone(pgid, Duration::from_secs(5)).await,
            Vec::<i32>::new()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn degraded_startup_keeps_the_good_servers_and_reports_the_failure() {
    // The failing server prints its secret env value to stderr before exiting: the reported
    // stderr tail must show it masked.
    let secrets: Secrets = [("TOKEN", "sk-SENTINEL-42")].into_iter().collect();
    let config = format!(
        r#"{{{}, "bad": {{"command": {}, "args": ["--stderr-env", "API_TOKEN", "--exit-early", "3"], "env": {{"API_TOKEN": "{{{{TOKEN}}}}"}}}}}}"#,
        stdio_server("good", &[]),
        json_str(&test_server_bin().to_string_lossy()),
    );
    let runtime = start(config, StartOptions::default(), &secrets)
        .await
        .expect("starting the servers");
    let reports = runtime.reports();
    assert_eq!(reports[0].name, "good");
    assert_eq!(tools(&reports[0].status).len(), 3);
    let reason = failure(&reports[1].status);
    assert!(
        reason.contains("exited (exit status: 3) before answering initialize"),
        "{reason}"
    );
    assert!(
        reason.contains("tether-test-mcp: exiting early with code 3 as asked"),
        "{reason}"
    );
    assert!(reason.contains("API_TOKEN=********"), "{reason}");
    assert!(!reason.contains("SENTINEL"), "{reason}");
    assert_eq!(runtime.running(), ["good"]);
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_startup_fails_the_run_and_stops_the_good_servers() {
    let config = format!(
        "{{{}, {}}}",
        stdio_server("good", &["--spawn-child"]),
        stdio_server("bad", &["--exit-early", "7"])
    );
    let options = StartOptions {
        strict: true,
        ..StartOptions::default()
    };
    let err = start(config, options, &Secrets::new()).await.err();
    match err {
        Some(DriverError::StartupFailed { details }) => {
            assert_eq!(details.len(), 1, "{details:?}");
            assert!(
                details[0].starts_with("bad: the server exited (exit status: 7)"),
                "{details:?}"
            );
        }
        other => panic!("expected StartupFailed, got {other:?}"),
    }
}

/// `excludeTools`/`includeTools` (Gemini CLI) keep a tool out of the report
/// and out of reach of calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_filters_hide_tools_and_refuse_their_calls() {
    let bin = json_str(&test_server_bin().to_string_lossy());
    let config = format!(
        r#"{{"ex": {{"command": {bin}, "excludeTools": ["env_check"]}},
            "in": {{"command": {bin}, "includeTools": ["add", "env_check"], "excludeTools": ["env_check"]}}}}"#
    );
    let runtime = start(config, StartOptions::default(), &Secrets::new())
        .await
        .expect("starting the servers");
    assert_eq!(tools(&runtime.reports()[0].status), ["add", "echo"]);
    assert_eq!(tools(&runtime.reports()[1].status), ["add"]);
    let refused = runtime
        .call_tool(
            "ex",
            "env_check",
            json!({"name": "HOME"}).as_object().cloned(),
            STEP,
        )
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        refused.contains("calling tool 'env_check' on MCP server 'ex' failed: the server's config leaves this tool out"),
        "{refused}"
    );
    let echoed = runtime
        .call_tool(
            "in",
            "echo",
            json!({"text": "x"}).as_object().cloned(),
            STEP,
        )
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(echoed.contains("leaves this tool out"), "{echoed}");
    let added = runtime
        .call_tool(
            "in",
            "add",
            json!({"a": 2, "b": 3}).as_object().cloned(),
            STEP,
        )
        .await
        .expect("calling add");
    assert_eq!(added["content"][0]["text"], "5");
    runtime.shutdown().await;
}

/// A program that is not there says where it was looked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_program_is_not_found_on_path() {
    let config = r#"{"uvx-like": {"command": "tether-issue-11-no-such-program"},
                     "absolute": {"command": "/nonexistent/tether-issue-11"},
                     "nowhere": {"command": "/bin/true", "cwd": "/nonexistent/tether-issue-11-dir"}}"#
        .to_owned();
    let runtime = start(config, StartOptions::default(), &Secrets::new())
        .await
        .expect("starting the servers");
    let reasons: Vec<String> = runtime
        .reports()
        .iter()
        .map(|report| failure(&report.status))
        .collect();
    assert_eq!(
        reasons,
        [
            "cannot start 'tether-issue-11-no-such-program': not found on PATH (install it, or give its full path)",
            "cannot start '/nonexistent/tether-issue-11': no such file",
            "cannot start '/bin/true': its working directory (cwd) does not exist",
        ]
    );
    runtime.shutdown().await;
}

/// `"disabled": true` (Windsurf, Cline, Roo) keeps a server from starting, even
/// under strict startup, and its report keeps its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_server_is_not_started_and_reported_as_disabled() {
    let config = format!(
        r#"{{"off": {{"command": "/nonexistent/tether-issue-11", "disabled": true}}, {}}}"#,
        stdio_server("good", &[])
    );
    let options = StartOptions {
        strict: true,
        ..StartOptions::default()
    };
    let runtime = start(config, options, &Secrets::new())
        .await
        .expect("starting the servers");
    let reports = runtime.reports();
    assert_eq!(reports[0].name, "off");
    assert_eq!(reports[0].status, ServerStatus::Disabled);
    assert_eq!(reports[1].name, "good");
    assert_eq!(tools(&reports[1].status).len(), 3);
    assert_eq!(runtime.running(), ["good"]);
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_server_times_out_and_is_killed() {
    let config = format!("{{{}}}", stdio_server("hang", &["--hang"]));
    let options = StartOptions {
        startup_timeout: Duration::from_secs(1),
        ..StartOptions::default()
    };
    let runtime = start(config, options, &Secrets::new())
        .await
        .expect("starting the servers");
    let reason = failure(&runtime.reports()[0].status);
    assert!(
        reason.starts_with("no answer to initialize/tools/list within 1 s"),
        "{reason}"
    );
    assert!(runtime.running().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_exit_fails_fast_not_after_the_timeout() {
    let config = format!("{{{}}}", stdio_server("early", &["--exit-early", "1"]));
    // The startup timeout is far beyond the step bound: only failing fast can pass.
    let options = StartOptions {
        startup_timeout: Duration::from_secs(3600),
        ..StartOptions::default()
    };
    let runtime = start(config, options, &Secrets::new())
        .await
        .expect("starting the servers");
    let reason = failure(&runtime.reports()[0].status);
    assert!(reason.contains("exit status: 1"), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_server_within_the_timeout_is_ready() {
    let config = format!(
        "{{{}}}",
        stdio_server("slow", &["--slow-start", "300", "--tools", "120"])
    );
    let runtime = start(config, StartOptions::default(), &Secrets::new())
        .await
        .expect("starting the servers");
    // 3 tools + 120 numbered ones, over three pages of 50.
    assert_eq!(tools(&runtime.reports()[0].status).len(), 123);
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_leaves_no_process_of_the_group_alive() {
    let config = format!("{{{}}}", stdio_server("parent", &["--spawn-child"]));
    let runtime = start(config, StartOptions::default(), &Secrets::new())
        .await
        .expect("starting the servers");
    let pgids = runtime.process_groups();
    assert_eq!(pgids.len(), 1);
    // The grandchild lives in the group before shutdown.
    assert!(crate::support::processes_in_group(pgids[0]).len() >= 2);
    runtime.shutdown().await;
    assert_eq!(
        wait_group_gone(pgids[0], Duration::from_secs(5)).await,
        Vec::<i32>::new()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_runtime_kills_the_group() {
    let config = format!("{{{}}}", stdio_server("parent", &["--spawn-child"]));
    let runtime = start(config, StartOptions::default(), &Secrets::new())
        .await
        .expect("starting the servers");
    let pgids = runtime.process_groups();
    drop(runtime);
    assert_eq!(
        wait_group_gone(pgids[0], Duration::from_secs(5)).await,
        Vec::<i32>::new()
    );
}

/// Starts `tether-test-mcp --http 127.0.0.1:0` with `env`, returns the child and its URL.
pub(crate) async fn http_server(
    extra: &[&str],
    env: &[(&str, &str)],
) -> (tokio::process::Child, String) {
    let mut command = tokio::process::Command::new(test_server_bin());
    command
        .args(["--http", "127.0.0.1:0"])
        .args(extra)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut child = command.spawn().expect("spawning the process");
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let line = tokio::time::timeout(STEP, lines.next_line())
        .await
        .unwrap_or_else(|_| panic!("no address printed"))
        .expect("reading a line of its output")
        .unwrap_or_default();
    let url = line.trim_start_matches("listening on ").to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{line}");
    (child, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_http_server_with_a_bearer_header_from_a_secret() {
    let token = "tok-SENTINEL-\\\"{{y}}";
    let (mut child, url) = http_server(
        &["--require-bearer-env", "UPSTREAM_TOKEN"],
        &[("UPSTREAM_TOKEN", token)],
    )
    .await;
    let secrets: Secrets = [("TOKEN", token)].into_iter().collect();
    let config = format!(
        r#"{{"remote": {{"url": {}, "headers": {{"Authorization": "Bearer {{{{TOKEN}}}}"}}}}}}"#,
        json_str(&url)
    );
    let runtime = start(config.clone(), StartOptions::default(), &secrets)
        .await
        .expect("starting the servers");
    assert_eq!(
        tools(&runtime.reports()[0].status),
        ["add", "echo", "env_check"]
    );
    let out = call(&runtime, "remote", "add", json!({"a": 2, "b": 40})).await;
    assert_eq!(out["content"][0]["text"], "42");
    runtime.shutdown().await;

    // Without the right token the server answers 401: a failure that shows no token.
    let wrong: Secrets = [("TOKEN", "not-it-SENTINEL2")].into_iter().collect();
    let runtime = start(config, StartOptions::default(), &wrong)
        .await
        .expect("starting the servers");
    let reason = failure(&runtime.reports()[0].status);
    assert!(!reason.contains("SENTINEL"), "{reason}");
    let _ = child.kill().await;
}

/// A request to a remote server that went away after it started fails in words: rmcp's own
/// text names Rust types (`Transport [rmcp::transport::worker::WorkerTransport<…>] error`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_to_a_server_that_went_away_fails_in_words() {
    let (mut child, url) = http_server(&[], &[]).await;
    let config = format!(r#"{{"remote": {{"url": {}}}}}"#, json_str(&url));
    let runtime = start(config, StartOptions::default(), &Secrets::default())
        .await
        .expect("starting the servers");
    assert_eq!(
        tools(&runtime.reports()[0].status),
        ["add", "echo", "env_check"]
    );
    child.kill().await.expect("stopping the server");
    let error = runtime
        .call_tool(
            "remote",
            "add",
            json!({"a": 1, "b": 2}).as_object().cloned(),
            STEP,
        )
        .await
        .expect_err("the server is gone");
    let text = error.to_string();
    assert!(
        text.contains("the request could not be sent: connection refused"),
        "{text}"
    );
    for rust in ["rmcp::", "Transport [", "WorkerTransport", "<"] {
        assert!(!text.contains(rust), "{rust:?} in {text}");
    }
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_with_a_line_break_is_refused_clearly() {
    let secrets: Secrets = [("TOKEN", "a\r\nX-Injected: 1")].into_iter().collect();
    let config = r#"{"remote": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer {{TOKEN}}"}}}"#.to_owned();
    let runtime = start(config, StartOptions::default(), &secrets)
        .await
        .expect("starting the servers");
    let reason = failure(&runtime.reports()[0].status);
    assert_eq!(
        reason,
        "header 'Authorization' holds a line break (CR or LF), which HTTP forbids; fix the value"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_from_npm_over_stdio() {
    let Some(bin) = crate::support::server_everything() else {
        return;
    };
    let config = format!(
        r#"{{"everything": {{"command": {}, "args": ["stdio"]}}}}"#,
        json_str(&bin.to_string_lossy())
    );
    let runtime = start(config, StartOptions::default(), &Secrets::new())
        .await
        .expect("starting the servers");
    let names = tools(&runtime.reports()[0].status);
    assert!(names.iter().any(|n| n == "echo"), "{names:?}");
    let out = call(&runtime, "everything", "echo", json!({"message": "hi"})).await;
    assert!(out.to_string().contains("hi"), "{out}");
    let pgids = runtime.process_groups();
    runtime.shutdown().await;
    assert_eq!(
        wait_group_gone(pgids[0], Duration::from_secs(5)).await,
        Vec::<i32>::new()
    );
}

/// Starts `mcp-server-everything MODE` on a free loopback port; returns it and the port.
async fn everything_http(bin: &std::path::Path, mode: &str) -> (tokio::process::Child, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("binding a loopback port");
    let child = tokio::process::Command::new(bin)
        .arg(mode)
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawning the process");
    let deadline = tokio::time::Instant::now() + STEP;
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "server-everything {mode} did not listen"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (child, port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_sse_and_streamable_http() {
    let Some(bin) = crate::support::server_everything() else {
        return;
    };
    let (mut sse, sse_port) = everything_http(&bin, "sse").await;
    let (mut http, http_port) = everything_http(&bin, "streamableHttp").await;
    let config = format!(
        r#"{{"legacy": {{"type": "sse", "url": "http://127.0.0.1:{sse_port}/sse", "headers": {{"X-Trace": "{{{{TRACE}}}}"}}}},
            "modern": {{"url": "http://127.0.0.1:{http_port}/mcp"}}}}"#
    );
    let secrets: Secrets = [("TRACE", "t-1")].into_iter().collect();
    let runtime = start(config, StartOptions::default(), &secrets)
        .await
        .expect("starting the servers");
    for report in runtime.reports() {
        assert!(
            tools(&report.status).iter().any(|n| n == "echo"),
            "{}",
            report.name
        );
    }
    for server in ["legacy", "modern"] {
        let out = call(
            &runtime,
            server,
            "echo",
            json!({"message": format!("via {server}")}),
        )
        .await;
        assert!(out.to_string().contains(&format!("via {server}")), "{out}");
    }
    runtime.shutdown().await;
    let _ = sse.kill().await;
    let _ = http.kill().await;
}

/// A URL without a `type` (Cursor's `/sse` entries, Gemini's `url`) is tried
/// as Streamable HTTP first and then, as the MCP specification's backwards-compatibility section
/// recommends, over the legacy SSE transport; a declared type gets no fallback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untyped_url_falls_back_to_sse() {
    let Some(bin) = crate::support::server_everything() else {
        return;
    };
    let (mut sse, port) = everything_http(&bin, "sse").await;
    let config = format!(
        r#"{{"cursor-style": {{"url": "http://127.0.0.1:{port}/sse"}},
            "declared": {{"type": "http", "url": "http://127.0.0.1:{port}/sse"}},
            "nowhere": {{"url": "http://127.0.0.1:9/mcp"}}}}"#
    );
    let runtime = start(config, StartOptions::default(), &Secrets::new())
        .await
        .expect("starting the servers");
    assert!(
        tools(&runtime.reports()[0].status)
            .iter()
            .any(|n| n == "echo"),
        "{:?}",
        runtime.reports()[0]
    );
    let out = runtime
        .call_tool(
            "cursor-style",
            "echo",
            json!({"message": "over sse"}).as_object().cloned(),
            STEP,
        )
        .await
        .expect("calling echo over the fallback");
    assert!(out.to_string().contains("over sse"), "{out}");
    let declared = failure(&runtime.reports()[1].status);
    assert!(
        declared.starts_with("cannot reach http://127.0.0.1:"),
        "{declared}"
    );
    assert!(!declared.contains("SSE transport was tried"), "{declared}");
    let nowhere = failure(&runtime.reports()[2].status);
    assert!(
        nowhere.contains("the url has no \"type\", so the legacy SSE transport was tried too"),
        "{nowhere}"
    );
    runtime.shutdown().await;
    let _ = sse.kill().await;
}

/// A [`tether_driver::BearerAuth`] that counts what it is asked: a refresh hands out
/// `refreshed`, a step-up a new token each time.
struct CountingAuth {
    refreshed: String,
    refreshes: std::sync::atomic::AtomicUsize,
    step_ups: std::sync::atomic::AtomicUsize,
}

impl CountingAuth {
    fn new(refreshed: &str) -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self {
            refreshed: refreshed.to_owned(),
            refreshes: 0.into(),
            step_ups: 0.into(),
        })
    }

    fn counts(&self) -> (usize, usize) {
        use std::sync::atomic::Ordering::SeqCst;
        (self.refreshes.load(SeqCst), self.step_ups.load(SeqCst))
    }
}

impl tether_driver::BearerAuth for CountingAuth {
    fn refresh(
        &self,
        _url: String,
    ) -> futures_util::future::BoxFuture<'static, Option<tether_config::SecretValue>> {
        self.refreshes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let token = self.refreshed.clone();
        Box::pin(async move { Some(token.into()) })
    }

    fn step_up(
        &self,
        _url: String,
        challenge: String,
    ) -> futures_util::future::BoxFuture<'static, Option<tether_config::SecretValue>> {
        assert!(challenge.contains("insufficient_scope"), "{challenge}");
        let n = self
            .step_ups
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::pin(async move { Some(format!("stepped-up-{n}").into()) })
    }
}

fn with_auth(auth: &std::sync::Arc<CountingAuth>) -> StartOptions {
    StartOptions {
        bearer_auth: Some(auth.clone()),
        ..StartOptions::default()
    }
}

/// A refused bearer token (401) is renewed once through `bearer_auth` and the
/// request retried; later requests use the new token; a renewal the server refuses too is not
/// asked for again within the same request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_bearer_token_is_renewed_once_per_request() {
    let (mut child, url) = http_server(
        &["--require-bearer-env", "UPSTREAM_TOKEN"],
        &[("UPSTREAM_TOKEN", "fresh-SENTINEL")],
    )
    .await;
    let secrets: Secrets = [("TOKEN", "stale-SENTINEL")].into_iter().collect();
    let config = format!(
        r#"{{"remote": {{"type": "http", "url": {}, "headers": {{"Authorization": "Bearer {{{{TOKEN}}}}"}}}}}}"#,
        json_str(&url)
    );
    let auth = CountingAuth::new("fresh-SENTINEL");
    let runtime = start(config.clone(), with_auth(&auth), &secrets)
        .await
        .expect("starting the servers");
    assert_eq!(
        tools(&runtime.reports()[0].status),
        ["add", "echo", "env_check"]
    );
    let out = call(&runtime, "remote", "add", json!({"a": 2, "b": 40})).await;
    assert_eq!(out["content"][0]["text"], "42");
    assert_eq!(
        auth.counts(),
        (1, 0),
        "one refresh, kept for later requests"
    );
    runtime.shutdown().await;

    let wrong = CountingAuth::new("also-wrong-SENTINEL");
    let runtime = start(config, with_auth(&wrong), &secrets)
        .await
        .expect("starting the servers");
    let reason = failure(&runtime.reports()[0].status);
    assert!(reason.contains("authorization required"), "{reason}");
    assert!(!reason.contains("SENTINEL"), "{reason}");
    assert_eq!(wrong.counts(), (1, 0));
    let _ = child.kill().await;
}

/// A server that answers every request 403 `insufficient_scope` gets at most
/// `MAX_STEP_UPS` step-ups per request, then its refusal stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_ups_are_bounded_per_request() {
    use wiremock::matchers::method;
    let upstream = wiremock::MockServer::start().await;
    wiremock::Mock::given(method("POST"))
        .respond_with(wiremock::ResponseTemplate::new(403).insert_header(
            "WWW-Authenticate",
            r#"Bearer error="insufficient_scope", scope="more""#,
        ))
        .mount(&upstream)
        .await;
    let config = format!(
        r#"{{"remote": {{"type": "http", "url": "{}/mcp", "headers": {{"Authorization": "Bearer first"}}}}}}"#,
        upstream.uri()
    );
    let auth = CountingAuth::new("unused");
    let runtime = start(config, with_auth(&auth), &Secrets::new())
        .await
        .expect("starting the servers");
    failure(&runtime.reports()[0].status);
    assert_eq!(auth.counts(), (0, tether_driver::MAX_STEP_UPS));
    let sent: Vec<String> = upstream
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter_map(|r| {
            r.headers
                .get("authorization")?
                .to_str()
                .ok()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(
        sent,
        ["Bearer first", "Bearer stepped-up-0", "Bearer stepped-up-1"]
    );
}

/// The legacy SSE transport renews a refused token too: its event stream's GET, refused with
/// 401, is sent again with the refreshed token (the stream then ends, so the handshake fails
/// later for that reason, which this test does not look at).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sse_transport_renews_a_refused_token() {
    use wiremock::matchers::{header, method};
    let upstream = wiremock::MockServer::start().await;
    wiremock::Mock::given(method("GET"))
        .and(header("authorization", "Bearer fresh"))
        .respond_with(
            wiremock::ResponseTemplate::new(200)
                .insert_header("content-type", "text/event-stream")
                .set_body_string("event: endpoint\ndata: /messages\n\n"),
        )
        .mount(&upstream)
        .await;
    wiremock::Mock::given(method("GET"))
        .respond_with(
            wiremock::ResponseTemplate::new(401)
                .insert_header("WWW-Authenticate", r#"Bearer error="invalid_token""#),
        )
        .mount(&upstream)
        .await;
    let config = format!(
        r#"{{"remote": {{"type": "sse", "url": "{}/sse", "headers": {{"Authorization": "Bearer stale"}}}}}}"#,
        upstream.uri()
    );
    let auth = CountingAuth::new("fresh");
    let options = StartOptions {
        startup_timeout: Duration::from_secs(3),
        ..with_auth(&auth)
    };
    let runtime = start(config, options, &Secrets::new())
        .await
        .expect("starting the servers");
    drop(runtime);
    assert_eq!(auth.counts(), (1, 0));
    let gets: Vec<String> = upstream
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| r.method == wiremock::http::Method::GET)
        .filter_map(|r| {
            r.headers
                .get("authorization")?
                .to_str()
                .ok()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(gets, ["Bearer stale", "Bearer fresh"]);
}

/// A legacy SSE server whose `endpoint` event names another origin (here another loopback
/// port, then the same port under another host name) does not get tether's messages sent
/// there: the server fails naming the refusal, and the other origin receives nothing, neither
/// the `initialize` nor the server's header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_endpoint_on_another_origin_is_refused_and_gets_nothing() {
    use wiremock::matchers::method;
    let elsewhere = wiremock::MockServer::start().await;
    wiremock::Mock::given(method("POST"))
        .respond_with(wiremock::ResponseTemplate::new(202))
        .mount(&elsewhere)
        .await;
    let sse = wiremock::MockServer::start().await;
    let sse_port = sse.address().port();
    for endpoint in [
        format!("{}/messages?sessionId=1", elsewhere.uri()),
        format!("http://localhost:{sse_port}/messages?sessionId=1"),
    ] {
        sse.reset().await;
        wiremock::Mock::given(method("GET"))
            .respond_with(
                wiremock::ResponseTemplate::new(200)
                    .insert_header("content-type", "text/event-stream")
                    .set_body_string(format!("event: endpoint\ndata: {endpoint}\n\n")),
            )
            .mount(&sse)
            .await;
        let secrets: Secrets = [("KEY", "k-SENTINEL-$HOME-$$-${X}-%41-\"q\"-\\-{{x}}-é")]
            .into_iter()
            .collect();
        let config = format!(
            r#"{{"hostile": {{"type": "sse", "url": "{}/sse", "headers": {{"X-Api-Key": "{{{{KEY}}}}"}}}}}}"#,
            sse.uri()
        );
        let runtime = start(config, StartOptions::default(), &secrets)
            .await
            .expect("starting the servers");
        let received = elsewhere.received_requests().await.unwrap_or_default();
        assert!(
            received.is_empty(),
            "{} requests reached {endpoint}",
            received.len()
        );
        let posted = sse.received_requests().await.unwrap_or_default();
        assert!(
            posted
                .iter()
                .all(|request| request.method.as_str() == "GET"),
            "a message reached the SSE server's other host name"
        );
        let reason = failure(&runtime.reports()[0].status);
        assert!(
            reason.contains("the SSE endpoint event names another origin"),
            "{reason}"
        );
        assert!(!reason.contains("SENTINEL"), "{reason}");
        runtime.shutdown().await;
    }
}

/// Package runners are told by the command's file name and, for multi-purpose tools, their
/// first argument (`npm exec`, `uv tool run`, `docker run`); any other command is not one.
#[test]
fn package_runners_are_told_by_command_and_first_argument() {
    use tether_driver::package_runner;
    let cases: &[(&str, &[&str], Option<&str>)] = &[
        (
            "npx",
            &["-y", "@modelcontextprotocol/server-everything"],
            Some("npx"),
        ),
        ("/usr/local/bin/uvx", &["mcp-server-fetch"], Some("uvx")),
        ("bunx", &[], Some("bunx")),
        ("pipx", &["run", "x"], Some("pipx")),
        ("npm", &["exec", "x"], Some("npm exec")),
        ("pnpm", &["dlx", "x"], Some("pnpm dlx")),
        ("yarn", &["dlx", "x"], Some("yarn dlx")),
        ("bun", &["x", "x"], Some("bun x")),
        ("uv", &["tool", "run", "x"], Some("uv tool run")),
        ("docker", &["run", "-i", "img"], Some("docker run")),
        ("podman", &["run", "img"], Some("podman run")),
        ("npm", &["start"], None),
        ("uv", &["run", "server.py"], None),
        ("docker", &["exec", "c"], None),
        ("node", &["server.js"], None),
        ("/opt/npx-tools/server", &[], None),
    ];
    for (command, args, runner) in cases {
        assert_eq!(
            package_runner(command, args).as_deref(),
            *runner,
            "{command} {args:?}"
        );
    }
}

/// A [`tether_driver::BearerAuth`] whose tokens are bound to a key: its "proof" names the
/// method, the nonce and the token, so the test reads what each request carried.
struct BoundAuth;

impl tether_driver::BearerAuth for BoundAuth {
    fn refresh(
        &self,
        _url: String,
    ) -> futures_util::future::BoxFuture<'static, Option<tether_config::SecretValue>> {
        Box::pin(async { Some("fresh".into()) })
    }

    fn step_up(
        &self,
        _url: String,
        _challenge: String,
    ) -> futures_util::future::BoxFuture<'static, Option<tether_config::SecretValue>> {
        Box::pin(async { None })
    }

    fn proof(
        &self,
        _url: &str,
        method: &str,
        token: &tether_config::SecretValue,
        nonce: Option<&str>,
    ) -> Option<tether_config::SecretValue> {
        Some(format!("proof {method} {} {}", nonce.unwrap_or("-"), token.expose()).into())
    }
}

/// A token bound to a key goes as `Authorization: DPoP` with a proof on every request; a
/// server that asks for its nonce (`use_dpop_nonce`, RFC 9449 §9) gets it in the proofs
/// that follow, the request sent again once; a refusal that stands is bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_token_goes_with_a_proof_and_the_servers_nonce() {
    use wiremock::matchers::method;
    let upstream = wiremock::MockServer::start().await;
    wiremock::Mock::given(method("POST"))
        .respond_with(
            wiremock::ResponseTemplate::new(401)
                .insert_header(
                    "WWW-Authenticate",
                    r#"DPoP error="use_dpop_nonce", resource_metadata="http://127.0.0.1:9/prm""#,
                )
                .insert_header("DPoP-Nonce", "rs-n"),
        )
        .mount(&upstream)
        .await;
    let config = format!(
        r#"{{"remote": {{"type": "http", "url": "{}/mcp", "headers": {{"Authorization": "Bearer first"}}}}}}"#,
        upstream.uri()
    );
    let options = StartOptions {
        bearer_auth: Some(std::sync::Arc::new(BoundAuth)),
        ..StartOptions::default()
    };
    let runtime = start(config, options, &Secrets::new())
        .await
        .expect("starting the servers");
    failure(&runtime.reports()[0].status);
    let sent: Vec<(String, String)> = upstream
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .map(|r| {
            let header = |name: &str| {
                r.headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("none")
                    .to_owned()
            };
            (header("authorization"), header("dpop"))
        })
        .collect();
    assert!(sent.len() <= 12, "bounded: {sent:?}");
    assert_eq!(
        sent.get(..4).unwrap_or_default(),
        [
            // The request, without a nonce yet.
            ("DPoP first".to_owned(), "proof POST - first".to_owned()),
            // The nonce asked for, then the request again with it.
            ("DPoP first".to_owned(), "proof POST - first".to_owned()),
            ("DPoP first".to_owned(), "proof POST rs-n first".to_owned()),
            // Still refused: one refresh, its token proven with the nonce kept.
            ("DPoP fresh".to_owned(), "proof POST rs-n fresh".to_owned()),
        ]
    );
    assert!(
        sent.iter()
            .all(|(authorization, _)| authorization.starts_with("DPoP ")),
        "never as Bearer: {sent:?}"
    );
}
