//! `tether serve`, the gateway, end to end: a real MCP client (rmcp) talks to the `tether`
//! binary, which fronts several real servers at once — server-everything over stdio and over
//! Streamable HTTP, and our test server — through namespaced names. A secret a server puts in
//! a tool result reaches the client masked, and the audit log holds no value.

#![allow(
    clippy::expect_used,
    reason = "a test binary: helpers outside #[test] functions panic on setup failure too"
)]

use std::io::{BufRead as _, BufReader};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use rmcp::ServiceExt as _;
use rmcp::model::{CallToolRequestParams, GetPromptRequestParams, ReadResourceRequestParams};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};
use tether_testkit::{
    Tether, bytes_read, json_str, server_everything, test_server_bin, test_server_with,
};

/// Every character a shell or a harness might expand, and a placeholder.
const SECRET: &str = "gw-s3cr3t $HOME \"q\" {{x}} é";
const MASK: &str = "********";

type Client = RunningService<RoleClient, ()>;

/// The `tether` binary this test was built with.
fn tether_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tether"))
}

/// How the tests run tether: its own TETHER_HOME under `dir`, no managed server, cwd `dir`.
fn tether_in(dir: &Path) -> Tether {
    Tether::new(tether_bin(), dir.join("home")).current_dir(dir)
}

/// `tether ARGS` with its own TETHER_HOME under `dir`, the secret in `GW_SECRET`; `serve`
/// with `--wait-for-servers` ([`waiting`]).
fn tether_command(dir: &Path, args: &[&str]) -> tokio::process::Command {
    let args = waiting(args);
    tokio::process::Command::from(tether_in(dir).env("GW_SECRET", SECRET).command(&args))
}

/// `args`, with `--wait-for-servers` after `serve`: these tests look at what is served once
/// every server started (tools listed right after initialize); `tests/serve_at_once.rs`
/// covers the default, where servers join later.
fn waiting<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut args = args.to_vec();
    if args.first() == Some(&"serve") {
        args.insert(1, "--wait-for-servers");
    }
    args
}

fn text_of(result: &Value) -> String {
    result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|item| item["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

async fn call<H: rmcp::ClientHandler>(
    client: &RunningService<RoleClient, H>,
    name: &str,
    arguments: Value,
) -> Value {
    let mut params = CallToolRequestParams::new(name.to_owned());
    if let Value::Object(map) = arguments {
        params = params.with_arguments(map);
    }
    let result = client
        .call_tool(params)
        .await
        .unwrap_or_else(|e| panic!("calling {name} through the gateway: {e}"));
    serde_json::to_value(result).expect("serializing a result")
}

/// A `tether serve --listen` process, its URL and the token it printed.
struct HttpGateway {
    child: Child,
    url: String,
    token: Option<String>,
}

impl Drop for HttpGateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn http_gateway(dir: &Path, extra: &[&str]) -> HttpGateway {
    http_gateway_for(dir, &[], extra)
}

/// `tether serve --listen` in front of the test server run with `server_args`.
fn http_gateway_for(dir: &Path, server_args: &[&str], extra: &[&str]) -> HttpGateway {
    let spec = format!(
        r#"{{"test": {{"command": {}, "args": {}}}}}"#,
        json_str(&test_server_bin().to_string_lossy()),
        json!(server_args)
    );
    http_gateway_of(dir, &spec, extra)
}

/// `tether serve --mcp SPEC --listen 127.0.0.1:0 EXTRA…`, its URL and printed token.
fn http_gateway_of(dir: &Path, spec: &str, extra: &[&str]) -> HttpGateway {
    http_gateway_with_env(dir, spec, extra, &[])
}

/// [`http_gateway_of`] with these environment variables set too.
fn http_gateway_with_env(
    dir: &Path,
    spec: &str,
    extra: &[&str],
    envs: &[(&str, &str)],
) -> HttpGateway {
    let mut args = vec!["serve", "--mcp", spec, "--listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let tether = envs.iter().fold(tether_in(dir), |tether, (name, value)| {
        tether.env(name, value)
    });
    let mut child = tether
        .command(&waiting(&args))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting tether serve --listen");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut url = String::new();
    BufReader::new(stdout)
        .read_line(&mut url)
        .expect("reading the listening line");
    let url = url
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {url:?}"))
        .to_owned();
    let stderr = child.stderr.take().expect("piped stderr");
    let mut token = None;
    let mut lines = BufReader::new(stderr).lines();
    for line in lines.by_ref() {
        let line = line.expect("reading stderr");
        if let Some(found) = line.strip_prefix("tether serve: bearer token ") {
            token = Some(found.to_owned());
        }
        if line.starts_with("tether serve: serving ") {
            break;
        }
    }
    // Keep draining stderr so that the gateway never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    HttpGateway { child, url, token }
}

fn initialize_body() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}})
}

