//! What a new user hits first: specs that declare nothing, `--mcp` values that are not
//! specs, misspelt flags, duplicate and path-like installation names, removing by name.

use pretty_assertions::assert_eq;

use crate::support::{Sandbox, json_str, test_server_bin, text};

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

#[test]
fn an_mcp_value_that_is_no_spec_is_echoed_with_what_is_accepted() {
    let sandbox = Sandbox::new();
    sandbox.install_test_server("github");
    let out = sandbox.run(&["test", "--mcp", "githb"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = lines(&out.stderr);
    assert_eq!(stderr.len(), 2, "{stderr:?}");
    assert!(
        stderr[0].starts_with("error: --mcp githb is not an installed server's name"),
        "{stderr:?}"
    );
    assert!(
        stderr[1].starts_with("hint: did you mean github? ")
            && stderr[1].contains("(github)")
            && stderr[1].contains("claude:, codex:, gemini:"),
        "{stderr:?}"
    );
    // A misspelt harness shorthand, and a path with no file.
    let out = sandbox.run(&["test", "--mcp", "claud:"]);
    assert!(
        text(&out.stderr).contains("did you mean claude:?"),
        "{}",
        text(&out.stderr)
    );
    let out = sandbox.run(&["test", "--mcp", "./mcp.jsn"]);
    assert!(
        text(&out.stderr).starts_with("error: --mcp ./mcp.jsn: no such file\nhint: "),
        "{}",
        text(&out.stderr)
    );
    // What could be a credential is named by position and length only.
    let out = sandbox.run(&["test", "--mcp", "ghp_SENTINEL%41$HOME"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        !text(&out.stderr).contains("SENTINEL"),
        "{}",
        text(&out.stderr)
    );
    assert!(text(&out.stderr).contains("--mcp value #1 (of 1, 20 characters"));
}

#[test]
fn a_json_error_is_one_line_with_its_cause_once() {
    let sandbox = Sandbox::new();
    let file = sandbox.write("bad.json", r#"{"a": {"command": }}"#);
    for value in [file.as_str(), r#"{"a": {"command": "{{x}}", }"#] {
        let out = sandbox.run(&["test", "--mcp", value]);
        assert_eq!(out.status.code(), Some(2));
        let stderr = lines(&out.stderr);
        assert_eq!(stderr.len(), 1, "{stderr:?}");
        assert_eq!(stderr[0].matches("invalid JSON").count(), 1, "{stderr:?}");
    }
}

#[test]
fn a_misspelt_flag_gets_the_flag_it_means() {
    let sandbox = Sandbox::new();
    for args in [
        &["test", "--mpc", "x"][..],
        &["run", "--mpc", "x", "--", "claude"],
        &["serve", "--scna", "off"],
    ] {
        let out = sandbox.run(args);
        assert_eq!(out.status.code(), Some(2));
        let stderr = text(&out.stderr);
        let flag = if args[1] == "--scna" {
            "--scan"
        } else {
            "--mcp"
        };
        assert!(
            stderr.contains(&format!("a similar argument exists: '{flag}'")),
            "{args:?}: {stderr}"
        );
        assert!(
            !stderr.contains("as a value, use '--"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn install_refuses_a_taken_or_path_like_name_installs_each_server_and_remove_takes_a_name() {
    let sandbox = Sandbox::new();
    let uid = sandbox.install_test_server("github");
    let spec = format!(
        r#"{{"command": {}}}"#,
        json_str(&test_server_bin().to_string_lossy())
    );
    // The same name again: refused, naming the one that has it.
    let out = sandbox.run(&["install", "github", "--from", &spec]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = lines(&out.stderr);
    assert_eq!(stderr.len(), 1, "{stderr:?}");
    assert!(
        stderr[0].contains("exists already") && stderr[0].contains(&uid),
        "{stderr:?}"
    );
    // A name that reads as a path.
    let out = sandbox.run(&["install", "./mcp.json", "--from", &spec]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("it reads as a path"),
        "{}",
        text(&out.stderr)
    );
    // Three servers: with NAME, how to pick one; without, each under its own name.
    let bin = json_str(&test_server_bin().to_string_lossy());
    let three = sandbox.write(
        "three.json",
        &format!(r#"{{"mcpServers": {{"a": {{"command": {bin}}}, "b": {{"command": {bin}}}, "c": {{"command": {bin}}}}}}}"#),
    );
    let out = sandbox.run(&["install", "x", "--from", &three]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--server KEY"),
        "{}",
        text(&out.stderr)
    );
    let out = sandbox.run(&["install", "--from", &three]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).lines().count(), 3);
    // Remove by name; `--mcp github` is no longer ambiguous at any point.
    let out = sandbox.run(&["remove", "a"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = sandbox.run(&["test", "--mcp", "github"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let listed = text(&sandbox.run(&["list"]).stdout);
    assert!(!listed.lines().any(|l| l.starts_with("a ")), "{listed}");
}
