//! The built-in path: launch rendered servers with rmcp, hold them, call their tools.
//!
//! For each server: connect (spawn a stdio child, or open Streamable HTTP), `initialize`, then
//! `tools/list` following pagination, all within a per-server startup timeout. A stdio child
//! that exits before answering fails at once with its exit status and stderr tail. Servers
//! start concurrently, at most `concurrency` at a time. Strict startup fails the run when any
//! server fails; degraded startup (the default) reports failures and keeps the rest.
//!
//! **Invariant:** rmcp is used only in this module.

mod bearer;
mod client;
mod failure;
mod headers_helper;
mod lifecycle;
mod process;
mod progress;
mod remote;
mod served;
mod sse;
mod start;
mod tasks;
pub use tasks::{ServerTask, TASK_LOST_AFTER, TaskSeen};

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{RoleClient, RunningService};
use serde_json::{Map, Value};
use tether_config::{
    Masker, RenderedServer, RenderedText, RenderedTransport, SecretValue, ServerOptions, mask_json,
    mask_known_values,
};

use process::ChildProcess;
pub use process::{ENV_WHITELIST, STDERR_TAIL_BYTES, StderrTail, TERMINATE_GRACE, inherited_env};
pub use sse::{SseError, sse_endpoint};

use crate::error::DriverError;
use client::TetherClient;
use start::{passed_env, start_filtered, tool_infos};

pub use bearer::{BearerAuth, BearerSlot, MAX_STEP_UPS, Refusal, send_renewing};
pub use headers_helper::{HeadersHelper, HelperError, send_with_helper};
pub use lifecycle::PROBE_BOUND;

/// How servers are started. A runtime keeps its options: a server it restarts later (a
/// re-minted managed config) starts under the same limits.
#[derive(Clone)]
pub struct StartOptions {
    /// Per-server limit for connect + `initialize` + `tools/list` (default 30 s).
    pub startup_timeout: Duration,
    /// How many times `startup_timeout` a stdio server launched through a package runner
    /// (`npx`, `uvx`, … : [`package_runner`]) gets, since its first start downloads the
    /// package (default [`PACKAGE_RUNNER_FACTOR`]; 1 where the timeout already allows for it).
    /// A server's own startup timeout in its config wins over both.
    pub package_runner_factor: u32,
    /// How many servers start at once (default 8).
    pub concurrency: usize,
    /// Fail the run if any server fails (default: degraded startup).
    pub strict: bool,
    /// Where the servers' notifications (log messages, list changes, resource updates) go,
    /// with the server's name; `None` drops them (a gateway passes them on to its clients).
    pub notices: Option<NoticeSink>,
    /// Who answers the requests servers send their client (`sampling/createMessage`,
    /// `elicitation/create`, `roots/list`). With one, tether declares the capabilities of
    /// [`StartOptions::declared`] to every server; without (the default), it declares none.
    pub client_requests: Option<ClientRequests>,
    /// With `client_requests`: the capabilities tether declares (a gateway declares what its
    /// own client declared, so that a server offers only what can be answered). `None`: all
    /// that can be passed on — `sampling`, `elicitation` (form and URL) and `roots`
    /// (`listChanged`). Other fields than these three are not declared.
    pub declared: Option<ClientCapabilities>,
    /// Fresh bearer tokens for a Streamable HTTP server that refuses the one it was sent
    /// (401) or asks for more access (403), at any request of the run (default: none).
    pub bearer_auth: Option<Arc<dyn BearerAuth>>,
    /// The sandbox every stdio server starts in (`--sandbox`; default: none). See
    /// `specs/sandbox/TECH.md`.
    pub sandbox: Option<tether_sandbox::Policy>,
    /// Whether [`StartOptions::sandbox`] came from `--sandbox`, and so wins over a server's
    /// own `sandbox` key; otherwise (a default from config.toml) the server's key wins.
    pub sandbox_wins: bool,
}

impl StartOptions {
    /// The sandbox `server` starts in: the run's when it wins or the server names none, else
    /// the server's own `sandbox` key (an HTTP-port package may also listen on its port); an
    /// error line when that key is not a valid mode.
    pub fn sandbox_for(
        &self,
        server: &RenderedServer,
    ) -> Result<Option<tether_sandbox::Policy>, String> {
        let mut policy = match (&server.options.sandbox, self.sandbox_wins) {
            (Some(mode), false) => tether_sandbox::Mode::parse(mode)
                .and_then(|mode| mode.policy())
                .map_err(|e| format!("its \"sandbox\" key: {e}"))?
                // A config's `none` never lowers the user's configured default: only
                // `--sandbox none` does.
                .or_else(|| self.sandbox.clone()),
            _ => self.sandbox.clone(),
        };
        if let (Some(served), Some(policy)) = (&server.options.serves, policy.as_mut()) {
            // A host list puts the server in its own network namespace, where tether could not
            // reach its port.
            if matches!(policy.profile.outgoing(), tether_sandbox::Outgoing::Ports { hosts, .. } if !hosts.is_empty())
            {
                return Err("it serves HTTP on a port tether must reach, and its sandbox profile's allow_host would put it in a network namespace of its own: allow ports (allow_port) instead of hosts, or use --sandbox default".to_owned());
            }
            // An HTTP-port package must listen on its port (a sandbox lets none by default).
            let settings = policy.profile.tether.get_or_insert_with(Default::default);
            settings.allow_bind.extend(served.port());
        }
        Ok(policy)
    }

