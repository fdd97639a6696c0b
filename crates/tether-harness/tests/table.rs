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
            "json", "claude", "codex", "gemini", "opencode", "vscode", "cursor"
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
    assert_eq!(targets, ["claude", "codex", "gemini", "opencode"]);
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
        // Export-only formats are not programs.
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
