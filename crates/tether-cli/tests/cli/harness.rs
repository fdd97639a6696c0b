//! Handing servers to a harness command: fake harness programs (shell scripts named like the
//! real ones) record what they were given. The real CLIs are exercised in `tests/harnesses.rs`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::{Sandbox, config, server_json, text};

const SECRET: &str = "sk-HANDOFF-SENTINEL";

/// Writes a fake harness `name` into `bin/` that records argv, the environment, and the
/// config it was handed (by flag or variable) into `record/`, then exits with `code`
/// (or sleeps when `code` is "sleep").
fn fake_harness(sandbox: &Sandbox, name: &str, code: &str) -> PathBuf {
    let bin = sandbox.path("bin");
    std::fs::create_dir_all(&bin).expect("creating the directory");
    let record = sandbox.path("record");
    std::fs::create_dir_all(&record).expect("creating the directory");
    let script = format!(
        r#"#!/bin/sh
if [ "{code}" = "sleep" ]; then trap 'echo got-term > "{r}/term"; exit 143' TERM; fi
printf '%s\n' "$@" > '{r}/argv'
env > '{r}/env'
for a in "$@"; do
  case "$a" in --mcp-config=*) f="${{a#--mcp-config=}}"; cp "$f" '{r}/config'; echo "$f" > '{r}/config-path';; esac
done
if [ -n "$GEMINI_CLI_HOME" ]; then cp "$GEMINI_CLI_HOME/.gemini/settings.json" '{r}/config'; echo "$GEMINI_CLI_HOME" > '{r}/config-path'; fi
if [ -n "$OPENCODE_CONFIG_CONTENT" ]; then printf '%s' "$OPENCODE_CONFIG_CONTENT" > '{r}/config'; fi
if [ -n "$CODEX_HOME" ]; then cp "$CODEX_HOME/config.toml" '{r}/config'; echo "$CODEX_HOME" > '{r}/config-path'; fi
# The TERM trap is set first: `argv` existing (what a test waits for) means it is in place.
if [ "{code}" = "sleep" ]; then while true; do sleep 0.1; done; fi
exit {code}
"#,
        r = record.display()
    );
    if name == "gemini" {
        // The user trusts the sandbox in Gemini CLI: tether refuses a folder Gemini does not
        // trust (it would give the run no servers).
        let gemini_dir = sandbox.path("home/.gemini");
        std::fs::create_dir_all(&gemini_dir).expect("creating the directory");
        let folder = std::fs::canonicalize(sandbox.dir.path()).expect("the sandbox's real path");
        let rules = serde_json::json!({ folder.to_string_lossy(): "TRUST_FOLDER" });
        std::fs::write(gemini_dir.join("trustedFolders.json"), rules.to_string())
            .expect("writing the trust rules");
    }
    let path = bin.join(name);
    std::fs::write(&path, script).expect("writing the file");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .expect("setting the file mode");
    path
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn run_dirs(sandbox: &Sandbox) -> Vec<PathBuf> {
    std::fs::read_dir(sandbox.home().join("run"))
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// `tether run --mcp SPEC --secret TOKEN=env:SRC --no-gateway FLAGS -- PROGRAM ARGS` (a direct
/// hand-off, also for Gemini CLI, whose default is the gateway) with `SRC` holding the secret
/// and `HOME` inside the sandbox.
fn hand_off(
    sandbox: &Sandbox,
    spec: &str,
    flags: &[&str],
    program: &Path,
    args: &[&str],
) -> assert_cmd::Command {
    let program = program.to_string_lossy();
    let mut argv = vec![
        "run",
        "--mcp",
        spec,
        "--secret",
        "TOKEN=env:SRC",
        "--no-gateway",
    ];
    argv.extend_from_slice(flags);
    argv.extend(["--", program.as_ref()]);
    argv.extend_from_slice(args);
    let mut command = sandbox.tether(&argv);
    command.env("SRC", SECRET).env("HOME", sandbox.path("home"));
    command
}

fn spec() -> String {
    config(&[
        server_json("local", &[], &[("API_KEY", "{{TOKEN}}")]),
        r#""remote": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer {{TOKEN}}"}}"#.to_owned(),
    ])
}

#[test]
fn each_harness_gets_references_in_its_config_and_values_in_its_environment() {
    for harness in ["claude", "gemini", "opencode", "codex"] {
        let sandbox = Sandbox::new();
        let program = fake_harness(&sandbox, harness, "7");
        let spec = spec();
        let out = hand_off(&sandbox, &spec, &[], &program, &["--user-flag"])
            .output()
            .expect("running tether");
        let record = sandbox.path("record");
        assert_eq!(
            out.status.code(),
            Some(7),
            "{harness}: exit code not passed through: {}",
            text(&out.stderr)
        );
        let argv = read(&record.join("argv"));
        assert!(
            !argv.contains(SECRET),
            "{harness}: secret on the command line: {argv}"
        );
        assert!(argv.contains("--user-flag"), "{harness}: {argv}");
        let config = read(&record.join("config"));
        assert!(!config.is_empty(), "{harness}: no config handed over");
        assert!(
            config.contains("local") && config.contains("remote"),
            "{harness}: {config}"
        );
        assert!(
            !config.contains(SECRET),
            "{harness}: secret in the config: {config}"
        );
        let env = read(&record.join("env"));
        assert!(
            env.contains(SECRET),
            "{harness}: the secret is not in the harness environment"
        );
        // Everything tether wrote is gone after the run.
        let config_path = read(&record.join("config-path"));
        if !config_path.trim().is_empty() {
            assert!(
                !Path::new(config_path.trim()).exists(),
                "{harness}: {config_path} left behind"
            );
        }
        assert_eq!(
            run_dirs(&sandbox),
            Vec::<PathBuf>::new(),
            "{harness}: run directory left behind"
        );
    }
}

/// Also: `--mcp-config` takes several values, so `--mcp-config FILE mcp list`
/// made Claude read `mcp` and `list` as config files. tether passes `--mcp-config=FILE`, one
/// argument, before the user's.
#[test]
fn strict_mcp_asks_claude_to_be_strict() {
    let sandbox = Sandbox::new();
    let program = fake_harness(&sandbox, "claude", "0");
    let spec = config(&[server_json("local", &[], &[])]);
    sandbox
        .tether(&[
            "run",
            "--strict-mcp",
            "--mcp",
            &spec,
            "--",
            &program.to_string_lossy(),
            "mcp",
            "list",
        ])
        .assert()
        .success();
    let record = sandbox.path("record");
    let argv = read(&record.join("argv"));
    assert!(argv.lines().any(|l| l == "--strict-mcp-config"), "{argv}");
    let config_path = read(&record.join("config-path"));
    assert_eq!(
        argv.lines().collect::<Vec<_>>(),
        [
            format!("--mcp-config={}", config_path.trim()).as_str(),
            "--strict-mcp-config",
            "mcp",
            "list"
        ],
        "{argv}"
    );
}

/// A secret in a remote server's `url` (which Codex's TOML cannot reference)
/// or headers stays in tether's bridge: every harness gets a loopback URL and the run's token,
/// so `--no-secrets-on-disk` has nothing to refuse and the harness's environment holds no
/// secret either. (The bridge's forwarding itself: `bridge.rs`.)
#[test]
fn a_url_secret_stays_in_the_bridge_for_every_harness() {
    for harness in ["claude", "gemini", "opencode", "codex"] {
        let sandbox = Sandbox::new();
        let program = fake_harness(&sandbox, harness, "0");
        let spec = config(&[
            r#""remote": {"url": "http://127.0.0.1:9/mcp?key={{TOKEN}}", "headers": {"X-Key": "{{TOKEN}}"}}"#
                .to_owned(),
        ]);
        let out = hand_off(&sandbox, &spec, &["--no-secrets-on-disk"], &program, &[])
            .output()
            .expect("running tether");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{harness}: {}",
            text(&out.stderr)
        );
        let stderr = text(&out.stderr);
        assert!(!stderr.contains(SECRET), "{harness}: {stderr}");
        let record = sandbox.path("record");
        let config = read(&record.join("config"));
        assert!(
            config.contains("http://127.0.0.1:") && !config.contains("127.0.0.1:9/"),
            "{harness}: not the bridge's URL: {config}"
        );
        assert!(
            !config.contains(SECRET) && !config.contains("X-Key"),
            "{harness}: {config}"
        );
        let env = read(&record.join("env"));
        assert!(
            !env.lines().any(|l| l.starts_with("TETHER_SECRET_")),
            "{harness}: a URL server's value is in the harness environment: {env}"
        );
        assert_eq!(run_dirs(&sandbox), Vec::<PathBuf>::new());
    }
}

