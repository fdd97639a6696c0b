//! Running `tether-server` (serve and admin) and `tether-test-mcp` as real processes.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use serde_json::Value;
use tether_config::{EmptyEnv, Origin, Secrets, parse_config};
use tether_driver::{McpRuntime, ServerStatus, StartOptions};
use tether_graphql::{
    HttpClientSettings, HttpManagedMcpClient, ManagedMcpClient as _, ManagedMcpClientConfig,
    RetryPolicy, SecretValue,
};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, ChildStdout, Command};

/// A bound on every step that waits for a process: nothing here may hang.
pub const STEP: Duration = Duration::from_secs(60);

/// Held by the tests that load the machine (thousands of sockets, gigabytes over loopback) and
/// by those that measure a duration, so that one does not skew the other.
pub static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The master key the tests run with (64 hex digits).
pub const TEST_KEY: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";

/// The server binary Cargo built for these tests.
pub fn server_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_tether-server"))
}

/// `tether-test-mcp`, next to the server binary; built with cargo only if it is missing
/// (`cargo test --workspace` builds it first).
pub fn test_mcp_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let bin = server_bin().with_file_name("tether-test-mcp");
        if !bin.is_file() {
            let profile_dir = server_bin()
                .parent()
                .expect("the server binary's directory");
            let mut build = std::process::Command::new(env!("CARGO"));
            build.args([
                "build",
                "--quiet",
                "-p",
                "tether-test-mcp",
                "--bin",
                "tether-test-mcp",
            ]);
            if profile_dir.ends_with("release") {
                build.arg("--release");
            }
            if let Some(target) = profile_dir.parent() {
                build.env("CARGO_TARGET_DIR", target);
            }
            let status = build.status().expect("running cargo build");
            assert!(
                status.success() && bin.is_file(),
                "building tether-test-mcp failed"
            );
        }
        bin
    })
    .clone()
}

/// Reads the first stdout line of a child within [`STEP`].
async fn first_line(stdout: ChildStdout, what: &str) -> (String, BufReader<ChildStdout>) {
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    tokio::time::timeout(STEP, reader.read_line(&mut line))
        .await
        .unwrap_or_else(|_| panic!("{what} printed nothing within {STEP:?}"))
        .unwrap_or_else(|e| panic!("reading {what}'s stdout: {e}"));
    (line.trim_end().to_owned(), reader)
}

/// Collects a child's stderr in the background.
fn collect(mut stderr: tokio::process::ChildStderr) -> Arc<Mutex<Vec<u8>>> {
    let buffer = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&buffer);
    tokio::spawn(async move {
        let mut chunk = [0_u8; 4096];
        while let Ok(n) = stderr.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend_from_slice(&chunk[..n]);
        }
    });
    buffer
}

/// A running `tether-server serve`, killed on drop.
pub struct ServerProcess {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    stderr: Arc<Mutex<Vec<u8>>>,
    stdout: BufReader<ChildStdout>,
}

impl ServerProcess {
    /// `serve --listen 127.0.0.1:0 --data-dir DIR ARGS…` with [`TEST_KEY`] and debug logs.
    pub async fn start(data_dir: &Path, args: &[&str]) -> Self {
        Self::spawn("127.0.0.1:0", data_dir, args, "debug").await
    }

    /// `serve --listen 127.0.0.1:0 ARGS…` (ARGS name the database) with [`TEST_KEY`] and debug
    /// logs.
    pub async fn serve(args: &[&str]) -> Self {
        let mut full = vec!["serve", "--listen", "127.0.0.1:0"];
        full.extend_from_slice(args);
        Self::from_command(server_command(&full, &[("TETHER_SERVER_LOG", "debug")])).await
    }

    /// `serve --listen LISTEN --data-dir DIR ARGS…` with [`TEST_KEY`] and the log filter `log`.
    pub async fn spawn(listen: &str, data_dir: &Path, args: &[&str], log: &str) -> Self {
        Self::spawn_with_env(listen, data_dir, args, &[("TETHER_SERVER_LOG", log)]).await
    }

