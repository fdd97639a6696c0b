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
mod failure;
mod headers_helper;
mod lifecycle;
mod process;
mod served;
mod sse;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use indexmap::IndexMap;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{ClientServiceExt as _, RoleClient, RunningService, ServiceExt as _};
use rmcp::transport::IntoTransport;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Map, Value};
use tether_config::{
    Exposure, Masker, RemoteTransport, RenderedServer, RenderedText, RenderedTransport,
    SecretValue, ServerOptions, mask_json, mask_known_values,
};

use process::{ChildProcess, StdioLaunch};
pub use process::{ENV_WHITELIST, STDERR_TAIL_BYTES, StderrTail, TERMINATE_GRACE, inherited_env};
use sse::SseClientTransport;
pub use sse::{SseError, sse_endpoint};

use crate::error::DriverError;

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

/// Where progress notifications of forwarded requests go, by the progress token rmcp gave the
/// request (see [`McpRuntime::forward`]).
type ProgressRoutes = Arc<
    std::sync::Mutex<
        HashMap<rmcp::model::ProgressToken, tokio::sync::mpsc::UnboundedSender<Value>>,
    >,
>;

/// tether's MCP client: its name and capabilities, the progress notifications it passes
/// on to whoever forwarded the request they belong to, the other notifications it passes to
/// the runtime's holder, and the server's own requests it has the holder answer.
#[derive(Clone)]
struct TetherClient {
    info: ClientConfig,
    progress: ProgressRoutes,
    /// The server's name, as notices and requests carry it.
    server: Arc<str>,
    notices: Option<NoticeSink>,
    requests: Option<ClientRequests>,
}

impl TetherClient {
    fn for_server(name: &str, start: &StartOptions) -> Self {
        Self {
            info: client_config(start.client_requests.as_ref().map(|_| {
                start
                    .declared
                    .as_ref()
                    .map_or_else(answerable_capabilities, passed_on_capabilities)
            })),
            progress: ProgressRoutes::default(),
            server: Arc::from(name),
            notices: start.notices.clone(),
            requests: start.client_requests.clone(),
        }
    }

    fn notice(&self, notice: ServerNotice) {
        if let Some(sink) = &self.notices {
            // Nobody listening any more: the notice is dropped.
            let _ = sink.send((self.server.to_string(), notice));
        }
    }

    /// Has the holder answer the server's `method` request.
    async fn ask<P: serde::Serialize, R: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<R, rmcp::ErrorData> {
        let Some(answer) = &self.requests else {
            return Err(rmcp::ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                format!("tether does not answer {method} here"),
                None,
            ));
        };
        let params = serde_json::to_value(params)
            .map_err(|e| rmcp::ErrorData::invalid_params(e.to_string(), None))?;
        match answer(self.server.to_string(), method.to_owned(), params).await {
            Ok(result) => serde_json::from_value(result).map_err(|e| {
                rmcp::ErrorData::internal_error(
                    format!("the client's answer to {method} is not MCP: {e}"),
                    None,
                )
            }),
            Err(RequestRefused { code, message }) => Err(rmcp::ErrorData::new(
                rmcp::model::ErrorCode(code),
                message,
                None,
            )),
        }
    }
}

impl TetherClient {
    /// Answers what a 2026-07-28 server's `InputRequiredResult` asks for, each through the
    /// holder (as that server's own request would be answered in 2025-11-25): the
    /// `inputResponses` by key, and the `requestState` to send back untouched.
    async fn fulfil(
        &self,
        asked: rmcp::model::InputRequiredResult,
    ) -> Result<(Map<String, Value>, Option<String>), rmcp::ErrorData> {
        let requests = asked.input_requests.unwrap_or_default();
        if requests.is_empty() && asked.request_state.is_none() {
            return Err(rmcp::ErrorData::internal_error(
                "the server asked for input without saying what (no inputRequests, no requestState)",
                None,
            ));
        }
        let mut responses = Map::new();
        for (key, request) in requests {
            let request = serde_json::to_value(request)
                .map_err(|e| rmcp::ErrorData::internal_error(e.to_string(), None))?;
            let method = request
                .get("method")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let params = request
                .get("params")
                .cloned()
                .unwrap_or_else(|| serde_json::json!({}));
            let answer: Value = self.ask(&method, &params).await?;
            responses.insert(key, answer);
        }
        Ok((responses, asked.request_state))
    }
}

