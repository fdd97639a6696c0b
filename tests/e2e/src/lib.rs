//! The managed stack as real processes on loopback: a `tether-server` with its store in a temp
//! directory, its admin CLI, and the `tether` CLI pointed at it. Used by the end-to-end tests
//! and by the quick start.
//!
//! With `TETHER_TEST_BACKEND=postgres-replicas` the stack is two replicas on one PostgreSQL
//! database (a throwaway cluster): the CLI's GraphQL goes to replica A, whose proxy URLs
//! (`--public-url`) name replica B, so every proxied call uses a token minted by the other
//! replica.

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub use tether_testkit::{
    Tether, files_bytes, holds, json_str, processes_with, test_server_bin, tether_bin,
    workspace_artifact, workspace_artifact_with_progress,
};

/// The `tether-server` binary.
pub fn server_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        workspace_artifact(
            &["-p", "tether-server", "--bin", "tether-server"],
            Path::new("tether-server"),
        )
    })
    .clone()
}

/// A running reference server with a client API key, and a sandbox for the CLI.
pub struct Stack {
    /// Temp directory holding the server's data and the CLI's TETHER_HOME.
    pub dir: tempfile::TempDir,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// A client API key for team `default`.
    pub api_key: String,
    /// The base of the proxy URLs the server hands out: `base`, or replica B's.
    pub proxy_base: String,
    server: Child,
    /// Replica B, when the stack runs as two replicas.
    replica: Option<Child>,
    /// `--data-dir DIR` or `--database-url URL`.
    database: Vec<OsString>,
    extra_serve_args: Vec<String>,
}

/// Why the stack could not be set up (a message for a person).
pub type StackError = String;

impl Stack {
    /// Starts `tether-server serve` on an ephemeral loopback port with `extra` serve flags.
    pub fn start(extra: &[&str]) -> Result<Self, StackError> {
        let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
        let extra_serve_args: Vec<String> = extra.iter().map(|s| (*s).to_owned()).collect();
        let data_dir = dir.path().join("server-data");
        let (database, replica, a_args, proxy_base) =
            if tether_testkit::postgres::replicas_enabled() {
                let postgres = tether_testkit::postgres::shared();
                let url = postgres.database(&tether_testkit::postgres::database_name(&data_dir));
                let database: Vec<OsString> = vec!["--database-url".into(), url.into()];
                let (replica, base_b) = serve(&database, &extra_serve_args)?;
                let mut a_args = extra_serve_args.clone();
                a_args.extend(["--public-url".to_owned(), base_b.clone()]);
                (database, Some(replica), a_args, Some(base_b))
            } else {
                let database = vec!["--data-dir".into(), data_dir.into_os_string()];
                (database, None, extra_serve_args.clone(), None)
            };
        let (server, base) = serve(&database, &a_args)?;
        let proxy_base = proxy_base.unwrap_or_else(|| base.clone());
        let mut stack = Self {
            dir,
            base,
            api_key: String::new(),
            proxy_base,
            server,
            replica,
            database,
            extra_serve_args,
        };
        let key = stack.admin(&["api-key", "create", "--team", "default"])?;
        stack.api_key = key.trim().to_owned();
        Ok(stack)
    }

