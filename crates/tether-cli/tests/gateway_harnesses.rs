//! `tether run --gateway -- HARNESS …` with the real harness CLIs (Claude
//! Code, Gemini CLI, opencode, Codex, GitHub Copilot CLI), each with a temp HOME: the harness gets ONE stdio server,
//! `tether`, which is tether's gateway; the run's servers start in tether itself.
//!
//! Two servers of ours behind the gateway: a stdio one that refuses to start unless its `PROBE`
//! variable holds its secret byte for byte (`--expect-env-file`; the secret has `$HOME`, quotes
//! and `{{x}}`, which Gemini CLI's expansion corrupts when it handles values), and a Streamable
//! HTTP one that answers 401 without `Authorization: Bearer <secret>`. tether reports each
//! server's start on stderr (and, with `--strict-mcp`, exits 1 before the harness starts when
//! one fails): `probe-stdio: ready` means its secret arrived exactly, though the harness never
//! held it. Every harness runs with `--strict-mcp` (for Gemini's `mcp list`, which refuses
//! `--allowed-mcp-server-names`, through `mcp.allowed` in its private settings). One more runs
//! Gemini in the default mode, with a third server held back for good: the harness starts and
//! lists the gateway while that server is still starting.

#![allow(
    clippy::expect_used,
    reason = "a test binary: helpers outside #[test] functions panic on setup failure too"
)]

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use tether_testkit::{json_str, npm_bin, output_within, strip_ansi as plain, test_server_bin};

/// The stdio server's secret: what a harness would expand, and a placeholder.
const STDIO_SECRET: &str = "gw-p@$$ $HOME ${X} \"q\" 'q' \\ {{x}} é";
/// The HTTP server's bearer token.
const HTTP_SECRET: &str = "gw-http \"b\\c\" {{d}}";

/// `--strict-mcp`: both servers start before the harness (or the run stops), so the harness's
/// one listing shows them.
const STRICT: &[&str] = &["--strict-mcp"];

struct Setup {
    dir: tempfile::TempDir,
    http: Child,
    http_base: String,
    spec: String,
}

impl Setup {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("creating a temporary directory");
        for sub in [
            "home/.config",
            "home/.cache",
            "home/.local/share",
            "home/.local/state",
            "work",
        ] {
            std::fs::create_dir_all(dir.path().join(sub)).expect("creating the directory");
        }
        let stdio_file = dir.path().join("stdio-secret");
        std::fs::write(&stdio_file, STDIO_SECRET).expect("writing the stdio secret");
        std::fs::write(dir.path().join("http-secret"), HTTP_SECRET)
            .expect("writing the HTTP secret");
        let mut http = Command::new(test_server_bin())
            .args([
                "--http",
                "127.0.0.1:0",
                "--require-bearer-env",
                "UPSTREAM_TOKEN",
            ])
            .env("UPSTREAM_TOKEN", HTTP_SECRET)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawning the HTTP test server");
        let mut line = String::new();
        BufReader::new(http.stdout.take().expect("piped stdout"))
            .read_line(&mut line)
            .expect("reading the test server's address");
        let url = line.trim().trim_start_matches("listening on ").to_owned();
        let http_base = url.trim_end_matches("/mcp").to_owned();
        let spec = format!(
            r#"{{"probe-stdio": {{"command": {server}, "args": ["--expect-env-file", {expect}], "env": {{"PROBE": "{{{{STDIO_TOKEN}}}}"}}}},
                "probe-http": {{"url": {url}, "headers": {{"Authorization": "Bearer {{{{TOKEN}}}}"}}}}}}"#,
            server = json_str(&test_server_bin().to_string_lossy()),
            expect = json_str(&format!("PROBE={}", stdio_file.display())),
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

    /// `tether run --gateway FLAGS --mcp SPEC --secret … -- HARNESS ARGS`, sandboxed.
    fn run(&self, harness: &Path, flags: &[&str], args: &[&str]) -> Command {
        let http_secret = format!(
            "TOKEN=file:{}",
            self.dir.path().join("http-secret").display()
        );
        let secrets = [
            "--secret",
            http_secret.as_str(),
            "--secret",
            "STDIO_TOKEN=env:STDIO_SOURCE",
        ];
        self.run_spec(&self.spec, &secrets, harness, flags, args)
    }

    /// `tether run --gateway FLAGS --mcp SPEC SECRETS -- HARNESS ARGS`, sandboxed.
    fn run_spec(
        &self,
        spec: &str,
        secrets: &[&str],
        harness: &Path,
        flags: &[&str],
        args: &[&str],
    ) -> Command {
        let harness = harness.to_string_lossy().into_owned();
        let mut all = vec!["run", "--gateway"];
        all.extend_from_slice(flags);
        all.extend(["--mcp", spec]);
        all.extend_from_slice(secrets);
        all.extend(["--", harness.as_str()]);
        all.extend_from_slice(args);
        let home = self.home();
        let mut command = Command::new(env!("CARGO_BIN_EXE_tether"));
        command
            .args(&all)
            .current_dir(self.dir.path().join("work"))
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_CACHE_HOME", home.join(".cache"))
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .env("XDG_STATE_HOME", home.join(".local/state"))
            .env("TETHER_HOME", self.dir.path().join("tether-home"))
            .env("STDIO_SOURCE", STDIO_SECRET)
            .env("NO_COLOR", "1")
            .env_remove("CODEX_HOME")
            .env_remove("COPILOT_HOME")
            .env_remove("GEMINI_CLI_HOME")
            .env_remove("CLAUDE_CONFIG_DIR")
            .env_remove("OPENCODE_CONFIG")
            .env_remove("OPENCODE_CONFIG_CONTENT")
            .env_remove("TETHER_SERVER_URL")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null());
        command
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

