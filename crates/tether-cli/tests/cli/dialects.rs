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

/// Issue 11 item 6: export to stdout masks by provenance (a secret, an environment value, a
/// credential-named field, a URL's password) and shows the rest, says on stderr how many values
/// it masked and how to get them; `-o` counts servers in the singular when there is one.
#[test]
fn export_masks_by_provenance_and_says_so() {
    let sandbox = Sandbox::new();
    // The shape of the Slack server's README config, plus a header and a URL default.
    let spec = r#"{"mcpServers": {"slack": {"command": "npx",
        "args": ["-y", "@modelcontextprotocol/server-slack", "--db=postgresql://u:pw-SENTINEL@h/db", "--base=${TETHER_T11_UNSET:-http://localhost:3000}/mcp"],
        "env": {"SLACK_BOT_TOKEN": "xoxb-SENTINEL", "SLACK_TEAM_ID": "T01234567", "FROM_ENV": "${TETHER_T11_VALUE}"}}}}"#;
    let out = sandbox
        .tether(&["export", "--mcp", spec, "--format", "json"])
        .env("TETHER_T11_VALUE", "env-SENTINEL")
        .env_remove("TETHER_T11_UNSET")
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(!stdout.contains("SENTINEL"), "{stdout}");
    let exported: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}"));
    let slack = &exported["mcpServers"]["slack"];
    assert_eq!(
        slack["env"],
        json!({"SLACK_BOT_TOKEN": "********", "SLACK_TEAM_ID": "T01234567", "FROM_ENV": "********"})
    );
    assert_eq!(slack["args"][2], "--db=postgresql://u:********@h/db");
    assert_eq!(slack["args"][3], "--base=http://localhost:3000/mcp");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("note: 3 values masked as ********")
            && stderr.contains("-o FILE")
            && stderr.contains("--show-secrets"),
        "{stderr}"
    );
    assert!(!stderr.contains("SENTINEL"), "{stderr}");

    let file = sandbox.path("out.json");
    let out = sandbox
        .tether(&[
            "export",
            "--mcp",
            spec,
            "--format",
            "json",
            "-o",
            &file.to_string_lossy(),
        ])
        .env("TETHER_T11_VALUE", "env-SENTINEL")
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("(1 server, mode 0600, real values)"),
        "{}",
        text(&out.stderr)
    );
}

/// Issue 11 item 7: a field tether does not use is warned about once, though the spec is
/// parsed several times in a run; two bare servers named after their command say how to name
/// them.
#[test]
fn unknown_fields_warn_once_and_duplicate_names_mention_the_name_field() {
    let sandbox = Sandbox::new();
    let out = sandbox
        .tether(&[
            "export",
            "--mcp",
            r#"{"s": {"command": "x", "description": "a server"}}"#,
            "--format",
            "json",
        ])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert_eq!(
        stderr
            .matches("MCP server 's': ignoring unknown field 'description'")
            .count(),
        1,
        "{stderr}"
    );

    let out = sandbox
        .tether(&[
            "export",
            "--mcp",
            r#"{"command": "npx", "args": ["-y", "a"]}"#,
            "--mcp",
            r#"{"command": "npx", "args": ["-y", "b"]}"#,
            "--format",
            "json",
        ])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("Duplicate MCP server name 'npx' (from inline spec #1 and inline spec #2): rename one of them (a single-server spec is named by its \"name\" field"),
        "{}",
        text(&out.stderr)
    );
}
