//! The real harness CLIs from the npm registry (Claude Code, Codex, Gemini CLI, opencode,
//! GitHub Copilot CLI),
//! given their servers by `tether run -- <harness> …` or by a config `tether export` wrote, each
//! with a temp HOME so the machine's own configs are never touched.
//!
//! Three servers of ours: a stdio one that refuses to start unless its `PROBE` variable holds its
//! secret byte for byte (`--expect-env-file`), a second stdio one that refuses to start if any
//! variable of its environment holds the first one's secret or the HTTP one's
//! (`--refuse-env-value-file`), and a Streamable HTTP one that answers 401 unless it gets
//! `Authorization: Bearer <secret>`, compared byte for byte. In a run both secrets hold every
//! character a harness might expand (`$HOME`, `${X}`, `$$`, `\$`, `$UNDEFINED`, quotes,
//! backslashes, `{{…}}`, `{env:…}`, non-ASCII): the stdio one reaches its server through
//! tether's exec shim, the HTTP one through tether's loopback bridge, neither through the
//! harness. A harness that reports all three connected has delivered each secret exactly, and
//! only to its own server, even though the stdio secret's source is a
//! variable of tether's own environment. (An exported config holds real values the harness
//! expands itself, so there the secrets hold a quote, a backslash and `{{` only.)

#![allow(
    clippy::expect_used,
    reason = "a test binary: helpers outside #[test] functions panic on setup failure too"
)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use tether_testkit::{json_str, npm_bin, output_within, strip_ansi, test_server_bin};

const SECRET: &str = "a\"b\\c {{d}} e";

/// The URL server's secret in a run: it reaches the server through tether's bridge, never
/// through the harness, so it may hold what no harness would pass on intact.
const HTTP_SECRET: &str = "a\"b\\c {{d}} e $HOME ${X} $$ \\$ $UNDEFINED 'q' {env:X} é✓秘";

/// The stdio server's secret in a run: every form of `$` a harness could expand, and more.
const STDIO_SECRET: &str = "p@$$w0rd $HOME ${X} $$ \\$ $UNDEFINED \"q\" 'q' \\ {{d}} {env:X} é✓秘";

/// The harness executables; their packages are pinned in `tether-testkit/npm-packages.txt`.
const CLAUDE: &str = "claude";
const CODEX: &str = "codex";
const GEMINI: &str = "gemini";
const OPENCODE: &str = "opencode";
const COPILOT: &str = "copilot";

/// A temp HOME, the two servers, and the spec naming them.
struct Setup {
    dir: tempfile::TempDir,
    http: Child,
    http_base: String,
    spec: String,
}

impl Setup {
    /// The servers of a hand-off, the stdio server's secret [`STDIO_SECRET`].
    fn new() -> Self {
        Self::with_secrets(HTTP_SECRET, STDIO_SECRET)
    }

    /// For a config `tether export` writes: the harness reads real values there and expands
    /// `$` in them itself, so the stdio server's secret is [`SECRET`] too.
    fn for_export() -> Self {
        Self::with_secrets(SECRET, SECRET)
    }

