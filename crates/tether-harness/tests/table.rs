//! The descriptor table: names, detection, and the structured config's edits and merges.

#![allow(
    clippy::expect_used,
    reason = "a test binary: helpers outside #[test] functions panic on setup failure too"
)]

use pretty_assertions::assert_eq;
use tether_config::{EmptyEnv, Exposure, Origin, RenderedServer, Secrets, parse_config};
use tether_harness::{
    Delivery, Format, HARNESSES, HarnessError, Syntax, detect, export_config,
    export_with_references,
};

fn servers(config: &str) -> Vec<RenderedServer> {
    let secrets: Secrets = [("T", "s3cret")].into_iter().collect();
    parse_config(config, Origin::User)
        .expect("parsing the test config")
        .servers
        .into_iter()
        .map(|s| s.into_installation().render(&secrets, &EmptyEnv))
        .collect()
}

#[test]
fn every_format_has_one_row_and_a_unique_name() {
    let names: Vec<&str> = Format::all().map(Format::name).collect();
    assert_eq!(
        names,
        [
            "json",
            "claude",
            "codex",
            "gemini",
            "opencode",
            "vscode",
            "cursor",
            "copilot",
            "claude-desktop",
            "windsurf",
            "zed",
            "goose",
            "antigravity"
        ]
    );
    for format in Format::all() {
        assert_eq!(format.harness().format, format);
        assert_eq!(Format::from_name(format.name()), Some(format));
    }
    assert_eq!(Format::from_name("emacs"), None);
}

#[test]
fn hand_off_targets_and_export_only_formats() {
    let targets: Vec<&str> = HARNESSES
        .iter()
        .filter(|h| h.run.is_some())
        .map(|h| h.name)
        .collect();
    assert_eq!(
        targets,
        ["claude", "codex", "gemini", "opencode", "copilot"]
    );
}

#[test]
fn only_gemini_cli_gets_the_gateway_by_default() {
    let by_default: Vec<&str> = HARNESSES
        .iter()
        .filter(|h| h.run.is_some_and(|run| run.gateway_by_default))
        .map(|h| h.name)
        .collect();
    assert_eq!(by_default, ["gemini"]);
    let gemini = Format::Gemini
        .harness()
        .run
        .expect("Gemini CLI is a hand-off target");
    assert!(gemini.gateway_by_default);
}

#[test]
fn only_vs_code_has_input_prompts() {
    let prompting: Vec<&str> = HARNESSES
        .iter()
        .filter(|h| h.input_prompts)
        .map(|h| h.name)
        .collect();
    assert_eq!(prompting, ["vscode"]);
}

#[test]
fn detection_uses_the_program_file_name() {
    let cases = [
        ("claude", Some(Format::Claude)),
        ("/opt/node_modules/.bin/codex", Some(Format::Codex)),
        ("./gemini", Some(Format::Gemini)),
        ("opencode", Some(Format::Opencode)),
        ("/usr/lib/node_modules/.bin/copilot", Some(Format::Copilot)),
        // Export-only formats are not programs.
        ("zed", None),
        ("goose", None),
        ("cursor", None),
        ("vscode", None),
        ("claude-wrapper", None),
        ("", None),
    ];
    for (program, expected) in cases {
        assert_eq!(detect(program).map(|h| h.format), expected, "{program}");
    }
}

#[test]
fn private_homes_are_only_for_harnesses_with_a_home_variable() {
    for harness in HARNESSES {
        if let Some(run) = harness.run
            && let Delivery::PrivateHome { env, .. } = run.delivery
        {
            assert!(
                tether_env::EnvVars::ALL.iter().any(|v| v.name == env),
                "{}: {env} is not in tether_env::EnvVars",
                harness.name
            );
        }
        let text = export_config(&[], harness.format, Exposure::Masked)
            .expect("exporting no servers")
            .to_text();
        match harness.syntax {
            Syntax::Json => assert!(text.starts_with('{'), "{}: {text}", harness.name),
            Syntax::Toml => assert!(!text.starts_with('{'), "{}: {text}", harness.name),
        }
    }
}

