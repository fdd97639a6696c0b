//! `export -o FILE` must not follow symlinks or check before it opens (which would chmod and
//! overwrite a link's target, or race in a shared directory): it writes a fresh 0600 file
//! and renames it over the target, refusing links and non-regular files.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use crate::support::{Sandbox, config, server_json, text};

const SECRET: &str = "sk-EXPORT-FILE-SENTINEL $HOME \"q\" {{x}} é";

fn export_to(sandbox: &Sandbox, target: &Path) -> std::process::Output {
    let spec = config(&[server_json("srv", &[], &[("API_KEY", "{{TOKEN}}")])]);
    sandbox
        .tether(&[
            "export",
            "--format",
            "json",
            "--mcp",
            &spec,
            "--secret",
            "TOKEN=env:MY_TOKEN",
            "-o",
            &target.to_string_lossy(),
        ])
        .env("MY_TOKEN", SECRET)
        .output()
        .expect("running tether export -o")
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .expect("metadata of the written file")
        .permissions()
        .mode()
        & 0o777
}

/// The names in the sandbox directory other than TETHER_HOME (no temp file may be left).
fn entries(sandbox: &Sandbox) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(sandbox.dir.path())
        .expect("listing the sandbox")
        .map(|entry| {
            entry
                .expect("a directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name != "tether-home")
        .collect();
    names.sort();
    names
}

#[test]
fn an_existing_loose_file_is_replaced_by_a_new_0600_file() {
    let sandbox = Sandbox::new();
    let target = sandbox.path("mcp.json");
    std::fs::write(&target, "old").expect("writing the old file");
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644))
        .expect("loosening the old file");
    // A second name for the old inode: it must keep the old bytes and mode (never chmod or
    // rewrite a file tether did not create).
    let other_name = sandbox.path("other-name");
    std::fs::hard_link(&target, &other_name).expect("a hard link to the old file");
    let old_inode = std::fs::metadata(&target).expect("old metadata").ino();

    let out = export_to(&sandbox, &target);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(mode(&target), 0o600);
    assert_ne!(
        std::fs::metadata(&target).expect("new metadata").ino(),
        old_inode
    );
    let written = std::fs::read_to_string(&target).expect("reading the export");
    assert!(written.contains("sk-EXPORT-FILE-SENTINEL"), "{written}");
    assert_eq!(
        std::fs::read_to_string(&other_name).expect("reading the old inode"),
        "old"
    );
    assert_eq!(mode(&other_name), 0o644);
    assert_eq!(entries(&sandbox), ["mcp.json", "other-name"]);
    assert!(!text(&out.stderr).contains("SENTINEL"));
}

#[test]
fn a_symlink_target_is_refused_and_its_target_untouched() {
    let sandbox = Sandbox::new();
    let victim = sandbox.path("victim");
    std::fs::write(&victim, "victim's bytes").expect("writing the victim");
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).expect("victim mode");
    let link = sandbox.path("link.json");
    std::os::unix::fs::symlink(&victim, &link).expect("a symlink");

    let out = export_to(&sandbox, &link);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("symbolic link"), "{stderr}");
    assert!(!stderr.contains("SENTINEL"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(&victim).expect("reading the victim"),
        "victim's bytes"
    );
    assert_eq!(mode(&victim), 0o644);
    assert!(
        std::fs::symlink_metadata(&link)
            .expect("the link")
            .file_type()
            .is_symlink()
    );
    assert_eq!(entries(&sandbox), ["link.json", "victim"]);
}

#[test]
fn a_directory_target_is_refused_and_a_missing_directory_leaves_nothing() {
    let sandbox = Sandbox::new();
    let dir = sandbox.path("a-dir");
    std::fs::create_dir(&dir).expect("a directory");
    let out = export_to(&sandbox, &dir);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("not a regular file"), "{stderr}");

    let missing = sandbox.path("no-such-dir").join("mcp.json");
    let out = export_to(&sandbox, &missing);
    let stderr = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("no-such-dir"), "{stderr}");
    assert!(!stderr.contains("SENTINEL"), "{stderr}");
    assert_eq!(entries(&sandbox), ["a-dir"]);
}