    fn with_secrets(http_secret: &str, stdio_secret: &str) -> Self {
        let dir = tempfile::tempdir().expect("creating a temporary directory");
        for sub in [
            "home",
            "home/.config",
            "home/.cache",
            "home/.local/share",
            "home/.local/state",
            "work",
        ] {
            std::fs::create_dir_all(dir.path().join(sub)).expect("creating the directory");
        }
        let secret_file = dir.path().join("secret");
        std::fs::write(&secret_file, http_secret).expect("writing the file");
        let stdio_secret_file = dir.path().join("stdio-secret");
        std::fs::write(&stdio_secret_file, stdio_secret).expect("writing the file");
        let mut http = Command::new(test_server_bin())
            .args([
                "--http",
                "127.0.0.1:0",
                "--require-bearer-env",
                "UPSTREAM_TOKEN",
            ])
            .env("UPSTREAM_TOKEN", http_secret)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawning the process");
        let mut line = String::new();
        let stdout = http.stdout.take().unwrap_or_else(|| panic!("no stdout"));
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("reading the test server's address");
        let url = line.trim().trim_start_matches("listening on ").to_owned();
        let http_base = url.trim_end_matches("/mcp").to_owned();
        let spec = format!(
            r#"{{"probe-stdio": {{"command": {server}, "args": ["--expect-env-file", {expect}], "env": {{"PROBE": "{{{{STDIO_TOKEN}}}}"}}}},
                "probe-other": {{"command": {server}, "args": ["--refuse-env-value-file", {stdio}, "--refuse-env-value-file", {http}]}},
                "probe-http": {{"url": {url}, "headers": {{"Authorization": "Bearer {{{{TOKEN}}}}"}}}}}}"#,
            server = json_str(&test_server_bin().to_string_lossy()),
            expect = json_str(&format!("PROBE={}", stdio_secret_file.display())),
            stdio = json_str(&stdio_secret_file.to_string_lossy()),
            http = json_str(&secret_file.to_string_lossy()),
            url = json_str(&url),
        );
        Self {
            dir,
            http,
            http_base,
            spec,
        }
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn secret_file(&self) -> String {
        self.dir
            .path()
            .join("secret")
            .to_string_lossy()
            .into_owned()
    }

    /// `--secret` values for both tokens. The stdio one comes from tether's environment
    /// (`STDIO_SOURCE`, which [`Setup::tether`] sets), which a harness passes on to every server
    /// it starts unless tether's exec shim removes it.
    fn secrets(&self) -> [String; 2] {
        [
            format!("TOKEN=file:{}", self.secret_file()),
            "STDIO_TOKEN=env:STDIO_SOURCE".to_owned(),
        ]
    }

    /// `tether export --format claude -o ~/.claude.json`: Claude Code's user scope, which
    /// `claude mcp list` reads.
    fn export_claude_user_config(&self) {
        let user_config = self.home().join(".claude.json");
        let [secret, stdio_secret] = self.secrets();
        let out = self
            .tether(&[
                "export",
                "--mcp",
                &self.spec,
                "--secret",
                &secret,
                "--secret",
                &stdio_secret,
                "--format",
                "claude",
                "-o",
                &user_config.to_string_lossy(),
            ])
            .output()
            .expect("running tether");
        assert!(out.status.success(), "{}", text(&out.stderr));
    }

    /// `tether ARGS` with a sandboxed HOME, XDG dirs and TETHER_HOME; cwd in the temp dir.
    fn tether(&self, args: &[&str]) -> Command {
        let mut command = Command::new(assert_cmd::cargo::cargo_bin("tether"));
        let home = self.home();
        command
            .args(args)
            .current_dir(self.dir.path().join("work"))
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_CACHE_HOME", home.join(".cache"))
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .env("XDG_STATE_HOME", home.join(".local/state"))
            .env("TETHER_HOME", self.dir.path().join("tether-home"))
            .env(
                "STDIO_SOURCE",
                std::fs::read_to_string(self.dir.path().join("stdio-secret"))
                    .expect("reading the stdio secret"),
            )
            .env("NO_COLOR", "1")
            .env_remove("CODEX_HOME")
            .env_remove("COPILOT_HOME")
            .env_remove("GEMINI_CLI_HOME")
            .env_remove("CLAUDE_CONFIG_DIR")
            .env_remove("OPENCODE_CONFIG")
            .env_remove("OPENCODE_CONFIG_CONTENT")
            .env_remove("TETHER_SERVER_URL")
            .stdin(Stdio::null());
        command
    }

    /// `tether run --mcp SPEC --secret TOKEN=file:… --secret STDIO_TOKEN=file:… -- HARNESS ARGS`.
    fn run_harness(&self, harness: &Path, args: &[&str]) -> Command {
        self.run_harness_with(&[], harness, args)
    }

    /// [`Setup::run_harness`] with `options` for `tether run` before `--`.
    fn run_harness_with(&self, options: &[&str], harness: &Path, args: &[&str]) -> Command {
        let [secret, stdio_secret] = self.secrets();
        let harness = harness.to_string_lossy().into_owned();
        // Direct hand-offs: Gemini CLI's default is the gateway (tests/gateway_harnesses.rs).
        let mut all = vec![
            "run",
            "--no-gateway",
            "--mcp",
            self.spec.as_str(),
            "--secret",
            secret.as_str(),
            "--secret",
            stdio_secret.as_str(),
        ];
        all.extend_from_slice(options);
        all.extend(["--", harness.as_str()]);
        all.extend_from_slice(args);
        self.tether(&all)
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = self.http.kill();
        let _ = self.http.wait();
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn assert_no_secret(what: &str, output: &Output) {
    for stream in [text(&output.stdout), text(&output.stderr)] {
        assert!(
            !stream.contains("b\\c {{d}}") && !stream.contains("p@$$w0rd"),
            "{what}: the secret was shown:\n{stream}"
        );
    }
}

#[test]
fn claude_code_run_connects_both_servers() {
    let Some(claude) = npm_bin(CLAUDE) else {
        return;
    };
    let setup = Setup::new();
    // A dummy key and a local base URL that answers 404: Claude starts its MCP servers, reports
    // them in its first stream-json line, then gives up on the model without any network.
    let mut command = setup.run_harness(
        &claude,
        &["-p", "hi", "--output-format", "stream-json", "--verbose"],
    );
    command
        .env("ANTHROPIC_API_KEY", "dummy-key")
        .env("ANTHROPIC_BASE_URL", &setup.http_base)
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
    // Read until the init line, then stop the run with SIGTERM (tether forwards it to Claude and
    // removes its run directory): the model call that follows would only fail slowly.
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning the process");
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("\"subtype\":\"init\"") {
                let _ = sender.send(line);
                return;
            }
        }
    });
    let init = receiver.recv_timeout(Duration::from_secs(120));
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let out = child.wait_with_output().expect("waiting for the harness");
    let init = init.unwrap_or_else(|_| panic!("no init line from claude: {}", text(&out.stderr)));
    let init: serde_json::Value = serde_json::from_str(&init).expect("parsing the JSON output");
    let statuses: Vec<(String, String)> = init["mcp_servers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            (
                s["name"].as_str().unwrap_or_default().to_owned(),
                s["status"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    for name in ["probe-stdio", "probe-other", "probe-http"] {
        assert!(
            statuses.iter().any(|(n, s)| n == name && s == "connected"),
            "claude did not connect {name}: {statuses:?}"
        );
    }
    let run_dirs = std::fs::read_dir(setup.dir.path().join("tether-home/run"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(run_dirs, 0, "the run directory outlived the run");
    // Claude's mcp-logs (which hold expanded headers) went to the run directory, not HOME.
    let cache_logs = setup.home().join(".cache/claude-cli-nodejs");
    let leaked = walk(&cache_logs).into_iter().any(|f| {
        std::fs::read_to_string(f)
            .unwrap_or_default()
            .contains("b\\\\c {{d}}")
    });
    assert!(!leaked, "claude wrote the secret into the user's cache");
    assert_no_secret("claude run", &out);
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                files.extend(walk(&path));
            } else {
                files.push(path);
            }
        }
    }
    files
}

