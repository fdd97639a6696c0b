//! `tether add` against the fixture registry, test-connecting real server-everything (npm):
//! as a stdio package (through an `npx` shim that runs the pinned, already installed package)
//! and as a remote in Streamable HTTP mode behind a required secret header.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tether_testkit::{EverythingServer, FixtureRegistry, server_everything};

use crate::support::{Sandbox, text};

/// A directory holding an `npx` that runs `body` (a shell script fragment).
fn npx_shim(sandbox: &Sandbox, body: &str) -> PathBuf {
    let dir = sandbox.path("shim");
    std::fs::create_dir_all(&dir).expect("creating the shim directory");
    let npx = dir.join("npx");
    std::fs::write(&npx, format!("#!/bin/sh\n{body}\n")).expect("writing the npx shim");
    std::fs::set_permissions(&npx, std::fs::Permissions::from_mode(0o755))
        .expect("making the shim executable");
    dir
}

fn path_with(dir: &std::path::Path) -> String {
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

fn tether(
    sandbox: &Sandbox,
    registry: &FixtureRegistry,
    path: Option<&str>,
    args: &[&str],
) -> std::process::Output {
    let mut command = sandbox.tether(args);
    command
        .env("TETHER_REGISTRY_URL", &registry.url)
        .env_remove("SMITHERY_API_KEY");
    if let Some(path) = path {
        command.env("PATH", path);
    }
    command.output().expect("running tether")
}

fn installations(sandbox: &Sandbox) -> serde_json::Value {
    let out = sandbox.run(&["list", "--json"]);
    serde_json::from_slice(&out.stdout).expect("list --json")
}

#[test]
fn add_a_stdio_package_test_connects_then_stores_it_and_it_runs_by_uuid() {
    let Some(everything) = server_everything() else {
        return;
    };
    let sandbox = Sandbox::new();
    let registry = FixtureRegistry::start(&[]);
    // npx -y PACKAGE@VERSION ARGS… → the installed server-everything with ARGS, after
    // checking that tether pinned the version.
    let shim = npx_shim(
        &sandbox,
        &format!(
            "[ \"$1\" = -y ] && [ \"$2\" = @modelcontextprotocol/server-everything@2026.8.31 ] || {{ echo \"unexpected npx $*\" >&2; exit 64; }}\nshift 2\nexec {} \"$@\"",
            everything.display()
        ),
    );
    let path = path_with(&shim);
    let out = tether(
        &sandbox,
        &registry,
        Some(&path),
        // The shim runs the package from outside anything a sandbox grants it.
        &["add", "io.github.example/everything", "--sandbox", "none"],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let uid = text(&out.stdout).trim().to_owned();
    assert_eq!(uid.len(), 36, "{uid}");
    assert!(
        stderr.contains("using the npm package @modelcontextprotocol/server-everything 2026.8.31 of io.github.example/everything 2026.8.31"),
        "{stderr}"
    );
    assert!(stderr.contains("test-connect: ready, "), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "added 'everything'; use it with: tether test --mcp {uid}"
        )),
        "{stderr}"
    );
    assert_eq!(
        installations(&sandbox),
        serde_json::json!({"installations": [{
            "uid": uid,
            "name": "everything",
            "source": {
                "registry": "official",
                "name": "io.github.example/everything",
                "version": "2026.8.31",
                "package": "npm package @modelcontextprotocol/server-everything 2026.8.31",
            },
            "transport": "stdio",
            "variables": [],
            "stored": [],
            "missing": [],
        }]})
    );

    for spec in [uid.as_str(), "everything"] {
        let out = sandbox
            .tether(&["test", "--mcp", spec])
            .env("PATH", &path)
            .output()
            .expect("running tether test");
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert!(
            text(&out.stdout).contains("everything"),
            "{}",
            text(&out.stdout)
        );
    }
}