/// A stdio server's values, a secret in `args` included, reach it through
/// tether's exec shim, so even Codex (which cannot reference `args`) gets a config without them
/// and `--no-secrets-on-disk` has nothing to refuse.
#[test]
fn a_stdio_secret_in_args_reaches_every_harness_through_the_shim_not_the_config() {
    for harness in ["claude", "gemini", "opencode", "codex"] {
        let sandbox = Sandbox::new();
        let program = fake_harness(&sandbox, harness, "0");
        let spec = config(&[server_json("local", &["--token={{TOKEN}}"], &[])]);
        let out = hand_off(&sandbox, &spec, &["--no-secrets-on-disk"], &program, &[])
            .output()
            .expect("running tether");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{harness}: {}",
            text(&out.stderr)
        );
        let record = sandbox.path("record");
        let config = read(&record.join("config"));
        assert!(config.contains("__exec"), "{harness}: {config}");
        assert!(
            !config.contains(SECRET) && !config.contains("tether-test-mcp"),
            "{harness}: the server's launch is in the config: {config}"
        );
        // (`SRC`, the secret's source here, is tether's own environment, which a harness
        // inherits: only the variables tether adds are looked at.)
        let env = read(&record.join("env"));
        assert!(
            !env.lines()
                .any(|l| l.starts_with("TETHER_SECRET_") && l.contains(SECRET)),
            "{harness}: a stdio server's secret is in the harness environment"
        );
        assert_eq!(run_dirs(&sandbox), Vec::<PathBuf>::new());
    }
}