impl rmcp::ClientHandler for TetherClient {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    #[expect(
        deprecated,
        reason = "notifications/message is still part of the protocol versions tether speaks"
    )]
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        if let Ok(value) = serde_json::to_value(&params) {
            self.notice(ServerNotice::Log(value));
        }
    }

    async fn on_tool_list_changed(&self, _context: rmcp::service::NotificationContext<RoleClient>) {
        self.notice(ServerNotice::ToolsChanged);
    }

    async fn on_prompt_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.notice(ServerNotice::PromptsChanged);
    }

    async fn on_resource_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.notice(ServerNotice::ResourcesChanged);
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        if let Ok(value) = serde_json::to_value(&params) {
            self.notice(ServerNotice::ResourceUpdated(value));
        }
    }

    #[expect(
        deprecated,
        reason = "sampling is still part of the protocol versions tether speaks"
    )]
    async fn create_message(
        &self,
        params: rmcp::model::CreateMessageRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, rmcp::ErrorData> {
        self.ask("sampling/createMessage", &params).await
    }

    async fn create_elicitation(
        &self,
        params: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        self.ask("elicitation/create", &params).await
    }

    #[expect(
        deprecated,
        reason = "roots are still part of the protocol versions tether speaks"
    )]
    async fn list_roots(
        &self,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ListRootsResult, rmcp::ErrorData> {
        self.ask("roots/list", &serde_json::json!({})).await
    }

    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        let sender = self
            .progress
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&params.progress_token)
            .cloned();
        if let (Some(sender), Ok(value)) = (sender, serde_json::to_value(&params)) {
            // The forwarder may have finished; a late notification has nowhere to go.
            let _ = sender.send(value);
        }
    }
}

struct RunningServer {
    name: String,
    client: Client,
    child: Option<ChildProcess>,
    /// Its config's options: the tool filters apply to calls.
    options: ServerOptions,
}

/// A server that answered `initialize` and `tools/list`, before it joins the runtime.
struct Started {
    client: Client,
    /// `None` for a remote server.
    child: Option<ChildProcess>,
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

/// Every client capability tether can pass on: `sampling`, `elicitation` (form and URL) and
/// `roots` (with `listChanged`).
pub fn answerable_capabilities() -> ClientCapabilities {
    serde_json::from_value(serde_json::json!({
        "sampling": {},
        "elicitation": {"form": {}, "url": {}},
        "roots": {"listChanged": true}
    }))
    .unwrap_or_default()
}

/// Of `capabilities` (a client's), what tether can pass on: `sampling`, `elicitation` and
/// `roots`, as declared; nothing else (no experimental or extension capability).
pub fn passed_on_capabilities(capabilities: &ClientCapabilities) -> ClientCapabilities {
    let mut kept = ClientCapabilities::default();
    kept.sampling = capabilities.sampling.clone();
    kept.elicitation = capabilities.elicitation.clone();
    kept.roots = capabilities.roots.clone();
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
        let result = tokio::time::timeout(timeout, running.client.call_tool(params))
            .await
            .map_err(|_| failed(format!("no answer within {} s", failure::seconds(timeout))))?
            .map_err(|e| failed(failure::request_failure(&e)))?;
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
        let options = rmcp::service::PeerRequestOptions::with_timeout(timeout);
        let handle = running
            .client
            .send_cancellable_request(request, options)
            .await
            .map_err(|e| failed(None, failure::request_failure(&e)))?;
        let peer = handle.peer.clone();
        let id = handle.id.clone();
        let routes = &running.client.service().progress;
        // A route, removed however this function ends (an answer, a cancellation, a dropped
        // future); none (and nothing to remove) without progress to pass on.
        let _route = progress.map(|progress| {
            let token = handle.progress_token.clone();
            routes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(token.clone(), progress);
            RemoveOnDrop {
                routes: Arc::clone(routes),
                token,
            }
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
        match answer {
            Ok(result) => Ok(result),
            Err(rmcp::ServiceError::McpError(error)) => {
                Err(failed(Some(error.code.0), error.message.to_string()))
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
                    tools,
                }),
            )) => {
                self.running.push(RunningServer {
                    name: name.clone(),
                    client,
                    child,
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

/// How long a progress route outlives its request's answer. rmcp hands each notification to
/// a task of its own but a response straight to its waiter, so a server's last progress sent
/// just before its answer can be handled after it: removed at once, the route would drop it
/// (the conformance suite's `tools-call-with-progress` saw 2 of 3 through the gateway now and
/// then). The forwarder waits for the route to close, so this is also the most an answer with
/// progress waits for a late one.
const LATE_PROGRESS: Duration = Duration::from_millis(50);

/// Removes a progress route when a forwarded request ends ([`LATE_PROGRESS`] later, within a
/// runtime).
struct RemoveOnDrop {
    routes: ProgressRoutes,
    token: rmcp::model::ProgressToken,
}

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let (routes, token) = (Arc::clone(&self.routes), self.token.clone());
        let remove = move || {
            routes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(&token);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    tokio::time::sleep(LATE_PROGRESS).await;
                    remove();
                });
            }
            Err(_) => remove(),
        }
    }
}

