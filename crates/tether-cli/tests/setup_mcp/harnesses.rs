//! The real harness CLIs (pinned npm packages, each with a temp HOME) given `tether setup-mcp`
//! with their own `mcp add` command (opencode: its config file, since its `mcp add` is an
//! interactive wizard for local servers), then listing it connected.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use tether_testkit::{npm_bin, output_within, strip_ansi};

use super::tether;

/// A temp HOME and a working directory in it.
struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temporary HOME");
        std::fs::create_dir_all(dir.path().join("work")).expect("a working directory");
        Self { dir }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    fn command(&self, program: &Path, args: &[&str]) -> Command {
        let home = self.path();
        let mut command = Command::new(program);
        command
            .args(args)
            .current_dir(home.join("work"))
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_CACHE_HOME", home.join(".cache"))
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .env("XDG_STATE_HOME", home.join(".local/state"))
            .env("NO_COLOR", "1")
            .env_remove("CODEX_HOME")
            .env_remove("GEMINI_CLI_HOME")
            .env_remove("CLAUDE_CONFIG_DIR")
            .env_remove("OPENCODE_CONFIG")
            .env_remove("OPENCODE_CONFIG_CONTENT")
            .env_remove("TETHER_HOME")
            .stdin(Stdio::null());
        command
    }

    /// Runs `program ARGS` to the end within `limit` (killed after it).
    fn run(&self, program: &Path, args: &[&str], limit: Duration) -> Output {
        let mut command = self.command(program, args);
        command.env("GEMINI_CLI_TRUST_WORKSPACE", "true");
        output_within(command, limit)
    }
}

fn listing(out: &Output) -> String {
    strip_ansi(&format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

fn tether_path() -> String {
    tether().to_string_lossy().into_owned()
}

#[test]
fn claude_code_lists_tether_setup_mcp_connected() {
    let Some(claude) = npm_bin("claude") else {
        return;
    };
    let home = Home::new();
    let tether = tether_path();
    let added = home.run(
        &claude,
        &[
            "mcp",
            "add",
            "--scope",
            "user",
            "tether-setup",
            "--",
            &tether,
            "setup-mcp",
        ],
        Duration::from_secs(60),
    );
    assert!(added.status.success(), "{}", listing(&added));
    let out = home.run(&claude, &["mcp", "list"], Duration::from_secs(120));
    let text = listing(&out);
    assert!(
        text.lines().any(|l| l.starts_with("tether-setup:")
            && l.contains("setup-mcp")
            && l.contains("Connected")),
        "{text}"
    );
}

#[test]
fn gemini_cli_lists_tether_setup_mcp_connected() {
    let Some(gemini) = npm_bin("gemini") else {
        return;
    };
    let home = Home::new();
    let tether = tether_path();
    let added = home.run(
        &gemini,
        &[
            "mcp",
            "add",
            "--scope",
            "user",
            "tether-setup",
            &tether,
            "setup-mcp",
        ],
        Duration::from_secs(60),
    );
    assert!(added.status.success(), "{}", listing(&added));
    let out = home.run(&gemini, &["mcp", "list"], Duration::from_secs(120));
    let text = listing(&out);
    assert!(
        text.lines()
            .any(|l| l.contains("✓ tether-setup") && l.contains("Connected")),
        "{text}"
    );
}

#[test]
fn codex_lists_tether_setup_mcp() {
    let Some(codex) = npm_bin("codex") else {
        return;
    };
    let home = Home::new();
    let tether = tether_path();
    let added = home.run(
        &codex,
        &["mcp", "add", "tether-setup", "--", &tether, "setup-mcp"],
        Duration::from_secs(60),
    );
    assert!(added.status.success(), "{}", listing(&added));
    let out = home.run(&codex, &["mcp", "list", "--json"], Duration::from_secs(60));
    assert!(out.status.success(), "{}", listing(&out));
    let servers: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("codex mcp list --json");
    let server = servers
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == "tether-setup"))
        .unwrap_or_else(|| panic!("codex does not list tether-setup: {servers}"));
    assert_eq!(server["enabled"], true, "{server}");
    assert_eq!(server["transport"]["type"], "stdio", "{server}");
    assert_eq!(server["transport"]["command"], tether.as_str(), "{server}");
    assert_eq!(
        server["transport"]["args"],
        serde_json::json!(["setup-mcp"]),
        "{server}"
    );
}

#[test]
fn opencode_lists_tether_setup_mcp_connected() {
    let Some(opencode) = npm_bin("opencode") else {
        return;
    };
    let home = Home::new();
    let config = home.path().join(".config/opencode");
    std::fs::create_dir_all(&config).expect("opencode's config directory");
    std::fs::write(
        config.join("opencode.json"),
        serde_json::json!({
            "$schema": "https://opencode.ai/config.json",
            "mcp": {"tether-setup": {"type": "local", "command": [tether_path(), "setup-mcp"]}},
        })
        .to_string(),
    )
    .expect("writing opencode.json");
    let out = home.run(&opencode, &["mcp", "list"], Duration::from_secs(180));
    let text = listing(&out);
    assert!(
        text.lines().any(|l| l.contains("✓ tether-setup connected")),
        "{text}"
    );
}
