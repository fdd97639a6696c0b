//! `tether serve`: a run's resolved MCP servers behind one MCP endpoint.
//!
//! A [`Gateway`] takes a started [`tether_driver::McpRuntime`] ([`Gateway::new`]) — or starts
//! the session's servers itself, serving at once while each joins when ready
//! ([`Gateway::start`]) — and the run's masking values, and serves, over stdio or Streamable HTTP, the union of the servers' tools, prompts and
//! resources under namespaced names ([`names`]), forwarding each call to its server and
//! restarting a server whose connection closes ([`supervise`]). Every
//! result and error message is masked with the run's secret values before it leaves
//! ([`redact`]), a tool result over the budget is cut, its whole kept for
//! `resources/read` ([`budget`]), and every forwarded call is recorded without its values
//! ([`audit`]).
//!
//! ```no_run
//! # async fn demo(session: tether_driver::Session) -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use tether_gateway::{Gateway, GatewayOptions};
//!
//! let mut start = tether_driver::StartOptions::default();
//! // The servers' notifications and requests to their client reach the gateway.
//! let upstream = tether_gateway::Upstream::wire(&mut start);
//! let runtime = session.start(&start).await?;
//! let options = GatewayOptions {
//!     call_timeout: Duration::from_secs(60),
//!     audit: None,
//!     start,
//!     pins: None,
//!     scan: tether_gateway::ScanPolicy::Warn,
//!     policies: Default::default(),
//!     filter: tether_gateway::names::ToolFilter::default(),
//!     upstream: Some(upstream),
//!     masking_hook: None,
//!     budget: tether_gateway::ResultBudget::default(),
//!     tool_search: tether_gateway::tool_search::ToolSearch::default(),
//!     secret_scan: tether_gateway::secret_scan::SecretScanPolicy::default(),
//!     first_list_grace: None,
//!     task_after: None,
//! };
//! let gateway = Gateway::new(session, runtime, options).await;
//! gateway.serve_stdio().await?; // until the client closes stdin
//! gateway.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! **Invariant:** rmcp's server side is used only in this crate; the servers behind it are
//! reached through `McpRuntime::forward` (JSON in, JSON out), never through rmcp types.

#![deny(missing_docs)]

pub mod apps;
pub mod audit;
pub mod budget;
mod catalogue;
mod clients;
mod error;
mod handler;
mod http;
pub mod instructions;
mod lines;
pub mod names;
pub mod pins;
mod policy;
pub mod redact;
mod remint;
mod rounds;
/// The prompt-injection scan (the `tether-scan` crate's `injection`).
pub use tether_scan::injection as scan;
/// Credential shapes in arguments and results (the `tether-scan` crate's `secrets`).
pub use tether_scan::secrets as secret_scan;
/// Tool search's ranking (the `tether-search` crate).
pub use tether_search as search;
mod shared;
mod stdio;
mod tasks;
pub use stdio::{Restore, Stdio, stdio};
pub mod supervise;
mod telemetry;
pub mod tool_search;
mod upstream;
pub mod uri_template;

use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt as _;
use tether_config::{Masker, SecretValue};
use tether_driver::{McpRuntime, ServerStatus, Session, StartOptions};
use tokio_util::sync::CancellationToken;

pub use audit::AuditLog;
pub use budget::ResultBudget;
pub use catalogue::STATUS_TOOL;
pub use error::GatewayError;
pub use http::{DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_IDLE, HttpOptions, MCP_PATH, is_loopback};
pub use lines::{FirstLine, read_first_line};
pub use pins::PinStore;
pub use policy::ToolPolicy;
pub use remint::{MaskingHook, RegisterValues};
pub use scan::ScanPolicy;
pub use shared::list_all;
pub use upstream::Upstream;

use handler::GatewayHandler;
use shared::Shared;