/// Both servers started behind the gateway (strict: otherwise tether stops before the
/// harness), and neither secret was printed.
fn assert_both_ready_and_nothing_shown(what: &str, out: &Output) {
    let stderr = text(&out.stderr);
    for name in ["probe-stdio", "probe-http"] {
        assert!(
            stderr.contains(&format!("tether serve: {name}: ready")),
            "{what}: {name} not ready behind the gateway:\n{stderr}"
        );
    }
    for stream in [text(&out.stdout), stderr] {
        assert!(
            !stream.contains("gw-p@$$") && !stream.contains("gw-http"),
            "{what}: a secret was shown:\n{stream}"
        );
    }
}

/// `gemini mcp list` through `tether run --gateway FLAGS` (at most 120 s): it succeeds and lists
/// `tether` connected. The output and the listing (stdout and stderr, plain).
fn gemini_lists_the_gateway(setup: &Setup, gemini: &Path, flags: &[&str]) -> (Output, String) {
    let mut command = setup.run(gemini, flags, &["mcp", "list"]);
    command.env("GEMINI_CLI_TRUST_WORKSPACE", "true");
    let out = output_within(command, Duration::from_secs(120));
    let listing = plain(&format!("{}{}", text(&out.stdout), text(&out.stderr)));
    assert!(out.status.success(), "{listing}");
    assert!(
        listing
            .lines()
            .any(|l| l.contains("✓ tether") && l.contains("Connected")),
        "gemini did not connect the gateway:\n{listing}"
    );
    (out, listing)
}

#[test]
fn gemini_cli_lists_the_gateway_connected_and_the_secret_arrives_byte_exact() {
    let Some(gemini) = npm_bin("gemini") else {
        return;
    };
    let setup = Setup::new();
    let (out, listing) = gemini_lists_the_gateway(&setup, &gemini, STRICT);
    assert!(
        !listing
            .lines()
            .any(|l| l.contains("✓ probe") || l.contains("✗ probe")),
        "gemini saw the servers themselves:\n{listing}"
    );
    assert_both_ready_and_nothing_shown("gemini mcp list", &out);
}