    /// What to say on stderr of the sandboxes `servers` (a run's) start in and what each
    /// enforces: one line for all stdio servers when they share the run's, else a line per
    /// stdio server — those without a sandbox named too; none when no server is sandboxed. A
    /// server whose key is not a valid mode is left out: its start fails, saying why.
    pub fn sandbox_lines(&self, servers: &[RenderedServer]) -> Vec<String> {
        let reports: Vec<(&str, Option<String>)> = servers
            .iter()
            .filter(|server| matches!(server.transport, RenderedTransport::Stdio { .. }))
            .filter_map(|server| {
                let policy = self.sandbox_for(server).ok()?;
                Some((
                    server.name.as_str(),
                    policy.map(|policy| tether_sandbox::assess(&policy).to_string()),
                ))
            })
            .collect();
        if reports.iter().all(|(_, report)| report.is_none()) {
            return Vec::new();
        }
        let shared = reports.windows(2).all(|pair| pair[0].1 == pair[1].1);
        match reports.first() {
            Some((_, Some(report))) if shared && self.sandbox.is_some() => {
                vec![format!("stdio servers run under {report}")]
            }
            _ => reports
                .iter()
                .map(|(name, report)| match report {
                    Some(report) => format!("{name} runs under {report}"),
                    None => format!("{name} runs with NO sandbox"),
                })
                .collect(),
        }
    }

    /// For a failed call's (or start's) `text` from `server`: the likely sandbox denial in it
    /// and the profile line that would allow it, when `server` runs sandboxed.
    pub fn explain_denial(&self, server: &RenderedServer, text: &str) -> Option<String> {
        let policy = self.sandbox_for(server).ok()??;
        tether_sandbox::explain_policy(text, &policy)
    }
}

impl std::fmt::Debug for StartOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StartOptions")
            .field("startup_timeout", &self.startup_timeout)
            .field("package_runner_factor", &self.package_runner_factor)
            .field("concurrency", &self.concurrency)
            .field("strict", &self.strict)
            .field("notices", &self.notices.is_some())
            .field("client_requests", &self.client_requests.is_some())
            .field("declared", &self.declared)
            .field("bearer_auth", &self.bearer_auth.is_some())
            .field("sandbox", &self.sandbox.as_ref().map(|p| &p.label))
            .field("sandbox_wins", &self.sandbox_wins)
            .finish()
    }
}

/// How many times the startup timeout a server launched through a package runner gets by
/// default: 120 s with the default 30 s. Cold `npx -y` starts were measured at 25–27 s, and a
/// large package or a slow registry takes longer; a cached start is as fast as any.
pub const PACKAGE_RUNNER_FACTOR: u32 = 4;

/// The package runner a stdio server is launched through, by the command's file name and
/// its first argument: `npx`, `pnpx`, `bunx`, `uvx`, `pipx`, `npm exec`, `pnpm dlx`,
/// `yarn dlx`, `bun x`, `uv tool run`, `docker run` and `podman run` (which pull an image).
/// Its first start downloads the package, so it gets a longer startup timeout.
pub fn package_runner(command: &str, args: &[&str]) -> Option<String> {
    let name = std::path::Path::new(command).file_name()?.to_str()?;
    let first = args.first().copied().unwrap_or_default();
    let runner = match (name, first) {
        ("npx" | "pnpx" | "bunx" | "uvx" | "pipx", _) => name.to_owned(),
        ("npm", "exec") | ("pnpm" | "yarn", "dlx") | ("bun", "x") => format!("{name} {first}"),
        ("docker" | "podman", "run") => format!("{name} {first}"),
        ("uv", "tool") if args.get(1) == Some(&"run") => "uv tool run".to_owned(),
        _ => return None,
    };
    Some(runner)
}

/// The package runner `server` is launched through, if it is a stdio server launched through
/// one.
fn server_package_runner(server: &RenderedServer) -> Option<String> {
    match &server.transport {
        RenderedTransport::Stdio { command, args, .. } => {
            let args: Vec<String> = args.iter().take(2).map(RenderedText::expose).collect();
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            package_runner(&command.expose(), &args)
        }
        RenderedTransport::Remote { .. } => None,
    }
}

