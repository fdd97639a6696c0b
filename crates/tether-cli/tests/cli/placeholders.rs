//! A `{{NAME}}` no secret fills is never launched silently: every resolving command
//! names it on stderr (server, field, name; never a value), and `run --strict-mcp` exits 2
//! before anything starts.

use crate::support::{Sandbox, json_str, test_server_bin, text};

/// A server that leaves a marker file when it starts, with one placeholder filled by
/// `--secret FILLED=…` and one left open.
fn spec(marker: &str) -> String {
    let script = format!("touch '{marker}'; exec \"$0\"");
    format!(
        r#"{{"api":{{"command":"sh","args":["-c",{},{}],"env":{{"API_KEY":"{{{{OPEN}}}}","OTHER":"{{{{FILLED}}}}"}}}}}}"#,
        json_str(&script),
        json_str(&test_server_bin().to_string_lossy())
    )
}

const FILLED: &str = "sk-FILLED-SENTINEL {{OPEN}} $HOME";

#[test]
fn an_unfilled_placeholder_is_named_for_every_resolving_command() {
    let sandbox = Sandbox::new();
    let marker = sandbox.path("started").to_string_lossy().into_owned();
    let spec = spec(&marker);
    let commands: [&[&str]; 3] = [
        &["test"],
        &["export", "--format", "json"],
        &["call", "api", "echo", "--args", r#"{"text":"hi"}"#],
    ];
    for command in commands {
        let mut args: Vec<&str> = command.to_vec();
        args.extend(["--mcp", &spec, "--secret", "FILLED=env:FILLED_VALUE"]);
        let out = sandbox
            .tether(&args)
            .env("FILLED_VALUE", FILLED)
            .output()
            .expect("running tether");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{command:?}: {stderr}");
        let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("WARN")).collect();
        assert_eq!(warnings.len(), 1, "{command:?}: {stderr}");
        let warning = warnings.first().copied().unwrap_or_default();
        assert!(warning.contains("env.API_KEY holds {{OPEN}}"), "{warning}");
        assert!(warning.contains("--secret OPEN=SOURCE"), "{warning}");
        assert!(warning.contains("server=api"), "{warning}");
        assert!(!stderr.contains("SENTINEL"), "{stderr}");
    }
}

#[test]
fn strict_mcp_refuses_before_anything_starts() {
    let sandbox = Sandbox::new();
    let marker = sandbox.path("started");
    let spec = spec(&marker.to_string_lossy());
    let out = sandbox
        .tether(&[
            "run",
            "--strict-mcp",
            "--mcp",
            &spec,
            "--secret",
            "FILLED=env:FILLED_VALUE",
        ])
        .env("FILLED_VALUE", FILLED)
        .output()
        .expect("running tether run --strict-mcp");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("MCP server 'api' needs values for: OPEN"),
        "{stderr}"
    );
    assert!(!marker.exists(), "the server was started");
    assert!(!stderr.contains("SENTINEL"), "{stderr}");

    // Without --strict-mcp the same run starts it (so the marker proves what it should).
    let out = sandbox
        .tether(&["run", "--mcp", &spec, "--secret", "FILLED=env:FILLED_VALUE"])
        .env("FILLED_VALUE", FILLED)
        .output()
        .expect("running tether run");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(marker.exists(), "the server was not started");
}