#[test]
fn a_failing_test_connect_shows_the_servers_stderr_and_stores_nothing() {
    let sandbox = Sandbox::new();
    let registry = FixtureRegistry::start(&[]);
    let shim = npx_shim(
        &sandbox,
        "echo 'npm ERR! 404 Not Found - the package is gone' >&2\nexit 1",
    );
    let out = tether(
        &sandbox,
        &registry,
        Some(&path_with(&shim)),
        &["add", "io.github.example/everything", "--timeout", "20"],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("test-connect failed: "), "{stderr}");
    assert!(
        stderr.contains("npm ERR! 404 Not Found - the package is gone"),
        "{stderr}"
    );
    assert!(stderr.ends_with("nothing was stored\n"), "{stderr}");
    assert_eq!(text(&out.stdout), "");
    assert_eq!(
        installations(&sandbox),
        serde_json::json!({"installations": []})
    );
}

/// `tether add` of the remote entry (server-everything in Streamable HTTP mode behind a
/// required secret header) stores the secret in the secret store `backend`, never in
/// `tether.db`, and `tether test --mcp NAME` then needs no `--secret`.
fn add_a_remote_with_a_required_secret_header(backend: &str) {
    let Some(everything) = server_everything() else {
        return;
    };
    let server = EverythingServer::start(&everything, "streamableHttp");
    let sandbox = Sandbox::new();
    let registry = FixtureRegistry::start(&[]);
    let key = format!("ek-remote-secret-93817-$HOME-{backend}");
    let port = server.port.to_string();
    let set_port = format!("port={port}");

    // Without the required secret and without a terminal: the flags to pass, nothing stored.
    let out = tether(
        &sandbox,
        &registry,
        None,
        &[
            "add",
            "io.github.example/everything",
            "--package",
            "remote",
            "--set",
            &set_port,
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr).lines().skip(1).collect::<Vec<_>>(),
        [
            "error: the entry needs values for:",
            "  --secret X-Api-Key=SOURCE  (Key the gateway checks)"
        ]
    );

    let out = sandbox
        .tether(&[
            "-vvv",
            "add",
            "io.github.example/everything",
            "--package",
            "remote",
            "--set",
            &set_port,
            "--secret",
            "X-Api-Key=env:EVERYTHING_KEY",
            "--name",
            "everything-http",
        ])
        .env("TETHER_REGISTRY_URL", &registry.url)
        .env("TETHER_SECRET_STORE", backend)
        .env("EVERYTHING_KEY", &key)
        .output()
        .expect("running tether add");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains(&key), "{stderr}");
    let uid = text(&out.stdout).trim().to_owned();
    let place = if backend == "file" {
        format!("the file {}", sandbox.home().join("secrets.json").display())
    } else {
        "the OS credential store".to_owned()
    };
    assert!(
        stderr.contains(&format!("added 'everything-http'; its secrets (X-Api-Key) are stored in {place}; use it with: tether test --mcp {uid}")),
        "{stderr}"
    );
    let listed = installations(&sandbox);
    assert_eq!(
        listed["installations"][0]["stored"],
        serde_json::json!([{"name": "X-Api-Key", "location": backend}])
    );
    assert_eq!(listed["installations"][0]["missing"], serde_json::json!([]));
    assert_eq!(listed["installations"][0]["transport"], "http");
    for entry in std::fs::read_dir(sandbox.home()).expect("TETHER_HOME") {
        let path = entry.expect("an entry").path();
        if path.is_file() && path.file_name().is_some_and(|n| n != "secrets.json") {
            let bytes = std::fs::read(&path).expect("reading a store file");
            assert!(
                !String::from_utf8_lossy(&bytes).contains(&key),
                "{} holds the secret",
                path.display()
            );
        }
    }

    // No --secret: the stored one is applied in memory.
    let out = sandbox
        .tether(&["-vvv", "test", "--mcp", "everything-http"])
        .env("TETHER_SECRET_STORE", backend)
        .output()
        .expect("running tether test");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(text(&out.stdout).contains("ready"), "{}", text(&out.stdout));
    assert!(!stderr.contains("which no secret fills"), "{stderr}");
    assert!(!stderr.contains(&key) && !text(&out.stdout).contains(&key));

    let out = sandbox.run(&["remove", &uid]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn add_a_remote_with_a_required_secret_header_file_backend() {
    add_a_remote_with_a_required_secret_header("file");
}

#[test]
fn add_a_remote_with_a_required_secret_header_secret_service() {
    if crate::stored::secret_service_or_skip() {
        add_a_remote_with_a_required_secret_header("keyring");
    }
}

/// `tether-test-mcp --http` on a free port: a remote the fixture's `everything` entry can
/// point at (`--set port=…`) without npm.
struct HttpTestMcp {
    child: Child,
    port: u16,
}

impl HttpTestMcp {
    fn start() -> Self {
        Self::start_with(&[])
    }

    /// With more arguments (`--extra-tool TEXT`, …).
    fn start_with(args: &[&str]) -> Self {
        let mut child = Command::new(tether_testkit::test_server_bin())
            .args(["--http", "127.0.0.1:0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting tether-test-mcp --http");
        let stdout = child.stdout.take().expect("its stdout");
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)
            .expect("reading the listening line");
        let port = line
            .trim()
            .rsplit(':')
            .next()
            .and_then(|rest| rest.split('/').next())
            .and_then(|port| port.parse().ok())
            .expect("a port in the listening line");
        Self { child, port }
    }
}

impl Drop for HttpTestMcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tether add` SIGKILLed at each step of storing leaves either nothing
/// visible or everything, and the next run sweeps what a killed one left half-written.
#[test]
fn add_killed_at_each_step_leaves_nothing_or_everything() {
    let server = HttpTestMcp::start();
    let registry = FixtureRegistry::start(&[]);
    let key = "SENTINEL-killed-add-5e21";
    for (step, visible) in [("pending", false), ("values", false), ("committed", true)] {
        let sandbox = Sandbox::new();
        let marker = sandbox.path("paused");
        let mut child = Command::new(assert_cmd::cargo::cargo_bin("tether"))
            .args([
                "add",
                "io.github.example/everything",
                "--package",
                "remote",
                "--set",
                &format!("port={}", server.port),
                "--secret",
                "X-Api-Key=env:KEY",
                "--timeout",
                "30",
            ])
            .current_dir(sandbox.dir.path())
            .env("TETHER_HOME", sandbox.home())
            .env("TETHER_REGISTRY_URL", &registry.url)
            .env("TETHER_SECRET_STORE", "file")
            .env("KEY", key)
            .env(
                "TETHER_TEST_STORE_PAUSE",
                format!("{step}:{}", marker.display()),
            )
            .env_remove("SMITHERY_API_KEY")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting tether add");
        let waited = Instant::now();
        while !marker.exists() {
            assert!(
                waited.elapsed() < Duration::from_secs(60),
                "tether add never reached {step}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        child.kill().expect("SIGKILL");
        child.wait().expect("waiting for tether add");

        // The next run sees either nothing or the installation with its secret; it sweeps
        // the values a killed writer left pending.
        let listed = installations(&sandbox);
        let rows = listed["installations"].as_array().expect("a list");
        if visible {
            assert_eq!(rows.len(), 1, "{step}: {listed}");
            assert_eq!(rows[0]["missing"], serde_json::json!([]), "{step}");
            let out = sandbox
                .tether(&["test", "--mcp", "everything"])
                .env("TETHER_SECRET_STORE", "file")
                .output()
                .expect("running tether test");
            assert_eq!(out.status.code(), Some(0), "{step}: {}", text(&out.stderr));
        } else {
            assert!(rows.is_empty(), "{step}: {listed}");
            let secret_file = sandbox.home().join("secrets.json");
            let left = std::fs::read_to_string(&secret_file).unwrap_or_default();
            assert!(
                !left.contains(key),
                "{step}: a value was left behind: {left}"
            );
        }
    }
}

#[test]
fn add_validates_inputs_before_launching_anything() {
    let sandbox = Sandbox::new();
    let registry = FixtureRegistry::start(&[]);
    let cases: [(&[&str], &str); 6] = [
        (
            &["add", "@smithery-ai/github"],
            // A Smithery-hosted server needs Smithery's key (tests/cli/smithery_add.rs adds one).
            "error: Smithery needs an API key: store it once with `tether secrets set --registry smithery`, or set SMITHERY_API_KEY (or smithery_api_key_file in config.toml)\n",
        ),
        (
            &[
                "add",
                "io.github.example/nuget-tools",
                "--package",
                "nuget",
                "--set",
                "dir=/srv",
                "--set",
                "MODE=read",
            ],
            "error: --set MODE: the nuget package Example.McpTools 2.1.0 has no input named MODE (its inputs: dir, TOOLS_MODE)\n",
        ),
        (
            &[
                "add",
                "io.github.example/nuget-tools",
                "--package",
                "nuget",
                "--set",
                "dir=/srv",
                "--set",
                "TOOLS_MODE=delete",
            ],
            "error: TOOLS_MODE: must be one of read, write\n",
        ),
        (
            &[
                "add",
                "io.github.example/everything",
                "--package",
                "remote",
                "--set",
                "port=http",
            ],
            "error: port: must be a number\n",
        ),
        (
            &[
                "add",
                "com.example/tenant-api",
                "--set",
                "tenant_id=acme",
                "--set",
                "api_token=sk-in-argv",
            ],
            "error: api_token is a secret: give it with --secret api_token=SOURCE, not --set\n",
        ),
        (
            &["add", "io.github.example/weather", "--package", "oci"],
            "error: io.github.example/weather has no oci package (it has: pypi)\n",
        ),
    ];
    for (args, expected) in cases {
        let out = tether(&sandbox, &registry, None, args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        let stderr = text(&out.stderr);
        let error = stderr
            .lines()
            .filter(|l| l.starts_with("error: "))
            .collect::<Vec<_>>()
            .join("\n")
            + "\n";
        assert_eq!(error, expected, "{args:?}");
    }
    assert_eq!(
        installations(&sandbox),
        serde_json::json!({"installations": []})
    );
}

#[test]
fn sigterm_during_the_test_connect_stops_the_server_and_stores_nothing() {
    let sandbox = Sandbox::new();
    let registry = FixtureRegistry::start(&[]);
    let started = sandbox.path("npx-started");
    // A server that never answers: it says it started, then sleeps (its marker is unique to
    // this test, so the process check below cannot see another test's processes).
    let marker = format!("tether-add-sigterm-{}", std::process::id());
    let shim = npx_shim(
        &sandbox,
        &format!(
            "touch {}\nexec sh -c 'sleep 300; : {marker}'",
            started.display()
        ),
    );
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("tether"))
        .args(["add", "io.github.example/everything", "--timeout", "60"])
        // The shim's marker file is outside anything a sandbox grants it.
        .args(["--sandbox", "none"])
        .current_dir(sandbox.dir.path())
        .env("TETHER_HOME", sandbox.home())
        .env("TETHER_REGISTRY_URL", &registry.url)
        .env("PATH", path_with(&shim))
        .env_remove("SMITHERY_API_KEY")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting tether add");
    let waited = Instant::now();
    while !started.exists() || tether_testkit::processes_with(&marker).is_empty() {
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "the server never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("a pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("sending SIGTERM");
    let status = child.wait().expect("waiting for tether add");
    assert_eq!(status.code(), Some(143));
    let gone = Instant::now();
    while !tether_testkit::processes_with(&marker).is_empty() {
        assert!(
            gone.elapsed() < Duration::from_secs(10),
            "the server outlived tether add"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        installations(&sandbox),
        serde_json::json!({"installations": []})
    );
}

/// Prompts on a terminal.
mod terminal;

/// MCP bundles.
mod mcpb;

/// Registry entries once added.
mod registry_entries;