/// Something a server told tether, its client, that a holder may pass on.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerNotice {
    /// `notifications/message`: its params as JSON.
    Log(Value),
    /// `notifications/tools/list_changed` (also sent by a supervisor after a restart: the
    /// restarted server's tools may differ).
    ToolsChanged,
    /// `notifications/prompts/list_changed`.
    PromptsChanged,
    /// `notifications/resources/list_changed`.
    ResourcesChanged,
    /// `notifications/resources/updated`: its params (`uri`, …) as JSON.
    ResourceUpdated(Value),
}

/// A receiver of servers' notifications: `(server name, notice)`.
pub type NoticeSink = tokio::sync::mpsc::UnboundedSender<(String, ServerNotice)>;

/// Why a holder did not answer a server's request: a JSON-RPC error code and a message,
/// passed back to the server as they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRefused {
    /// The JSON-RPC error code (e.g. -32601, method not found).
    pub code: i32,
    /// Why, for the server (and whoever reads its logs): never a secret value.
    pub message: String,
}

/// Answers a server's request to its client: called with the server's name, the method
/// (`sampling/createMessage`, `elicitation/create`, `roots/list`) and its params as JSON;
/// returns the result as JSON.
pub type ClientRequests = Arc<
    dyn Fn(
            String,
            String,
            Value,
        ) -> futures_util::future::BoxFuture<'static, Result<Value, RequestRefused>>
        + Send
        + Sync,
>;

impl Default for StartOptions {
    fn default() -> Self {
        Self {
            startup_timeout: Duration::from_secs(30),
            package_runner_factor: PACKAGE_RUNNER_FACTOR,
            concurrency: 8,
            strict: false,
            notices: None,
            client_requests: None,
            declared: None,
            bearer_auth: None,
            sandbox: None,
            sandbox_wins: false,
        }
    }
}

/// A tool a server offers, with every string the server wrote in it masked (the run's
/// masking set, [`tether_config::mask_json`]): whoever shows a tool — a report, a gateway's
/// list, setup-mcp's answer to an agent — shows no secret value a server put there (one that
/// reflects its environment into a description). A tool whose name holds a value is not
/// listed at all: its name is what a call sends back, so it can be neither masked nor shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolInfo {
    /// The name `tools/call` takes.
    pub name: String,
    /// As the server describes it (`None` when it gives none), masked.
    pub description: Option<String>,
    /// The whole definition as the server sent it (name, description, input and output
    /// schema, annotations, …), masked: what a gateway offers under its own name.
    pub definition: Value,
}

/// How a server's startup went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerStatus {
    /// Initialized and listed its tools.
    Ready {
        /// Every page of `tools/list`, in the server's order.
        tools: Vec<ToolInfo>,
    },
    /// Did not start.
    Failed {
        /// Exit status, handshake error or timeout, with the stderr tail; known secret
        /// values masked.
        reason: String,
    },
    /// Not started because its config says `"disabled": true`.
    Disabled,
}

/// One server's startup result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerReport {
    /// The server's name in the run.
    pub name: String,
    /// How its startup went.
    pub status: ServerStatus,
}

type Client = RunningService<RoleClient, TetherClient>;

struct RunningServer {
    name: String,
    client: Client,
    child: Option<ChildProcess>,
    /// A remote server's bearer token slot: says whether a step-up waits for its login.
    bearer: Option<Arc<BearerSlot>>,
    /// Its config's options: the tool filters apply to calls.
    options: ServerOptions,
}

impl RunningServer {
    /// Why a request got no answer within `timeout`: the server's silence, or — when a
    /// step-up waits for its login meanwhile — a login that was not completed, and how to
    /// finish it.
    fn no_answer(&self, timeout: Duration) -> String {
        let seconds = failure::seconds(timeout);
        if let Some(slot) = self.bearer.as_ref().filter(|slot| slot.stepping_up()) {
            format!(
                "no answer within {seconds} s: the server asked for more access and the login for it was not completed in time (the authorization URL is on stderr above, when no browser opened); finish it in a browser and call again, or run `tether auth login {}` first",
                slot.url()
            )
        } else {
            format!("no answer within {seconds} s")
        }
    }
}

/// A server that answered `initialize` and `tools/list`, before it joins the runtime.
struct Started {
    client: Client,
    /// `None` for a remote server.
    child: Option<ChildProcess>,
    /// A remote server's bearer token slot, when its token is renewed.
    bearer: Option<Arc<BearerSlot>>,
    tools: Vec<ToolInfo>,
}

/// The servers of a run, held until [`McpRuntime::shutdown`] (or drop, which kills children).
pub struct McpRuntime {
    running: Vec<RunningServer>,
    reports: Vec<ServerReport>,
    /// Values masked in stderr tails and error messages: every sensitive value of the servers
    /// started so far, plus what the caller added (a session's secrets).
    masking: Arc<Vec<SecretValue>>,
    /// The masker of `masking`: what the servers answer is masked with it.
    masker: Arc<Masker>,
    options: StartOptions,
}

