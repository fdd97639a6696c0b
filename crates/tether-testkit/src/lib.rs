//! Test helpers shared by tether's crates (a dev-dependency only).
//!
//! - [`Tether`] / [`tether_bin`]: the one command builder for the `tether` binary (its own
//!   `TETHER_HOME`, no managed server, options for the rest);
//! - [`test_server_bin`] / [`workspace_artifact`]: binaries of this workspace, found in the
//!   target directory the tests were built into (built on demand when missing);
//! - [`npm_bin`] / [`server_everything`]: the pinned npm packages of `npm-packages.txt`
//!   (server-everything and the harness CLIs), installed once under a file lock;
//! - [`FixtureRegistry`]: the loopback fixture registry (`tether-test-registry`), started
//!   as a real process;
//! - [`processes_in_group`] / [`wait_group_gone`] / [`terminal_echo_is_off`]: process checks
//!   through `/proc`;
//! - [`files_bytes`] / [`holds`]: what a store wrote to disk (sentinel searches);
//! - [`output_within`] / [`strip_ansi`]: a harness CLI run with a time limit, its coloured
//!   listing as plain text;
//! - [`mcp_client`]: an MCP client's view of the gateway (list changes, `tether_status`,
//!   calls left running), for tests of servers joining it;
//! - [`ManualClock`]: a clock the test moves forward, for code that takes a
//!   `tether_clock::Clock`;
//! - [`postgres`]: throwaway PostgreSQL clusters (`PgCluster`), and the switch that runs
//!   tether-server's suite on one (`TETHER_TEST_BACKEND=postgres`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

mod clock;
pub mod managed;
pub mod mcp_client;
mod missing;
mod npm;
pub mod otlp;
pub mod postgres;
mod registry;
mod tether;

pub use clock::ManualClock;
pub use missing::{missing, skipped, under_ci};
pub use npm::{NPM_PACKAGES_FILE, NpmPackage, npm_bin, npm_packages, npm_prefix};
pub use registry::{FIXTURE_SMITHERY_KEY, FixtureRegistry, test_registry_bin};
pub use tether::{Tether, tether_bin};

/// The `tether-test-mcp` binary (built on first use when a test runs without the workspace).
pub fn test_server_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        workspace_artifact(
            &["-p", "tether-test-mcp", "--bin", "tether-test-mcp"],
            Path::new("tether-test-mcp"),
        )
    })
    .clone()
}

/// `target/debug/<path>` of this workspace, built with `cargo build ARGS` only when it is missing.
///
/// `cargo test --workspace` builds every binary and example first, so this normally finds the
/// file; building it again from inside a test would re-resolve features for one package and
/// could rebuild shared dependencies. The build is quiet: see
/// [`workspace_artifact_with_progress`] for one that shows what it compiles.
pub fn workspace_artifact(args: &[&str], path: &Path) -> PathBuf {
    build_artifact(args, path, false)
}

/// [`workspace_artifact`], with cargo's own progress (each crate it compiles) on stderr: for
/// programs a person watches, such as the quick start, where a first build takes minutes.
pub fn workspace_artifact_with_progress(args: &[&str], path: &Path) -> PathBuf {
    build_artifact(args, path, true)
}

fn build_artifact(args: &[&str], path: &Path, progress: bool) -> PathBuf {
    let target = target_dir();
    let existing = target.join("debug").join(path);
    if existing.is_file() {
        return existing;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut command = Command::new(cargo);
    command.arg("build");
    if !progress {
        command.arg("--quiet");
    }
    let status = command
        .args(args)
        .env("CARGO_TARGET_DIR", &target)
        .status()
        .unwrap_or_else(|e| panic!("cannot run cargo build {args:?}: {e}"));
    assert!(status.success(), "cargo build {args:?} failed");
    let bin = target.join("debug").join(path);
    assert!(bin.is_file(), "{} was not built", bin.display());
    bin
}

/// The target directory this test binary was built in (…/target/debug/deps/driver-… → …/target).
pub fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    exe.ancestors()
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n == "debug" || n == "release")
        })
        .and_then(Path::parent)
        .map(Path::to_owned)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"))
}