    /// `serve --listen LISTEN --data-dir DIR ARGS…` with [`TEST_KEY`] unless `envs` sets
    /// `TETHER_SERVER_KEY` (an empty value unsets a variable).
    pub async fn spawn_with_env(
        listen: &str,
        data_dir: &Path,
        args: &[&str],
        envs: &[(&str, &str)],
    ) -> Self {
        let data_dir = data_dir.to_string_lossy();
        let mut full = vec!["serve", "--listen", listen, "--data-dir", data_dir.as_ref()];
        full.extend_from_slice(args);
        Self::from_command(server_command(&full, envs)).await
    }

    /// Runs `command` (a `tether-server serve`, maybe wrapped) and waits for its listening line.
    pub async fn from_command(mut command: Command) -> Self {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("starting tether-server");
        let stderr = collect(child.stderr.take().expect("the child's stderr is piped"));
        let stdout = child.stdout.take().expect("the child's stdout is piped");
        let (line, reader) = first_line(stdout, "tether-server").await;
        let Some(base) = line.strip_prefix("listening on ") else {
            let logs =
                String::from_utf8_lossy(&stderr.lock().unwrap_or_else(PoisonError::into_inner))
                    .into_owned();
            panic!("unexpected first line {line:?}; stderr:\n{logs}");
        };
        assert!(base.starts_with("http://127.0.0.1:"), "{line}");
        Self {
            child,
            base: base.to_owned(),
            stderr,
            stdout: reader,
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("the server is still running")
    }

    /// A memory figure of the server from `/proc/PID/status` (`VmRSS`, `VmHWM` for the
    /// peak), in bytes.
    pub fn memory_bytes(&self, field: &str) -> u64 {
        let pid = self.child.id().expect("the server is still running");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .expect("reading the server's /proc status");
        let kib: u64 = status
            .lines()
            .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} line in /proc/PID/status"));
        kib * 1024
    }

    /// How many sockets the server has open (from `/proc/PID/fd`): its listener, its store's
    /// connections and every connection it accepted.
    pub fn open_sockets(&self) -> usize {
        let pid = self.child.id().expect("the server is still running");
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .expect("reading the server's /proc fd list")
            .flatten()
            .filter(|entry| {
                std::fs::read_link(entry.path())
                    .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"))
            })
            .count()
    }

    /// Whether the server's stderr shows `needle` within 5 s (the log is collected
    /// asynchronously, so a line written just now may not be there yet).
    pub async fn logged(&self, needle: &str) -> bool {
        for _ in 0..50 {
            if self.logs().contains(needle) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    /// The GraphQL endpoint.
    pub fn graphql_url(&self) -> String {
        format!("{}/graphql", self.base)
    }

    /// Everything the server wrote to stderr so far.
    pub fn logs(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap_or_else(PoisonError::into_inner))
            .into_owned()
    }

    /// The managed client of the workspace, with `api_key` and no retries.
    pub fn client(&self, api_key: &str) -> HttpManagedMcpClient {
        managed_client(&self.graphql_url(), api_key)
    }

    /// `GET /metrics` with `api_key`: the createManagedMcpClientConfig resolutions, every
    /// outcome summed.
    pub async fn config_requests(&self, api_key: &str) -> u64 {
        let text = reqwest::Client::new()
            .get(format!("{}/metrics", self.base))
            .bearer_auth(api_key)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .expect("metrics")
            .text()
            .await
            .expect("metrics body");
        resolutions(&text)
    }

    /// The second stdout line of a server started with `--metrics-listen`: its metrics URL.
    pub async fn metrics_url(&mut self) -> String {
        let mut line = String::new();
        tokio::time::timeout(STEP, self.stdout.read_line(&mut line))
            .await
            .expect("the metrics line within STEP")
            .expect("reading stdout");
        line.trim_end()
            .strip_prefix("metrics on ")
            .unwrap_or_else(|| panic!("unexpected second line {line:?}"))
            .to_owned()
    }

    /// SIGKILL, and wait for it.
    pub async fn kill(mut self) {
        self.child.kill().await.expect("kill");
    }

    /// Sends SIGTERM and waits (within [`STEP`]) for the exit status.
    pub async fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().expect("the server is still running");
        let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("the pid fits an i32"));
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("kill");
        tokio::time::timeout(STEP, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("tether-server did not exit after SIGTERM"))
            .expect("wait")
    }
}