/// A prompt-mode session of Copilot CLI, offline against a loopback model provider that
/// refuses every call: its JSONL events say the one server, `tether`, connected.
#[test]
fn copilot_cli_connects_the_gateway() {
    let Some(copilot) = npm_bin("copilot") else {
        return;
    };
    let setup = Setup::new();
    let args = ["-p", "hi", "--output-format", "json", "--allow-all-tools"];
    let mut command = setup.run(&copilot, STRICT, &args);
    tether_testkit::copilot_offline(&mut command);
    let out = output_within(command, Duration::from_secs(180));
    let loaded = text(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|event| event["type"] == "session.mcp_servers_loaded")
        .unwrap_or_else(|| panic!("no servers loaded:\n{}", text(&out.stderr)));
    let servers = loaded["data"]["servers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    // Copilot lists its own built-in servers too, disabled (offline; `--disable-builtin-mcps`).
    let connected: Vec<_> = servers
        .iter()
        .filter(|s| s["status"] != "disabled")
        .map(|s| (s["name"].clone(), s["status"].clone()))
        .collect();
    assert_eq!(
        connected,
        [(serde_json::json!("tether"), serde_json::json!("connected"))],
        "{loaded}"
    );
    assert_both_ready_and_nothing_shown("copilot -p", &out);
}

#[test]
fn opencode_lists_the_gateway_connected() {
    let Some(opencode) = npm_bin("opencode") else {
        return;
    };
    let setup = Setup::new();
    let out = output_within(
        setup.run(&opencode, STRICT, &["mcp", "list"]),
        Duration::from_secs(180),
    );
    let listing = plain(&format!("{}{}", text(&out.stdout), text(&out.stderr)));
    assert!(
        listing.lines().any(|l| l.contains("✓ tether connected")),
        "opencode did not connect the gateway:\n{listing}"
    );
    assert_both_ready_and_nothing_shown("opencode mcp list", &out);
}

#[test]
fn codex_lists_one_server_that_holds_no_value() {
    let Some(codex) = npm_bin("codex") else {
        return;
    };
    let setup = Setup::new();
    let out = output_within(
        setup.run(&codex, STRICT, &["mcp", "list", "--json"]),
        Duration::from_secs(120),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listing: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("codex mcp list --json is JSON");
    let servers = listing.as_array().cloned().unwrap_or_default();
    assert_eq!(servers.len(), 1, "{listing}");
    let gateway = &servers[0];
    assert_eq!(gateway["name"], "tether", "{gateway}");
    assert!(
        gateway["transport"]["env_vars"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "{gateway}"
    );
    assert!(
        gateway["transport"]["env"]
            .as_object()
            .is_none_or(serde_json::Map::is_empty),
        "{gateway}"
    );
    assert_both_ready_and_nothing_shown("codex mcp list", &out);
}

#[test]
fn claude_code_connects_the_gateway_and_sees_namespaced_tools() {
    let Some(claude) = npm_bin("claude") else {
        return;
    };
    let setup = Setup::new();
    let command = setup.run(
        &claude,
        STRICT,
        &["-p", "hi", "--output-format", "stream-json", "--verbose"],
    );
    let (init, out) = claude_init(&setup, command);
    let servers = init["mcp_servers"].as_array().cloned().unwrap_or_default();
    assert_eq!(servers.len(), 1, "{servers:?}");
    assert_eq!(servers[0]["name"], "tether");
    assert_eq!(servers[0]["status"], "connected", "{servers:?}");
    let tools = tools_of(&init);
    for expected in [
        "mcp__tether__probe-stdio__echo",
        "mcp__tether__probe-http__add",
    ] {
        assert!(tools.contains(&expected), "{expected} in {tools:?}");
    }
    assert_both_ready_and_nothing_shown("claude run", &out);
}

/// Two copies of a real MCP App server from npm (`@modelcontextprotocol/server-basic-vanillajs`)
/// behind `run --gateway` for Claude Code: it connects the one `tether` server and is offered
/// both apps' tools under their servers' names.
#[test]
fn claude_code_is_offered_two_copies_of_a_real_mcp_app_through_the_gateway() {
    let Some(claude) = npm_bin("claude") else {
        return;
    };
    let Some(app) = npm_bin("mcp-server-basic-vanillajs") else {
        return;
    };
    let setup = Setup::new();
    let app = json_str(&app.to_string_lossy());
    let spec = format!(
        r#"{{"clock": {{"command": {app}, "args": ["--stdio"]}}, "clock2": {{"command": {app}, "args": ["--stdio"]}}}}"#
    );
    let command = setup.run_spec(
        &spec,
        &[],
        &claude,
        STRICT,
        &["-p", "hi", "--output-format", "stream-json", "--verbose"],
    );
    let (init, out) = claude_init(&setup, command);
    let servers = init["mcp_servers"].as_array().cloned().unwrap_or_default();
    assert_eq!(servers.len(), 1, "{servers:?}");
    assert_eq!(servers[0]["status"], "connected", "{servers:?}");
    let tools = tools_of(&init);
    for expected in [
        "mcp__tether__clock__get-time",
        "mcp__tether__clock2__get-time",
    ] {
        assert!(tools.contains(&expected), "{expected} in {tools:?}");
    }
    let stderr = text(&out.stderr);
    assert!(stderr.contains("clock: ready"), "{stderr}");
    assert!(stderr.contains("clock2: ready"), "{stderr}");
}

/// The tool names of Claude's init line.
fn tools_of(init: &serde_json::Value) -> Vec<&str> {
    init["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(serde_json::Value::as_str)
        .collect()
}

/// Runs `command` (tether running Claude Code with stream-json output), with a dummy key and a
/// model URL of `setup` that answers 404 — Claude connects its MCP servers, reports them in its
/// first stream-json line, then gives up on the model — until Claude's init line, then stops
/// it: the init line, read, and tether's output.
fn claude_init(setup: &Setup, mut command: Command) -> (serde_json::Value, Output) {
    command
        .env("ANTHROPIC_API_KEY", "dummy-key")
        .env("ANTHROPIC_BASE_URL", &setup.http_base)
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning tether");
    let stdout = child.stdout.take().expect("piped stdout");
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
    let out = child.wait_with_output().expect("waiting for tether");
    let init = init.unwrap_or_else(|_| panic!("no init line from claude: {}", text(&out.stderr)));
    (
        serde_json::from_str(&init).expect("parsing the init line"),
        out,
    )
}

/// `tether export --gateway --format gemini`: one entry running `tether serve` with the specs
/// and secret *sources*; Gemini CLI connects it from its user settings, and the file holds no
/// value. (Gemini passes a server only variables whose names do not look like credentials —
/// no `*TOKEN*`, `*KEY*`, `*SECRET*` — so `file:` sources are the dependable kind here.)
#[test]
fn an_exported_gateway_entry_connects_in_gemini_cli_and_holds_no_value() {
    let Some(gemini) = npm_bin("gemini") else {
        return;
    };
    let setup = Setup::new();
    let spec_file = setup.dir.path().join("mcp.json");
    std::fs::write(&spec_file, &setup.spec).expect("writing the spec file");
    let settings = setup.home().join(".gemini/settings.json");
    std::fs::create_dir_all(setup.home().join(".gemini")).expect("creating ~/.gemini");
    let export = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args([
            "export",
            "--gateway",
            "--format",
            "gemini",
            "--mcp",
            &spec_file.to_string_lossy(),
            "--secret",
            &format!(
                "TOKEN=file:{}",
                setup.dir.path().join("http-secret").display()
            ),
            "--secret",
            &format!(
                "STDIO_TOKEN=file:{}",
                setup.dir.path().join("stdio-secret").display()
            ),
            "-o",
            &settings.to_string_lossy(),
        ])
        .env("TETHER_HOME", setup.dir.path().join("tether-home"))
        .output()
        .expect("running tether export --gateway");
    assert!(export.status.success(), "{}", text(&export.stderr));
    let written = std::fs::read_to_string(&settings).expect("reading the settings");
    let config: serde_json::Value = serde_json::from_str(&written).expect("settings are JSON");
    let servers = config["mcpServers"]
        .as_object()
        .expect("an mcpServers object");
    assert_eq!(servers.keys().collect::<Vec<_>>(), ["tether"], "{written}");
    assert_eq!(servers["tether"]["args"][0], "serve", "{written}");
    assert!(
        !written.contains("gw-p@$$") && !written.contains("gw-http"),
        "{written}"
    );
    let mut list = Command::new(&gemini);
    list.args(["mcp", "list"])
        .current_dir(setup.dir.path().join("work"))
        .env("HOME", setup.home())
        .env("TETHER_HOME", setup.dir.path().join("tether-home"))
        .env("GEMINI_CLI_TRUST_WORKSPACE", "true")
        .env_remove("GEMINI_CLI_HOME")
        .stdin(Stdio::null());
    let out = output_within(list, Duration::from_secs(120));
    let listing = plain(&format!("{}{}", text(&out.stdout), text(&out.stderr)));
    assert!(
        listing
            .lines()
            .any(|l| l.contains("✓ tether") && l.contains("Connected")),
        "gemini did not connect the exported gateway:\n{listing}"
    );
}

#[test]
fn by_default_the_harness_starts_while_a_server_is_still_starting() {
    let Some(gemini) = npm_bin("gemini") else {
        return;
    };
    let mut setup = Setup::new();
    // A third server held back for good: the file that would release it is never made.
    let release = setup.dir.path().join("release");
    let held = format!(
        r#", "held": {{"command": {}, "args": ["--start-when-file", {}]}}}}"#,
        json_str(&test_server_bin().to_string_lossy()),
        json_str(&release.to_string_lossy())
    );
    setup.spec = format!(
        "{}{held}",
        setup
            .spec
            .trim_end()
            .strip_suffix('}')
            .expect("a JSON object")
    );
    // A start timeout far beyond the test's limit: waiting for `held` would not end in time.
    let (out, _) = gemini_lists_the_gateway(&setup, &gemini, &["--timeout", "600"]);
    assert!(!release.exists());
    let stderr = text(&out.stderr);
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("MCP server pending: starting") && l.contains("server=held")),
        "{stderr}"
    );
    assert!(
        !stderr
            .lines()
            .any(|l| l.contains("MCP server ready") && l.contains("server=held")),
        "{stderr}"
    );
}