/// A secret holding every harness's own variable syntax, and the other hostile characters.
const EXPANDABLE: &str = "EXPAND-SENTINEL ${HOME} $HOME ${HOME:-x} {env:HOME} {file:/etc/hostname} $$ %41 \"q\" \\ {{x}} é";

/// `export -o` for `format` of one server whose `PROBE` holds [`EXPANDABLE`].
fn export_expandable(sandbox: &Sandbox, format: &str, target: &Path) -> std::process::Output {
    let spec = config(&[server_json("srv", &[], &[("PROBE", "{{TOKEN}}")])]);
    sandbox
        .tether(&["export", "--format", format, "--mcp", &spec])
        .args(["--secret", "TOKEN=env:MY_TOKEN", "-o"])
        .arg(target)
        .env("MY_TOKEN", EXPANDABLE)
        .output()
        .expect("running tether export -o")
}

/// Claude Code (`${VAR}`), Gemini CLI (`$VAR`), VS Code and Cursor (`${…}`) would rewrite the
/// secret when they read the file and have no escape: the export is refused in one line that
/// names the server and the key, never the value, and says what to do; no file is written.
#[test]
fn a_secret_a_harness_would_expand_without_an_escape_is_refused() {
    let sandbox = Sandbox::new();
    for format in ["claude", "gemini", "vscode", "cursor"] {
        let target = sandbox.path(&format!("{format}.json"));
        let out = export_expandable(&sandbox, format, &target);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{format}: {stderr}");
        assert!(!target.exists(), "{format}: a file was written");
        assert!(!stderr.contains("SENTINEL"), "{format}: {stderr}");
        let line = stderr
            .lines()
            .find(|line| line.contains("MCP server 'srv'"))
            .unwrap_or_else(|| panic!("{format}: no refusal naming the server: {stderr}"));
        assert!(line.contains("env.PROBE"), "{format}: {line}");
        assert!(line.contains("--gateway"), "{format}: {line}");
        if format == "claude" || format == "gemini" {
            assert!(line.contains(&format!("tether run -- {format}")), "{line}");
        }
    }
}

/// opencode pastes `{env:…}`/`{file:…}` into its file's text before parsing it: the export
/// escapes them, and the real opencode reads the secret back byte for byte. Codex expands
/// nothing: the real Codex lists the secret as it is.
#[test]
fn a_secret_reaches_opencode_and_codex_as_written() {
    let sandbox = Sandbox::new();
    let opencode_file = sandbox.path("opencode.json");
    let out = export_expandable(&sandbox, "opencode", &opencode_file);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!text(&out.stderr).contains("SENTINEL"));
    let written = std::fs::read_to_string(&opencode_file).expect("reading the export");
    let parsed: serde_json::Value = serde_json::from_str(&written).expect("the export is JSON");
    assert_eq!(
        parsed["mcp"]["srv"]["environment"]["PROBE"], EXPANDABLE,
        "{written}"
    );
    assert!(!written.contains("{env:"), "{written}");

    let codex_home = sandbox.path("codex-home");
    std::fs::create_dir_all(&codex_home).expect("creating the Codex home");
    let out = export_expandable(&sandbox, "codex", &codex_home.join("config.toml"));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    if let Some(opencode) = tether_testkit::npm_bin("opencode") {
        let out = crate::support::opencode_in(&opencode, &sandbox.path("opencode-home"))
            .args(["debug", "config"])
            .env("OPENCODE_CONFIG", &opencode_file)
            .output()
            .expect("running opencode debug config");
        assert!(out.status.success(), "{}", text(&out.stderr));
        let resolved: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("opencode prints its config as JSON");
        assert_eq!(
            resolved["mcp"]["srv"]["environment"]["PROBE"], EXPANDABLE,
            "opencode read the secret changed"
        );
    }
    if let Some(codex) = tether_testkit::npm_bin("codex") {
        let listed = crate::support::codex_mcp_list(&codex, &codex_home);
        assert_eq!(
            listed[0]["transport"]["env"]["PROBE"], EXPANDABLE,
            "codex read the secret changed"
        );
    }
}