/// The managed client of the workspace for `graphql_url`, with `api_key` and no retries.
pub fn managed_client(graphql_url: &str, api_key: &str) -> HttpManagedMcpClient {
    let settings = HttpClientSettings {
        api_key: Some(SecretValue::from(api_key)),
        retry: RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        },
        ..HttpClientSettings::new(graphql_url.parse().expect("graphql url"))
    };
    HttpManagedMcpClient::new(settings).expect("client")
}

/// `tether-server ARGS` with [`TEST_KEY`] unless `envs` sets `TETHER_SERVER_KEY` (an empty
/// value unsets a variable).
///
/// With `TETHER_TEST_BACKEND=postgres`, `--data-dir DIR` becomes `--database-url` naming a
/// database of its own on the shared throwaway cluster ([`crate::pg`]).
fn server_command(args: &[&str], envs: &[(&str, &str)]) -> Command {
    let mut command = Command::new(server_bin());
    command
        .args(backend_args(args))
        .env("TETHER_SERVER_KEY", TEST_KEY);
    for (name, value) in envs {
        if value.is_empty() {
            command.env_remove(name);
        } else {
            command.env(name, value);
        }
    }
    command
}

/// `args` with `--data-dir DIR` replaced by `--database-url URL` when the suite runs on
/// PostgreSQL.
pub fn backend_args(args: &[&str]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let on_postgres = |dir: &str| crate::pg::enabled() || crate::pg::is_forced(Path::new(dir));
        if *arg == "--data-dir"
            && let Some(dir) = args.as_slice().first().filter(|dir| on_postgres(dir))
        {
            args.next();
            out.push("--database-url".to_owned());
            out.push(database_url(Path::new(dir)));
        } else {
            out.push((*arg).to_owned());
        }
    }
    out
}

/// The PostgreSQL URL standing for data directory `dir` (its database created on first use).
pub fn database_url(dir: &Path) -> String {
    crate::pg::shared().database(&crate::pg::database_name(dir))
}

/// Whether `needle` is stored in clear in the store standing for data directory `dir`: in the
/// bytes of its SQLite files, or in what `pg_dump` prints of its PostgreSQL database (text, or
/// hex inside a bytea).
pub fn stored_in_clear(dir: &Path, needle: &str) -> bool {
    if crate::pg::enabled() || crate::pg::is_forced(dir) {
        let dump = crate::pg::shared().dump(&crate::pg::database_name(dir));
        let hex: String = needle.bytes().map(|b| format!("{b:02x}")).collect();
        dump.contains(needle) || dump.contains(&hex)
    } else {
        let bytes = tether_testkit::files_bytes(dir).expect("reading the store's files");
        tether_testkit::holds(&bytes, needle)
    }
}

/// Runs `tether-server ARGS` to completion (within [`STEP`]) with the given environment and
/// stdin; [`TEST_KEY`] is set unless `envs` sets `TETHER_SERVER_KEY` (an empty value unsets it).
pub async fn run(args: &[&str], envs: &[(&str, &str)], stdin: &str) -> Output {
    let mut child = server_command(args, envs)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("starting tether-server");
    let mut input = child.stdin.take().expect("the child's stdin is piped");
    input
        .write_all(stdin.as_bytes())
        .await
        .expect("writing stdin");
    drop(input);
    tokio::time::timeout(STEP, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("tether-server {args:?} did not finish"))
        .unwrap_or_else(|e| panic!("tether-server {args:?}: {e}"))
}