/// How a gateway forwards and records.
#[derive(Debug)]
pub struct GatewayOptions {
    /// The longest a forwarded call may take before it fails (and is cancelled upstream).
    pub call_timeout: Duration,
    /// Where calls are recorded; `None` records nothing.
    pub audit: Option<AuditLog>,
    /// How a server that stopped is started again (its startup timeout).
    pub start: StartOptions,
    /// Where tool definitions are pinned; `None` pins nothing.
    pub pins: Option<PinStore>,
    /// What the prompt-injection scan does with a finding, for a server `policies` does
    /// not name.
    pub scan: ScanPolicy,
    /// Per server: where its tools are pinned and its scan policy. A server not named here
    /// is pinned under its name and scanned under `scan`.
    pub policies: std::collections::HashMap<String, ToolPolicy>,
    /// Which namespaced tools are offered.
    pub filter: names::ToolFilter,
    /// The servers' notifications and requests to their client, when `start` was wired with
    /// [`Upstream::wire`]: followed (list changes) and passed on to the connected clients.
    pub upstream: Option<Upstream>,
    /// Told the session's masking set when re-minting a managed config added values.
    pub masking_hook: Option<MaskingHook>,
    /// Where `tools/call` results are cut, and how much of the whole cut results is kept.
    pub budget: ResultBudget,
    /// Whether `tools/list` offers every tool or the two search tools (`--tool-mode`).
    pub tool_search: tool_search::ToolSearch,
    /// What the scan for credential shapes does in tool arguments and results
    /// (`--secret-scan`; default: warn for arguments, mask for results).
    pub secret_scan: secret_scan::SecretScanPolicy,
    /// For a client that lists tools once (it ignores `notifications/tools/list_changed`):
    /// its first `tools/list` waits until every server joined, at most this long, so it does
    /// not start with a silently partial toolset. `None`: answered at once.
    pub first_list_grace: Option<std::time::Duration>,
    /// For a client that declared Tasks (SEP-2663) calling a server that has none: the call
    /// runs as a task the gateway holds, answered in place when it ends within this (and asks
    /// nothing first), else with the task. `None`: such calls are never tasks.
    pub task_after: Option<std::time::Duration>,
}

/// The default of [`GatewayOptions::task_after`].
pub const DEFAULT_TASK_AFTER: Duration = Duration::from_secs(5);

/// `--task-after` and `task_after`, read: seconds, or `None` for `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskAfter(pub Option<u64>);

/// Reads `--task-after` and `task_after`: a number of seconds, or `off`.
pub fn parse_task_after(text: &str) -> Result<TaskAfter, String> {
    match text.trim() {
        "off" => Ok(TaskAfter(None)),
        seconds => seconds
            .parse::<u64>()
            .map(|seconds| TaskAfter(Some(seconds)))
            .map_err(|_| format!("'{text}' is neither a number of seconds nor 'off'")),
    }
}

/// The run's servers, served as one MCP server. Clones share the servers: each serves its own
/// clients (a hand-off serves every connection the harness opens).
#[derive(Clone)]
pub struct Gateway {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("tools", &self.shared.tool_names().len())
            .finish_non_exhaustive()
    }
}

impl Gateway {
    /// Builds the catalogue from `runtime` — `session`'s started servers — (its tools; prompts
    /// are listed now), masks the session's sensitive values in everything it sends back, and
    /// starts watching the servers: one whose connection closes is started again from the
    /// session. A server that failed to start in `runtime` is reported, not retried. Must be
    /// called within a tokio runtime.
    pub async fn new(session: Session, runtime: McpRuntime, mut options: GatewayOptions) -> Self {
        always_load(&session, &mut options);
        let masker = Masker::new(session.sensitive_values());
        let failed_at_start = runtime
            .reports()
            .iter()
            .filter_map(|report| match &report.status {
                ServerStatus::Failed { reason } => Some((report.name.clone(), masker.mask(reason))),
                ServerStatus::Ready { .. } | ServerStatus::Disabled => None,
            })
            .collect();
        let runtime = Arc::new(runtime);
        let ready: Vec<supervise::Joined> = runtime
            .running()
            .into_iter()
            .map(|name| (name, Arc::clone(&runtime)))
            .collect();
        let supervisor =
            supervise::Supervisor::new(session, options.start.clone(), runtime, failed_at_start);
        let upstream = options.upstream.take();
        let masking_hook = options.masking_hook.take();
        let shared = Arc::new(Shared::new(supervisor, masker, options));
        shared.admit(&ready).await;
        Self::watch(&shared, upstream, masking_hook);
        Self { shared }
    }