#[test]
fn claude_code_mcp_list_accepts_an_exported_user_config() {
    let Some(claude) = npm_bin(CLAUDE) else {
        return;
    };
    let setup = Setup::for_export();
    setup.export_claude_user_config();
    let mut command = Command::new(&claude);
    command
        .arg("mcp")
        .arg("list")
        .current_dir(setup.dir.path().join("work"))
        .env("HOME", setup.home())
        .env("XDG_CACHE_HOME", setup.home().join(".cache"))
        .env("XDG_CONFIG_HOME", setup.home().join(".config"))
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env_remove("CLAUDE_CONFIG_DIR")
        .stdin(Stdio::null());
    let out = output_within(command, Duration::from_secs(120));
    let listing = text(&out.stdout);
    for name in ["probe-stdio", "probe-http"] {
        assert!(
            listing.lines().any(|l| l.starts_with(&format!("{name}:"))
                && l.contains("Connected")
                && !l.contains("Failed")),
            "claude mcp list did not connect {name}:\n{listing}\n{}",
            text(&out.stderr)
        );
    }
}

/// `claude mcp …` reads only Claude Code's own config files, never `--mcp-config`: through
/// `tether run` it lists none of the servers handed over, and tether says so in one line.
#[test]
fn claude_code_mcp_list_through_a_run_is_said_to_ignore_the_handed_over_servers() {
    let Some(claude) = npm_bin(CLAUDE) else {
        return;
    };
    let setup = Setup::new();
    let mut command = setup.run_harness(&claude, &["mcp", "list"]);
    command.env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
    let out = output_within(command, Duration::from_secs(120));
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(
        !stdout.contains("probe-stdio"),
        "claude mcp list now reads --mcp-config: drop the note\n{stdout}"
    );
    let notes: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("`claude mcp …` reads only Claude Code's own config files"))
        .collect();
    assert_eq!(notes.len(), 1, "{stderr}");
    assert!(notes[0].contains("tether test"), "{stderr}");
    assert_no_secret("claude mcp list", &out);
}