impl std::fmt::Debug for McpRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpRuntime")
            .field("reports", &self.reports)
            .finish_non_exhaustive()
    }
}

/// tether's `initialize`, declaring `capabilities` (none without).
fn client_config(capabilities: Option<ClientCapabilities>) -> ClientConfig {
    ClientConfig::new(
        capabilities.unwrap_or_default(),
        Implementation::new("tether", env!("CARGO_PKG_VERSION")),
    )
}

/// Whether `error` is a server's -32021 naming the Tasks extension among what it requires.
fn tasks_required(error: &rmcp::ErrorData) -> bool {
    error.code == rmcp::model::ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
        && error
            .data
            .as_ref()
            .and_then(|data| data.pointer("/requiredCapabilities/extensions"))
            .and_then(Value::as_object)
            .is_some_and(|extensions| extensions.contains_key(rmcp::model::TASKS_EXTENSION_ID))
}

/// The key of a forwarded request's `params._meta` that asks [`McpRuntime::forward`] to
/// declare the Tasks extension (SEP-2663) to the server for this one request (a client of the
/// gateway that declared it, or a call the gateway holds as a task). Taken out before sending.
pub const DECLARE_TASKS: &str = "tether/declareTasks";

/// Marks `params` (a request's) with [`DECLARE_TASKS`].
pub fn declare_tasks(params: &mut Value) {
    if let Some(fields) = params.as_object_mut() {
        let meta = fields
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert(DECLARE_TASKS.to_owned(), Value::Bool(true));
        }
    }
}

/// Whether `params` carried [`DECLARE_TASKS`]; removes it (and `_meta` when left empty).
fn take_tasks_declaration(params: &mut Value) -> bool {
    let Some(fields) = params.as_object_mut() else {
        return false;
    };
    let Some(meta) = fields.get_mut("_meta").and_then(Value::as_object_mut) else {
        return false;
    };
    let declared = meta.remove(DECLARE_TASKS).is_some();
    if meta.is_empty() {
        fields.remove("_meta");
    }
    declared
}

/// The MCP Apps extension (SEP-1865): a host that renders a tool's `ui://` HTML.
pub const APPS_EXTENSION: &str = "io.modelcontextprotocol/ui";

/// Every client capability tether can pass on: `sampling`, `elicitation` (form and URL),
/// `roots` (with `listChanged`), and the MCP Apps extension (the gateway passes apps through
/// to its clients' hosts).
pub fn answerable_capabilities() -> ClientCapabilities {
    serde_json::from_value(serde_json::json!({
        "sampling": {},
        "elicitation": {"form": {}, "url": {}},
        "roots": {"listChanged": true},
        "extensions": {APPS_EXTENSION: {"mimeTypes": ["text/html;profile=mcp-app"]}}
    }))
    .unwrap_or_default()
}

/// Of `capabilities` (a client's), what tether can pass on: `sampling`, `elicitation`,
/// `roots` and the MCP Apps extension, as declared; nothing else (no experimental capability,
/// no other extension).
pub fn passed_on_capabilities(capabilities: &ClientCapabilities) -> ClientCapabilities {
    let mut kept = ClientCapabilities::default();
    kept.sampling = capabilities.sampling.clone();
    kept.elicitation = capabilities.elicitation.clone();
    kept.roots = capabilities.roots.clone();
    kept.extensions = capabilities
        .extensions
        .as_ref()
        .and_then(|extensions| extensions.get(APPS_EXTENSION))
        .map(|apps| {
            [(APPS_EXTENSION.to_owned(), apps.clone())]
                .into_iter()
                .collect()
        });
    kept
}

impl McpRuntime {
    /// Starts every server. What the servers print, and every error about them, is masked
    /// with the servers' own sensitive values (what secrets and the environment put into
    /// them); a [`crate::Session`] adds its secrets to that set.
    pub async fn start(
        servers: Vec<RenderedServer>,
        options: &StartOptions,
    ) -> Result<Self, DriverError> {
        Self::start_masking(servers, options, Vec::new()).await
    }