    /// Builds the gateway with every server of `session` still to start, and returns at
    /// once: a client is served from now on. Each server starts in the background (at most
    /// `StartOptions::concurrency` at once) and joins when it is ready — its tools, prompts
    /// and resources are offered from then on, and every connected client is sent
    /// `notifications/tools/list_changed` (and the prompts' and resources' when it declared
    /// them). A server whose start fails or times out stays pending and is tried again with
    /// the restart backoff ([`supervise`]). A call to a pending server waits for it, at
    /// most the call timeout. Must be called within a tokio runtime.
    ///
    /// With `tool_search.lazy`, a server whose tools were pinned before is not started: its
    /// pinned definitions are offered (admitted as any list: scanned, masked) until one of
    /// its tools is found by `tether__find_tools` or called, which starts it; when it joins,
    /// its own list replaces them (checked against the pins as always).
    pub fn start(session: Session, mut options: GatewayOptions) -> Self {
        always_load(&session, &mut options);
        let masker = Masker::new(session.sensitive_values());
        let pinned = lazy_servers(&session, &options);
        let lazy = pinned.iter().map(|(server, _)| server.clone()).collect();
        let (supervisor, mut joined) =
            supervise::Supervisor::starting(session, options.start.clone(), &lazy);
        let upstream = options.upstream.take();
        let masking_hook = options.masking_hook.take();
        let shared = Arc::new(Shared::new(supervisor, masker, options));
        shared.admit_pinned(&pinned);
        Self::watch(&shared, upstream, masking_hook);
        let weak = Arc::downgrade(&shared);
        tokio::spawn(async move {
            while let Some((server, runtime)) = joined.recv().await {
                let Some(shared) = weak.upgrade() else {
                    return;
                };
                shared.join(server, runtime).await;
            }
        });
        shared.supervisor.start_all();
        Self { shared }
    }

    /// Starts what watches a built gateway's servers: restarts, re-mints, the servers'
    /// notifications and requests.
    fn watch(shared: &Arc<Shared>, upstream: Option<Upstream>, masking_hook: Option<MaskingHook>) {
        tokio::spawn(supervise::watch(Arc::downgrade(&shared.supervisor)));
        tokio::spawn(remint::remint(Arc::downgrade(shared), masking_hook));
        let (servers, tools) = (Arc::downgrade(shared), Arc::downgrade(shared));
        telemetry::observe(
            move || Some(servers.upgrade()?.supervisor.status(|_| 0)),
            move || {
                let catalogue = tools.upgrade()?.catalogue();
                Some((catalogue.tools.len(), catalogue.withheld.len()))
            },
        );
        if let Some(upstream) = upstream {
            upstream.attach(shared);
        }
    }

    /// Waits, at most `limit`, until no server is pending (each is ready, or was given up
    /// after its failed starts). Returns whether none is.
    pub async fn ready_within(&self, limit: Duration) -> bool {
        self.shared.supervisor.all_joined(limit).await
    }

    /// The namespaced tool names offered, in order.
    pub fn tool_names(&self) -> Vec<String> {
        self.shared.tool_names()
    }

    /// Serves one client on this process's stdin and stdout until the client closes stdin:
    /// as pipes of the event loop when they are pipes (`stdio.rs`), else through tokio's.
    pub async fn serve_stdio(&self) -> Result<(), GatewayError> {
        let stdio = stdio();
        self.serve_io(stdio.reader, stdio.writer).await
    }

