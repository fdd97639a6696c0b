//! Configs as users paste them from other tools' docs, end to end through `tether`.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support::{Sandbox, config, json_str, server_json, text};

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
        .expect("running the command");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
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
        .expect("running the command");
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
        .expect("running the command");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let exported: Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(exported["mcp"]["off"]["enabled"], json!(false));
    assert_eq!(exported["mcp"]["on"]["enabled"], json!(true));

    let out = sandbox
        .tether(&["export", "--mcp", spec, "--format", "claude"])
        .output()
        .expect("running the command");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let exported: Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert!(exported["mcpServers"]["off"].is_null(), "{exported}");
    assert!(
        text(&out.stderr).contains(
            "note: MCP server 'off' is disabled and claude has no flag for that: left out of the claude config"
        ),
        "{}",
        text(&out.stderr)
    );
}

/// Export to stdout masks by provenance (a secret, an environment value, a
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
        .expect("running the command");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(!stdout.contains("SENTINEL"), "{stdout}");
    let exported: Value = serde_json::from_str(&stdout).expect("stdout is JSON");
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
        .expect("running the command");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("(1 server, mode 0600, real values)"),
        "{}",
        text(&out.stderr)
    );
}

/// A field tether does not use is warned about once, though the spec is
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
        .expect("running the command");
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
        .expect("running the command");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("Duplicate MCP server name 'npx' (from inline spec #1 and inline spec #2): rename one of them (a single-server spec is named by its \"name\" field"),
        "{}",
        text(&out.stderr)
    );
}

/// The snippet corpus: MCP configs in the shapes projects publish (sources in
/// `tests/cli/snippets/SOURCES.md`), each with the values the run gives it.
const SNIPPETS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cli/snippets");

/// Values a snippet's secrets and environment references take: each holds a marker that must
/// never reach a masked export.
const SNIPPET_ENV: [(&str, &str); 5] = [
    ("SNIPPET_API_KEY", "key-SENTINEL"),
    ("SNIPPET_AUTH_TOKEN", "auth-SENTINEL"),
    ("GITHUB_MCP_PAT", "pat-SENTINEL"),
    ("EXTERNAL_API_KEY", "ext-SENTINEL"),
    ("DB_CONNECTION_STRING", "postgres://u:db-SENTINEL@h/db"),
];

/// What a format refuses in a snippet, by design (file, format, the error's words).
const REFUSED: [(&str, &str, &str); 2] = [
    (
        "claude-code-mcp.json",
        "codex",
        "codex cannot connect to an SSE server",
    ),
    (
        "gemini-settings.jsonc",
        "opencode",
        "opencode cannot set a working directory",
    ),
];

/// Formats with no off switch: a disabled server is left out of them.
const NO_DISABLED_FLAG: [&str; 4] = ["claude", "gemini", "vscode", "cursor"];

