//! The `tether` CLI against the reference server, as real processes on loopback.

#![allow(
    clippy::expect_used,
    reason = "test helpers outside #[test] fns say what they were doing when they fail"
)]

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use tether_e2e::{Stack, http_test_server, json_str, processes_with, test_server_bin};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The `error:` lines of stderr (log lines carry timestamps).
fn error_lines(stderr: &str) -> String {
    stderr
        .lines()
        .filter(|l| l.starts_with("error:"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn stack(extra: &[&str]) -> Stack {
    Stack::start(extra).expect("starting the tether-server stack")
}

/// A fresh marker that tags one test's server processes for /proc checks.
fn new_marker() -> String {
    format!("E2E_MARK_{}", uuid::Uuid::new_v4().simple())
}

/// Adds [`command_spec`] as the managed installation `name` with the server-held `REGION`;
/// returns its uid.
fn add_echo(stack: &Stack, name: &str, marker: &str, region: &str) -> String {
    stack
        .add(
            name,
            &command_spec(marker),
            &[("REGION", region)],
            "default",
        )
        .expect("adding an installation to tether-server")
}

/// A COMMAND installation of our test server; `marker` tags its processes for /proc checks.
fn command_spec(marker: &str) -> String {
    format!(
        r#"{{"command": {}, "args": ["--stderr-env", {}], "env": {{"REGION": "{{{{REGION}}}}", "API_KEY": "{{{{CLIENT_TOKEN}}}}"}}}}"#,
        json_str(&test_server_bin().to_string_lossy()),
        json_str(marker)
    )
}

fn assert_no_leftover(marker: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = processes_with(marker);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "processes left behind: {left:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_command_installation_resolves_by_uuid_gets_the_client_secret_and_lists_tools() {
    let stack = stack(&[]);
    let marker = new_marker();
    let uid = add_echo(&stack, "managed-echo", &marker, "server-held-eu");
    let env = [("CLIENT", "client-SENTINEL")];
    let out = stack
        .run_tether(
            &[
                "test",
                "--mcp",
                &uid,
                "--secret",
                "CLIENT_TOKEN=env:CLIENT",
                "--json",
            ],
            &env,
        )
        .expect("running tether");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: Value =
        serde_json::from_slice(&out.stdout).expect("parsing the JSON report on stdout");
    assert_eq!(report["servers"][0]["name"], "managed-echo");
    assert_eq!(
        report["servers"][0]["tools"].as_array().map(Vec::len),
        Some(3)
    );

    let out = stack
        .run_tether(
            &[
                "call",
                "--mcp",
                &uid,
                "--secret",
                "CLIENT_TOKEN=env:CLIENT",
                "managed-echo",
                "env_check",
                "--args",
                r#"{"name":"API_KEY"}"#,
            ],
            &env,
        )
        .expect("running tether");
    assert!(
        text(&out.stdout).contains("\"set\":true"),
        "{}",
        text(&out.stderr)
    );
    // The server-held value was rendered in by the server; the client secret by the client.
    let out = stack
        .run_tether(
            &[
                "export",
                "--mcp",
                &uid,
                "--secret",
                "CLIENT_TOKEN=env:CLIENT",
                "--format",
                "json",
                "--show-secrets",
            ],
            &env,
        )
        .expect("running tether");
    let config: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{}: {e}", text(&out.stderr)));
    assert_eq!(
        config["mcpServers"]["managed-echo"]["env"]["REGION"],
        "server-held-eu"
    );
    assert_eq!(
        config["mcpServers"]["managed-echo"]["env"]["API_KEY"],
        "client-SENTINEL"
    );
    assert_no_leftover(&marker);
}

#[test]
fn a_url_installation_goes_through_the_proxy_and_never_shows_the_upstream_credential() {
    let upstream_token = "upstream-SENTINEL-9f2e";
    let (mut upstream, upstream_url) = http_test_server(
        &["--require-bearer-env", "UPSTREAM_TOKEN"],
        &[("UPSTREAM_TOKEN", upstream_token)],
    )
    .expect("starting the upstream test MCP server");

    let stack = stack(&[]);
    let spec = format!(
        r#"{{"url": {}, "headers": {{"Authorization": "Bearer {{{{UPSTREAM}}}}"}}}}"#,
        json_str(&upstream_url)
    );
    let uid = stack
        .add("proxied", &spec, &[("UPSTREAM", upstream_token)], "default")
        .expect("adding an installation to tether-server");
    let out = stack
        .run_tether(&["test", "--mcp", &uid, "--json"], &[])
        .expect("running tether");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: Value =
        serde_json::from_slice(&out.stdout).expect("parsing the JSON report on stdout");
    let tools: Vec<&str> = report["servers"][0]["tools"]
        .as_array()
        .map(|t| t.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(tools, ["add", "echo", "env_check"]);

    // Everything the client received, shown in full: the proxy URL and token, never upstream's.
    let out = stack
        .run_tether(
            &[
                "-vvv",
                "export",
                "--mcp",
                &uid,
                "--format",
                "json",
                "--show-secrets",
            ],
            &[],
        )
        .expect("running tether");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        stdout.contains(&format!("{}/mcp-proxy/{uid}", stack.proxy_base)),
        "{stdout}"
    );
    assert!(stdout.contains("Bearer "), "{stdout}");
    for shown in [&stdout, &stderr] {
        assert!(
            !shown.contains(upstream_token),
            "the upstream credential reached the client:\n{shown}"
        );
        assert!(
            !shown.contains(&upstream_url),
            "the upstream URL reached the client:\n{shown}"
        );
    }
    let _ = upstream.kill();
    let _ = upstream.wait();
}

#[test]
fn a_local_installation_is_resolved_with_zero_graphql_requests() {
    let stack = stack(&[]);
    let marker = new_marker();
    let out = stack
        .run_tether(
            &["install", "local-echo", "--from", &command_spec(&marker)],
            &[],
        )
        .expect("running tether");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let uid = text(&out.stdout).trim().to_owned();
    let before = stack.mint_count().expect("reading the mint count");
    let out = stack
        .run_tether(
            &[
                "test",
                "--mcp",
                &uid,
                "--secret",
                "REGION=env:R",
                "--secret",
                "CLIENT_TOKEN=env:R",
            ],
            &[("R", "x")],
        )
        .expect("running tether");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        stack.mint_count().expect("reading the mint count"),
        before,
        "a local UUID reached the server"
    );
    assert_no_leftover(&marker);
}

#[test]
fn inactive_unknown_and_foreign_uids_fail_with_exit_code_3() {
    let stack = stack(&[]);
    let uid = stack
        .add(
            "to-deactivate",
            &command_spec("E2E_MARK_inactive"),
            &[("REGION", "x")],
            "default",
        )
        .expect("adding an installation to tether-server");
    stack
        .admin(&["deactivate", &uid])
        .expect("running tether-server admin");
    let out = stack
        .run_tether(&["test", "--mcp", &uid], &[])
        .expect("running tether");
    assert_eq!(out.status.code(), Some(3));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!("Failed to resolve managed MCP server {uid}:")),
        "{stderr}"
    );

    let unknown = uuid::Uuid::new_v4().to_string();
    let out = stack
        .run_tether(&["test", "--mcp", &unknown], &[])
        .expect("running tether");
    assert_eq!(out.status.code(), Some(3));
    let not_found = text(&out.stderr);
    assert!(
        not_found.contains(&format!("Failed to resolve managed MCP server {unknown}:")),
        "{not_found}"
    );

    // Another team's uid answers exactly like an unknown one.
    let foreign = stack
        .add(
            "other-team",
            &command_spec("E2E_MARK_foreign"),
            &[("REGION", "x")],
            "team-b",
        )
        .expect("adding an installation to tether-server");
    let out = stack
        .run_tether(&["test", "--mcp", &foreign], &[])
        .expect("running tether");
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(
        error_lines(&text(&out.stderr)).replace(&foreign, "UID"),
        error_lines(&not_found).replace(&unknown, "UID"),
        "a foreign uid must look exactly like an unknown one"
    );
    // A wrong API key is an HTTP 401: also a managed resolution failure.
    let out = stack
        .tether(&["test", "--mcp", &uid])
        .env("TETHER_API_KEY", "wrong-key")
        .output()
        .expect("running tether");
    assert_eq!(out.status.code(), Some(3));
    assert!(text(&out.stderr).contains("401"), "{}", text(&out.stderr));
}

