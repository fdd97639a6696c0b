//! Snapshots of every export format, and the reference mode used for runs.

use tether_config::{EmptyEnv, Exposure, Origin, RenderedServer, Secrets, parse_config};
use tether_harness::{Format, HarnessError, export, export_with_references};

const CONFIG: &str = r#"{"mcpServers": {
  "github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github", "--token={{GH_TOKEN}}"],
             "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "{{GH_TOKEN}}", "LOG_LEVEL": "info"}},
  "linear": {"url": "https://mcp.linear.example/mcp", "headers": {"Authorization": "Bearer {{LINEAR_KEY}}"}}
}}"#;

fn servers(config: &str) -> Vec<RenderedServer> {
    let secrets: Secrets = [
        ("GH_TOKEN", "ghp_\"quoted\\{{x}}"),
        ("LINEAR_KEY", "lin_api_123"),
    ]
    .into_iter()
    .collect();
    parse_config(config, Origin::User)
        .unwrap_or_else(|e| panic!("{e}"))
        .servers
        .into_iter()
        .map(|s| s.into_installation().render(&secrets, &EmptyEnv))
        .collect()
}

/// An export's text as JSON (Codex's TOML converted), for assertions on its structure.
fn parsed(format: Format, text: &str) -> serde_json::Value {
    if format == Format::Codex {
        let table: toml::Table = toml::from_str(text)
            .unwrap_or_else(|e| panic!("the codex export is not TOML: {e}\n{text}"));
        serde_json::to_value(table).unwrap_or_else(|e| panic!("a TOML table as JSON: {e}"))
    } else {
        serde_json::from_str(text)
            .unwrap_or_else(|e| panic!("the {format} export is not JSON: {e}\n{text}"))
    }
}

#[test]
fn masked_exports() {
    let servers = servers(CONFIG);
    for format in Format::all() {
        let text =
            export(&servers, format, Exposure::Masked).unwrap_or_else(|e| panic!("{format}: {e}"));
        assert!(
            !text.contains("ghp_") && !text.contains("lin_api"),
            "{format} leaks:\n{text}"
        );
        insta::assert_snapshot!(format!("masked_{format}"), text);
    }
}