/// Every snippet goes through `export` for every format: it parses,
/// holds every server (a disabled one only where the format can say so), and shows no secret.
#[test]
fn published_snippets_export_to_every_format() {
    let sandbox = Sandbox::new();
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(SNIPPETS)
        .unwrap_or_else(|e| panic!("{SNIPPETS}: {e}"))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext != "md"))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "{files:?}");
    let formats = [
        "json", "claude", "codex", "gemini", "opencode", "vscode", "cursor",
    ];
    let mut checked = 0;
    for file in &files {
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let snippet = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{name}: {e}"));
        // The servers and which are disabled, from tether's own reading of the snippet.
        let own = sandbox
            .tether(&[
                "export",
                "--mcp",
                &file.to_string_lossy(),
                "--format",
                "json",
            ])
            .args(["--secret", "github_mcp_pat=env:GITHUB_MCP_PAT"])
            .envs(SNIPPET_ENV)
            .output()
            .expect("running the command");
        assert_eq!(own.status.code(), Some(0), "{name}: {}", text(&own.stderr));
        let own: Value = serde_json::from_slice(&own.stdout).expect("stdout is JSON");
        let servers: Vec<(String, bool)> = own["mcpServers"]
            .as_object()
            .map(|map| {
                map.iter()
                    .map(|(k, v)| (k.clone(), v["disabled"] == json!(true)))
                    .collect()
            })
            .unwrap_or_default();
        assert!(!servers.is_empty(), "{name}: no server in {snippet}");
        for format in formats {
            let out = sandbox
                .tether(&[
                    "export",
                    "--mcp",
                    &file.to_string_lossy(),
                    "--format",
                    format,
                ])
                .args(["--secret", "github_mcp_pat=env:GITHUB_MCP_PAT"])
                .envs(SNIPPET_ENV)
                .output()
                .expect("running the command");
            let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
            for shown in [&stdout, &stderr] {
                assert!(
                    !shown.contains("SENTINEL") && !shown.contains("SNIPPET-PW"),
                    "{name} as {format} shows a secret:\n{shown}"
                );
            }
            if let Some((_, _, words)) = REFUSED
                .iter()
                .find(|(file, refused, _)| *file == name && *refused == format)
            {
                assert_eq!(out.status.code(), Some(2), "{name} as {format}: {stderr}");
                assert!(stderr.contains(words), "{name} as {format}: {stderr}");
                continue;
            }
            assert_eq!(out.status.code(), Some(0), "{name} as {format}: {stderr}");
            let document: Value = if format == "codex" {
                let table: toml::Table =
                    toml::from_str(&stdout).unwrap_or_else(|e| panic!("{name}: {e}\n{stdout}"));
                serde_json::to_value(table).expect("a TOML table as JSON")
            } else {
                serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{name} as {format}: {e}"))
            };
            let map = document
                .as_object()
                .and_then(|root| root.values().find_map(Value::as_object))
                .unwrap_or_else(|| panic!("{name} as {format}: no server map in {stdout}"));
            for (server, disabled) in &servers {
                let left_out = *disabled && NO_DISABLED_FLAG.contains(&format);
                assert_eq!(
                    map.contains_key(server),
                    !left_out,
                    "{name} as {format}: server '{server}'\n{stdout}"
                );
                if left_out {
                    assert!(
                        stderr.contains(&format!("note: MCP server '{server}' is disabled")),
                        "{name} as {format}: {stderr}"
                    );
                }
            }
            checked += 1;
        }
    }
    eprintln!(
        "{checked} snippet exports checked ({} snippets)",
        files.len()
    );
}

/// Tool filters with a real server from the registry: a Gemini-style JSONC file whose
/// command is a bare `$VAR` and which excludes `get-env`: `test` lists the other tools only and
/// `call` refuses the excluded one.
#[test]
fn gemini_style_config_filters_a_real_servers_tools() {
    let Some(bin) = tether_testkit::server_everything() else {
        return;
    };
    let sandbox = Sandbox::new();
    let file = sandbox.write(
        "settings.json",
        r#"// ~/.gemini/settings.json
{
  "mcpServers": {
    "everything": {
      "command": "$SNIPPET_EVERYTHING",
      "args": ["stdio"],
      "excludeTools": ["get-env"],
    },
  },
}
"#,
    );
    let out = sandbox
        .tether(&["test", "--mcp", &file, "--json"])
        .env("SNIPPET_EVERYTHING", &bin)
        .output()
        .expect("running the command");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    let tools: Vec<&str> = report["servers"][0]["tools"]
        .as_array()
        .map(|tools| tools.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    assert!(tools.contains(&"echo"), "{tools:?}");
    assert!(!tools.contains(&"get-env"), "{tools:?}");

    let out = sandbox
        .tether(&["call", "--mcp", &file, "everything", "get-env"])
        .env("SNIPPET_EVERYTHING", &bin)
        .output()
        .expect("running the command");
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("the server's config leaves this tool out"),
        "{}",
        text(&out.stderr)
    );
}