#[test]
fn an_unknown_command_needs_harness() {
    let sandbox = Sandbox::new();
    let spec = config(&[server_json("local", &[], &[])]);
    let out = sandbox.run(&["run", "--mcp", &spec, "--", "my-agent"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("cannot tell which harness `my-agent` is; pass --harness"));
}

#[test]
fn sigterm_is_forwarded_and_the_run_directory_removed() {
    let sandbox = Sandbox::new();
    let program = fake_harness(&sandbox, "claude", "sleep");
    let spec = spec();
    let mut command = sandbox.runner().command(&[
        "run",
        "--mcp",
        &spec,
        "--secret",
        "TOKEN=env:SRC",
        "--",
        &program.to_string_lossy(),
    ]);
    command.env("SRC", SECRET);
    let mut child = command.spawn().expect("spawning the process");
    // Wait (bounded) until the harness is running.
    let argv = sandbox.path("record").join("argv");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !argv.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the fake harness never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(run_dirs(&sandbox).len(), 1);
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap_or_default());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("sending the signal");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("polling the tether process") {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "tether did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(143));
    assert_eq!(
        read(&sandbox.path("record").join("term")).trim(),
        "got-term"
    );
    assert_eq!(
        run_dirs(&sandbox),
        Vec::<PathBuf>::new(),
        "run directory left after SIGTERM"
    );
}

#[test]
fn strict_mcp_names_each_gemini_server_in_its_own_argument() {
    let sandbox = Sandbox::new();
    let program = fake_harness(&sandbox, "gemini", "0");
    let spec = spec();
    hand_off(&sandbox, &spec, &["--strict-mcp"], &program, &["a prompt"])
        .assert()
        .success();
    let argv = read(&sandbox.path("record").join("argv"));
    assert_eq!(
        argv.lines().collect::<Vec<_>>(),
        [
            "--allowed-mcp-server-names=local",
            "--allowed-mcp-server-names=remote",
            "a prompt"
        ],
        "{argv}"
    );
    // A subcommand takes no such flag (`gemini mcp list` refuses it): the user's arguments
    // alone, the list being in the private settings instead.
    hand_off(
        &sandbox,
        &spec,
        &["--strict-mcp"],
        &program,
        &["mcp", "list"],
    )
    .assert()
    .success();
    let argv = read(&sandbox.path("record").join("argv"));
    assert_eq!(argv.lines().collect::<Vec<_>>(), ["mcp", "list"], "{argv}");
}

#[test]
fn harness_and_format_values_come_from_the_harness_table() {
    let sandbox = Sandbox::new();
    let spec = config(&[server_json("local", &[], &[])]);
    // An export-only format is not a harness `run` can hand servers to.
    let out = sandbox.run(&["run", "--mcp", &spec, "--harness", "vscode", "--", "code"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("invalid value 'vscode' for '--harness <HARNESS>'")
            && stderr
                .contains("[possible values: builtin, claude, codex, gemini, opencode, copilot]"),
        "{stderr}"
    );
    let out = sandbox.run(&["export", "--mcp", &spec, "--format", "emacs"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "[possible values: json, claude, codex, gemini, opencode, vscode, cursor, copilot, claude-desktop, windsurf, zed, goose, antigravity]"
        ),
        "{stderr}"
    );
    // A harness named explicitly overrides the program's name.
    let program = fake_harness(&sandbox, "my-agent", "0");
    sandbox
        .tether(&[
            "run",
            "--mcp",
            &spec,
            "--harness",
            "opencode",
            "--",
            &program.to_string_lossy(),
        ])
        .assert()
        .success();
    let config = read(&sandbox.path("record").join("config"));
    assert!(
        config.contains("\"mcp\"") && config.contains("local"),
        "{config}"
    );
}

/// Gemini CLI (its row's `gateway_by_default`) goes through the gateway unless `--no-gateway`: its settings
/// hold one server, `tether`, whose command is tether's exec shim, and its environment holds
/// no secret; `--audit` without the gateway is refused.
#[test]
fn gemini_gets_the_gateway_by_default() {
    let sandbox = Sandbox::new();
    let program = fake_harness(&sandbox, "gemini", "0");
    let spec = config(&[server_json("local", &[], &[("API_KEY", "{{TOKEN}}")])]);
    let program_arg = program.to_string_lossy().into_owned();
    // A file source: an `env:` source's variable stays in the harness's own environment.
    let secret_file = sandbox.write("token.txt", SECRET);
    let source = format!("TOKEN=file:{secret_file}");
    let out = sandbox
        .tether(&[
            "run",
            "--mcp",
            &spec,
            "--secret",
            &source,
            "--",
            &program_arg,
        ])
        .env("HOME", sandbox.path("home"))
        .output()
        .expect("running tether");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let record = sandbox.path("record");
    let settings: serde_json::Value =
        serde_json::from_str(&read(&record.join("config"))).expect("gemini settings are JSON");
    let servers = settings["mcpServers"].as_object().expect("mcpServers");
    assert_eq!(servers.keys().collect::<Vec<_>>(), ["tether"], "{settings}");
    let args = servers["tether"]["args"].to_string();
    assert!(args.contains("__exec"), "{settings}");
    assert!(!read(&record.join("env")).contains(SECRET));
    assert!(
        text(&out.stderr).contains("the harness gets one MCP server, `tether`"),
        "{}",
        text(&out.stderr)
    );

    // Claude keeps the direct hand-off; --audit there needs --gateway.
    let claude = fake_harness(&sandbox, "claude", "0");
    let out = sandbox.run(&[
        "run",
        "--mcp",
        &spec,
        "--audit",
        "audit.jsonl",
        "--",
        &claude.to_string_lossy(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("add --gateway"),
        "{}",
        text(&out.stderr)
    );
}

/// A hostile value for a variable of the harness's environment that no server may see.
const HARNESS_ONLY: &str = "aws-SENTINEL $HOME ${X} $$ %41 \"q\" 'q' \\ {{x}} é✓";

#[test]
fn a_server_started_through_the_shim_gets_the_allow_list_not_the_harness_environment() {
    for harness in ["claude", "gemini", "opencode", "codex"] {
        let sandbox = Sandbox::new();
        let record = sandbox.path("record");
        let program = fake_harness(&sandbox, harness, "0");
        // The harness starts its one stdio server as its config says (`tether __exec SOCKET
        // ID`, the arguments found in whichever format it was handed) before it exits.
        let tether = env!("CARGO_BIN_EXE_tether");
        let script = std::fs::read_to_string(&program).expect("reading the fake harness");
        let start = format!(
            r#"line=$(tr -d '\n ' < '{r}/config' | grep -o '"__exec","[^"]*","[^"]*"' | head -1)
'{tether}' __exec "$(echo "$line" | cut -d'"' -f4)" "$(echo "$line" | cut -d'"' -f6)"
exit 0
"#,
            r = record.display()
        );
        std::fs::write(&program, script.replace("exit 0\n", &start)).expect("writing");
        let dump = format!("env > '{}/server-env'", record.display());
        let spec = config(&[format!(
            r#""local": {{"command": "/bin/sh", "args": ["-c", {dump:?}], "env": {{"OWN": "mine"}}}}"#
        )]);
        let out = hand_off(&sandbox, &spec, &["--pass-env", "PASSED"], &program, &[])
            .env("AWS_SECRET_ACCESS_KEY", HARNESS_ONLY)
            .env("GITHUB_TOKEN", HARNESS_ONLY)
            .env("PASSED", "passed-value")
            .output()
            .expect("running tether");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{harness}: {}",
            text(&out.stderr)
        );
        let env = read(&record.join("server-env"));
        assert!(
            env.contains("OWN=mine"),
            "{harness}: the server did not run: {env}"
        );
        assert!(
            !env.contains("aws-SENTINEL")
                && !env.contains("AWS_SECRET_ACCESS_KEY")
                && !env.contains("GITHUB_TOKEN"),
            "{harness}: the harness's environment reached the server: {env}"
        );
        assert!(
            !env.contains(SECRET) && !env.lines().any(|l| l.starts_with("SRC=")),
            "{harness}: a secret's source variable reached the server"
        );
        assert!(
            env.contains("PASSED=passed-value"),
            "{harness}: --pass-env: {env}"
        );
        assert!(
            env.lines().any(|l| l.starts_with("PATH=")),
            "{harness}: the allow-list: {env}"
        );
        let names: Vec<&str> = env
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(n, _)| n)
            .collect();
        for name in &names {
            assert!(
                tether_driver::ENV_WHITELIST.contains(name)
                    || ["PASSED", "OWN", "PWD", "SHLVL", "_"].contains(name),
                "{harness}: {name} is not on the allow-list"
            );
        }
    }
}

/// A fake `claude` that starts the one stdio server in its `--mcp-config=FILE` as a harness
/// would (its command, args and env), asks it `initialize` and `tools/list` over stdio, and
/// writes the tool names, one a line, to `$RECORD`.
const LISTING_HARNESS: &str = r#"#!/usr/bin/env python3
import json, os, subprocess, sys
path = [a for a in sys.argv[1:] if a.startswith("--mcp-config=")][0].split("=", 1)[1]
(server,) = json.load(open(path))["mcpServers"].values()
env = dict(os.environ); env.update(server.get("env", {}))
child = subprocess.Popen([server["command"]] + server.get("args", []), env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
def send(message):
    child.stdin.write(json.dumps(message) + "\n"); child.stdin.flush()
def answer(id):
    for line in child.stdout:
        message = json.loads(line)
        if message.get("id") == id:
            return message
send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "fake", "version": "0"}}})
answer(1)
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
tools = answer(2)["result"]["tools"]
open(os.environ["RECORD"], "w").write("".join(t["name"] + "\n" for t in tools))
child.stdin.close(); child.wait(timeout=30)
"#;