    /// [`McpRuntime::start`], masking `masking` as well.
    pub(crate) async fn start_masking(
        servers: Vec<RenderedServer>,
        options: &StartOptions,
        mut masking: Vec<SecretValue>,
    ) -> Result<Self, DriverError> {
        for server in &servers {
            add_masking(&mut masking, server);
            // Values passed on from tether's environment may be credentials too.
            for (_, value) in passed_env(server) {
                let value = SecretValue::new(value);
                if !value.is_empty() && !masking.contains(&value) {
                    masking.push(value);
                }
            }
        }
        let masking = Arc::new(masking);
        // A disabled server is never started; its report keeps its place in the input order.
        let disabled: Vec<String> = servers
            .iter()
            .filter(|s| s.options.disabled)
            .map(|s| s.name.clone())
            .collect();
        let order: std::collections::HashMap<String, usize> = servers
            .iter()
            .enumerate()
            .map(|(index, s)| (s.name.clone(), index))
            .collect();
        let servers = servers.into_iter().filter(|s| !s.options.disabled);
        let outcomes: Vec<(String, ServerOptions, Result<Started, String>)> =
            futures_util::stream::iter(servers)
                .map(|server| {
                    let masking = Arc::clone(&masking);
                    async move {
                        let name = server.name.clone();
                        let (server_options, outcome) =
                            start_filtered(server, options, &masking).await;
                        (name, server_options, outcome)
                    }
                })
                .buffered(options.concurrency.max(1))
                .collect()
                .await;
        let mut runtime = Self {
            running: Vec::new(),
            reports: Vec::new(),
            masker: Arc::new(Masker::new(masking.iter())),
            masking,
            options: options.clone(),
        };
        for (name, server_options, outcome) in outcomes {
            match outcome {
                Ok(Started {
                    client,
                    child,
                    bearer,
                    tools,
                }) => {
                    tracing::info!(server = %name, tools = tools.len(), "MCP server ready");
                    runtime.reports.push(ServerReport {
                        name: name.clone(),
                        status: ServerStatus::Ready { tools },
                    });
                    runtime.running.push(RunningServer {
                        name,
                        client,
                        child,
                        bearer,
                        options: server_options,
                    });
                }
                Err(reason) => {
                    tracing::info!(server = %name, "MCP server failed to start: {reason}");
                    runtime.reports.push(ServerReport {
                        name,
                        status: ServerStatus::Failed { reason },
                    });
                }
            }
        }
        for name in disabled {
            tracing::info!(server = %name, "MCP server is disabled in its config: not started");
            runtime.reports.push(ServerReport {
                name,
                status: ServerStatus::Disabled,
            });
        }
        runtime
            .reports
            .sort_by_key(|report| order.get(&report.name).copied().unwrap_or(usize::MAX));
        if options.strict {
            let details: Vec<String> = runtime
                .reports
                .iter()
                .filter_map(|r| match &r.status {
                    ServerStatus::Failed { reason } => Some(format!("{}: {reason}", r.name)),
                    ServerStatus::Ready { .. } | ServerStatus::Disabled => None,
                })
                .collect();
            if !details.is_empty() {
                runtime.shutdown().await;
                return Err(DriverError::StartupFailed { details });
            }
        }
        Ok(runtime)
    }

    /// Each server's startup result, in input order.
    pub fn reports(&self) -> &[ServerReport] {
        &self.reports
    }

    /// The names of the servers that are running.
    pub fn running(&self) -> Vec<String> {
        self.running.iter().map(|s| s.name.clone()).collect()
    }

    /// The running server called `server`, or [`DriverError::UnknownServer`].
    fn server(&self, server: &str) -> Result<&RunningServer, DriverError> {
        self.running
            .iter()
            .find(|s| s.name == server)
            .ok_or_else(|| DriverError::UnknownServer {
                name: server.to_owned(),
                running: self.running(),
            })
    }

    /// The servers whose connection has closed since they started: a stdio server that exited
    /// or crashed, a remote one that went away. Their calls fail; a holder that supervises
    /// (the gateway) starts them again.
    pub fn closed(&self) -> Vec<String> {
        self.running
            .iter()
            .filter(|s| s.client.is_transport_closed())
            .map(|s| s.name.clone())
            .collect()
    }

    /// The process group ids of running stdio servers (for tests and diagnostics).
    pub fn process_groups(&self) -> Vec<i32> {
        self.running
            .iter()
            .filter_map(|s| s.child.as_ref().and_then(ChildProcess::pgid))
            .collect()
    }

    /// Calls `tool` on `server` with `arguments`, within `timeout` (or the server's own
    /// `timeout`, when its config sets one). Returns the MCP
    /// `CallToolResult` as JSON (a tool's own failure is `isError: true`, not an `Err`).
    pub async fn call_tool(
        &self,
        server: &str,
        tool: &str,
        arguments: Option<Map<String, Value>>,
        timeout: Duration,
    ) -> Result<Value, DriverError> {
        self.call_tool_declaring(server, tool, arguments, timeout, false)
            .await
    }