#[test]
fn a_task_config_with_warp_ids_resolves_the_same_way() {
    let stack = stack(&[]);
    let marker = new_marker();
    let uid = add_echo(&stack, "task-echo", &marker, "r");
    let task = stack.dir.path().join("task.json");
    std::fs::write(
        &task,
        format!(r#"{{"task_id": "task-42", "mcp_servers": {{"{uid}": {{"warp_id": "{uid}"}}}}}}"#),
    )
    .expect("writing the test file");
    let out = stack
        .run_tether(
            &[
                "test",
                "--task",
                &task.to_string_lossy(),
                "--secret",
                "CLIENT_TOKEN=env:C",
                "--json",
            ],
            &[("C", "c")],
        )
        .expect("running tether");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: Value =
        serde_json::from_slice(&out.stdout).expect("parsing the JSON report on stdout");
    assert_eq!(report["servers"][0]["name"], "task-echo");
    // The task config itself was not rewritten with anything resolved.
    let after = std::fs::read_to_string(&task).unwrap_or_default();
    assert_eq!(
        after,
        format!(r#"{{"task_id": "task-42", "mcp_servers": {{"{uid}": {{"warp_id": "{uid}"}}}}}}"#)
    );
    assert_no_leftover(&marker);
}

#[test]
fn a_long_running_run_re_mints_an_expiring_proxy_token() {
    let (mut upstream, upstream_url) =
        http_test_server(&[], &[]).expect("starting the upstream test MCP server");

    // Tokens live 120 s: inside the 5-minute window from the start, so the first check re-mints.
    let stack = stack(&["--proxy-token-ttl", "120"]);
    let uid = stack
        .add(
            "expiring",
            &format!(r#"{{"url": {}}}"#, json_str(&upstream_url)),
            &[],
            "default",
        )
        .expect("adding an installation to tether-server");
    let mut run = stack
        .tether(&["run", "--hold", "--mcp", &uid])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning tether");
    let stderr = run.stderr.take().unwrap_or_else(|| panic!("no stderr"));
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = sender.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    let reminted = loop {
        match receiver.recv_timeout(Duration::from_millis(200)) {
            Ok(line)
                if line.contains(&format!(
                    "re-minted managed config {uid}: restarted expiring (ready)"
                )) =>
            {
                break true;
            }
            Ok(line) => seen.push(line),
            Err(_) if Instant::now() > deadline => break false,
            Err(_) => {}
        }
    };
    assert!(
        reminted,
        "no re-mint seen; stderr so far:\n{}",
        seen.join("\n")
    );
    assert!(stack.mint_count().expect("reading the mint count") >= 2);
    let pid = nix::unistd::Pid::from_raw(i32::try_from(run.id()).unwrap_or_default());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM)
        .expect("sending SIGTERM to tether");
    let status = run.wait().expect("waiting for tether to exit");
    assert_eq!(status.code(), Some(0));
    let _ = upstream.kill();
    let _ = upstream.wait();
}

#[test]
fn the_base_url_tether_server_prints_is_accepted_as_the_server_url() {
    let stack = stack(&[]);
    let marker = new_marker();
    let uid = add_echo(&stack, "managed-base", &marker, "server-held-eu");
    // What `tether-server serve` prints ("listening on http://ADDRESS"), without `/graphql`.
    let base = stack.base.trim_end_matches('/').to_owned();
    assert!(!base.ends_with("/graphql"), "{base}");
    let out = stack
        .run_tether(
            &[
                "test",
                "--mcp",
                &uid,
                "--secret",
                "CLIENT_TOKEN=env:CLIENT",
                "--json",
            ],
            &[("CLIENT", "client-SENTINEL"), ("TETHER_SERVER_URL", &base)],
        )
        .expect("running tether");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: Value =
        serde_json::from_slice(&out.stdout).expect("parsing the JSON report on stdout");
    assert_eq!(report["servers"][0]["name"], "managed-base");
    assert_no_leftover(&marker);
}