    /// Serves one client speaking newline-delimited JSON-RPC (the stdio framing) on `reader`
    /// and `writer` until it closes its side.
    pub async fn serve_io<R, W>(&self, reader: R, writer: W) -> Result<(), GatewayError>
    where
        R: tokio::io::AsyncRead + Send + Unpin + 'static,
        W: tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        let handler = GatewayHandler::new(Arc::clone(&self.shared)).with_catalogue_marker();
        let transport = lines::LineTransport::new(reader, writer, Arc::clone(&self.shared));
        let running = handler
            .serve(transport)
            .await
            .map_err(|e| GatewayError::Handshake {
                message: self.shared.masker().mask(&e.to_string()),
            })?;
        if let Err(error) = running.waiting().await {
            tracing::debug!(%error, "the session ended abnormally");
        }
        Ok(())
    }

    /// Serves every connection to `listener` (a Unix socket in a private directory) as one
    /// client, concurrently, until the returned task is aborted. A peer of another user is
    /// closed at once: the socket's directory is 0700 already; this is the second lock. So is
    /// a sandboxed peer ([`tether_sandbox::confined_peer`]).
    pub fn serve_unix(&self, listener: tokio::net::UnixListener) -> tokio::task::JoinHandle<()> {
        let gateway = self.clone();
        let uid = nix::unistd::getuid().as_raw();
        tokio::spawn(async move {
            let mut clients = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                let Ok(peer) = stream.peer_cred() else {
                    continue;
                };
                if peer.uid() != uid {
                    tracing::warn!("refused a gateway connection from another user");
                    continue;
                }
                // A sandboxed server that found the socket (on the relay's command line) must
                // not call every server's tools through it.
                if peer.pid().is_none_or(tether_sandbox::confined_peer) {
                    tracing::warn!("refused a gateway connection from a sandboxed process");
                    continue;
                }
                let gateway = gateway.clone();
                clients.spawn(async move {
                    let (reader, writer) = stream.into_split();
                    if let Err(error) = gateway.serve_io(reader, writer).await {
                        tracing::debug!(%error, "a gateway client left during initialize");
                    }
                });
            }
        })
    }

    /// Serves Streamable HTTP at [`MCP_PATH`] on `listener` (bound to a loopback address by
    /// the caller; see [`is_loopback`]) until `shutdown` is cancelled. With `tokens`, every
    /// request needs `Authorization: Bearer TOKEN` of one of them — each a caller of its own:
    /// 2026-07-28 clients (which have no session) see only the cut results and tasks of
    /// requests made with their token; `options` bound the sessions (idle expiry, measured on
    /// the session's clock, and how many may be open).
    pub async fn serve_http(
        &self,
        listener: tokio::net::TcpListener,
        tokens: Vec<SecretValue>,
        options: HttpOptions,
        shutdown: CancellationToken,
    ) -> Result<(), GatewayError> {
        http::serve(
            Arc::clone(&self.shared),
            listener,
            tokens,
            options,
            shutdown,
        )
        .await
    }

    /// Stops every server. Connections still open keep their handlers until they close;
    /// the servers' processes are ended either way (a runtime still held elsewhere kills its
    /// children when the last holder drops it).
    pub async fn shutdown(self) {
        self.shared.supervisor.stop();
        let runtimes = self.shared.supervisor.runtimes();
        drop(self);
        for runtime in runtimes {
            if let Ok(runtime) = Arc::try_unwrap(runtime) {
                runtime.shutdown().await;
            }
        }
    }
}

/// A server with `"alwaysLoad": true` in its config has every tool listed in search mode, as
/// if named with `--always-load`.
fn always_load(session: &Session, options: &mut GatewayOptions) {
    let servers = session.servers().iter();
    let named = servers.filter(|server| server.options.always_load);
    (options.tool_search.always_load).extend(named.map(|server| server.name.clone()));
}

/// With `--lazy` and pins: every server of `session` (not disabled) with pinned tools, and
/// those tools' pinned definitions.
fn lazy_servers(
    session: &Session,
    options: &GatewayOptions,
) -> Vec<(String, Vec<tether_driver::ToolInfo>)> {
    let Some(pins) = options.pins.as_ref().filter(|_| options.tool_search.lazy) else {
        return Vec::new();
    };
    let servers = session.servers().iter().filter(|s| !s.options.disabled);
    servers
        .filter_map(|server| {
            let key = ToolPolicy::of(&options.policies, options.scan, &server.name).pin_key;
            let tools = match pins.pinned(&key) {
                Ok(tools) => tools,
                Err(error) => {
                    tracing::warn!(server = %server.name, "{error}; it starts with the gateway");
                    return None;
                }
            };
            let tools: Vec<_> = tools
                .into_iter()
                .map(|(name, definition)| tether_driver::ToolInfo {
                    description: definition["description"].as_str().map(str::to_owned),
                    name,
                    definition,
                })
                .collect();
            (!tools.is_empty()).then(|| (server.name.clone(), tools))
        })
        .collect()
}
