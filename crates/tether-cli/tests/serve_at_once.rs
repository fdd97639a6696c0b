//! `tether serve` answers at once while its servers start, over stdio and Streamable HTTP:
//! the `tether` binary in front of real servers — our test server, one held back until the
//! test creates a file (`--start-when-file`), one whose starts fail until the test creates a
//! file (`--exit-unless-file`), server-everything — with a real MCP client (rmcp). And the
//! modes that wait: `--wait-for-servers` serves only once every server started,
//! `--strict-mcp` fails on a server that cannot start.

#![allow(
    clippy::expect_used,
    reason = "a test binary: helpers outside #[test] functions panic on setup failure too"
)]

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use rmcp::ServiceExt as _;
use rmcp::transport::TokioChildProcess;
use serde_json::json;
use tether_testkit::mcp_client::{
    ListChanges, ListWatcher, WatchingClient, answer_of, gateway_status, next_list_change,
    spawn_call, tool_names, until_status,
};
use tether_testkit::{Tether, json_str, server_everything, test_server_bin};

const LIMIT: Duration = Duration::from_secs(60);

/// `tether` with its own TETHER_HOME under `dir`, cwd `dir`.
fn tether_in(dir: &Path) -> Tether {
    Tether::new(
        PathBuf::from(env!("CARGO_BIN_EXE_tether")),
        dir.join("home"),
    )
    .current_dir(dir)
}

/// Closes `client` (stdin of its `tether serve`): the whole stderr of the process, which ends.
async fn closed(client: WatchingClient, stderr: Option<tokio::process::ChildStderr>) -> String {
    client.cancel().await.expect("closing the client");
    let mut text = String::new();
    let mut stderr = stderr.expect("piped stderr");
    tokio::time::timeout(
        Duration::from_secs(30),
        tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut text),
    )
    .await
    .expect("tether serve ends")
    .expect("reading its stderr");
    text
}

/// A directory, the file that releases `slow`, and a spec of `fast` and `slow` (held back).
fn fast_and_slow() -> (tempfile::TempDir, PathBuf, String) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let release = dir.path().join("release");
    let spec = format!(
        "{{{}, {}}}",
        test_server("fast", &[]),
        test_server("slow", &["--start-when-file", &release.to_string_lossy()])
    );
    (dir, release, spec)
}

/// A spec entry for the test server with `args`.
fn test_server(name: &str, args: &[&str]) -> String {
    format!(
        r#"{}: {{"command": {}, "args": {}}}"#,
        json_str(name),
        json_str(&test_server_bin().to_string_lossy()),
        json!(args)
    )
}

