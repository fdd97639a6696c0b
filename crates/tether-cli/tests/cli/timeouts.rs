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