fn post(
    http: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    session: Option<&str>,
    body: &Value,
) -> reqwest::RequestBuilder {
    post_text(http, url, token, session, body.to_string())
}

/// A POST of `body` as JSON, whatever it holds.
fn post_text(
    http: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    session: Option<&str>,
    body: String,
) -> reqwest::RequestBuilder {
    let mut request = http
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .body(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(session) = session {
        request = request
            .header("Mcp-Session-Id", session)
            .header("Mcp-Protocol-Version", "2025-06-18");
    }
    request
}

/// The pids of live processes whose program (first word of the command line) is `program`.
fn pids_running(program: &Path) -> Vec<i32> {
    let wanted = program.to_string_lossy().into_owned();
    tether_testkit::processes_with(&wanted)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|cmdline| cmdline.split(|b| *b == 0).next() == Some(wanted.as_bytes()))
                .unwrap_or(false)
        })
        .collect()
}

async fn status_of(client: &Client, server: &str) -> Value {
    let status = call(client, "tether_status", json!({})).await;
    let servers = status["structuredContent"]["servers"].clone();
    servers
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["name"] == server)
        .cloned()
        .unwrap_or_else(|| panic!("{server} not in {status}"))
}

/// `tether serve` over stdio for `spec` with TETHER_HOME in `dir`, plus `extra` flags.
async fn serve_client(
    dir: &Path,
    spec: &str,
    extra: &[&str],
) -> (Client, tokio::process::ChildStderr) {
    let mut args = vec!["serve", "--mcp", spec];
    args.extend_from_slice(extra);
    let (transport, stderr) = TokioChildProcess::builder(tether_command(dir, &args))
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting tether serve");
    let client: Client = ().serve(transport).await.expect("initializing");
    (client, stderr.expect("piped stderr"))
}

async fn tool_names<H: rmcp::ClientHandler>(client: &RunningService<RoleClient, H>) -> Vec<String> {
    client
        .list_all_tools()
        .await
        .expect("tools/list")
        .iter()
        .map(|t| t.name.to_string())
        .collect()
}

async fn stderr_of(client: Client, mut stderr: tokio::process::ChildStderr) -> String {
    use tokio::io::AsyncReadExt as _;
    client.cancel().await.expect("closing the client");
    let mut text = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stderr.read_to_string(&mut text)).await;
    text
}

fn extra_spec(description: &str) -> String {
    format!(
        r#"{{"srv": {{"command": {}, "args": ["--extra-tool", {}]}}}}"#,
        json_str(&test_server_bin().to_string_lossy()),
        json_str(description)
    )
}

/// `tether serve` in front of server-everything over stdio (as `ev`), with a client of
/// `handler`; `None` when npm is absent. The directory holds TETHER_HOME.
/// The `--mcp` spec of server-everything over stdio as `ev`; `None` when it is not installed.
fn everything_spec() -> Option<String> {
    let everything = server_everything()?;
    Some(format!(
        r#"{{"ev": {{"command": {}, "args": ["stdio"]}}}}"#,
        json_str(&everything.to_string_lossy())
    ))
}

async fn everything_behind_gateway<H: rmcp::ClientHandler>(
    handler: H,
) -> Option<(tempfile::TempDir, RunningService<RoleClient, H>)> {
    let (dir, transport) = everything_over_stdio()?;
    let client = handler.serve(transport).await.expect("initializing");
    Some((dir, client))
}

/// `tether serve` (stdio, stderr dropped) in front of server-everything, in a new directory.
fn everything_over_stdio() -> Option<(tempfile::TempDir, TokioChildProcess)> {
    let spec = everything_spec()?;
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let (transport, _) =
        TokioChildProcess::builder(tether_command(dir.path(), &["serve", "--mcp", &spec]))
            .stderr(Stdio::null())
            .spawn()
            .expect("starting tether serve");
    Some((dir, transport))
}