/// The held-back server `slow`: the initialize was answered while it is held; its tools are
/// not listed; a call to it issued now waits; releasing it brings `tools/list_changed`, its
/// tools, and the call's answer.
async fn slow_joins_when_released(
    client: &WatchingClient,
    changes: &mut ListChanges,
    release: &Path,
) {
    assert!(!release.exists(), "the slow server is still held back");
    let capabilities = serde_json::to_value(
        &client
            .peer_info()
            .expect("an initialize answer")
            .capabilities,
    )
    .expect("capabilities");
    assert_eq!(capabilities["tools"]["listChanged"], true, "{capabilities}");
    let slow = gateway_status(client, "slow").await;
    assert_eq!(slow["state"], "pending", "{slow}");
    assert!(
        !tool_names(client)
            .await
            .iter()
            .any(|name| name.starts_with("slow__")),
    );
    let call = spawn_call(client, "slow__echo", json!({"text": "it waited"}));
    until_status(client, "slow", LIMIT, |entry| entry["waiting_calls"] == 1).await;
    assert!(!call.is_finished(), "the call waits for the server");

    while changes.try_recv().is_ok() {}
    std::fs::write(release, "").expect("releasing the slow server");
    next_list_change(changes, LIMIT).await;
    let names = tool_names(client).await;
    assert!(names.contains(&"slow__echo".to_owned()), "{names:?}");
    assert!(format!("{:?}", answer_of(call, LIMIT).await.content).contains("it waited"));
    assert_eq!(gateway_status(client, "slow").await["state"], "ready");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_stdio_initialize_is_answered_at_once_and_a_slow_server_joins_later() {
    let (dir, release, spec) = fast_and_slow();
    let command = tether_in(dir.path()).command(&["serve", "--mcp", &spec]);
    let (transport, stderr) = TokioChildProcess::builder(tokio::process::Command::from(command))
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting tether serve");
    let (handler, mut changes) = ListWatcher::new();
    let client = handler.serve(transport).await.expect("initializing");

    until_status(&client, "fast", LIMIT, |entry| entry["state"] == "ready").await;
    assert!(tool_names(&client).await.contains(&"fast__echo".to_owned()));
    slow_joins_when_released(&client, &mut changes, &release).await;

    let text = closed(client, stderr).await;
    // The log says which servers are pending and when each is ready.
    let said = |words: &str, server: &str| {
        text.lines()
            .any(|line| line.contains(words) && line.contains(&format!("server={server}")))
    };
    assert!(said("MCP server pending", "slow"), "{text}");
    assert!(said("MCP server ready, 3 tools", "slow"), "{text}");
    assert!(said("MCP server ready, 3 tools", "fast"), "{text}");
}

/// `tether serve --listen 127.0.0.1:0 --no-auth EXTRA… --mcp SPEC` in `dir`: the child and
/// the URL it printed; stderr drained.
fn serve_http(dir: &Path, spec: &str, extra: &[&str]) -> (std::process::Child, String) {
    let mut args = vec![
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--no-auth",
        "--mcp",
        spec,
    ];
    args.extend_from_slice(extra);
    let mut child = tether_in(dir)
        .command(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting tether serve --listen");
    let stderr = child.stderr.take().expect("piped stderr");
    std::thread::spawn(move || BufReader::new(stderr).lines().for_each(drop));
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped stdout"))
        .read_line(&mut line)
        .expect("reading the listening line");
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    (child, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_servers_join_as_they_start_and_a_failing_one_is_retried() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let release = dir.path().join("release");
    let allow = dir.path().join("allow");
    let mut entries = vec![
        test_server("slow", &["--start-when-file", &release.to_string_lossy()]),
        test_server("flaky", &["--exit-unless-file", &allow.to_string_lossy()]),
    ];
    let everything = server_everything();
    if let Some(bin) = &everything {
        entries.push(format!(
            r#""everything": {{"command": {}, "args": ["stdio"]}}"#,
            json_str(&bin.to_string_lossy())
        ));
    }
    let spec = format!("{{{}}}", entries.join(", "));
    let (mut child, url) = serve_http(dir.path(), &spec, &[]);
    let (handler, mut changes) = ListWatcher::new();
    let client = handler
        .serve(rmcp::transport::StreamableHttpClientTransport::from_uri(
            url,
        ))
        .await
        .expect("initializing over HTTP");

    // `flaky` fails its starts and is retried; once allowed, it joins.
    let flaky = until_status(&client, "flaky", LIMIT, |entry| {
        entry["state"] == "retrying"
    })
    .await;
    assert!(flaky["failed_starts"].as_u64() >= Some(1), "{flaky}");
    std::fs::write(&allow, "").expect("letting flaky start");
    until_status(&client, "flaky", LIMIT, |entry| entry["state"] == "ready").await;
    assert!(tool_names(&client).await.contains(&"flaky__add".to_owned()));
    if everything.is_some() {
        until_status(&client, "everything", LIMIT, |entry| {
            entry["state"] == "ready"
        })
        .await;
        assert!(
            tool_names(&client)
                .await
                .contains(&"everything__echo".to_owned())
        );
    }

    slow_joins_when_released(&client, &mut changes, &release).await;
    client.cancel().await.expect("closing the client");
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_servers_serves_only_once_every_server_started() {
    let (dir, release, spec) = fast_and_slow();
    let command = tether_in(dir.path()).command(&["serve", "--wait-for-servers", "--mcp", &spec]);
    let (transport, stderr) = TokioChildProcess::builder(tokio::process::Command::from(command))
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting tether serve");
    let (handler, _changes) = ListWatcher::new();
    let initialize = tokio::spawn(handler.serve(transport));
    // Released at once: that the answer waited for it shows in the order of the stderr lines.
    std::fs::write(&release, "").expect("releasing the slow server");
    let client = tokio::time::timeout(Duration::from_secs(60), initialize)
        .await
        .expect("an initialize answer")
        .expect("the task")
        .expect("initializing");
    // The first tools/list has every server's tools, with no list change needed.
    let names = tool_names(&client).await;
    assert!(names.contains(&"slow__echo".to_owned()), "{names:?}");
    assert!(names.contains(&"fast__echo".to_owned()), "{names:?}");
    let text = closed(client, stderr).await;
    // Both were ready before serving began.
    let at = |words: &str| {
        text.find(words)
            .unwrap_or_else(|| panic!("no {words:?} in {text}"))
    };
    assert!(
        at("tether serve: slow: ready, 3 tools") < at("tether serve: serving 6 tools on stdio")
    );
    assert!(
        at("tether serve: fast: ready, 3 tools") < at("tether serve: serving 6 tools on stdio")
    );
}

#[test]
fn strict_mcp_fails_when_a_server_cannot_start() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    for (what, broken, extra) in [
        ("exits", test_server("broken", &["--exit-early", "4"]), "30"),
        (
            "misses its start timeout",
            test_server("broken", &["--hang"]),
            "1",
        ),
    ] {
        let spec = format!("{{{}, {broken}}}", test_server("fine", &[]));
        let out = tether_testkit::output_within(
            tether_in(dir.path()).command(&[
                "serve",
                "--strict-mcp",
                "--timeout",
                extra,
                "--listen",
                "127.0.0.1:0",
                "--no-auth",
                "--mcp",
                &spec,
            ]),
            Duration::from_secs(60),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{what}: {stderr}");
        assert!(stderr.contains("broken"), "{what}: {stderr}");
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("listening on"),
            "{what}: served anyway"
        );
    }
}