#[test]
fn real_exports_hold_exact_values_and_parse() {
    let servers = servers(CONFIG);
    for format in Format::all() {
        let text =
            export(&servers, format, Exposure::Real).unwrap_or_else(|e| panic!("{format}: {e}"));
        if format == Format::Codex {
            let value: toml::Table =
                toml::from_str(&text).unwrap_or_else(|e| panic!("codex TOML: {e}\n{text}"));
            let env = &value["mcp_servers"]["github"]["env"]["GITHUB_PERSONAL_ACCESS_TOKEN"];
            assert_eq!(env.as_str(), Some("ghp_\"quoted\\{{x}}"));
        } else {
            let value: serde_json::Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{format}: {e}"));
            assert!(
                value.to_string().contains(r#"ghp_\"quoted\\{{x}}"#),
                "{format}: {text}"
            );
        }
    }
}

#[test]
fn reference_mode_keeps_secrets_out_of_the_file() {
    let servers = servers(CONFIG);
    for format in [Format::Claude, Format::Gemini, Format::Opencode] {
        let out = export_with_references(&servers, format, true)
            .unwrap_or_else(|e| panic!("{format}: {e}"));
        assert!(
            !out.config.to_text().contains("ghp_") && !out.config.to_text().contains("lin_api"),
            "{format}:\n{}",
            out.config.to_text()
        );
        assert!(out.inlined.is_empty());
        // opencode pastes the variable into JSON text, so it holds the escaped form; reading it
        // back as a JSON string literal gives the exact value for every harness.
        let values: Vec<String> = out
            .env
            .iter()
            .map(|(_, v)| match format {
                Format::Opencode => {
                    serde_json::from_str(&format!("\"{}\"", v.expose())).unwrap_or_default()
                }
                _ => v.expose().to_owned(),
            })
            .collect();
        assert!(
            values.iter().any(|v| v == "ghp_\"quoted\\{{x}}")
                && values.iter().any(|v| v == "Bearer lin_api_123"),
            "{format}"
        );
        insta::assert_snapshot!(format!("references_{format}"), out.config.to_text());
    }
}

#[test]
fn plain_values_a_harness_would_expand_go_through_the_environment() {
    let servers =
        servers(r#"{"s": {"command": "srv", "args": ["--price=$5", "{env:HOME}", "plain"]}}"#);
    let claude = export_with_references(&servers, Format::Claude, true)
        .expect("exporting for claude by reference");
    assert!(
        claude.config.to_text().contains("${TETHER_SECRET_1}")
            && claude.config.to_text().contains("\"{env:HOME}\""),
        "{}",
        claude.config.to_text()
    );
    assert_eq!(claude.env.len(), 1);
    assert_eq!(claude.env[0].1.expose(), "--price=$5");
    let opencode = export_with_references(&servers, Format::Opencode, true)
        .expect("exporting for opencode by reference");
    assert!(
        opencode.config.to_text().contains("--price=$5")
            && opencode.config.to_text().contains("{env:TETHER_SECRET_1}"),
        "{}",
        opencode.config.to_text()
    );
    assert_eq!(opencode.env[0].1.expose(), "{env:HOME}");
}

#[test]
fn codex_forwards_env_and_headers_and_inlines_args() {
    let servers = servers(CONFIG);
    let out = export_with_references(&servers, Format::Codex, false)
        .expect("exporting for codex by reference");
    insta::assert_snapshot!("references_codex", out.config.to_text());
    assert_eq!(out.inlined, ["github: args[2]"]);
    let names: Vec<&str> = out.env.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        // LOG_LEVEL's plain value is written inline (masking and references follow
        // provenance: a user's own literal that is not a credential is not a secret).
        ["GITHUB_PERSONAL_ACCESS_TOKEN", "TETHER_SECRET_2"]
    );
    let err = export_with_references(&servers, Format::Codex, true).err();
    assert_eq!(
        err,
        Some(HarnessError::SecretWouldBeOnDisk {
            server: "github".to_owned(),
            harness: Format::Codex,
            field: "args[2]".to_owned()
        })
    );
}

#[test]
fn unsupported_shapes_are_clear_errors() {
    let sse = servers(r#"{"old": {"url": "https://h/sse", "type": "sse"}}"#);
    let err = export(&sse, Format::Codex, Exposure::Masked)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert_eq!(
        err,
        "MCP server 'old': codex cannot connect to an SSE server (it speaks Streamable HTTP only)"
    );
    let cwd = servers(r#"{"local": {"command": "srv", "cwd": "/srv"}}"#);
    let err = export(&cwd, Format::Opencode, Exposure::Masked)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert_eq!(
        err,
        "MCP server 'local': opencode cannot set a working directory (cwd) for a local server"
    );
}

/// A disabled server keeps its flag in the formats that have one and is left
/// out, with a note naming it, of those that do not.
#[test]
fn disabled_servers_are_flagged_or_left_out_with_a_note() {
    let servers = servers(
        r#"{"on": {"command": "x"}, "off": {"url": "https://h.example/mcp", "disabled": true}}"#,
    );
    for format in Format::all() {
        let config = tether_harness::export_config(&servers, format, Exposure::Masked)
            .unwrap_or_else(|e| panic!("{format}: {e}"));
        let text = config.to_text();
        let key = format.harness().servers_key;
        let document = parsed(format, &text);
        let off = &document[key]["off"];
        let expected = match format {
            Format::Json | Format::Windsurf => Some(("disabled", true)),
            Format::Opencode | Format::Codex | Format::Zed | Format::Goose => {
                Some(("enabled", false))
            }
            // Claude Desktop leaves the remote `off` out for being remote (another note).
            Format::ClaudeDesktop => continue,
            Format::Claude
            | Format::Gemini
            | Format::Vscode
            | Format::Cursor
            | Format::Copilot
            | Format::Antigravity => None,
        };
        match expected {
            Some((flag, value)) => {
                assert_eq!(off[flag], value, "{format}: {text}");
                assert!(config.notes().is_empty(), "{format}: {:?}", config.notes());
            }
            None => {
                assert!(off.is_null(), "{format} kept the disabled server: {text}");
                assert_eq!(
                    config.notes(),
                    [format!(
                        "MCP server 'off' is disabled and {format} has no flag for that: left out of the {format} config"
                    )]
                );
            }
        }
        assert!(!document[key]["on"].is_null(), "{format}: {text}");
        assert!(
            document[key]["on"].get("disabled").is_none(),
            "{format}: {text}"
        );
    }
}

/// A masked export counts the fields it masked (the secret in args[2], the
/// token env entry, the Authorization header), and shows the plain LOG_LEVEL.
#[test]
fn masked_exports_count_what_they_mask() {
    let servers = servers(CONFIG);
    for format in Format::all() {
        let masked = tether_harness::export_config(&servers, format, Exposure::Masked)
            .unwrap_or_else(|e| panic!("{format}: {e}"));
        // Claude Desktop leaves the remote server (and its header) out.
        let expected = if format == Format::ClaudeDesktop {
            2
        } else {
            3
        };
        assert_eq!(masked.masked(), expected, "{format}");
        assert!(masked.to_text().contains("info"), "{format}");
        let real = tether_harness::export_config(&servers, format, Exposure::Real)
            .unwrap_or_else(|e| panic!("{format}: {e}"));
        assert_eq!(real.masked(), 0, "{format}");
    }
}

/// Tool filters and per-server options go into the formats that have them;
/// the rest is named in a note.
#[test]
fn server_options_are_exported_where_the_format_has_them() {
    // Gemini CLI's fields (docs/tools/mcp-server.md) plus Roo's `alwaysAllow` and Codex's
    // startup timeout.
    let servers = servers(
        r#"{"gh": {"command": "npx", "includeTools": ["get_me", "list_issues"], "excludeTools": ["delete_repo"],
                   "trust": false, "timeout": 30000, "alwaysAllow": ["get_me"], "startup_timeout_sec": 20}}"#,
    );
    let all_lost = "includeTools, excludeTools, alwaysAllow, trust, timeout, startup timeout";
    let expected: [(Format, serde_json::Value, &str); 13] = [
        (
            Format::Json,
            serde_json::json!({"includeTools": ["get_me", "list_issues"], "excludeTools": ["delete_repo"],
                               "alwaysAllow": ["get_me"], "trust": false, "timeout": 30000, "startup_timeout_ms": 20000}),
            "",
        ),
        (
            Format::Gemini,
            serde_json::json!({"includeTools": ["get_me", "list_issues"], "excludeTools": ["delete_repo"],
                               "trust": false, "timeout": 30000}),
            "alwaysAllow, startup timeout",
        ),
        (
            Format::Codex,
            serde_json::json!({"enabled_tools": ["get_me", "list_issues"], "disabled_tools": ["delete_repo"],
                               "tool_timeout_sec": 30, "startup_timeout_sec": 20}),
            "alwaysAllow, trust",
        ),
        (
            Format::Opencode,
            serde_json::json!({"timeout": 20000}),
            "includeTools, excludeTools, alwaysAllow, trust, timeout",
        ),
        (
            Format::Claude,
            serde_json::json!({}),
            "includeTools, excludeTools, alwaysAllow, trust, timeout, startup timeout",
        ),
        (
            Format::Vscode,
            serde_json::json!({}),
            "includeTools, excludeTools, alwaysAllow, trust, timeout, startup timeout",
        ),
        (
            Format::Cursor,
            serde_json::json!({}),
            "includeTools, excludeTools, alwaysAllow, trust, timeout, startup timeout",
        ),
        (
            Format::Copilot,
            serde_json::json!({"tools": ["get_me", "list_issues"], "timeout": 30000}),
            "excludeTools, alwaysAllow, trust, startup timeout",
        ),
        (Format::ClaudeDesktop, serde_json::json!({}), all_lost),
        (Format::Windsurf, serde_json::json!({}), all_lost),
        (Format::Zed, serde_json::json!({}), all_lost),
        // Goose's own `timeout` (seconds) is written as the default, 300, not from the option.
        (Format::Goose, serde_json::json!({"timeout": 300}), all_lost),
        (Format::Antigravity, serde_json::json!({}), all_lost),
    ];
    for (format, fields, lost) in expected {
        let config = tether_harness::export_config(&servers, format, Exposure::Real)
            .unwrap_or_else(|e| panic!("{format}: {e}"));
        let text = config.to_text();
        let document = parsed(format, &text);
        let server = &document[format.harness().servers_key]["gh"];
        let option_keys = [
            "includeTools",
            "excludeTools",
            "alwaysAllow",
            "trust",
            "timeout",
            "startup_timeout_ms",
            "enabled_tools",
            "disabled_tools",
            "tool_timeout_sec",
            "startup_timeout_sec",
            "tools",
        ];
        let written: serde_json::Map<String, serde_json::Value> = server
            .as_object()
            .map(|o| {
                o.iter()
                    .filter(|(k, _)| option_keys.contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(
            serde_json::Value::Object(written),
            fields,
            "{format}: {text}"
        );
        let notes: Vec<String> = if lost.is_empty() {
            Vec::new()
        } else {
            vec![format!(
                "MCP server 'gh': {format} has no place for {lost}: left out of the {format} config"
            )]
        };
        assert_eq!(config.notes(), notes, "{format}");
    }
}

/// A remote server's `headersHelper` goes to Claude Code as the one string it runs with a
/// shell (quoted back, so the words stay the words); the other formats have no place for it.
#[test]
fn a_headers_helper_is_exported_to_claude_code_only() {
    let servers = servers(
        r#"{"web": {"url": "https://h.example/mcp", "headersHelper": ["/opt/get token", "--for", "$HOME"]}}"#,
    );
    let config = tether_harness::export_config(&servers, Format::Claude, Exposure::Real)
        .unwrap_or_else(|e| panic!("{e}"));
    let document = parsed(Format::Claude, &config.to_text());
    let line = document["mcpServers"]["web"]["headersHelper"]
        .as_str()
        .unwrap_or_else(|| panic!("{document}"));
    assert_eq!(
        shlex::split(line),
        Some(vec![
            "/opt/get token".to_owned(),
            "--for".to_owned(),
            "$HOME".to_owned()
        ])
    );
    assert!(config.notes().is_empty(), "{:?}", config.notes());
    for format in [Format::Gemini, Format::Codex, Format::Vscode] {
        let config = tether_harness::export_config(&servers, format, Exposure::Real)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!config.to_text().contains("/opt/get token"), "{format}");
        assert_eq!(
            config.notes(),
            [format!(
                "MCP server 'web': {format} has no place for headersHelper: left out of the {format} config"
            )]
        );
    }
}

/// The export-only formats, parsed and checked against the shapes their documentation gives
/// (no CLI of theirs can be installed here): Claude Desktop (`mcpServers`, local servers only),
/// Windsurf and Antigravity (`serverUrl` for a remote server), Zed (`context_servers`, a local
/// server `"source": "custom"`), Goose (`extensions`, YAML: the JSON written is a YAML flow
/// mapping) and Copilot CLI (`"type": "local"`, `tools`).
#[test]
fn new_formats_have_their_documented_shapes() {
    let shapes = servers(
        r#"{"loc": {"command": "node", "args": ["s.js"], "env": {"K": "v"}},
            "web": {"url": "https://h.example/mcp", "headers": {"X-Key": "k"}},
            "old": {"url": "https://h.example/sse", "type": "sse"}}"#,
    );
    let export = |format: Format| {
        let config = tether_harness::export_config(&shapes, format, Exposure::Real)
            .unwrap_or_else(|e| panic!("{format}: {e}"));
        (parsed(format, &config.to_text()), config.notes().to_vec())
    };
    let local = serde_json::json!({"command": "node", "args": ["s.js"], "env": {"K": "v"}});

    let (desktop, notes) = export(Format::ClaudeDesktop);
    assert_eq!(desktop["mcpServers"]["loc"], local);
    assert_eq!(desktop["mcpServers"].as_object().map(|m| m.len()), Some(1));
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(
        notes[0].contains("'web'") && notes[0].contains("Connectors"),
        "{notes:?}"
    );

    for format in [Format::Windsurf, Format::Antigravity] {
        let (doc, notes) = export(format);
        assert!(notes.is_empty(), "{format}: {notes:?}");
        assert_eq!(doc["mcpServers"]["loc"], local, "{format}");
        assert_eq!(
            doc["mcpServers"]["web"],
            serde_json::json!({"serverUrl": "https://h.example/mcp", "headers": {"X-Key": "k"}}),
            "{format}"
        );
        assert_eq!(
            doc["mcpServers"]["old"]["serverUrl"],
            "https://h.example/sse"
        );
    }

    let (zed, _) = export(Format::Zed);
    assert_eq!(
        zed["context_servers"]["loc"],
        serde_json::json!({"source": "custom", "command": "node", "args": ["s.js"], "env": {"K": "v"}})
    );
    assert_eq!(
        zed["context_servers"]["web"],
        serde_json::json!({"url": "https://h.example/mcp", "headers": {"X-Key": "k"}})
    );

    let (goose, _) = export(Format::Goose);
    let extensions = &goose["extensions"];
    assert_eq!(
        extensions["loc"],
        serde_json::json!({"enabled": true, "type": "stdio", "name": "loc", "cmd": "node",
                           "args": ["s.js"], "envs": {"K": "v"}, "timeout": 300})
    );
    assert_eq!(extensions["web"]["type"], "streamable_http");
    assert_eq!(extensions["web"]["uri"], "https://h.example/mcp");
    assert_eq!(
        extensions["web"]["headers"],
        serde_json::json!({"X-Key": "k"})
    );
    assert_eq!(extensions["old"]["type"], "sse");
    assert_eq!(extensions["old"]["name"], "old");

    let (copilot, _) = export(Format::Copilot);
    assert_eq!(
        copilot["mcpServers"]["loc"],
        serde_json::json!({"type": "local", "command": "node", "args": ["s.js"],
                           "env": {"K": "v"}, "tools": ["*"]})
    );
    assert_eq!(copilot["mcpServers"]["web"]["type"], "http");
    assert_eq!(copilot["mcpServers"]["old"]["type"], "sse");

    // Goose's SSE extension has no headers; a working directory has no place in these formats.
    let sse =
        servers(r#"{"s": {"url": "https://h.example/sse", "type": "sse", "headers": {"A": "b"}}}"#);
    let err = tether_harness::export(&sse, Format::Goose, Exposure::Masked)
        .expect_err("goose SSE headers");
    assert!(
        err.to_string().contains("send headers to an SSE server"),
        "{err}"
    );
    let cwd = servers(r#"{"c": {"command": "x", "cwd": "/tmp"}}"#);
    for format in [
        Format::Copilot,
        Format::ClaudeDesktop,
        Format::Windsurf,
        Format::Zed,
        Format::Goose,
        Format::Antigravity,
    ] {
        let err = tether_harness::export(&cwd, format, Exposure::Masked).expect_err("cwd");
        assert!(
            err.to_string().contains("working directory"),
            "{format}: {err}"
        );
    }
}