    /// [`McpRuntime::call_tool`], declaring the Tasks extension (SEP-2663) when
    /// `declare_tasks`: a call the server then runs as a task is followed to its end
    /// (`tasks.rs`), its questions answered as the server's own requests would be. Without,
    /// a tool whose server runs it only as a task (-32021 naming Tasks) is called that way too.
    pub async fn call_tool_declaring(
        &self,
        server: &str,
        tool: &str,
        arguments: Option<Map<String, Value>>,
        timeout: Duration,
        declare_tasks: bool,
    ) -> Result<Value, DriverError> {
        let running = self.server(server)?;
        let failed = |message: String| DriverError::ToolCallFailed {
            server: server.to_owned(),
            tool: tool.to_owned(),
            message: mask_known_values(&message, self.masking.iter()),
        };
        if !running.options.allows_tool(tool) {
            return Err(failed(
                "the server's config leaves this tool out (includeTools/excludeTools), so it is not offered"
                    .to_owned(),
            ));
        }
        // The server's own per-request timeout (Gemini/Claude `timeout`, Codex
        // `tool_timeout_sec`), if its config set one, replaces the caller's.
        let timeout = running
            .options
            .timeout_ms
            .map_or(timeout, Duration::from_millis);
        let mut params = CallToolRequestParams::new(tool.to_owned());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        if declare_tasks {
            return self.call_tool_as_task(server, &params, timeout).await;
        }
        let started = Instant::now();
        let result = tokio::time::timeout(timeout, running.client.call_tool(params.clone()))
            .await
            .map_err(|_| failed(running.no_answer(timeout)))?;
        let result = match result {
            // A tool its server runs only as a task: again, declaring Tasks, and the task
            // followed to its end.
            Err(rmcp::ServiceError::McpError(error)) if tasks_required(&error) => {
                let left = timeout.saturating_sub(started.elapsed());
                return self.call_tool_as_task(server, &params, left).await;
            }
            result => result.map_err(|e| failed(failure::request_failure(&e)))?,
        };
        let mut result =
            serde_json::to_value(result).map_err(|e| failed(format!("unreadable result: {e}")))?;
        mask_json(&self.masker, &mut result);
        Ok(result)
    }

    /// Lists `server`'s tools again (every page), keeping those its config allows: what a
    /// holder does when the server says its list changed. Errors as [`McpRuntime::forward`].
    pub async fn list_tools(
        &self,
        server: &str,
        timeout: Duration,
    ) -> Result<Vec<ToolInfo>, DriverError> {
        let running = self.server(server)?;
        let failed = |message: String| DriverError::RequestFailed {
            server: server.to_owned(),
            method: "tools/list".to_owned(),
            code: None,
            message: mask_known_values(&message, self.masking.iter()),
        };
        let mut tools = tokio::time::timeout(timeout, running.client.list_all_tools())
            .await
            .map_err(|_| failed(format!("no answer within {} s", failure::seconds(timeout))))?
            .map_err(|e| failed(failure::request_failure(&e)))?;
        tools.retain(|tool| running.options.allows_tool(&tool.name));
        Ok(tool_infos(server, tools, &self.masker))
    }

    /// Ends `server`'s connection and process now, leaving it listed in this runtime (whose
    /// other servers keep running): what a holder does with a server it replaced by a fresh
    /// start elsewhere (a re-minted managed config). Unknown names are ignored.
    pub fn stop_server(&self, server: &str) {
        if let Some(running) = self.running.iter().find(|s| s.name == server) {
            running.client.cancellation_token().cancel();
            if let Some(child) = &running.child {
                child.stop();
            }
        }
    }

    /// Tells every running server that the client's roots changed
    /// (`notifications/roots/list_changed`); a server that cannot be told is skipped.
    pub async fn notify_roots_changed(&self) {
        for running in &self.running {
            if let Err(error) = running.client.notify_roots_list_changed().await {
                tracing::debug!(server = %running.name, %error, "could not pass roots/list_changed on");
            }
        }
    }

    /// What `server` declared in its `initialize` answer (`capabilities`: `tools`,
    /// `resources`, `prompts`, `completions`, `logging`, …) as JSON; `None` when no server of
    /// that name is running.
    pub fn capabilities(&self, server: &str) -> Option<Value> {
        let running = self.running.iter().find(|s| s.name == server)?;
        let info = running.client.peer_info()?;
        serde_json::to_value(&info.capabilities).ok()
    }

    /// The MCP revision tether speaks with `server` (`2026-07-28` after `server/discover`, or
    /// what `initialize` agreed on); `None` when no server of that name is running.
    pub fn protocol_version(&self, server: &str) -> Option<String> {
        let running = self.running.iter().find(|s| s.name == server)?;
        Some(running.client.peer_info()?.protocol_version.to_string())
    }

    /// The `instructions` `server` gave in its `initialize` answer, masked with the runtime's
    /// values; `None` when it gave none or no server of that name is running.
    pub fn instructions(&self, server: &str) -> Option<String> {
        let running = self.running.iter().find(|s| s.name == server)?;
        let info = running.client.peer_info()?;
        let text = info.instructions.as_deref()?;
        Some(mask_known_values(text, self.masking.iter()))
    }