/// `tether run … -- claude mcp list` used to fail with `MCP config file not found:
/// …/mcp`, because `--mcp-config` takes several values and swallowed the subcommand. tether now
/// passes `--mcp-config=FILE`. `claude mcp list` itself reads user scope (not `--mcp-config`),
/// so the servers it connects here come from an exported `~/.claude.json`: the subcommand and
/// its arguments reached Claude intact.
#[test]
fn claude_code_subcommand_arguments_survive_the_run() {
    let Some(claude) = npm_bin(CLAUDE) else {
        return;
    };
    let setup = Setup::for_export();
    setup.export_claude_user_config();
    let claude = claude.to_string_lossy().into_owned();
    let [secret, stdio_secret] = setup.secrets();
    for strict in [false, true] {
        let mut args = vec![
            "run",
            "--mcp",
            &setup.spec,
            "--secret",
            &secret,
            "--secret",
            &stdio_secret,
        ];
        if strict {
            args.push("--strict-mcp");
        }
        args.extend(["--", &claude, "mcp", "list"]);
        let mut command = setup.tether(&args);
        command.env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
        let out = output_within(command, Duration::from_secs(120));
        let listing = text(&out.stdout);
        let stderr = text(&out.stderr);
        assert!(
            out.status.success() && !stderr.contains("MCP config file not found"),
            "claude {args:?} through tether failed:\n{listing}\n{stderr}"
        );
        for name in ["probe-stdio", "probe-http"] {
            assert!(
                listing
                    .lines()
                    .any(|l| l.starts_with(&format!("{name}:")) && l.contains("Connected")),
                "claude {args:?} did not list {name}:\n{listing}\n{stderr}"
            );
        }
    }
}

/// Every server of the setup is listed connected by `gemini mcp list`.
fn assert_gemini_connected_all(listing: &str) {
    for name in ["probe-stdio", "probe-other", "probe-http"] {
        assert!(
            listing
                .lines()
                .any(|l| l.contains(&format!("✓ {name}")) && l.contains("Connected")),
            "gemini did not connect {name}:\n{listing}"
        );
    }
}

#[test]
fn gemini_cli_run_connects_both_servers() {
    let Some(gemini) = npm_bin(GEMINI) else {
        return;
    };
    let setup = Setup::new();
    let mut command = setup.run_harness(&gemini, &["mcp", "list"]);
    command.env("GEMINI_CLI_TRUST_WORKSPACE", "true");
    let out = output_within(command, Duration::from_secs(120));
    let listing = strip_ansi(&format!("{}{}", text(&out.stdout), text(&out.stderr)));
    assert_gemini_connected_all(&listing);
    assert!(
        !setup.home().join(".gemini/settings.json").exists(),
        "tether wrote the user's Gemini settings"
    );
    assert_no_secret("gemini mcp list", &out);
}