/// On a terminal, a VS Code input no `--secret` gave is asked for with its
/// description, the typing hidden when `password: true` (as VS Code does); run under `script`
/// for a real pseudo-terminal.
#[test]
fn missing_vscode_inputs_are_prompted_for_on_a_terminal() {
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        tether_testkit::missing("util-linux `script`", "it gives tether a terminal");
        return;
    }
    let sandbox = Sandbox::new();
    let file = sandbox.write(
        "mcp.json",
        r#"{"inputs": [{"type": "promptString", "id": "tok", "description": "API token", "password": true},
                       {"type": "promptString", "id": "region", "description": "Region"}],
            "servers": {"s": {"command": "x", "args": ["--region=${input:region}"], "env": {"API_TOKEN": "${input:tok}"}}}}"#,
    );
    let tether = assert_cmd::cargo::cargo_bin("tether");
    let command = format!(
        "{} export --mcp {file} --format json --show-secrets",
        tether.display()
    );
    let mut child = std::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .current_dir(sandbox.path(""))
        .env("TETHER_HOME", sandbox.home())
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("starting script");
    let mut stdin = child.stdin.take().expect("script's stdin is piped");
    let mut stdout = child.stdout.take().expect("script's stdout is piped");
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    let reader = {
        let seen = std::sync::Arc::clone(&seen);
        std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            while let Ok(n) = std::io::Read::read(&mut stdout, &mut buffer) {
                if n == 0 {
                    break;
                }
                seen.lock()
                    .expect("transcript lock")
                    .extend_from_slice(&buffer[..n]);
            }
        })
    };
    // Each answer once its prompt is up, and a hidden one once tether's terminal has echo
    // off (the prompt is written just before): typing that comes earlier would be echoed.
    let wait_for = |what: &str, ready: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !ready() {
            assert!(
                std::time::Instant::now() < deadline,
                "no {what}: {}",
                text(&seen.lock().expect("transcript lock"))
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    };
    for (prompt, answer, hidden) in [
        ("API token (tok): ", "typed-SENTINEL\n", true),
        ("Region (region): ", "eu-west\n", false),
    ] {
        wait_for(prompt, &|| {
            text(&seen.lock().expect("transcript lock")).contains(prompt)
        });
        if hidden {
            wait_for("echo off", &|| {
                tether_testkit::terminal_echo_is_off(&tether, &file)
            });
        }
        std::io::Write::write_all(&mut stdin, answer.as_bytes()).expect("answering a prompt");
    }
    let status = child.wait().expect("waiting for script");
    reader.join().expect("the transcript reader");
    drop(stdin);
    assert!(status.success(), "{status}");
    let transcript = text(&seen.lock().expect("transcript lock"));
    assert!(transcript.contains("API token (tok): "), "{transcript}");
    assert!(
        transcript.contains("Region (region): eu-west"),
        "{transcript}"
    );
    // The hidden answer shows up once: in the exported config (--show-secrets), never echoed.
    assert_eq!(
        transcript.matches("typed-SENTINEL").count(),
        1,
        "{transcript}"
    );
    assert!(
        transcript.contains(r#""API_TOKEN": "typed-SENTINEL""#),
        "{transcript}"
    );
    assert!(transcript.contains(r#""--region=eu-west""#), "{transcript}");
}

/// An export to VS Code keeps each `${input:ID}` as a reference and
/// writes its `inputs` entry back (`promptString`, `password: true`, the description kept), so
/// VS Code prompts for it; no value is read for it, even when `--secret` gives one, and on a
/// terminal nothing is asked. An input no server uses is left out. The file written reads back
/// as a spec whose inputs `--secret` fills.
#[test]
fn a_vscode_export_writes_inputs_back_instead_of_values() {
    let sandbox = Sandbox::new();
    let file = sandbox.write(
        "mcp.json",
        r#"{"inputs": [{"type": "promptString", "id": "tok", "description": "API token", "password": true},
                       {"type": "promptString", "id": "region"},
                       {"type": "promptString", "id": "unused", "description": "never used"}],
            "servers": {"s": {"command": "x", "args": ["--region=${input:region}"], "env": {"API_TOKEN": "${input:tok}", "OTHER": "{{PLAIN}}"}},
                        "r": {"type": "http", "url": "https://mcp.example/mcp", "headers": {"Authorization": "Bearer ${input:tok}"}}}}"#,
    );
    let expected_inputs = json!([
        {"type": "promptString", "id": "tok", "description": "API token", "password": true},
        {"type": "promptString", "id": "region", "password": true},
    ]);
    let out_file = sandbox.path("exported.json");
    for output in [None, Some(&out_file)] {
        let mut args = vec![
            "export",
            "--mcp",
            &file,
            "--format",
            "vscode",
            "--secret",
            "tok=env:TOK_SOURCE",
            "--secret",
            "PLAIN=env:PLAIN_SOURCE",
        ];
        let path = output.map(|p| p.to_string_lossy().into_owned());
        if let Some(path) = &path {
            args.extend(["-o", path]);
        } else {
            args.push("--show-secrets");
        }
        let out = sandbox
            .tether(&args)
            .env("TOK_SOURCE", "tok-SENTINEL")
            .env("PLAIN_SOURCE", "plain-value")
            .output()
            .expect("running tether");
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let written = match output {
            Some(path) => std::fs::read_to_string(path).expect("reading the exported file"),
            None => text(&out.stdout),
        };
        assert!(!written.contains("tok-SENTINEL"), "{written}");
        let exported: Value = serde_json::from_str(&written).expect("parsing the export");
        assert_eq!(exported["inputs"], expected_inputs, "{written}");
        let server = &exported["servers"]["s"];
        assert_eq!(server["env"]["API_TOKEN"], "${input:tok}", "{written}");
        assert_eq!(server["env"]["OTHER"], "plain-value", "{written}");
        assert_eq!(server["args"][0], "--region=${input:region}", "{written}");
        assert_eq!(
            exported["servers"]["r"]["headers"]["Authorization"], "Bearer ${input:tok}",
            "{written}"
        );
        // No placeholder is reported unfilled: VS Code fills them.
        assert!(
            !text(&out.stderr).contains("which no secret fills"),
            "{}",
            text(&out.stderr)
        );
    }
    // The export is a spec again: its inputs are secrets `--secret` fills.
    let out = sandbox
        .tether(&[
            "export",
            "--mcp",
            &out_file.to_string_lossy(),
            "--format",
            "json",
            "--show-secrets",
            "--secret",
            "tok=env:TOK_SOURCE",
            "--secret",
            "region=env:REGION_SOURCE",
        ])
        .env("TOK_SOURCE", "tok-SENTINEL")
        .env("REGION_SOURCE", "eu-west")
        .output()
        .expect("running tether");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let again: Value = serde_json::from_slice(&out.stdout).expect("parsing the export");
    assert_eq!(again["mcpServers"]["s"]["env"]["API_TOKEN"], "tok-SENTINEL");
    assert_eq!(again["mcpServers"]["s"]["args"][0], "--region=eu-west");
}

/// Codex's own `config.toml`, written by the real `codex mcp add`
/// in a temporary home, is a `--mcp` file: `test` starts its stdio server, and its remote entry's
/// `bearer_token_env_var` becomes an `Authorization` header from the environment.
#[test]
fn a_config_toml_written_by_codex_is_a_spec() {
    let Some(codex) = tether_testkit::npm_bin("codex") else {
        return;
    };
    let sandbox = Sandbox::new();
    let codex_home = sandbox.path("codex-home");
    std::fs::create_dir_all(&codex_home).expect("creating the Codex home");
    let server = crate::support::test_server_bin();
    let add = |args: &[&str]| {
        let out = std::process::Command::new(&codex)
            .args(["mcp", "add"])
            .args(args)
            .env("CODEX_HOME", &codex_home)
            .env("HOME", &codex_home)
            .output()
            .expect("running the command");
        assert!(out.status.success(), "codex mcp add: {}", text(&out.stderr));
    };
    add(&[
        "tester",
        "--env",
        "LOG_LEVEL=info",
        "--",
        &server.to_string_lossy(),
    ]);
    add(&[
        "remote",
        "--url",
        "http://127.0.0.1:9/mcp",
        "--bearer-token-env-var",
        "T11_REMOTE_TOKEN",
    ]);
    let config = codex_home.join("config.toml");
    let config = config.to_string_lossy();

    let out = sandbox
        .tether(&[
            "export",
            "--mcp",
            &config,
            "--format",
            "json",
            "--show-secrets",
        ])
        .env("T11_REMOTE_TOKEN", "tok-1")
        .output()
        .expect("running the command");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let exported: Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(
        exported["mcpServers"]["tester"]["env"],
        json!({"LOG_LEVEL": "info"})
    );
    assert_eq!(
        exported["mcpServers"]["remote"]["headers"],
        json!({"Authorization": "Bearer tok-1"})
    );

    // Only the stdio server: the remote one points at a closed port.
    let out = sandbox
        .tether(&["export", "--mcp", &config, "--format", "codex"])
        .output()
        .expect("running the command");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = sandbox
        .tether(&["test", "--mcp", &config, "--json"])
        .env("T11_REMOTE_TOKEN", "tok-1")
        .output()
        .expect("running the command");
    let report: Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(report["servers"][0]["name"], "tester");
    assert_eq!(report["servers"][0]["status"], "ready", "{report}");
    assert_eq!(report["servers"][1]["status"], "failed", "{report}");
}

/// Checked against the real harnesses: what tether exports for a
/// disabled server and for tool filters and timeouts is what Codex and opencode read.
#[test]
fn real_codex_and_opencode_read_the_exported_flags_and_options() {
    let (Some(codex), Some(opencode)) = (
        tether_testkit::npm_bin("codex"),
        tether_testkit::npm_bin("opencode"),
    ) else {
        return;
    };
    let sandbox = Sandbox::new();
    let spec = r#"{"off": {"command": "/bin/true", "disabled": true, "startup_timeout_sec": 12},
                   "on": {"command": "/bin/true", "includeTools": ["x"], "excludeTools": ["y"], "timeout": 30500}}"#;

    let codex_home = sandbox.path("codex-home");
    std::fs::create_dir_all(&codex_home).expect("creating the Codex home");
    let config = codex_home.join("config.toml");
    let out = sandbox
        .tether(&["export", "--mcp", spec, "--format", "codex", "-o"])
        .arg(&config)
        .output()
        .expect("running the command");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let listed = crate::support::codex_mcp_list(&codex, &codex_home);
    let server = |name: &str| {
        listed
            .as_array()
            .and_then(|servers| servers.iter().find(|s| s["name"] == name))
            .cloned()
            .unwrap_or_else(|| panic!("codex does not list {name}: {listed}"))
    };
    assert_eq!(server("off")["enabled"], json!(false));
    assert_eq!(server("off")["startup_timeout_sec"], json!(12.0));
    assert_eq!(server("on")["enabled"], json!(true));
    assert_eq!(server("on")["tool_timeout_sec"], json!(30.5));

    let out = sandbox
        .tether(&["export", "--mcp", spec, "--format", "opencode"])
        .output()
        .expect("running the command");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = crate::support::opencode_in(&opencode, &sandbox.path("opencode-home"))
        .args(["mcp", "list"])
        .env("OPENCODE_CONFIG_CONTENT", text(&out.stdout))
        .output()
        .expect("running opencode mcp list");
    let listing = text(&out.stdout) + &text(&out.stderr);
    assert!(
        listing
            .lines()
            .any(|line| line.contains(" off ") && line.contains("disabled")),
        "{listing}"
    );
    assert!(
        !listing
            .lines()
            .any(|line| line.contains(" on ") && line.contains("disabled")),
        "{listing}"
    );
}