#[test]
fn merged_into_keeps_the_users_settings_and_replaces_their_servers() {
    let servers = servers(r#"{"ours": {"command": "srv", "env": {"K": "{{T}}"}}}"#);
    let gemini = export_with_references(&servers, Format::Gemini, true).expect("gemini");
    let merged = gemini
        .config
        .merged_into(Some(
            r#"{"theme": "dark", "mcpServers": {"theirs": {"command": "x"}}}"#,
        ))
        .expect("merging into the user's settings");
    let merged: serde_json::Value = serde_json::from_str(&merged).expect("merged JSON");
    assert_eq!(
        merged,
        serde_json::json!({"theme": "dark", "mcpServers": {"ours": {"command": "srv", "args": [], "env": {"K": "${TETHER_SECRET_1}"}}}})
    );
    let codex = export_with_references(&servers, Format::Codex, true).expect("codex");
    let merged = codex
        .config
        .merged_into(Some(
            "model = \"o3\"\n[mcp_servers.theirs]\ncommand = \"x\"\n",
        ))
        .expect("merging into the user's config.toml");
    assert_eq!(
        merged,
        "model = \"o3\"\n\n[mcp_servers.ours]\ncommand = \"srv\"\nargs = []\nenv_vars = [\"K\"]\n"
    );
    let err = gemini.config.merged_into(Some("{not json")).err();
    assert!(
        matches!(
            err,
            Some(HarnessError::UserConfig {
                title: "Gemini CLI",
                file: "settings.json",
                ..
            })
        ),
        "{err:?}"
    );
}

#[test]
fn a_default_stdio_env_value_does_not_override_the_servers_own() {
    let servers = servers(
        r#"{"a": {"command": "srv"}, "b": {"command": "srv", "env": {"XDG_CACHE_HOME": "/mine"}},
            "r": {"url": "http://127.0.0.1:9/mcp"}}"#,
    );
    for format in [Format::Claude, Format::Codex, Format::Opencode] {
        let mut config = export_config(&servers, format, Exposure::Real).expect("exporting");
        config.set_default_stdio_env("XDG_CACHE_HOME", "/home/u/.cache");
        let text = config.to_text();
        assert_eq!(
            text.matches("/home/u/.cache").count(),
            1,
            "{format}: {text}"
        );
        assert_eq!(text.matches("/mine").count(), 1, "{format}: {text}");
    }
}

/// Each row's expansion rule matches what its harness rewrites (checked against Claude Code
/// 2.1's, Gemini CLI 0.61's and opencode 1.18's own code), and leaves the rest alone.
#[test]
fn expansion_rules_match_what_each_harness_rewrites() {
    let expands = |format: Format, text: &str| format.harness().expansion.expands(text);
    // Claude Code: `${NAME}` and `${NAME:-default}` only.
    for text in ["${HOME}", "a${X_1}b", "${HOME:-x}", "${A:-}"] {
        assert!(expands(Format::Claude, text), "claude: {text}");
    }
    for text in [
        "$HOME",
        "$$",
        "${1X}",
        "${}",
        "${HOME",
        "{env:HOME}",
        "%41",
        "{{x}}",
    ] {
        assert!(!expands(Format::Claude, text), "claude: {text}");
    }
    // Gemini CLI: `$NAME` (word characters) and `${…}`.
    for text in ["$HOME", "x$1", "${HOME}", "${a b}", "$_"] {
        assert!(expands(Format::Gemini, text), "gemini: {text}");
    }
    for text in ["$$", "$", "${}", "${HOME", "$-", "{env:HOME}", "é$"] {
        assert!(!expands(Format::Gemini, text), "gemini: {text}");
    }
    // opencode: `{env:…}` and `{file:…}` in the text.
    assert!(expands(Format::Opencode, "a{env:HOME}"));
    assert!(expands(Format::Opencode, "{file:/etc/passwd}"));
    assert!(!expands(Format::Opencode, "${HOME} $HOME {{x}}"));
    // Codex expands nothing; VS Code and Cursor their `${…}` variables.
    assert!(!expands(Format::Codex, "${HOME} $HOME {env:HOME}"));
    for format in [Format::Vscode, Format::Cursor] {
        assert!(expands(format, "${env:HOME}"));
        assert!(!expands(format, "$HOME ${}"));
    }
    let escapable: Vec<&str> = HARNESSES
        .iter()
        .filter(|h| h.expansion.has_escape())
        .map(|h| h.name)
        .collect();
    assert_eq!(escapable, ["opencode"]);
}