/// Gemini CLI gives no MCP server to a folder it does not trust (in a fresh HOME, none is):
/// `tether run -- gemini` refuses there, before starting anything, naming the steps; once the
/// user's own rules trust the folder (as Gemini's trust prompt writes them) the same run
/// connects every server, and tether wrote none of the user's files.
#[test]
fn gemini_cli_in_an_untrusted_folder_is_refused_until_the_user_trusts_it() {
    let Some(gemini) = npm_bin(GEMINI) else {
        return;
    };
    let setup = Setup::new();
    let mut command = setup.run_harness(&gemini, &["mcp", "list"]);
    command
        .env_remove("GEMINI_CLI_TRUST_WORKSPACE")
        .env_remove("GEMINI_CLI_TRUSTED_FOLDERS_PATH");
    let out = output_within(command, Duration::from_secs(120));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}{}", text(&out.stdout));
    assert!(
        !text(&out.stdout).contains("Configured MCP servers"),
        "gemini was started"
    );
    let line = stderr
        .lines()
        .find(|l| l.contains("Gemini CLI does not trust"))
        .unwrap_or_else(|| panic!("no refusal: {stderr}"));
    assert!(line.contains("GEMINI_CLI_TRUST_WORKSPACE=true"), "{line}");
    assert!(line.contains("trust prompt"), "{line}");

    let gemini_dir = setup.home().join(".gemini");
    std::fs::create_dir_all(&gemini_dir).expect("creating ~/.gemini");
    let work = std::fs::canonicalize(setup.dir.path().join("work")).expect("the work dir");
    let rules = format!(
        "{{{}: \"TRUST_FOLDER\"}}",
        json_str(&work.to_string_lossy())
    );
    std::fs::write(gemini_dir.join("trustedFolders.json"), &rules).expect("writing the rules");
    let mut command = setup.run_harness(&gemini, &["mcp", "list"]);
    command
        .env_remove("GEMINI_CLI_TRUST_WORKSPACE")
        .env_remove("GEMINI_CLI_TRUSTED_FOLDERS_PATH");
    let out = output_within(command, Duration::from_secs(120));
    let listing = strip_ansi(&format!("{}{}", text(&out.stdout), text(&out.stderr)));
    assert_gemini_connected_all(&listing);
    assert_eq!(
        std::fs::read_to_string(gemini_dir.join("trustedFolders.json")).expect("the rules"),
        rules,
        "the user's trust rules were changed"
    );
    assert!(
        !gemini_dir.join("settings.json").exists(),
        "tether wrote the user's Gemini settings"
    );
    assert_no_secret("gemini mcp list", &out);
}

/// `--strict-mcp` with a Gemini subcommand: `gemini mcp list` refuses
/// `--allowed-mcp-server-names`, so tether leaves the flag out there and writes the same list
/// as `mcp.allowed` in the private settings: the run succeeds, tether's servers connect, and a
/// server of the project's own `.gemini/settings.json` is blocked.
#[test]
fn gemini_cli_strict_mcp_list_blocks_project_servers() {
    let Some(gemini) = npm_bin(GEMINI) else {
        return;
    };
    let setup = Setup::new();
    let work = setup.dir.path().join("work");
    std::fs::create_dir_all(work.join(".gemini")).expect("creating the project settings dir");
    std::fs::write(
        work.join(".gemini/settings.json"),
        r#"{"mcpServers": {"project-only": {"command": "/bin/false"}}}"#,
    )
    .expect("writing the project settings");
    let mut command = setup.run_harness_with(&["--strict-mcp"], &gemini, &["mcp", "list"]);
    command
        .current_dir(&work)
        .env("GEMINI_CLI_TRUST_WORKSPACE", "true");
    let out = output_within(command, Duration::from_secs(120));
    let listing = strip_ansi(&format!("{}{}", text(&out.stdout), text(&out.stderr)));
    assert!(out.status.success(), "gemini mcp list failed:\n{listing}");
    assert_gemini_connected_all(&listing);
    assert!(
        listing
            .lines()
            .any(|l| l.contains("project-only") && l.contains("Blocked")),
        "the project's server was not blocked:\n{listing}"
    );
    assert_no_secret("gemini --strict-mcp mcp list", &out);
}