/// An `--mcp` error says which value failed, by position (the value may hold
/// a secret, so it is not shown).
#[test]
fn an_mcp_error_names_the_value_by_position() {
    let sandbox = Sandbox::new();
    let out = sandbox
        .tether(&[
            "export",
            "--mcp",
            r#"{"a": {"command": "x"}}"#,
            "--mcp",
            r#"{"b": {"command": "sk-SENTINEL",, }}"#,
            "--format",
            "json",
        ])
        .output()
        .expect("running the command");
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "error: --mcp value #2 (of 2, inline JSON): invalid JSON at line 1, column 33"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("SENTINEL"), "{stderr}");
}

/// A stdio server gets only a short allowlist of tether's environment;
/// `--pass-env NAME` and a server's `passEnv` pass more, the values stay masked in output, and
/// Codex's export forwards them with `env_vars`.
#[test]
fn pass_env_gives_a_stdio_server_more_of_the_environment() {
    let sandbox = Sandbox::new();
    let bin = crate::support::test_server_bin();
    let spec = format!(
        r#"{{"srv": {{"command": {}}}, "own": {{"command": {}, "passEnv": ["T11_OWN"]}}}}"#,
        json_str(&bin.to_string_lossy()),
        json_str(&bin.to_string_lossy()),
    );
    let check = |server: &str, name: &str, extra: &[&str]| -> String {
        let arguments = format!(r#"{{"name":"{name}"}}"#);
        let mut args = vec!["call", "--mcp", spec.as_str()];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[server, "env_check", "--args", &arguments]);
        let out = sandbox
            .tether(&args)
            .env("T11_PASSED", "passed-SENTINEL")
            .env("T11_OWN", "own-SENTINEL")
            .output()
            .expect("running the command");
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert!(!text(&out.stderr).contains("SENTINEL"));
        text(&out.stdout)
    };
    assert!(check("srv", "T11_PASSED", &[]).contains(r#""set":false"#));
    assert!(check("srv", "T11_PASSED", &["--pass-env", "T11_PASSED"]).contains(r#""set":true"#));
    assert!(check("own", "T11_OWN", &[]).contains(r#""set":true"#));
    assert!(check("srv", "T11_OWN", &[]).contains(r#""set":false"#));

    let out = sandbox
        .tether(&["export", "--mcp", &spec, "--format", "codex"])
        .args(["--pass-env", "T11_PASSED"])
        .output()
        .expect("running the command");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let table: toml::Table = toml::from_str(&text(&out.stdout)).expect("the codex export is TOML");
    assert_eq!(
        table["mcp_servers"]["own"]["env_vars"],
        toml::Value::Array(vec!["T11_OWN".into(), "T11_PASSED".into()])
    );
}

/// `--mcp NAME:` reads the configs a harness keeps in its standard places,
/// here written by the real `claude mcp add` (user, project and local scope), `gemini mcp add` and
/// `codex mcp add` in a temporary home (opencode, VS Code and Cursor files by hand: their
/// commands are interactive or absent), and `test` starts every server in them.
#[test]
fn harness_shorthands_read_what_the_real_clis_wrote() {
    let (Some(claude), Some(gemini), Some(codex)) = (
        tether_testkit::npm_bin("claude"),
        tether_testkit::npm_bin("gemini"),
        tether_testkit::npm_bin("codex"),
    ) else {
        return;
    };
    let sandbox = Sandbox::new();
    let home = sandbox.path("home");
    let project = sandbox.path("");
    std::fs::create_dir_all(home.join(".codex")).expect("creating the home");
    let server = crate::support::test_server_bin();
    let server = server.to_string_lossy();
    let add = |program: &std::path::Path, args: &[&str]| {
        let out = std::process::Command::new(program)
            .args(args)
            .current_dir(&project)
            .env("HOME", &home)
            .env("CODEX_HOME", home.join(".codex"))
            .env_remove("GEMINI_CLI_HOME")
            .output()
            .expect("running a harness's mcp add");
        assert!(
            out.status.success(),
            "{}: {}",
            program.display(),
            text(&out.stderr)
        );
    };
    add(
        &claude,
        &["mcp", "add", "--scope", "user", "c-user", "--", &server],
    );
    add(
        &claude,
        &[
            "mcp",
            "add",
            "--scope",
            "project",
            "c-project",
            "--",
            &server,
        ],
    );
    // The default scope, local: kept for this directory inside ~/.claude.json.
    add(&claude, &["mcp", "add", "c-local", "--", &server]);
    add(
        &gemini,
        &["mcp", "add", "--scope", "user", "g-user", &server],
    );
    add(&codex, &["mcp", "add", "x-user", "--", &server]);
    let by_hand = [
        (
            ".vscode/mcp.json",
            format!(
                r#"{{"servers": {{"v-project": {{"type": "stdio", "command": {}}}}}}}"#,
                json_str(&server)
            ),
        ),
        (
            ".cursor/mcp.json",
            format!(
                r#"{{"mcpServers": {{"cu-project": {{"command": {}}}}}}}"#,
                json_str(&server)
            ),
        ),
        (
            "opencode.json",
            format!(
                r#"{{"mcp": {{"o-project": {{"type": "local", "command": [{}]}}}}}}"#,
                json_str(&server)
            ),
        ),
    ];
    // Claude Code starts a project's .mcp.json server only once approved; so does claude:.
    let claude_json = home.join(".claude.json");
    let mut state: Value =
        serde_json::from_str(&std::fs::read_to_string(&claude_json).expect("~/.claude.json"))
            .expect("~/.claude.json is JSON");
    for (_, entry) in state["projects"]
        .as_object_mut()
        .expect("a project entry")
        .iter_mut()
    {
        entry["enabledMcpjsonServers"] = serde_json::json!(["c-project"]);
    }
    std::fs::write(&claude_json, state.to_string()).expect("approving c-project");
    for (path, content) in &by_hand {
        let path = project.join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("creating a folder");
        std::fs::write(&path, content).expect("writing a config by hand");
    }
    for (shorthand, names) in [
        ("claude:", vec!["c-user", "c-project", "c-local"]),
        ("gemini:", vec!["g-user"]),
        ("codex:", vec!["x-user"]),
        ("vscode:", vec!["v-project"]),
        ("cursor:", vec!["cu-project"]),
        ("opencode:", vec!["o-project"]),
    ] {
        let out = sandbox
            .tether(&["test", "--mcp", shorthand, "--json"])
            .env("HOME", &home)
            .env("CODEX_HOME", home.join(".codex"))
            .env_remove("GEMINI_CLI_HOME")
            .output()
            .expect("running the command");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{shorthand}: {}",
            text(&out.stderr)
        );
        let report: Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
        let ready: Vec<&str> = report["servers"]
            .as_array()
            .map(|servers| {
                servers
                    .iter()
                    .filter(|s| s["status"] == "ready")
                    .filter_map(|s| s["name"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(ready, names, "{shorthand}: {report}");
    }
    // A harness with nothing configured says where it looked.
    let out = sandbox
        .tether(&["test", "--mcp", "codex:"])
        .env("HOME", &home)
        .env("CODEX_HOME", sandbox.path("empty-codex-home"))
        .output()
        .expect("running the command");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("no MCP servers configured for Codex CLI (looked in"),
        "{}",
        text(&out.stderr)
    );
}

/// A cloned project's `.mcp.json` runs commands (and `headersHelper`s) on start: `claude:`
/// starts only the servers approved for the directory in `~/.claude.json`, as Claude Code does.
#[test]
fn claude_shorthand_starts_only_the_project_servers_claude_code_approved() {
    let sandbox = Sandbox::new();
    let home = sandbox.path("home");
    std::fs::create_dir_all(&home).expect("creating the home");
    let server = json_str(&crate::support::test_server_bin().to_string_lossy());
    let marker = sandbox.path("ran-rejected");
    let rejected = json_str(&format!("touch '{}'", marker.display()));
    sandbox.write(
        ".mcp.json",
        &format!(
            r#"{{"mcpServers": {{"approved": {{"command": {server}}},
                 "rejected": {{"command": "sh", "args": ["-c", {rejected}]}},
                 "unasked": {{"command": "sh", "args": ["-c", {rejected}]}}}}}}"#
        ),
    );
    let test = || {
        sandbox
            .tether(&["test", "--mcp", "claude:"])
            .env("HOME", &home)
            .output()
            .expect("running tether test")
    };
    // No ~/.claude.json: nothing approved.
    let out = test();
    assert_ne!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!marker.exists(), "an unapproved server ran");
    let project = sandbox
        .dir
        .path()
        .canonicalize()
        .expect("the project's path");
    let state = serde_json::json!({"projects": {project.to_string_lossy(): {
        "enabledMcpjsonServers": ["approved", "rejected"],
        "disabledMcpjsonServers": ["rejected"],
        "hasTrustDialogAccepted": false
    }}});
    std::fs::write(home.join(".claude.json"), state.to_string()).expect("~/.claude.json");
    let out = test();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!marker.exists(), "a rejected server ran");
    assert!(
        text(&out.stderr).contains("not starting rejected, unasked of"),
        "{}",
        text(&out.stderr)
    );
}

/// Gemini CLI with folder trust on reads no project settings in a folder it does not trust:
/// `gemini:` starts none of the project's `.gemini/settings.json` servers there (saying why),
/// the user's own still start, and once `~/.gemini/trustedFolders.json` trusts the folder the
/// project's start too.
#[test]
fn gemini_shorthand_starts_a_projects_servers_only_in_a_folder_gemini_trusts() {
    let sandbox = Sandbox::new();
    let home = sandbox.path("home");
    std::fs::create_dir_all(home.join(".gemini")).expect("~/.gemini");
    let server = json_str(&crate::support::test_server_bin().to_string_lossy());
    let marker = sandbox.path("ran-project-server");
    let touch = json_str(&format!("touch '{}'", marker.display()));
    std::fs::write(
        home.join(".gemini/settings.json"),
        format!(
            r#"{{"security": {{"folderTrust": {{"enabled": true}}}},
                 "mcpServers": {{"mine": {{"command": {server}}}}}}}"#
        ),
    )
    .expect("~/.gemini/settings.json");
    std::fs::create_dir_all(sandbox.path(".gemini")).expect("the project's .gemini");
    sandbox.write(
        ".gemini/settings.json",
        &format!(r#"{{"mcpServers": {{"cloned": {{"command": "sh", "args": ["-c", {touch}]}}}}}}"#),
    );
    let test = || {
        sandbox
            .tether(&["test", "--mcp", "gemini:"])
            .env("HOME", &home)
            .env_remove("GEMINI_CLI_HOME")
            .env_remove("GEMINI_CLI_TRUST_WORKSPACE")
            .env_remove("GEMINI_CLI_TRUSTED_FOLDERS_PATH")
            .env(
                "GEMINI_CLI_SYSTEM_SETTINGS_PATH",
                sandbox.path("no-system-settings.json"),
            )
            .output()
            .expect("running tether test")
    };
    let out = test();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!marker.exists(), "a server of an untrusted folder ran");
    assert!(text(&out.stdout).contains("mine"), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("Gemini CLI does not trust this folder"),
        "{}",
        text(&out.stderr)
    );
    let project = sandbox
        .dir
        .path()
        .canonicalize()
        .expect("the project's path");
    std::fs::write(
        home.join(".gemini/trustedFolders.json"),
        serde_json::json!({ project.to_string_lossy(): "TRUST_FOLDER" }).to_string(),
    )
    .expect("trustedFolders.json");
    let _ = test();
    assert!(marker.exists(), "the trusted folder's server did not start");
}
