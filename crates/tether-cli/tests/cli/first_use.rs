//! What a new user hits first: specs that declare nothing, `--mcp` values that are not
//! specs, misspelt flags, duplicate and path-like installation names, removing by name.

use pretty_assertions::assert_eq;

use crate::support::{Sandbox, text};

/// The lines of `stderr` that are not blank.
fn lines(stderr: &[u8]) -> Vec<String> {
    text(stderr)
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

#[test]
fn an_empty_server_map_is_said_and_is_an_input_error_where_something_must_start() {
    let sandbox = Sandbox::new();
    let file = sandbox.write("empty.json", r#"{"mcpServers": {}}"#);
    for command in ["run", "test", "serve"] {
        let out = sandbox.run(&[command, "--mcp", &file]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{command}: {}",
            text(&out.stderr)
        );
        let stderr = lines(&out.stderr);
        assert_eq!(stderr.len(), 1, "{command}: {stderr:?}");
        assert!(
            stderr[0].contains("declares no MCP servers") && stderr[0].contains("empty.json"),
            "{command}: {stderr:?}"
        );
        assert!(out.stdout.is_empty(), "{command}");
    }
    // A harness run with nothing to hand over does not start the harness.
    let out = sandbox.run(&[
        "run",
        "--mcp",
        "{}",
        "--harness",
        "claude",
        "--",
        "/bin/echo",
        "started",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(!text(&out.stdout).contains("started"));
    assert!(text(&out.stderr).contains("inline spec #1 declares no MCP servers"));
    // Export writes the empty config it was asked for, and says so.
    let out = sandbox.run(&["export", "--format", "claude", "--mcp", &file]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("mcpServers"));
    assert!(
        text(&out.stderr).contains("declares no MCP servers"),
        "{}",
        text(&out.stderr)
    );
}