/// Closes one server: the MCP session first (bounded), then the child's process group.
async fn stop(server: RunningServer) {
    let RunningServer {
        name,
        client,
        child,
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

type Handshake = Result<(Client, Vec<rmcp::model::Tool>), Box<dyn std::error::Error + Send + Sync>>;

/// Where a remote server is and what goes with its requests.
struct RemoteTarget<'a> {
    url: &'a str,
    headers: &'a reqwest::header::HeaderMap,
    timeout: Duration,
    bearer_auth: Option<Arc<dyn BearerAuth>>,
    helper: Option<Arc<HeadersHelper>>,
}

/// Connects to a remote server over `kind`, runs `initialize` and lists its tools. A refused
/// bearer token is renewed through `bearer_auth` at any request.
async fn remote_handshake(
    client: TetherClient,
    kind: RemoteTransport,
    http: reqwest::Client,
    target: &RemoteTarget<'_>,
) -> Handshake {
    let RemoteTarget {
        url,
        headers,
        timeout,
        ..
    } = *target;
    let helper = target.helper.clone();
    // A helper's headers are the server's credentials: no OAuth renewal besides.
    let bearer_auth = target.bearer_auth.clone().filter(|_| helper.is_none());
    let slot = bearer::slot_for(url, headers, bearer_auth);
    let client = match kind {
        RemoteTransport::Sse => {
            // The legacy transport takes its headers once, when it connects.
            let mut headers = headers.clone();
            if let Some(helper) = &helper {
                headers.extend(helper.current().await?.1);
            }
            let sse = SseClientTransport::connect(http, url, headers, slot, timeout).await?;
            client.serve(sse).await?
        }
        RemoteTransport::StreamableHttp => {
            let custom: HashMap<HeaderName, HeaderValue> = headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let config = StreamableHttpClientTransportConfig::with_uri(url.to_owned())
                .custom_headers(custom);
            let http = bearer::BearerHttp::new(http, slot, helper);
            let transport = StreamableHttpClientTransport::with_client(http, config);
            let prefer_legacy = client.notices.is_some();
            client
                .serve_with_lifecycle(
                    lifecycle::Probing::new(transport, false, prefer_legacy),
                    lifecycle::auto(),
                )
                .await?
        }
    };
    let tools = client.list_all_tools().await?;
    Ok((client, tools))
}

/// The variables a server's `passEnv` names that are set in tether's environment, with their
/// values (for a stdio server, after the allowlist and before its own `env`).
fn passed_env(server: &RenderedServer) -> Vec<(String, String)> {
    server
        .options
        .pass_env
        .iter()
        .filter_map(|name| std::env::var(name).ok().map(|value| (name.clone(), value)))
        .collect()
}

/// Starts `server` and keeps only the tools its config allows (`includeTools`,
/// `excludeTools`); returns its options too, for the calls that follow.
async fn start_filtered(
    server: RenderedServer,
    start: &StartOptions,
    masking: &Arc<Vec<SecretValue>>,
) -> (ServerOptions, Result<Started, String>) {
    let options = server.options.clone();
    // The server's own startup timeout (Codex `startup_timeout_sec`/`_ms`), if its config set
    // one, replaces the run's; a server launched through a package runner gets a multiple of
    // the run's, for its first start's download.
    let runner_timeout = || match server_package_runner(&server) {
        Some(_) => start
            .startup_timeout
            .saturating_mul(start.package_runner_factor.max(1)),
        None => start.startup_timeout,
    };
    let timeout = options
        .startup_timeout_ms
        .map_or_else(runner_timeout, Duration::from_millis);
    let outcome = start_one(server, start, timeout, masking)
        .await
        .map(|mut started| {
            started.tools.retain(|tool| options.allows_tool(&tool.name));
            started
        });
    (options, outcome)
}

/// Starts `server` within `timeout` (the run's, or the server's own).
async fn start_one(
    server: RenderedServer,
    start: &StartOptions,
    timeout: Duration,
    masking: &Arc<Vec<SecretValue>>,
) -> Result<Started, String> {
    let mask = |text: String| mask_known_values(&text, masking.iter());
    let masker = Masker::new(masking.iter());
    let client = TetherClient::for_server(&server.name, start);
    match &server.transport {
        RenderedTransport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let sandbox = start.sandbox_for(&server)?;
            let launch = StdioLaunch {
                command: SecretValue::new(command.expose()),
                args: args.iter().map(|a| SecretValue::new(a.expose())).collect(),
                env: passed_env(&server)
                    .into_iter()
                    .filter(|(name, _)| !env.contains_key(name))
                    .map(|(k, v)| (k, SecretValue::new(v)))
                    .chain(
                        env.iter()
                            .map(|(k, v)| (k.clone(), SecretValue::new(v.expose()))),
                    )
                    .collect(),
                cwd: cwd.as_ref().map(|c| SecretValue::new(c.expose())),
            };
            if let Some(served) = &server.options.serves {
                served::port_free(served).await.map_err(mask)?;
            }
            let (mut child, stdout, stdin) =
                ChildProcess::spawn(&server.name, &launch, masking.to_vec(), sandbox.as_ref())
                    .map_err(|e| {
                        let shown = command.show(Exposure::Masked);
                        // "No such file or directory" says neither what was missing nor where it
                        // was looked for.
                        let why = match (&launch.cwd, e.kind()) {
                            (Some(dir), std::io::ErrorKind::NotFound)
                                if !std::path::Path::new(dir.expose()).is_dir() =>
                            {
                                "its working directory (cwd) does not exist".to_owned()
                            }
                            (_, std::io::ErrorKind::NotFound)
                                if !launch.command.expose().contains('/') =>
                            {
                                "not found on PATH (install it, or give its full path)".to_owned()
                            }
                            (_, std::io::ErrorKind::NotFound) => "no such file".to_owned(),
                            _ => e.to_string(),
                        };
                        mask(format!("cannot start '{shown}': {why}"))
                    })?;
            if let Some(served) = &server.options.serves {
                let started = served::connect(
                    served,
                    &mut child,
                    (stdout, stdin),
                    client,
                    timeout,
                    start.bearer_auth.clone(),
                )
                .await;
                return match started {
                    Ok((client, tools)) => Ok(Started {
                        client,
                        child: Some(child),
                        tools: tool_infos(&server.name, tools, &masker),
                    }),
                    Err(served::Failure::Exited(status)) => {
                        child.stderr.wait_closed(Duration::from_millis(300)).await;
                        Err(exited_early(&status, &child.stderr, sandbox.as_ref()))
                    }
                    Err(served::Failure::Other(reason)) => {
                        let reason = mask(format!(
                            "{reason}{}",
                            stderr_suffix(&child.stderr, sandbox.as_ref())
                        ));
                        child.terminate().await;
                        Err(reason)
                    }
                };
            }
            let handshake = tokio::time::timeout(timeout, async {
                let pipes =
                    IntoTransport::<RoleClient, std::io::Error, _>::into_transport((stdout, stdin));
                let prefer_legacy = client.notices.is_some();
                let client = client
                    .serve_with_lifecycle(
                        lifecycle::Probing::new(pipes, true, prefer_legacy),
                        lifecycle::auto(),
                    )
                    .await?;
                let tools = client.list_all_tools().await?;
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>((client, tools))
            });
            tokio::pin!(handshake);
            let outcome = tokio::select! {
                outcome = &mut handshake => outcome,
                status = child.wait() => {
                    let status = status.map_or_else(|e| e.to_string(), |s| s.to_string());
                    child.stderr.wait_closed(Duration::from_millis(300)).await;
                    return Err(exited_early(&status, &child.stderr, sandbox.as_ref()));
                }
            };
            match outcome {
                Ok(Ok((client, tools))) => Ok(Started {
                    client,
                    child: Some(child),
                    tools: tool_infos(&server.name, tools, &masker),
                }),
                Ok(Err(err)) => {
                    // The child may be exiting right now: its status explains more than the
                    // closed pipe does.
                    let status =
                        tokio::time::timeout(Duration::from_millis(500), child.wait()).await;
                    let reason = match status {
                        Ok(Ok(status)) => {
                            child.stderr.wait_closed(Duration::from_millis(300)).await;
                            exited_early(&status.to_string(), &child.stderr, sandbox.as_ref())
                        }
                        _ => mask(format!(
                            "MCP handshake failed: {err}{}",
                            stderr_suffix(&child.stderr, sandbox.as_ref())
                        )),
                    };
                    child.terminate().await;
                    Err(reason)
                }
                Err(_) => {
                    // A package runner's first start downloads the package: say so, and how
                    // to give it longer.
                    let downloading = server_package_runner(&server).map_or_else(String::new, |runner| {
                        let factor = match start.package_runner_factor {
                            0 | 1 => String::new(),
                            n => format!(" (a package runner gets {n}× that)"),
                        };
                        format!(
                            "; it is launched through {runner}, which is probably still downloading its package on a first start: run it again once the download is done, or give it more time with --timeout SECS{factor} or startup_timeout_sec in its config"
                        )
                    });
                    let reason = format!(
                        "no answer to initialize/tools/list within {} s{downloading}{}",
                        timeout.as_secs_f64(),
                        stderr_suffix(&child.stderr, sandbox.as_ref())
                    );
                    child.terminate().await;
                    Err(reason)
                }
            }
        }
        RenderedTransport::Remote {
            url,
            headers,
            transport,
        } => {
            let helper = HeadersHelper::of(&server);
            let url = url.expose();
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err("the url must start with http:// or https://".to_owned());
            }
            let headers = header_map(headers)?;
            let http = reqwest::Client::builder()
                .connect_timeout(timeout.min(Duration::from_secs(10)))
                .user_agent(concat!("tether/", env!("CARGO_PKG_VERSION")))
                .build()
                .map_err(|e| mask(format!("cannot build the HTTP client: {e}")))?;
            let kind = *transport;
            let target = RemoteTarget {
                url: &url,
                headers: &headers,
                timeout,
                bearer_auth: start.bearer_auth.clone(),
                helper,
            };
            let handshake = tokio::time::timeout(timeout, async {
                let outcome =
                    remote_handshake(client.clone(), kind, http.clone(), &target)
                        .await;
                match outcome {
                    // A URL without a `type`: the MCP specification's backwards-compatibility
                    // rule is to fall back to the legacy SSE transport.
                    Err(http_err)
                        if kind == RemoteTransport::StreamableHttp
                            && server.options.transport_guessed =>
                    {
                        match remote_handshake(client.clone(), RemoteTransport::Sse, http, &target)
                            .await
                        {
                            Ok(connected) => {
                                tracing::warn!(
                                    server = %server.name,
                                    "no Streamable HTTP at its url ({}); connected over the legacy SSE transport (add \"type\": \"sse\" to say so)",
                                    mask(failure::cause(RemoteTransport::StreamableHttp, &*http_err))
                                );
                                Ok(connected)
                            }
                            Err(sse_err) => Err(format!(
                                "{}; the url has no \"type\", so the legacy SSE transport was tried too: {}",
                                failure::cause(RemoteTransport::StreamableHttp, &*http_err),
                                failure::cause(RemoteTransport::Sse, &*sse_err),
                            )
                            .into()),
                        }
                    }
                    other => other,
                }
            })
            .await;
            match handshake {
                Ok(Ok((client, tools))) => Ok(Started {
                    client,
                    child: None,
                    tools: tool_infos(&server.name, tools, &masker),
                }),
                Ok(Err(err)) => Err(mask(failure::describe(&url, kind, &*err))),
                Err(_) => Err(mask(format!(
                    "no answer from {url} to initialize/tools/list within {} s",
                    timeout.as_secs_f64()
                ))),
            }
        }
    }
}