/// Every byte of every regular file directly in `dir` (a database with its `-wal`/`-shm`
/// files), concatenated: for checking that a value was, or was no longer, written to disk.
pub fn files_bytes(dir: &Path) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_file() {
            bytes.extend(std::fs::read(&path)?);
        }
    }
    Ok(bytes)
}

/// Whether `haystack` holds the bytes of `needle`.
pub fn holds(haystack: &[u8], needle: &str) -> bool {
    !needle.is_empty()
        && haystack
            .windows(needle.len())
            .any(|window| window == needle.as_bytes())
}

/// Runs `command` to completion with stdout and stderr captured, killing it (SIGKILL) if it
/// takes longer than `limit`: for harness CLIs, which may wait for input forever.
pub fn output_within(mut command: Command, limit: Duration) -> std::process::Output {
    let child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot spawn {command:?}: {e}"));
    let pid = child.id();
    let (sender, receiver) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if receiver.recv_timeout(limit).is_err() {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
        }
    });
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("cannot wait for the process: {e}"));
    let _ = sender.send(());
    out
}

/// `text` without ANSI escape sequences (harness CLIs colour their listings).
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for next in chars.by_ref() {
                if next.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A JSON string literal for `text` (for building configs by hand).
pub fn json_str(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

/// A live (not zombie) process, read from /proc.
struct Process {
    pid: i32,
    pgrp: Option<i32>,
    cmdline: String,
}

/// Every live process this user can see.
fn live_processes() -> Vec<Process> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<i32>().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // Fields after the parenthesized command: state ppid pgrp …
            let (_, rest) = stat.rsplit_once(')')?;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            if fields.first() == Some(&"Z") {
                return None;
            }
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            Some(Process {
                pid,
                pgrp: fields.get(2).and_then(|f| f.parse().ok()),
                cmdline: String::from_utf8_lossy(&cmdline).replace('\0', " "),
            })
        })
        .collect()
}

/// Whether a live process of `program` (its `argv[0]`) whose command line contains `marker`
/// reads from a terminal with echo off (`stty -F` on the pseudo-terminal of its stdin): a
/// hidden prompt is up and typing now is not echoed. False while no such process is found.
pub fn terminal_echo_is_off(program: &Path, marker: &str) -> bool {
    let program = program.as_os_str().as_encoded_bytes();
    processes_with(marker).into_iter().any(|pid| {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let Ok(tty) = std::fs::read_link(format!("/proc/{pid}/fd/0")) else {
            return false;
        };
        cmdline.split(|b| *b == 0).next() == Some(program)
            && Command::new("stty")
                .arg("-F")
                .arg(&tty)
                .arg("-a")
                .output()
                .is_ok_and(|out| {
                    String::from_utf8_lossy(&out.stdout)
                        .split_whitespace()
                        .any(|flag| flag == "-echo")
                })
    })
}

/// Pids of live processes whose process group is `pgid`.
pub fn processes_in_group(pgid: i32) -> Vec<i32> {
    live_processes()
        .into_iter()
        .filter(|p| p.pgrp == Some(pgid))
        .map(|p| p.pid)
        .collect()
}

/// Pids of live processes (other than this one) whose command line contains `marker`.
pub fn processes_with(marker: &str) -> Vec<i32> {
    let me = i32::try_from(std::process::id()).unwrap_or(-1);
    live_processes()
        .into_iter()
        .filter(|p| p.pid != me && p.cmdline.contains(marker))
        .map(|p| p.pid)
        .collect()
}

/// What the process `pid` has read so far (`rchar` in /proc/PID/io): it changes when a server
/// reads a request, the event a test of a call under way waits for.
pub fn bytes_read(pid: i32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io"))
        .unwrap_or_else(|e| panic!("reading /proc/{pid}/io: {e}"));
    io.lines()
        .find_map(|line| line.strip_prefix("rchar: "))
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or_else(|| panic!("no rchar line in /proc/{pid}/io: {io}"))
}