/// A client that declares (or not) sampling, elicitation and roots, answers them with fixed
/// values, and records the list changes and resource updates it is sent.
#[derive(Clone, Default)]
struct FullClient {
    /// Declare sampling, elicitation and roots.
    capable: bool,
    tools_changed: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    updated: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    /// The methods of the server requests it answered.
    answered: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl FullClient {
    /// How many `notifications/tools/list_changed` arrived.
    fn tool_list_changes(&self) -> usize {
        self.tools_changed.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Has `srv` (a `--grow-tools` test server) add the tool `name` through `client`, then
    /// waits for the gateway's `tools/list_changed`.
    async fn grow_tool(&self, client: &RunningService<RoleClient, FullClient>, name: &str) {
        let added = call(client, "srv__add_tool", json!({"name": name})).await;
        assert_eq!(text_of(&added), format!("added {name}"));
        eventually("a tools/list_changed for the client", async || {
            self.tool_list_changes() >= 1
        })
        .await;
    }
}

const SAMPLED: &str = "sampled by the gateway test client";
const ROOT: &str = "file:///tmp/tether-gateway-roots-test";

impl FullClient {
    fn capable() -> Self {
        Self {
            capable: true,
            ..Self::default()
        }
    }

    /// The methods of the server requests it answered, in order.
    fn asked(&self) -> Vec<String> {
        self.answered.lock().expect("the answered list").clone()
    }

    fn answered(&self, method: &str) {
        self.answered
            .lock()
            .expect("the answered list")
            .push(method.to_owned());
    }
}

impl rmcp::ClientHandler for FullClient {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        let capabilities = if self.capable {
            json!({"sampling": {}, "elicitation": {"form": {}}, "roots": {"listChanged": true},
                "extensions": {"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]},
                    "com.example/other": {}}})
        } else {
            json!({})
        };
        serde_json::from_value(json!({
            "protocolVersion": "2025-06-18",
            "capabilities": capabilities,
            "clientInfo": {"name": "gateway-test", "version": "1"}
        }))
        .expect("a client info")
    }

    async fn on_tool_list_changed(&self, _context: rmcp::service::NotificationContext<RoleClient>) {
        self.tools_changed
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.updated.lock().expect("the updates").push(params.uri);
    }

    #[expect(
        deprecated,
        reason = "sampling of the protocol versions the test speaks"
    )]
    async fn create_message(
        &self,
        _params: rmcp::model::CreateMessageRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, rmcp::ErrorData> {
        self.answered("sampling/createMessage");
        Ok(serde_json::from_value(json!({
            "model": "test-model", "role": "assistant", "stopReason": "endTurn",
            "content": {"type": "text", "text": SAMPLED}
        }))
        .expect("a sampling result"))
    }

    async fn create_elicitation(
        &self,
        _params: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        self.answered("elicitation/create");
        Ok(serde_json::from_value(json!({
            "action": "accept", "content": {"name": "Gateway Tester", "check": true}
        }))
        .expect("an elicitation result"))
    }

    #[expect(deprecated, reason = "roots of the protocol versions the test speaks")]
    async fn list_roots(
        &self,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ListRootsResult, rmcp::ErrorData> {
        self.answered("roots/list");
        Ok(
            serde_json::from_value(json!({"roots": [{"uri": ROOT, "name": "test root"}]}))
                .expect("a roots result"),
        )
    }
}

/// Waits (at most 20 s) until `ready` holds.
async fn eventually(what: &str, mut ready: impl AsyncFnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !ready().await {
        assert!(
            std::time::Instant::now() < deadline,
            "{what} did not happen"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the gateway lists `name` (server-everything registers some tools only after
/// its client, tether, declared a capability).
async fn tool_listed(client: &RunningService<RoleClient, FullClient>, name: &str) {
    eventually(&format!("{name} being listed"), async || {
        tool_names(client).await.iter().any(|listed| listed == name)
    })
    .await;
}

/// The test server alone, as `test`.
fn test_spec() -> String {
    format!(
        r#"{{"test": {{"command": {}}}}}"#,
        json_str(&test_server_bin().to_string_lossy())
    )
}

/// `tether serve` with `flags` in front of server-everything (`ev`) and the test server
/// (`test`) over stdio: a client and the gateway's stderr; `None` where server-everything is
/// missing (locally only: under CI its absence fails the test).
async fn serve_everything_and_test(
    dir: &Path,
    flags: &[&str],
) -> Option<(Client, tokio::process::ChildStderr)> {
    let everything = server_everything()?;
    let spec = format!(
        r#"{{"ev": {{"command": {}, "args": ["stdio"]}}, "test": {{"command": {}}}}}"#,
        json_str(&everything.to_string_lossy()),
        json_str(&test_server_bin().to_string_lossy())
    );
    Some(serve_client(dir, &spec, flags).await)
}

/// An rmcp client of `gateway` over Streamable HTTP (no token: the gateway runs --no-auth).
async fn http_client(gateway: &HttpGateway) -> Client {
    let config =
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            gateway.url.clone(),
        );
    ().serve(rmcp::transport::StreamableHttpClientTransport::from_config(
        config,
    ))
    .await
    .expect("connecting over HTTP")
}

/// A spec of test servers, in this order: each `(name, args)`.
fn test_servers_spec(servers: &[(&str, &[&str])]) -> String {
    let bin = test_server_bin().to_string_lossy().into_owned();
    let entries: serde_json::Map<String, Value> = servers
        .iter()
        .map(|(name, args)| ((*name).to_owned(), json!({"command": bin, "args": args})))
        .collect();
    Value::Object(entries).to_string()
}

/// `tether serve` over stdio for `spec` plus `extra` flags, with a [`FullClient`] that counts
/// list changes.
async fn serve_full(
    dir: &Path,
    spec: &str,
    extra: &[&str],
) -> (FullClient, RunningService<RoleClient, FullClient>) {
    let mut args = vec!["serve", "--mcp", spec];
    args.extend_from_slice(extra);
    let (transport, _) = TokioChildProcess::builder(tether_command(dir, &args))
        .stderr(Stdio::null())
        .spawn()
        .expect("starting tether serve");
    let handler = FullClient::default();
    let client = handler
        .clone()
        .serve(transport)
        .await
        .expect("initializing");
    (handler, client)
}

/// `resources/read` of `uri` through `client`: its contents, or the error's message.
async fn read_resource<H: rmcp::ClientHandler>(
    client: &RunningService<RoleClient, H>,
    uri: &str,
) -> Result<Value, String> {
    client
        .read_resource(ReadResourceRequestParams::new(uri))
        .await
        .map(|read| serde_json::to_value(read).expect("serializing a read")["contents"].clone())
        .map_err(|e| e.to_string())
}

/// `tether ARGS` in `dir`, which must exit 2 (bad input); its stderr.
fn refused_in(dir: &Path, args: &[&str]) -> String {
    let out = tether_in(dir)
        .command(args)
        .stdin(Stdio::null())
        .output()
        .expect("running tether");
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Search mode (`--tool-mode`).
#[path = "gateway/search.rs"]
mod search;

/// Code mode (`--tool-mode code`).
#[path = "gateway/code.rs"]
mod code;

/// MCP Apps (SEP-1865).
#[path = "gateway/apps.rs"]
mod apps;

/// 2026-07-28 clients.
#[path = "gateway/modern.rs"]
mod modern;

/// Tasks (SEP-2663).
#[path = "gateway/tasks.rs"]
mod tasks;

/// Namespaced names, masking and the audit log.
#[path = "gateway/masking.rs"]
mod masking;

/// Streamable HTTP and its sessions.
#[path = "gateway/http.rs"]
mod http;

/// Crashes and restarts.
#[path = "gateway/supervision.rs"]
mod supervision;

/// Tool definitions: trust, the scan, include/exclude.
#[path = "gateway/definitions.rs"]
mod definitions;

/// Progress, logs, list changes and resource updates.
#[path = "gateway/notifications.rs"]
mod notifications;

/// Sampling, elicitation, roots and the declared client capabilities.
#[path = "gateway/capabilities.rs"]
mod capabilities;

/// Large results and the token budget.
#[path = "gateway/results.rs"]
mod results;

/// OpenTelemetry export.
#[path = "gateway/otlp.rs"]
mod otlp;