/// The config's headers as HTTP headers; a name or value HTTP forbids is an error naming the
/// header (never its value).
fn header_map(headers: &IndexMap<String, RenderedText>) -> Result<HeaderMap, String> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let value = value.expose();
        if value.contains(['\r', '\n']) {
            return Err(format!(
                "header '{name}' holds a line break (CR or LF), which HTTP forbids; fix the value"
            ));
        }
        let header_name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("header name '{name}' is not a valid HTTP header name"))?;
        let mut header_value = HeaderValue::from_str(&value)
            .map_err(|_| format!("header '{name}' holds characters HTTP does not allow"))?;
        header_value.set_sensitive(true);
        map.insert(header_name, header_value);
    }
    Ok(map)
}

/// `tools` as [`ToolInfo`]s, masked with `masker`; a tool whose name holds a value is left out
/// (said in a warning that shows its name masked).
fn tool_infos(server: &str, tools: Vec<rmcp::model::Tool>, masker: &Masker) -> Vec<ToolInfo> {
    tools
        .into_iter()
        .filter_map(|tool| {
            let name = tool.name.to_string();
            let shown = masker.mask(&name);
            if shown != name {
                tracing::warn!(
                    server,
                    "the tool '{}' is not offered: its name holds a secret value",
                    tether_config::escape_controls(&shown)
                );
                return None;
            }
            // A `Tool` is plain data; serializing it cannot fail.
            let mut definition = serde_json::to_value(&tool).unwrap_or(Value::Null);
            mask_json(masker, &mut definition);
            let description = definition
                .get("description")
                .and_then(Value::as_str)
                .map(str::to_owned);
            Some(ToolInfo {
                name,
                description,
                definition,
            })
        })
        .collect()
}

fn exited_early(
    status: &str,
    stderr: &StderrTail,
    sandbox: Option<&tether_sandbox::Policy>,
) -> String {
    format!(
        "the server exited ({status}) before answering initialize{}",
        stderr_suffix(stderr, sandbox)
    )
}

/// The last lines of stderr, and, for a sandboxed server whose stderr shows a denial, what the
/// sandbox probably denied and the profile line that would allow it.
fn stderr_suffix(stderr: &StderrTail, sandbox: Option<&tether_sandbox::Policy>) -> String {
    let tail = stderr.last_lines(5);
    let denial = sandbox
        .and_then(|policy| tether_sandbox::explain_policy(&stderr.text(), policy))
        .map_or_else(String::new, |why| format!("\n{why}"));
    if tail.is_empty() {
        denial
    } else {
        format!("; stderr:\n{tail}{denial}")
    }
}