/// The one test server process (`test_server_bin`) whose command line holds `marker`.
pub fn test_server_with(marker: &str) -> i32 {
    let server_exe = test_server_bin()
        .canonicalize()
        .unwrap_or_else(|e| panic!("the test server's path: {e}"));
    let upstream: Vec<i32> = processes_with(marker)
        .into_iter()
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| exe == server_exe)
        })
        .collect();
    assert_eq!(
        upstream.len(),
        1,
        "the test server with {marker}: {upstream:?}"
    );
    upstream[0]
}

/// Waits (bounded) until no live process is left in `pgid`.
pub async fn wait_group_gone(pgid: i32, limit: Duration) -> Vec<i32> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let left = processes_in_group(pgid);
        if left.is_empty() || tokio::time::Instant::now() >= deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The `mcp-server-everything` launcher of `@modelcontextprotocol/server-everything`, pinned
/// in `npm-packages.txt` (see [`npm_bin`]).
pub fn server_everything() -> Option<PathBuf> {
    npm_bin("mcp-server-everything")
}

/// server-everything (the launcher `bin`, see [`server_everything`]) serving `mode`
/// (`streamableHttp`: `/mcp`, or `sse`: `/sse`) on a free loopback port; killed on drop.
pub struct EverythingServer {
    child: std::process::Child,
    /// The port it listens on.
    pub port: u16,
}

impl EverythingServer {
    /// Starts it and waits (up to 30 s) until it accepts connections; panics otherwise.
    pub fn start(bin: &Path, mode: &str) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map(|address| address.port())
            .unwrap_or_else(|e| panic!("no free port: {e}"));
        let child = Command::new(bin)
            .arg(mode)
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start server-everything: {e}"));
        let started = std::time::Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "server-everything did not listen"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Self { child, port }
    }
}

impl Drop for EverythingServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A model provider on loopback that refuses every request with 400 at once: GitHub Copilot CLI
/// in offline mode (`COPILOT_OFFLINE`, a BYOK provider) starts a session, connects its MCP
/// servers, calls the model once and stops, with no account and no network. Answers until the
/// test process ends.
pub fn refusing_model_provider() -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap_or_else(|e| panic!("binding a loopback port: {e}"));
    let address = listener
        .local_addr()
        .unwrap_or_else(|e| panic!("the listener's address: {e}"));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
            // The request: headers, then Content-Length bytes of body.
            let mut request = Vec::new();
            let mut buf = [0u8; 8192];
            let body_start = loop {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break None,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
                if let Some(at) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                    break Some(at + 4);
                }
            };
            let Some(body_start) = body_start else {
                continue;
            };
            let head = String::from_utf8_lossy(&request[..body_start]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            while request.len() < body_start + length {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let body = r#"{"error":{"message":"no model here","type":"invalid_request_error"}}"#;
            let _ = write!(
                stream,
                "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!("http://{address}")
}

/// Sets GitHub Copilot CLI's offline mode on `command`: no account, no network, no
/// self-update, its model a [`refusing_model_provider`] (a session connects its MCP servers,
/// calls the model once and stops).
pub fn copilot_offline(command: &mut Command) {
    command
        .env("COPILOT_OFFLINE", "true")
        .env("COPILOT_PROVIDER_BASE_URL", refusing_model_provider())
        .env("COPILOT_MODEL", "gpt-4o")
        .env("COPILOT_AUTO_UPDATE", "false");
}

/// The MCP Apps example server from npm (`@modelcontextprotocol/server-basic-vanillajs`): one
/// tool, `get-time`, whose app is the `ui://get-time/mcp-app.html` resource. Run it with
/// `--stdio`. `None` as [`npm_bin`] says.
pub fn app_server() -> Option<PathBuf> {
    npm_bin("mcp-server-basic-vanillajs")
}