    /// Sends one MCP request (`method` with `params`, as JSON) to `server` and returns the
    /// server's result as JSON: what a gateway uses to pass `tools/call`, `resources/read`,
    /// `prompts/get`, the list methods and `completion/complete` on without knowing rmcp.
    ///
    /// The answer is awaited until `timeout` or until `cancelled` completes, whichever is
    /// first; in both cases the server is sent `notifications/cancelled` for the request.
    /// With `progress`, the server's `notifications/progress` for this request are sent there
    /// (their params as JSON, with the progress token tether gave the request) until it ends.
    /// A `tools/call` of a tool the server's config leaves out is refused here, as
    /// [`McpRuntime::call_tool`] refuses it. Errors are [`DriverError::RequestFailed`] (the
    /// server's JSON-RPC code when it answered with one), [`DriverError::Cancelled`] and
    /// [`DriverError::UnknownServer`]; their messages are masked.
    pub async fn forward(
        &self,
        server: &str,
        method: &str,
        params: Value,
        timeout: Duration,
        cancelled: impl Future<Output = ()>,
        progress: Option<tokio::sync::mpsc::UnboundedSender<Value>>,
    ) -> Result<Value, DriverError> {
        let running = self.server(server)?;
        let failed = |code: Option<i32>, message: String| DriverError::RequestFailed {
            server: server.to_owned(),
            method: method.to_owned(),
            code,
            message: mask_known_values(&message, self.masking.iter()),
        };
        if method == "tools/call"
            && let Some(tool) = params.get("name").and_then(Value::as_str)
            && !running.options.allows_tool(tool)
        {
            return Err(failed(
                Some(rmcp::model::ErrorCode::INVALID_PARAMS.0),
                format!(
                    "the server's config leaves the tool '{tool}' out (includeTools/excludeTools)"
                ),
            ));
        }
        tokio::pin!(cancelled);
        let mut params = params;
        // A 2026-07-28 server may answer with `InputRequiredResult`: what it asks for
        // (elicitation, sampling, roots) is put to the holder, as a legacy server's own
        // request would be, and the request is sent again with the answers and the state.
        for _round in 0..rmcp::model::DEFAULT_MRTR_MAX_ROUNDS {
            let answer = self
                .forward_once(
                    running,
                    method,
                    params.clone(),
                    timeout,
                    &mut cancelled,
                    progress.clone(),
                )
                .await?;
            let result = match answer {
                rmcp::model::ServerResult::InputRequiredResult(asked) => asked,
                result => {
                    let mut result = serde_json::to_value(result)
                        .map_err(|e| failed(None, format!("unreadable result: {e}")))?;
                    mask_json(&self.masker, &mut result);
                    return Ok(result);
                }
            };
            let (responses, state) = running
                .client
                .service()
                .fulfil(result)
                .await
                .map_err(|e| failed(Some(e.code.0), e.message.to_string()))?;
            if let Value::Object(fields) = &mut params {
                fields.remove("inputResponses");
                fields.remove("requestState");
                if !responses.is_empty() {
                    fields.insert("inputResponses".to_owned(), Value::Object(responses));
                }
                if let Some(state) = state {
                    fields.insert("requestState".to_owned(), Value::String(state));
                }
            }
        }
        Err(failed(
            None,
            format!(
                "the server still asked for input after {} rounds",
                rmcp::model::DEFAULT_MRTR_MAX_ROUNDS
            ),
        ))
    }

