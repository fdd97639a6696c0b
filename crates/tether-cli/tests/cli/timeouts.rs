//! Per-server timeouts from the configs: a server's own startup timeout
//! (Codex `startup_timeout_sec`/`startup_timeout_ms`) replaces `--timeout` for its startup, and
//! its own per-request `timeout` (Gemini/Claude, in ms) replaces `call --timeout` for its tool
//! calls, both ways: shorter and longer.

use std::time::{Duration, Instant};

use crate::support::{Sandbox, json_str, test_server_bin, text};

/// A server entry of ours named `name` with `args` and extra JSON fields `options`.
fn server(name: &str, args: &[&str], options: &str) -> String {
    let args: Vec<String> = args.iter().map(|a| json_str(a)).collect();
    format!(
        r#"{{{}: {{"command": {}, "args": [{}]{options}}}}}"#,
        json_str(name),
        json_str(&test_server_bin().to_string_lossy()),
        args.join(", ")
    )
}

#[test]
fn a_servers_own_startup_timeout_replaces_the_runs() {
    let sandbox = Sandbox::new();
    // Shorter: the server's 0.5 s, not the run's 30 s.
    let spec = server(
        "slow",
        &["--slow-start", "5000"],
        r#", "startup_timeout_ms": 500"#,
    );
    let started = Instant::now();
    let out = sandbox.run(&["test", "--mcp", &spec, "--timeout", "30"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("within 0.5 s"), "{stdout}");
    assert!(started.elapsed() < Duration::from_secs(4), "{stdout}");
    // Longer: the server's 20 s, not the run's 1 s.
    let spec = server(
        "slow",
        &["--slow-start", "2000"],
        r#", "startup_timeout_sec": 20"#,
    );
    let out = sandbox.run(&["test", "--mcp", &spec, "--timeout", "1"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

#[test]
fn a_servers_own_request_timeout_replaces_the_calls() {
    let sandbox = Sandbox::new();
    let call = |options: &str, timeout: &str| {
        let spec = server("srv", &["--slow-echo", "2000"], options);
        sandbox.run(&[
            "call",
            "--mcp",
            &spec,
            "srv",
            "echo",
            "--args",
            r#"{"text":"late"}"#,
            "--timeout",
            timeout,
        ])
    };
    // Shorter: the server's 0.5 s, not the call's 60 s.
    let started = Instant::now();
    let out = call(r#", "timeout": 500"#, "60");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no answer within 0.5 s"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(10), "{stderr}");
    // Longer: the server's 20 s, not the call's 1 s (which still bounds the startup).
    let out = call(r#", "timeout": 20000"#, "1");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "late\n");
}

/// Writes an executable shell script `name` into `dir`.
fn script(dir: &std::path::Path, name: &str, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}")).expect("writing the script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .expect("making the script executable");
}

/// `PATH` with `bin` first.
fn path_with(bin: &std::path::Path) -> String {
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// A server launched through a package runner (`npx`, here a script on PATH) gets four times
/// `--timeout` for its start, a plain one `--timeout` itself. The fake `npx` answers only
/// once the plain server, which never answers, has been stopped at its own timeout: so it
/// starts after `--timeout` has passed, and is ready.
#[test]
fn a_package_runner_gets_a_longer_start_than_a_plain_server() {
    let sandbox = Sandbox::new();
    let bin = sandbox.path("bin");
    std::fs::create_dir_all(&bin).expect("creating the bin directory");
    let server = test_server_bin();
    let pid_file = sandbox.path("plain.pid");
    script(
        &bin,
        "plain-server",
        &format!(
            "echo $$ > '{pid}'\nexec '{server}' --hang\n",
            pid = pid_file.display(),
            server = server.display()
        ),
    );
    // Waits (at most 30 s, in 50 ms steps) until the plain server's pid is written and that
    // process is gone, then becomes the test server.
    script(
        &bin,
        "npx",
        &format!(
            "i=0\nwhile [ $i -lt 600 ]; do\n  if [ -s '{pid}' ] && ! kill -0 \"$(cat '{pid}')\" 2>/dev/null; then exec '{server}'; fi\n  i=$((i+1)); sleep 0.05\ndone\nexit 9\n",
            pid = pid_file.display(),
            server = server.display()
        ),
    );
    let spec = format!(
        r#"{{"plain": {{"command": {plain}}}, "runner": {{"command": "npx", "args": ["-y", "some-mcp-server@1.0.0"]}}}}"#,
        plain = json_str(&bin.join("plain-server").to_string_lossy()),
    );
    let path = path_with(&bin);
    let out = sandbox
        .tether(&["test", "--mcp", &spec, "--timeout", "1", "--json"])
        .env("PATH", &path)
        .output()
        .expect("running tether test");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("no JSON report: {}", text(&out.stderr)));
    let status = |name: &str| {
        report["servers"]
            .as_array()
            .and_then(|servers| servers.iter().find(|s| s["name"] == name))
            .map(|s| s["status"].as_str().unwrap_or_default().to_owned())
            .unwrap_or_default()
    };
    assert_eq!(status("plain"), "failed", "{report}");
    assert_eq!(status("runner"), "ready", "{report}");
}

/// A package runner's start that times out says the package is probably still downloading
/// and how to give it longer.
#[test]
fn a_package_runner_that_times_out_is_said_to_be_downloading() {
    let sandbox = Sandbox::new();
    let bin = sandbox.path("bin");
    std::fs::create_dir_all(&bin).expect("creating the bin directory");
    // Never answers: waits for a file no one writes (at most 30 s, if tether is gone).
    script(
        &bin,
        "uvx",
        &format!(
            "i=0\nwhile [ $i -lt 600 ] && [ ! -e '{never}' ]; do i=$((i+1)); sleep 0.05; done\nexit 9\n",
            never = sandbox.path("never").display()
        ),
    );
    let path = path_with(&bin);
    let started = Instant::now();
    let out = sandbox
        .tether(&[
            "test",
            "--mcp",
            r#"{"slow": {"command": "uvx", "args": ["some-mcp-server"]}}"#,
            "--timeout",
            "1",
        ])
        .env("PATH", &path)
        .output()
        .expect("running tether test");
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("within 4 s"), "{stdout}");
    assert!(stdout.contains("launched through uvx"), "{stdout}");
    assert!(stdout.contains("still downloading"), "{stdout}");
    assert!(stdout.contains("--timeout SECS"), "{stdout}");
    assert!(started.elapsed() < Duration::from_secs(20), "{stdout}");
}