/// A real value the harness would rewrite: escaped where the format can (opencode, read back
/// as written), refused naming the server and field where it cannot; a plain value the user
/// wrote (which may use the harness's own variables on purpose) and a masked one are left as
/// they are.
#[test]
fn a_real_value_the_harness_would_rewrite_is_escaped_or_refused() {
    let secrets: Secrets = [("T", "x{env:HOME}${HOME}")].into_iter().collect();
    let rendered: Vec<RenderedServer> = parse_config(
        r#"{"s": {"command": "run", "args": ["${workspaceFolder}"], "env": {"K": "{{T}}"}}}"#,
        Origin::User,
    )
    .expect("parsing the test config")
    .servers
    .into_iter()
    .map(|s| s.into_installation().render(&secrets, &EmptyEnv))
    .collect();
    let text = export_config(&rendered, Format::Opencode, Exposure::Real)
        .expect("opencode has an escape")
        .to_text();
    let parsed: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(parsed["mcp"]["s"]["environment"]["K"], "x{env:HOME}${HOME}");
    assert!(!text.contains("{env:"), "{text}");
    for format in [Format::Claude, Format::Gemini, Format::Vscode] {
        let err = export_config(&rendered, format, Exposure::Real).expect_err("no escape: refused");
        assert!(
            matches!(&err, HarnessError::WouldExpand { server, field, .. } if server == "s" && field == "env.K"),
            "{format}: {err}"
        );
        assert!(!err.to_string().contains("HOME}"), "{err}");
        export_config(&rendered, format, Exposure::Masked).expect("masked: nothing to expand");
    }
    // A reference the user wrote in a credential-named field (sensitive as a whole), which
    // tether left as written because the variable is unset, is for the harness to expand.
    let referenced: Vec<RenderedServer> =
        servers(r#"{"s": {"command": "run", "env": {"API_KEY": "Bearer ${MY_KEY}"}}}"#);
    let text = export_config(&referenced, Format::Claude, Exposure::Real)
        .expect("the user's own reference")
        .to_text();
    assert!(text.contains("Bearer ${MY_KEY}"), "{text}");
    // The user's own `${workspaceFolder}` (plain text) passes for VS Code.
    let plain: Vec<RenderedServer> =
        servers(r#"{"s": {"command": "run", "args": ["${workspaceFolder}"]}}"#);
    let text = export_config(&plain, Format::Vscode, Exposure::Real)
        .expect("a plain value is the user's")
        .to_text();
    assert!(text.contains("${workspaceFolder}"), "{text}");
}

/// Gemini CLI's folder trust, read as Gemini reads it: variables, the setting, then the
/// longest rule that holds the folder.
#[test]
fn folder_trust_is_read_as_gemini_cli_reads_it() {
    use std::path::{Path, PathBuf};
    use tether_harness::{TrustInputs, TrustVerdict};
    let trust = Format::Gemini
        .harness()
        .run
        .and_then(|run| run.folder_trust)
        .expect("Gemini CLI gates servers on folder trust");
    for format in [Format::Claude, Format::Codex, Format::Opencode] {
        assert!(format.harness().run.and_then(|r| r.folder_trust).is_none());
    }
    let verdict = |env: &[(&str, &str)],
                   settings: &[serde_json::Value],
                   rules: Option<serde_json::Value>| {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let lookup = move |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let real = |path: &Path| -> PathBuf { path.to_owned() };
        trust.verdict(&TrustInputs {
            env: &lookup,
            settings,
            rules: rules.as_ref(),
            folder: Path::new("/home/me/work/repo"),
            real_path: &real,
        })
    };
    let trusted = |v: &TrustVerdict| *v == TrustVerdict::Trusted;
    assert!(!trusted(&verdict(&[], &[], None)));
    assert!(trusted(&verdict(
        &[("GEMINI_CLI_TRUST_WORKSPACE", "true")],
        &[],
        None
    )));
    assert!(!trusted(&verdict(
        &[
            ("GEMINI_CLI_TRUST_WORKSPACE", "true"),
            ("GEMINI_RESTRICTED_MODE", "true")
        ],
        &[],
        None
    )));
    let off = serde_json::json!({"security": {"folderTrust": {"enabled": false}}});
    let on = serde_json::json!({"security": {"folderTrust": {"enabled": true}}});
    assert!(trusted(&verdict(&[], std::slice::from_ref(&off), None)));
    // The system settings (first) win over the user's.
    assert!(!trusted(&verdict(&[], &[on, off], None)));
    let rules = |r: serde_json::Value| verdict(&[], &[], Some(r));
    assert!(trusted(&rules(
        serde_json::json!({"/home/me/work/repo": "TRUST_FOLDER"})
    )));
    assert!(trusted(&rules(
        serde_json::json!({"/home/me/work/x": "TRUST_PARENT"})
    )));
    assert!(!trusted(&rules(
        serde_json::json!({"/home/me/work/repository": "TRUST_FOLDER"})
    )));
    // The longest rule decides, either way.
    assert!(!trusted(&rules(
        serde_json::json!({"/home/me": "TRUST_FOLDER", "/home/me/work": "DO_NOT_TRUST"})
    )));
    assert!(trusted(&rules(
        serde_json::json!({"/home/me": "DO_NOT_TRUST", "/home/me/work/repo": "TRUST_FOLDER"})
    )));
    match rules(serde_json::json!({"/home": "DO_NOT_TRUST"})) {
        TrustVerdict::NotTrusted(why) => assert!(why.contains("DO_NOT_TRUST"), "{why}"),
        TrustVerdict::Trusted => panic!("a DO_NOT_TRUST rule was ignored"),
    }
}

/// Subcommands that read only the harness's own files: Claude Code's `mcp` (it ignores
/// `--mcp-config`); the others read what tether hands over.
#[test]
fn only_claude_codes_mcp_subcommand_ignores_the_handed_over_servers() {
    let rows: Vec<(&str, &[&str])> = HARNESSES
        .iter()
        .filter_map(|h| h.run.map(|run| (h.name, run.config_only_subcommands)))
        .filter(|(_, subcommands)| !subcommands.is_empty())
        .collect();
    assert_eq!(rows, [("claude", &["mcp"][..])]);
}