/// `tether-server admin --data-dir DIR ARGS…`, which must succeed; returns stdout, trimmed.
pub async fn admin(data_dir: &Path, args: &[&str], envs: &[(&str, &str)]) -> String {
    let dir = data_dir.to_string_lossy();
    let mut full = vec!["admin", "--data-dir", dir.as_ref()];
    full.extend_from_slice(args);
    let output = run(&full, envs, "").await;
    assert!(
        output.status.success(),
        "admin {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// A new API key for `team`.
pub async fn api_key(data_dir: &Path, team: &str) -> String {
    admin(data_dir, &["api-key", "create", "--team", team], &[]).await
}

/// `admin add NAME --from SPEC [--secret …] [--team T]`; returns the uid.
pub async fn add(
    data_dir: &Path,
    name: &str,
    spec: &str,
    secrets: &[&str],
    team: &str,
    envs: &[(&str, &str)],
) -> uuid::Uuid {
    let mut args = vec!["add", name, "--from", spec, "--team", team];
    for secret in secrets {
        args.extend(["--secret", secret]);
    }
    let uid = admin(data_dir, &args, envs).await;
    uid.parse()
        .unwrap_or_else(|e| panic!("add printed {uid:?}, not a uid: {e}"))
}

/// A running `tether-test-mcp --http 127.0.0.1:0 --require-bearer-env UPSTREAM_TOKEN`.
pub struct Upstream {
    _child: Child,
    _stdout: BufReader<ChildStdout>,
    /// `http://127.0.0.1:PORT/mcp`.
    pub url: String,
}

impl Upstream {
    /// Starts the test MCP server requiring `Authorization: Bearer <token>`.
    pub async fn start(token: &str) -> Self {
        let mut child = Command::new(test_mcp_bin())
            .args([
                "--http",
                "127.0.0.1:0",
                "--require-bearer-env",
                "UPSTREAM_TOKEN",
            ])
            .env("UPSTREAM_TOKEN", token)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("starting tether-test-mcp");
        let stdout = child.stdout.take().expect("the child's stdout is piped");
        let (line, reader) = first_line(stdout, "tether-test-mcp").await;
        let url = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected line {line:?}"))
            .to_owned();
        Self {
            _child: child,
            _stdout: reader,
            url,
        }
    }
}

/// Whether PostgreSQL's server binaries are installed; when not, says the test skips — except
/// in CI, where that fails.
pub fn postgres_installed() -> bool {
    if crate::pg::available() {
        return true;
    }
    tether_testkit::missing(
        "PostgreSQL's server binaries (initdb, postgres)",
        "Debian's postgresql package",
    );
    false
}

/// The sum of `tether_server_resolutions_total` over its outcomes in a Prometheus text page.
pub fn resolutions(text: &str) -> u64 {
    text.lines()
        .filter(|line| line.starts_with("tether_server_resolutions_total{"))
        .map(|line| {
            let value = line.rsplit(' ').next().unwrap_or_default();
            value
                .parse::<u64>()
                .unwrap_or_else(|_| panic!("a counter line: {line}"))
        })
        .sum()
}

/// A data directory with a running server and an API key of the default team.
pub struct Fixture {
    /// Holds the data directory.
    pub dir: tempfile::TempDir,
    /// The running server.
    pub server: ServerProcess,
    /// An API key of team `default`.
    pub api_key: String,
}

impl Fixture {
    /// Starts a server with `args` on a fresh data directory.
    pub async fn start(args: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let api_key = api_key(&dir.path().join("data"), "default").await;
        let server = ServerProcess::start(&dir.path().join("data"), args).await;
        Self {
            dir,
            server,
            api_key,
        }
    }

    /// Starts a server with `args` on PostgreSQL, whatever the suite's backend: the data
    /// directory stands for a database of the shared cluster. `None` (the test skips, saying
    /// so) when PostgreSQL is not installed, except in CI, where that fails.
    pub async fn start_on_postgres(args: &[&str]) -> Option<Self> {
        if !postgres_installed() {
            return None;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        crate::pg::force(&dir.path().join("data"));
        let api_key = api_key(&dir.path().join("data"), "default").await;
        let server = ServerProcess::start(&dir.path().join("data"), args).await;
        Some(Self {
            dir,
            server,
            api_key,
        })
    }

    /// The data directory.
    pub fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// `createManagedMcpClientConfig(uid)` with the default team's key, which must succeed.
    pub async fn mint(&self, uid: uuid::Uuid) -> ManagedMcpClientConfig {
        self.server
            .client(&self.api_key)
            .create_managed_mcp_client_config(uid)
            .await
            .unwrap_or_else(|e| panic!("createManagedMcpClientConfig {uid}: {e}"))
    }
}

/// tether-server's library serving in this test process on a clock the test moves, for what
/// depends on time (proxy-token expiry, rate-limit refills): the test advances the clock
/// instead of waiting. The data directory and its API key are made with the admin CLI, as
/// for [`Fixture`]; the server stops when this is dropped.
pub struct ClockedFixture {
    /// Holds the data directory.
    pub dir: tempfile::TempDir,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// An API key of team `default`.
    pub api_key: String,
    /// The clock the server tells time by.
    pub clock: Arc<tether_testkit::ManualClock>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl ClockedFixture {
    /// Serves a fresh data directory with these proxy-token lifetime and rate settings.
    pub async fn start(proxy_token_ttl: Duration, rate: tether_server::rate::RateSettings) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("data");
        let api_key = api_key(&data, "default").await;
        let database = if crate::pg::enabled() {
            tether_server::DatabaseUrl::parse(&database_url(&data)).expect("a database URL")
        } else {
            tether_server::DatabaseUrl::sqlite(&data)
        };
        let clock = tether_testkit::ManualClock::new();
        let server = tether_server::BoundServer::bind_with_clock(
            tether_server::ServeOptions {
                listen: "127.0.0.1:0".parse().expect("a socket address"),
                database,
                public_url: None,
                proxy_token_ttl,
                key: tether_server::MasterKey::from_text(TEST_KEY).expect("the test key"),
                limits: tether_server::limits::Limits::default(),
                rate,
                metrics_listen: None,
                metrics_public: false,
            },
            clock.clone(),
        )
        .await
        .expect("binding the server");
        let base = format!("http://{}", server.local_addr());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(server.run(async {
            let _ = stopped.await;
        }));
        Self {
            dir,
            base,
            api_key,
            clock,
            stop: Some(stop),
        }
    }

    /// The data directory.
    pub fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The GraphQL endpoint.
    pub fn graphql_url(&self) -> String {
        format!("{}/graphql", self.base)
    }

    /// `createManagedMcpClientConfig(uid)` with the default team's key, which must succeed.
    pub async fn mint(&self, uid: uuid::Uuid) -> ManagedMcpClientConfig {
        managed_client(&self.graphql_url(), &self.api_key)
            .create_managed_mcp_client_config(uid)
            .await
            .unwrap_or_else(|e| panic!("createManagedMcpClientConfig {uid}: {e}"))
    }
}

impl Drop for ClockedFixture {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Does with a returned config what a client does: parse it (managed origin), fill the
/// client's own secrets, and start its one server strictly with the driver's runtime.
pub async fn launch(mcp_config_json: &str, client_secrets: &Secrets) -> McpRuntime {
    let parsed = parse_config(mcp_config_json, Origin::Managed).expect("parsing the minted config");
    let servers = parsed
        .servers
        .into_iter()
        .map(|server| server.into_installation().render(client_secrets, &EmptyEnv))
        .collect();
    let options = StartOptions {
        strict: true,
        ..StartOptions::default()
    };
    McpRuntime::start(servers, &options)
        .await
        .expect("starting the minted server with the driver")
}

/// Calls `tool` on `server` and returns the result as JSON text.
pub async fn call(runtime: &McpRuntime, server: &str, tool: &str, arguments: Value) -> String {
    runtime
        .call_tool(server, tool, arguments.as_object().cloned(), STEP)
        .await
        .unwrap_or_else(|e| panic!("{server}.{tool}: {e}"))
        .to_string()
}

/// The sorted tool names of the runtime's first server, which must be ready.
pub fn ready_tools(runtime: &McpRuntime) -> Vec<String> {
    match &runtime.reports()[0].status {
        ServerStatus::Ready { tools } => {
            let mut names: Vec<String> = tools.iter().map(|t| t.name.clone()).collect();
            names.sort();
            names
        }
        ServerStatus::Failed { reason } => panic!("not ready: {reason}"),
        ServerStatus::Disabled => panic!("not ready: disabled"),
    }
}

/// A JSON string literal for `text`.
pub fn json_str(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

/// A random-looking sentinel that cannot occur by accident.
pub fn sentinel(label: &str) -> String {
    format!("{label}-{}", uuid::Uuid::new_v4().simple())
}