    /// One round of [`McpRuntime::forward`]: the request sent, the answer awaited.
    async fn forward_once(
        &self,
        running: &RunningServer,
        method: &str,
        params: Value,
        timeout: Duration,
        cancelled: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
        progress: Option<tokio::sync::mpsc::UnboundedSender<Value>>,
    ) -> Result<rmcp::model::ServerResult, DriverError> {
        let server = running.name.as_str();
        let failed = |code: Option<i32>, message: String| DriverError::RequestFailed {
            server: server.to_owned(),
            method: method.to_owned(),
            code,
            message: mask_known_values(&message, self.masking.iter()),
        };
        let mut params = params;
        let tasks_declared = take_tasks_declaration(&mut params);
        let mut message = Map::new();
        message.insert("method".to_owned(), Value::String(method.to_owned()));
        if !params.is_null() {
            message.insert("params".to_owned(), params);
        }
        let request: rmcp::model::ClientRequest = serde_json::from_value(Value::Object(message))
            .map_err(|e| {
                failed(
                    Some(rmcp::model::ErrorCode::INVALID_PARAMS.0),
                    format!("invalid params: {e}"),
                )
            })?;
        let mut options = rmcp::service::PeerRequestOptions::with_timeout(timeout);
        if tasks_declared {
            // Per request (SEP-2575): tether's own capabilities plus the Tasks extension. In
            // the options, which rmcp applies after its own per-request metadata (a 2026-07-28
            // server's), so that the declaration is not overwritten.
            let mut capabilities = running.client.service().info.capabilities.clone();
            capabilities
                .extensions
                .get_or_insert_with(Default::default)
                .insert(rmcp::model::TASKS_EXTENSION_ID.to_owned(), Map::new());
            let mut meta = rmcp::model::RequestMetaObject::new();
            meta.set_client_capabilities(capabilities);
            options.meta = Some(meta);
        }
        let handle = running
            .client
            .send_cancellable_request(request, options)
            .await
            .map_err(|e| failed(None, failure::request_failure(&e)))?;
        let peer = handle.peer.clone();
        let id = handle.id.clone();
        // A route, closed however this function ends: settled once the answer came (its
        // progress all passed on first), else a moment after a cancellation or a dropped
        // future; none (and nothing to close) without progress to pass on.
        let route = progress.map(|progress| {
            let routes = &running.client.service().progress;
            routes.open(handle.progress_token.clone(), progress)
        });
        let answer = tokio::select! {
            answer = handle.await_response() => answer,
            () = cancelled.as_mut() => {
                let notice = rmcp::model::CancelledNotificationParam::new(
                    Some(id),
                    Some("cancelled by the client".to_owned()),
                );
                if let Err(error) = peer.notify_cancelled(notice).await {
                    tracing::debug!(server, %error, "could not pass a cancellation on");
                }
                return Err(DriverError::Cancelled {
                    server: server.to_owned(),
                    method: method.to_owned(),
                });
            }
        };
        if let Some(route) = route {
            route.settle().await;
        }
        match answer {
            Ok(result) => Ok(result),
            Err(rmcp::ServiceError::McpError(error))
                if error.code == rmcp::model::ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY =>
            {
                let mut required = error
                    .data
                    .as_ref()
                    .and_then(|data| data.get("requiredCapabilities"))
                    .cloned()
                    .unwrap_or_else(|| Value::Object(Map::new()));
                mask_json(&self.masker, &mut required);
                Err(DriverError::NeedsCapability {
                    server: server.to_owned(),
                    method: method.to_owned(),
                    message: mask_known_values(&error.message, self.masking.iter()),
                    required: Box::new(required),
                })
            }
            Err(rmcp::ServiceError::McpError(error)) => {
                Err(failed(Some(error.code.0), error.message.to_string()))
            }
            Err(rmcp::ServiceError::Timeout { timeout }) => {
                Err(failed(None, running.no_answer(timeout)))
            }
            Err(error) => Err(failed(None, failure::request_failure(&error))),
        }
    }

    /// Replaces the server named like `server` with a fresh start of `server`, under the
    /// runtime's own options (a session does this when a re-minted managed config renders
    /// differently). Its new sensitive values join the masking set. Returns the new report.
    pub(crate) async fn restart(&mut self, server: RenderedServer) -> ServerReport {
        let name = server.name.clone();
        if let Some(index) = self.running.iter().position(|s| s.name == name) {
            let old = self.running.remove(index);
            stop(old).await;
        }
        let mut masking = self.masking.as_ref().clone();
        add_masking(&mut masking, &server);
        self.masker = Arc::new(Masker::new(masking.iter()));
        self.masking = Arc::new(masking);
        let started = if server.options.disabled {
            None
        } else {
            Some(start_filtered(server, &self.options, &self.masking).await)
        };
        let report = match started {
            None => ServerReport {
                name: name.clone(),
                status: ServerStatus::Disabled,
            },
            Some((
                server_options,
                Ok(Started {
                    client,
                    child,
                    bearer,
                    tools,
                }),
            )) => {
                self.running.push(RunningServer {
                    name: name.clone(),
                    client,
                    child,
                    bearer,
                    options: server_options,
                });
                ServerReport {
                    name: name.clone(),
                    status: ServerStatus::Ready { tools },
                }
            }
            Some((_, Err(reason))) => ServerReport {
                name: name.clone(),
                status: ServerStatus::Failed { reason },
            },
        };
        match self.reports.iter_mut().find(|r| r.name == name) {
            Some(slot) => *slot = report.clone(),
            None => self.reports.push(report.clone()),
        }
        report
    }

    /// Closes every client and terminates every child's process group.
    pub async fn shutdown(mut self) {
        let running = std::mem::take(&mut self.running);
        futures_util::future::join_all(running.into_iter().map(stop)).await;
    }
}

/// Closes one server: the MCP session first (bounded), then the child's process group.
async fn stop(server: RunningServer) {
    let RunningServer {
        name,
        client,
        child,
        bearer: _,
        options: _,
    } = server;
    if tokio::time::timeout(Duration::from_secs(2), client.cancel())
        .await
        .is_err()
    {
        tracing::debug!(server = %name, "MCP client did not close in time");
    }
    if let Some(child) = child {
        child.terminate().await;
    }
    tracing::debug!(server = %name, "MCP server stopped");
}

/// Adds `server`'s sensitive values to `masking`, once each, leaving out empty ones.
fn add_masking(masking: &mut Vec<SecretValue>, server: &RenderedServer) {
    for value in server.sensitive_values() {
        if !value.is_empty() && !masking.contains(value) {
            masking.push(value.clone());
        }
    }
}