/// `run --gateway` takes the gateway's tool-search flags: `--tool-mode search` hands the
/// harness the two search tools and the `--always-load` tool only; without the gateway the
/// flags are refused.
#[test]
fn run_through_the_gateway_takes_the_tool_search_flags() {
    let sandbox = Sandbox::new();
    let harness = sandbox.fake_program("claude", LISTING_HARNESS);
    let harness = harness.to_string_lossy().into_owned();
    let spec = format!("{{{}}}", server_json("probe", &[], &[]));
    let record = sandbox.path("tools");
    let listed = |flags: &[&str]| {
        let mut args = vec!["run", "--gateway", "--strict-mcp", "--mcp", &spec];
        args.extend_from_slice(flags);
        args.extend(["--", harness.as_str()]);
        let out = sandbox
            .tether(&args)
            .env("RECORD", &record)
            .output()
            .expect("running tether");
        assert!(out.status.success(), "{flags:?}: {}", text(&out.stderr));
        let names = read(&record);
        std::fs::remove_file(&record).expect("removing the record");
        names.lines().map(str::to_owned).collect::<Vec<_>>()
    };

    let all = listed(&["--tool-mode", "all"]);
    assert!(
        all.contains(&"probe__echo".to_owned()) && all.contains(&"probe__add".to_owned()),
        "{all:?}"
    );
    assert!(
        !all.iter().any(|name| name == "tether__find_tools"),
        "{all:?}"
    );

    let search = listed(&["--tool-mode", "search", "--always-load", "probe__echo"]);
    for name in ["tether__find_tools", "tether__call_tool", "probe__echo"] {
        assert!(
            search.contains(&name.to_owned()),
            "{name} not in {search:?}"
        );
    }
    assert!(!search.contains(&"probe__add".to_owned()), "{search:?}");

    let out = sandbox.run(&[
        "run",
        "--no-gateway",
        "--mcp",
        &spec,
        "--tool-mode",
        "search",
        "--",
        &harness,
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--tool-mode sets up the gateway: add --gateway"),
        "{}",
        text(&out.stderr)
    );

    let out = sandbox.run(&[
        "run",
        "--no-gateway",
        "--mcp",
        &spec,
        "--secret-scan",
        "block",
        "--",
        &harness,
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--secret-scan sets up the gateway"),
        "{}",
        text(&out.stderr)
    );
    // The gateway takes it (the scan itself: tether-gateway's tests/secret_scan.rs).
    assert!(
        listed(&["--secret-scan", "block", "--tool-mode", "all"])
            .contains(&"probe__echo".to_owned())
    );

    // --lazy starts servers when asked for; --strict-mcp wants them all started first.
    let out = sandbox.run(&[
        "run",
        "--gateway",
        "--lazy",
        "--strict-mcp",
        "--mcp",
        &spec,
        "--",
        &harness,
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("drop one"),
        "{}",
        text(&out.stderr)
    );
}

/// With trace export on, `tether run` is a span under the caller's `TRACEPARENT`, and the
/// harness gets a `TRACEPARENT` naming that span; the span is exported when tether exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_trace_export_on_the_harness_gets_a_traceparent_naming_the_run() {
    const CALLER_TRACE: &str = "5b8efff798038103d269b633813fc60c";
    const CALLER_SPAN: &str = "eee19b7ec3c1b174";
    let receiver = tether_testkit::otlp::OtlpReceiver::start()
        .await
        .expect("starting the OTLP receiver");
    let sandbox = Sandbox::new();
    let program = fake_harness(&sandbox, "claude", "0");
    let spec = spec();
    let mut command = hand_off(&sandbox, &spec, &[], &program, &[]);
    command
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint)
        .env("TRACEPARENT", format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01"));
    let out = command.output().expect("running tether");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let env = read(&sandbox.path("record/env"));
    let given = env
        .lines()
        .find_map(|line| line.strip_prefix("TRACEPARENT="))
        .unwrap_or_else(|| panic!("no TRACEPARENT in the harness's environment:\n{env}"))
        .to_owned();
    let parts: Vec<&str> = given.split('-').collect();
    assert_eq!(parts.len(), 4, "{given}");
    assert_eq!(parts[1], CALLER_TRACE, "{given}");
    assert_ne!(parts[2], CALLER_SPAN, "{given}");
    // tether flushed the export before exiting: the run's span is there.
    let spans = receiver.spans();
    let run = spans
        .iter()
        .find(|span| span.name == "tether run")
        .unwrap_or_else(|| panic!("no run span in {spans:?}"));
    assert_eq!(run.trace_id, CALLER_TRACE);
    assert_eq!(run.parent_span_id, CALLER_SPAN);
    assert_eq!(run.span_id, parts[2]);
}