#[test]
fn opencode_run_connects_both_servers() {
    let Some(opencode) = npm_bin(OPENCODE) else {
        return;
    };
    let setup = Setup::new();
    let out = output_within(
        setup.run_harness(&opencode, &["mcp", "list"]),
        Duration::from_secs(180),
    );
    let listing = strip_ansi(&format!("{}{}", text(&out.stdout), text(&out.stderr)));
    for name in ["probe-stdio", "probe-other", "probe-http"] {
        assert!(
            listing
                .lines()
                .any(|l| l.contains(&format!("✓ {name} connected"))),
            "opencode did not connect {name}:\n{listing}"
        );
    }
    assert_no_secret("opencode mcp list", &out);
}

#[test]
fn codex_run_lists_the_servers_behind_the_shim_and_the_bridge() {
    let Some(codex) = npm_bin(CODEX) else {
        return;
    };
    let setup = Setup::new();
    let started = Instant::now();
    let out = output_within(
        setup.run_harness(&codex, &["mcp", "list", "--json"]),
        Duration::from_secs(120),
    );
    assert!(
        out.status.success(),
        "codex mcp list failed after {:?}: {}",
        started.elapsed(),
        text(&out.stderr)
    );
    let listing: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "codex mcp list --json is not JSON ({e}):\n{}",
            text(&out.stdout)
        )
    });
    let servers = listing.as_array().cloned().unwrap_or_default();
    let find = |name: &str| {
        servers
            .iter()
            .find(|s| s["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("codex does not list {name}: {listing}"))
    };
    // Each stdio server is tether's exec shim with no environment of its own: Codex holds none
    // of its values, so none can be forwarded by name either.
    for name in ["probe-stdio", "probe-other"] {
        let stdio = find(name);
        assert_eq!(
            stdio["transport"]["args"][0].as_str(),
            Some("__exec"),
            "{stdio}"
        );
        assert!(
            stdio["transport"]["env_vars"]
                .as_array()
                .is_none_or(Vec::is_empty),
            "{stdio}"
        );
    }
    // The URL server is tether's bridge on loopback, with the run's token as its only header:
    // Codex holds none of the server's values, not even by reference.
    let http = find("probe-http");
    let url = http["transport"]["url"].as_str().unwrap_or_default();
    assert!(
        url.starts_with("http://127.0.0.1:") && !url.starts_with(&setup.http_base),
        "{http}"
    );
    assert!(
        http["transport"]["env_http_headers"]
            .as_object()
            .is_none_or(serde_json::Map::is_empty),
        "{http}"
    );
    assert_no_secret("codex mcp list", &out);
    // The user's own Codex home was not created or written.
    assert!(!setup.home().join(".codex/config.toml").exists());
}

/// A legacy SSE server with a secret header goes through tether's bridge too: the bridge
/// rewrites the `endpoint` event of the stream so that the harness posts its messages back
/// through the bridge, and Gemini CLI (for which `url` means SSE) connects.
#[test]
fn gemini_cli_reaches_a_legacy_sse_server_through_the_bridge() {
    let (Some(gemini), Some(everything)) = (npm_bin(GEMINI), tether_testkit::server_everything())
    else {
        return;
    };
    let sse = tether_testkit::EverythingServer::start(&everything, "sse");
    let sse_url = format!("http://127.0.0.1:{}/sse", sse.port);
    let setup = Setup::new();
    let spec = format!(
        r#"{{"everything-sse": {{"url": {}, "type": "sse", "headers": {{"X-Key": "{{{{TOKEN}}}}"}}}}}}"#,
        json_str(&sse_url)
    );
    let [secret, _] = setup.secrets();
    let gemini = gemini.to_string_lossy().into_owned();
    let mut command = setup.tether(&[
        "run",
        "--no-gateway",
        "--mcp",
        &spec,
        "--secret",
        &secret,
        "--",
        &gemini,
        "mcp",
        "list",
    ]);
    command.env("GEMINI_CLI_TRUST_WORKSPACE", "true");
    let out = output_within(command, Duration::from_secs(120));
    let listing = strip_ansi(&format!("{}{}", text(&out.stdout), text(&out.stderr)));
    assert!(
        listing
            .lines()
            .any(|l| l.contains("✓ everything-sse") && l.contains("Connected")),
        "gemini did not connect the SSE server:\n{listing}"
    );
    assert!(
        !listing.contains(&sse_url),
        "the harness saw the real URL:\n{listing}"
    );
    assert_no_secret("gemini mcp list (SSE)", &out);
}

/// `tether run … -- copilot ARGS` in offline mode (`tether_testkit::copilot_offline`), with
/// no self-update.
fn copilot_run(setup: &Setup, copilot: &Path, args: &[&str]) -> Command {
    let mut command = setup.run_harness(copilot, args);
    tether_testkit::copilot_offline(&mut command);
    command
}

/// A prompt-mode session of GitHub Copilot CLI through `tether run` connects all three servers
/// (its JSONL events say so), each secret having reached its server exactly through the exec
/// shim or the bridge; the user's own `~/.copilot` is not created. Prints how long each
/// server took from `pending` to `connected`, as Copilot's own event timestamps give it.
#[test]
fn copilot_cli_run_connects_all_three_servers() {
    let Some(copilot) = npm_bin(COPILOT) else {
        return;
    };
    let setup = Setup::new();
    let out = output_within(
        copilot_run(
            &setup,
            &copilot,
            &["-p", "hi", "--output-format", "json", "--allow-all-tools"],
        ),
        Duration::from_secs(180),
    );
    let events: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    let loaded = events
        .iter()
        .find(|e| e["type"] == "session.mcp_servers_loaded")
        .unwrap_or_else(|| {
            panic!(
                "copilot reported no MCP servers loaded:\n{}\n{}",
                text(&out.stdout),
                text(&out.stderr)
            )
        });
    let servers = loaded["data"]["servers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for name in ["probe-stdio", "probe-other", "probe-http"] {
        let server = servers.iter().find(|s| s["name"] == name);
        assert_eq!(
            server.map(|s| s["status"].clone()),
            Some(serde_json::json!("connected")),
            "copilot did not connect {name}: {loaded}"
        );
        let at = |status: &str| {
            events.iter().find_map(|e| {
                (e["type"] == "session.mcp_server_status_changed"
                    && e["data"]["serverName"] == name
                    && e["data"]["status"] == status)
                    .then(|| e["timestamp"].as_str().map(str::to_owned))
                    .flatten()
            })
        };
        if let (Some(pending), Some(connected)) = (at("pending"), at("connected")) {
            eprintln!("copilot connect time {name}: {pending} -> {connected}");
        }
    }
    assert!(
        !setup.home().join(".copilot/mcp-config.json").exists(),
        "tether wrote the user's Copilot config"
    );
    assert_no_secret("copilot -p", &out);
}

/// `copilot mcp list --json` through a run lists the servers as tether handed them over: each
/// stdio one is the exec shim with no environment, the URL one is the bridge on loopback with
/// the run's token; Copilot holds none of the servers' values.
#[test]
fn copilot_cli_mcp_list_shows_the_shim_and_the_bridge() {
    let Some(copilot) = npm_bin(COPILOT) else {
        return;
    };
    let setup = Setup::new();
    let out = output_within(
        copilot_run(&setup, &copilot, &["mcp", "list", "--json"]),
        Duration::from_secs(120),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listing: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("copilot mcp list --json: {e}\n{}", text(&out.stdout)));
    let servers = &listing["mcpServers"];
    for name in ["probe-stdio", "probe-other"] {
        let stdio = &servers[name];
        assert_eq!(stdio["type"], "local", "{stdio}");
        assert_eq!(stdio["args"][0], "__exec", "{stdio}");
        assert!(
            stdio["env"]
                .as_object()
                .is_none_or(serde_json::Map::is_empty),
            "{stdio}"
        );
    }
    let http = &servers["probe-http"];
    let url = http["url"].as_str().unwrap_or_default();
    assert!(
        url.starts_with("http://127.0.0.1:") && !url.starts_with(&setup.http_base),
        "{http}"
    );
    assert_no_secret("copilot mcp list", &out);
    assert!(!setup.home().join(".copilot").exists());
}