    /// The server's data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("server-data")
    }

    /// The CLI's TETHER_HOME.
    pub fn tether_home(&self) -> PathBuf {
        self.dir.path().join("tether-home")
    }

    /// The GraphQL endpoint.
    pub fn graphql_url(&self) -> String {
        format!("{}/graphql", self.base)
    }

    /// Runs `tether-server admin --data-dir … --insecure-dev-key ARGS`; returns stdout.
    pub fn admin(&self, args: &[&str]) -> Result<String, StackError> {
        self.admin_with_env(args, &[])
    }

    /// Like [`Stack::admin`] with extra environment (for `--secret NAME=env:VAR`).
    pub fn admin_with_env(
        &self,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<String, StackError> {
        let out = Command::new(server_bin())
            .arg("admin")
            .args(&self.database)
            .arg("--insecure-dev-key")
            .args(args)
            .envs(env.iter().copied())
            .env_remove("TETHER_SERVER_KEY")
            .output()
            .map_err(|e| format!("cannot run tether-server admin: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "tether-server admin {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Adds an installation from inline JSON; returns its uid.
    pub fn add(
        &self,
        name: &str,
        spec: &str,
        secrets: &[(&str, &str)],
        team: &str,
    ) -> Result<String, StackError> {
        let mut args = vec!["add", name, "--from", spec, "--team", team];
        let vars: Vec<(String, String)> = secrets
            .iter()
            .enumerate()
            .map(|(i, (secret, value))| (format!("E2E_SECRET_{i}"), format!("{secret}={value}")))
            .collect();
        let sources: Vec<String> = secrets
            .iter()
            .enumerate()
            .map(|(i, (secret, _))| format!("{secret}=env:E2E_SECRET_{i}"))
            .collect();
        for source in &sources {
            args.push("--secret");
            args.push(source);
        }
        let env: Vec<(String, String)> = vars
            .iter()
            .zip(secrets)
            .map(|((var, _), (_, value))| (var.clone(), (*value).to_owned()))
            .collect();
        let env_refs: Vec<(&str, &str)> =
            env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        Ok(self.admin_with_env(&args, &env_refs)?.trim().to_owned())
    }

    /// How the CLI is run against this server: TETHER_HOME in the temp dir, the server's
    /// GraphQL endpoint and API key.
    pub fn runner(&self) -> Tether {
        Tether::new(tether_bin(), self.tether_home()).managed(&self.graphql_url(), &self.api_key)
    }

    /// A `tether ARGS` command pointed at this server, with TETHER_HOME in the temp dir.
    pub fn tether(&self, args: &[&str]) -> Command {
        self.runner().command(args)
    }

    /// Runs `tether ARGS` and returns its output.
    pub fn run_tether(&self, args: &[&str], env: &[(&str, &str)]) -> Result<Output, StackError> {
        self.tether(args)
            .envs(env.iter().copied())
            .output()
            .map_err(|e| format!("cannot run tether: {e}"))
    }

    /// How many `createManagedMcpClientConfig` calls the server has answered: the sum of
    /// `tether_server_resolutions_total` over its outcomes on its Prometheus page.
    pub fn mint_count(&self) -> Result<u64, StackError> {
        let body = http_get_with_key(&self.base, "/metrics", &self.api_key)?;
        let counters = body
            .lines()
            .filter(|line| line.starts_with("tether_server_resolutions_total{"));
        let mut total = 0;
        for line in counters {
            let value = line.rsplit(' ').next().unwrap_or_default();
            total += value
                .parse::<u64>()
                .map_err(|e| format!("not a counter line ({e}): {line}"))?;
        }
        Ok(total)
    }

    /// Stops the server, and replica B if there is one (SIGTERM via kill, then wait).
    pub fn stop(&mut self) {
        stop_child(&mut self.server);
        if let Some(replica) = &mut self.replica {
            stop_child(replica);
        }
    }

    /// The serve flags this stack was started with.
    pub fn serve_args(&self) -> &[String] {
        &self.extra_serve_args
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.stop();
    }
}

/// SIGTERM via kill, then wait (SIGKILL after 10 s).
fn stop_child(child: &mut Child) {
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Starts `tether-server serve` on `database` and waits for its `listening on` line.
fn serve(database: &[OsString], extra: &[String]) -> Result<(Child, String), StackError> {
    let mut child = Command::new(server_bin())
        .arg("serve")
        .arg("--listen")
        .arg("127.0.0.1:0")
        .args(database)
        .arg("--insecure-dev-key")
        .args(extra)
        .env_remove("TETHER_SERVER_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start tether-server: {e}"))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        if let Some(Ok(line)) = lines.next() {
            let _ = sender.send(line);
        }
        // Keep draining so the server never blocks on a full pipe.
        for _ in lines {}
    });
    let line = receiver
        .recv_timeout(Duration::from_secs(60))
        .map_err(|_| "tether-server printed no listening address within 60 s".to_owned())?;
    let base = line
        .strip_prefix("listening on ")
        .ok_or_else(|| format!("unexpected first line from tether-server: {line}"))?
        .trim_end_matches('/')
        .to_owned();
    Ok((child, base))
}

/// `GET base+path`, expecting 200; returns the body.
pub fn http_get(base: &str, path: &str) -> Result<String, StackError> {
    http_get_with_key(base, path, "")
}

/// [`http_get`] with `Authorization: Bearer KEY` (none for an empty key): the main listener's
/// `/metrics` wants an API key.
pub fn http_get_with_key(base: &str, path: &str, key: &str) -> Result<String, StackError> {
    let mut request = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| e.to_string())?
        .get(format!("{base}{path}"));
    if !key.is_empty() {
        request = request.bearer_auth(key);
    }
    let response = request.send().map_err(|e| format!("GET {path}: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("GET {path}: HTTP {}", response.status()));
    }
    response.text().map_err(|e| format!("GET {path}: {e}"))
}

/// Starts `tether-test-mcp --http 127.0.0.1:0 EXTRA` with `env`; returns it and its `/mcp` URL.
pub fn http_test_server(
    extra: &[&str],
    env: &[(&str, &str)],
) -> Result<(Child, String), StackError> {
    let mut child = Command::new(test_server_bin())
        .args(["--http", "127.0.0.1:0"])
        .args(extra)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start tether-test-mcp: {e}"))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .map_err(|e| format!("reading tether-test-mcp's address: {e}"))?;
    let url = line.trim().trim_start_matches("listening on ").to_owned();
    if !url.starts_with("http://127.0.0.1:") {
        return Err(format!("unexpected line from tether-test-mcp: {line}"));
    }
    Ok((child, url))
}
