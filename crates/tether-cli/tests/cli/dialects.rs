//! Issue 11: configs as users paste them from other tools' docs, end to end through `tether`.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support::{Sandbox, config, server_json, text};

/// A JSONC file (as VS Code and Gemini CLI read theirs) with a disabled server that could not
/// start: `test` starts only the other, reports the disabled one, and succeeds.
#[test]
fn test_skips_and_reports_a_disabled_server_from_a_jsonc_file() {
    let sandbox = Sandbox::new();
    let servers = config(&[
        server_json("good", &[], &[]),
        r#""off": {"command": "/nonexistent/tether-issue-11", "disabled": true,}"#.to_owned(),
    ]);
    let file = sandbox.write(
        "settings.json",
        &format!(
            "// ~/.gemini/settings.json\n{{\n  /* servers */ \"mcpServers\": {servers},\n}}\n"
        ),
    );
    let out = sandbox
        .tether(&["test", "--mcp", &file, "--json"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}"));
    let statuses: Vec<(&str, &str)> = report["servers"]
        .as_array()
        .map(|servers| {
            servers
                .iter()
                .map(|s| {
                    (
                        s["name"].as_str().unwrap_or_default(),
                        s["status"].as_str().unwrap_or_default(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(statuses, [("good", "ready"), ("off", "disabled")]);
    assert_eq!(report["servers"][1]["tools"], json!([]));

    let out = sandbox
        .tether(&["test", "--mcp", &file])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let table = text(&out.stdout);
    assert!(
        table.contains("disabled  off   not started (\"disabled\": true in its config)"),
        "{table}"
    );
}

/// Export keeps the flag where the format has one and says on stderr what it left out.
#[test]
fn export_flags_or_leaves_out_a_disabled_server() {
    let sandbox = Sandbox::new();
    let spec = r#"{"on": {"command": "x"}, "off": {"command": "y", "disabled": true}}"#;
    let out = sandbox
        .tether(&["export", "--mcp", spec, "--format", "opencode"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let exported: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(exported["mcp"]["off"]["enabled"], json!(false));
    assert_eq!(exported["mcp"]["on"]["enabled"], json!(true));

    let out = sandbox
        .tether(&["export", "--mcp", spec, "--format", "claude"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let exported: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}"));
    assert!(exported["mcpServers"]["off"].is_null(), "{exported}");
    assert!(
        text(&out.stderr).contains(
            "note: MCP server 'off' is disabled and claude has no flag for that: left out of the claude config"
        ),
        "{}",
        text(&out.stderr)
    );
}
