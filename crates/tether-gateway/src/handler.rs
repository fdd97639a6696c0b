//! The MCP server side: one [`GatewayHandler`] per client connection, all sharing the run's
//! servers ([`Shared`]).
//!
//! - `tools/list` answers from the catalogue, rebuilt when a server joins (`Shared::admit`) or
//!   its list changes: every joined server's tools
//!   (after its config's include/exclude filters) under namespaced names (`names.rs`), with
//!   the server's whole definition otherwise unchanged.
//! - `prompts/list` likewise for prompts; `resources/list` and `resources/templates/list` ask
//!   every server that declared resources, each time, and merge (URIs stay as the servers
//!   give them; a URI goes back to the server that listed it).
//! - `tools/call`, `prompts/get`, `resources/read` and `completion/complete` are forwarded
//!   to the server the name leads to; a client's cancellation is passed on. What comes back
//!   — results and error messages — is masked (`redact.rs`) and audited (`audit.rs`).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams,
    CompleteResult, ContentBlock, ErrorCode, GetPromptRequestParams, GetPromptResponse,
    GetPromptResult, Implementation, InitializeResult, InputRequiredResult, InputResponses,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, Resource, ResourceTemplate, ResultType, ServerCapabilities,
    ServerNotification, SetLevelRequestMethod, SubscribeRequestParams, SubscriptionFilter,
    UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::Deserialize as _;
use serde_json::{Map, Value, json};
use tether_config::Masker;
use tether_driver::{DriverError, McpRuntime, ServerStatus, ToolInfo};
use tracing::Instrument as _;

use crate::GatewayOptions;
use crate::audit::{AuditLog, Outcome, Record, uri_target};
use crate::budget::{
    GATEWAY_URI_SCHEME, RESULTS_URI_PREFIX, ReadFailure, ResultBudget, ResultStore,
};
use crate::catalogue::{
    CATALOGUE_MARKER, Catalogue, Entries, STATUS_TOOL, admit_prompts, admit_tools, scanned,
};
use crate::clients::Clients;
use crate::names::ToolFilter;
use crate::pins::PinStore;
use crate::policy::ToolPolicy;
use crate::redact::mask_value;
use crate::rounds::{Asker, Round, Rounds, modern};
use crate::scan::ScanPolicy;
use crate::secret_scan::{SecretScan, SecretScanPolicy};
use crate::supervise::{Joined, Supervisor};
use crate::tool_search::{CALL_TOOL, FIND_TOOLS, ToolMode, ToolSearch};

/// What every connection of one gateway shares.
pub(crate) struct Shared {
    pub(crate) supervisor: Arc<Supervisor>,
    /// What is offered now; replaced whole when a server's list changes.
    catalogue: RwLock<Arc<Catalogue>>,
    /// Every server's admitted tools and prompts, from which the catalogue is built.
    entries: std::sync::Mutex<Entries>,
    /// Per server: where its tools are pinned, and its scan policy.
    policies: HashMap<String, ToolPolicy>,
    /// The scan policy of a server `policies` does not name.
    default_scan: ScanPolicy,
    pins: Option<PinStore>,
    filter: ToolFilter,
    /// Per server that joined: the capabilities it declared when it started (`prompts`,
    /// `resources`, `completions`, `logging`).
    declared: RwLock<HashMap<String, Value>>,
    /// URI → the server that listed it (the last `resources/list`).
    resource_routes: RwLock<HashMap<String, String>>,
    /// Every template with its server, in spec order then each server's order (the last
    /// templates list).
    template_routes: RwLock<Vec<(String, String)>>,
    /// The session's masking set as a masker; replaced when a re-mint adds values.
    masker: RwLock<Arc<Masker>>,
    audit: Option<AuditLog>,
    pub(crate) call_timeout: Duration,
    /// The longest a server may take to list its tools again after a change.
    relist_timeout: Duration,
    /// The connected clients, their running calls and subscriptions.
    pub(crate) clients: Arc<Clients>,
    /// Where `tools/call` results are cut.
    budget: ResultBudget,
    /// The whole of every cut result, for `resources/read` by its connection.
    results: Arc<ResultStore>,
    /// Each joined server's part of the `instructions` (`instructions.rs`).
    instruction_parts: std::sync::Mutex<HashMap<String, String>>,
    /// The `instructions` of the gateway's `initialize` answer, composed from the parts.
    instructions: RwLock<String>,
    /// Whether `tools/list` offers every tool or the search tools (`tool_search.rs`).
    tool_search: ToolSearch,
    /// The scan for credential shapes in tool arguments and results (`secret_scan.rs`).
    secret_scan: SecretScanPolicy,
    /// 2026-07-28 clients' calls waiting for their answers to a server's request.
    pub(crate) rounds: Rounds,
    /// List changes and resource updates, for 2026-07-28 clients' `subscriptions/listen`.
    pub(crate) changes: tokio::sync::broadcast::Sender<ServerNotification>,
}

/// How many changes a slow `subscriptions/listen` may fall behind before it misses some.
const CHANGES_KEPT: usize = 64;

/// How long a 2026-07-28 client may keep a tools or prompts list no server says can change.
const STABLE_LIST_TTL: Duration = Duration::from_secs(60);

/// The owner of the results kept for 2026-07-28 clients, and their audit records' session.
const STATELESS_OWNER: &str = "2026-07-28";

/// The longest a `tools/call` answer waits for the server's progress notifications before it
/// to be passed on.
const PROGRESS_DRAIN: Duration = Duration::from_secs(1);

/// A list method that may span pages.
const PAGE_LIMIT: usize = 1000;

/// Whether `runtime`'s `server` declared the capability `what`.
fn declares(runtime: &McpRuntime, server: &str, what: &str) -> bool {
    runtime
        .capabilities(server)
        .is_some_and(|caps| caps.get(what).is_some_and(|v| !v.is_null()))
}

impl Shared {
    /// A gateway over `supervisor`'s servers with nothing admitted yet: the servers ready
    /// now are admitted by [`Shared::admit`].
    pub(crate) fn new(supervisor: Supervisor, masker: Masker, options: GatewayOptions) -> Self {
        let GatewayOptions {
            call_timeout,
            audit,
            start,
            pins,
            scan: default_scan,
            policies,
            filter,
            upstream: _,
            masking_hook: _,
            budget,
            tool_search,
            secret_scan,
        } = options;
        let entries = Entries {
            order: supervisor.order().to_vec(),
            tool_ledger: crate::names::Ledger::new(filter.bare),
            prompt_ledger: crate::names::Ledger::new(filter.bare),
            ..Entries::default()
        };
        let catalogue = Catalogue::build(&mut Entries::default(), &filter, &tool_search);
        Self {
            supervisor: Arc::new(supervisor),
            catalogue: RwLock::new(Arc::new(catalogue)),
            entries: std::sync::Mutex::new(entries),
            policies,
            default_scan,
            pins,
            filter,
            declared: RwLock::new(HashMap::new()),
            resource_routes: RwLock::new(HashMap::new()),
            template_routes: RwLock::new(Vec::new()),
            masker: RwLock::new(Arc::new(masker)),
            audit,
            call_timeout,
            relist_timeout: start.startup_timeout,
            clients: Arc::default(),
            budget,
            results: Arc::new(ResultStore::new(budget.stored_bytes)),
            instruction_parts: std::sync::Mutex::new(HashMap::new()),
            instructions: RwLock::new(crate::instructions::compose(&[])),
            tool_search,
            secret_scan,
            rounds: Rounds::new(call_timeout),
            changes: tokio::sync::broadcast::channel(CHANGES_KEPT).0,
        }
    }

    /// Admits `servers`, each started in its runtime: their tools (from the start's report;
    /// the other servers' tools, admitted already or in this batch, for the shadowing rule),
    /// their prompts (listed now), their declared capabilities and instructions; then
    /// rebuilds the catalogue. Returns whether what is offered changed.
    pub(crate) async fn admit(&self, servers: &[Joined]) -> bool {
        let masker = self.masker();
        let offered: Vec<(String, Vec<ToolInfo>)> = servers
            .iter()
            .filter_map(|(server, runtime)| {
                runtime
                    .reports()
                    .iter()
                    .find(|report| report.name == *server)
                    .and_then(|report| match &report.status {
                        ServerStatus::Ready { tools } => Some((server.clone(), tools.clone())),
                        ServerStatus::Failed { .. } | ServerStatus::Disabled => None,
                    })
            })
            .collect();
        self.declared
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(servers.iter().map(|(server, runtime)| {
                (
                    server.clone(),
                    runtime.capabilities(server).unwrap_or(Value::Null),
                )
            }));
        let listed = futures_util::future::join_all(
            servers
                .iter()
                .filter(|(server, runtime)| declares(runtime, server, "prompts"))
                .map(|(server, runtime)| async move {
                    let items = list_all(
                        runtime,
                        server,
                        "prompts/list",
                        "prompts",
                        self.call_timeout,
                    )
                    .await;
                    (server, items)
                }),
        )
        .await;
        let mut entries = self.lock_entries();
        for (server, tools) in &offered {
            let others = others_than(&entries, &offered, server);
            let policy = self.policy(server);
            let admitted = admit_tools(
                server,
                &policy,
                tools,
                self.pins.as_ref(),
                &others,
                &masker,
                &[],
            );
            entries.tools.insert(server.clone(), admitted);
        }
        for (server, listed) in listed {
            match listed {
                Ok(items) => {
                    let admitted =
                        admit_prompts(server, self.policy(server).scan, items, &masker, &[]);
                    entries.prompts.insert(server.clone(), admitted);
                }
                Err(error) => {
                    tracing::warn!(server = %server, "listing prompts failed: {}", masker.mask(&error.to_string()));
                }
            }
        }
        let mut parts = self
            .instruction_parts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (server, runtime) in servers {
            let Some(text) = runtime.instructions(server) else {
                continue;
            };
            // Naming its own tools is no shadowing, even where another server has a tool of
            // the same name.
            let own: HashSet<&String> = entries
                .tools
                .get(server)
                .into_iter()
                .flatten()
                .map(|tool| &tool.own)
                .collect();
            let mut others = entries.other_tools(server);
            others.retain(|tool| !own.contains(tool));
            let part = crate::instructions::server_part(
                server,
                &text,
                self.policy(server).scan,
                &others,
                &masker,
            );
            if let Some(part) = part {
                parts.insert(server.clone(), part);
            }
        }
        let ordered: Vec<(String, String)> = entries
            .order
            .iter()
            .filter_map(|server| parts.get(server).map(|part| (server.clone(), part.clone())))
            .collect();
        drop(parts);
        *self
            .instructions
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            crate::instructions::compose(&ordered);
        self.rebuild(&mut entries)
    }

    /// Offers each lazy server's pinned tools until it starts (`Gateway::start`): admitted
    /// like a list it sent (scanned, masked; not checked against the pins they came from).
    pub(crate) fn admit_pinned(&self, servers: &[(String, Vec<ToolInfo>)]) {
        if servers.is_empty() {
            return;
        }
        let masker = self.masker();
        let mut entries = self.lock_entries();
        for (server, tools) in servers {
            let others = others_than(&entries, servers, server);
            let policy = self.policy(server);
            let admitted = admit_tools(server, &policy, tools, None, &others, &masker, &[]);
            tracing::info!(server = %server, "MCP server lazy: {} pinned tools offered; it starts when one is found or called", admitted.len());
            entries.tools.insert(server.clone(), admitted);
        }
        self.rebuild(&mut entries);
    }

    /// `server`, started after the gateway was built, joins: its entries are admitted, it is
    /// marked ready (a call waiting for it goes on), and every connected client is told the
    /// lists changed.
    pub(crate) async fn join(&self, server: String, runtime: Arc<McpRuntime>) {
        self.admit(&[(server.clone(), Arc::clone(&runtime))]).await;
        let tools = self.lock_entries().tools.get(&server).map_or(0, Vec::len);
        self.supervisor.ready(&server, runtime, tools);
        let prompts = self.declares(&server, "prompts");
        let resources = self.declares(&server, "resources");
        for peer in self.clients.peers() {
            let _ = peer.notify_tool_list_changed().await;
            if prompts {
                let _ = peer.notify_prompt_list_changed().await;
            }
            if resources {
                let _ = peer.notify_resource_list_changed().await;
            }
        }
    }

    /// The servers that joined and declared the capability `what`, in spec order.
    pub(crate) fn declaring(&self, what: &str) -> Vec<String> {
        let declared = self
            .declared
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.supervisor
            .order()
            .iter()
            .filter(|server| {
                declared
                    .get(*server)
                    .and_then(|caps| caps.get(what))
                    .is_some_and(|v| !v.is_null())
            })
            .cloned()
            .collect()
    }

    /// Whether `server` joined and declared the capability `what`.
    fn declares(&self, server: &str, what: &str) -> bool {
        self.declared
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(server)
            .and_then(|caps| caps.get(what))
            .is_some_and(|v| !v.is_null())
    }

    /// What the gateway's `initialize` answer declares: lists change (a server's own change
    /// is followed and passed on, and servers join); prompts, logging, completions and
    /// resource subscriptions when a server that joined declared them, or while a server is
    /// still pending (it may declare them when it joins, after this answer).
    fn capabilities(&self) -> ServerCapabilities {
        let pending = self.supervisor.any_pending();
        let any = |what: &str| pending || !self.declaring(what).is_empty();
        let subscribe = pending
            || self
                .declared
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .values()
                .any(|caps| caps.pointer("/resources/subscribe") == Some(&Value::Bool(true)));
        let mut capabilities = ServerCapabilities::default();
        capabilities.tools = serde_json::from_value(json!({"listChanged": true})).ok();
        if any("prompts") {
            capabilities.prompts = serde_json::from_value(json!({"listChanged": true})).ok();
        }
        // Always: a cut result's whole is read back as a resource (`tether://results/ID`).
        capabilities.resources =
            serde_json::from_value(json!({"listChanged": true, "subscribe": subscribe})).ok();
        if any("logging") {
            capabilities.logging = Some(Map::new());
        }
        if any("completions") {
            capabilities.completions = Some(Map::new());
        }
        capabilities
    }

    /// The `ttlMs` of a 2026-07-28 `tools/list` or `prompts/list` (`what`): 0 — ask again
    /// every time — while a server is still starting (its entries join the list) or when a
    /// server that joined declared `listChanged` for it (its list changes whenever it says
    /// so; a client that wants to know opens `subscriptions/listen`); else [`STABLE_LIST_TTL`],
    /// since such lists change only when a server is restarted.
    pub(crate) fn list_ttl_ms(&self, what: &str) -> u64 {
        let changing = self.supervisor.any_pending()
            || self
                .declared
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .values()
                .any(|caps| {
                    caps.pointer(&format!("/{what}/listChanged")) == Some(&Value::Bool(true))
                });
        if changing {
            0
        } else {
            u64::try_from(STABLE_LIST_TTL.as_millis()).unwrap_or(u64::MAX)
        }
    }

    /// What is offered now.
    pub(crate) fn catalogue(&self) -> Arc<Catalogue> {
        Arc::clone(
            &self
                .catalogue
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// How `server`'s entries are checked before they are offered.
    fn policy(&self, server: &str) -> ToolPolicy {
        ToolPolicy::of(&self.policies, self.default_scan, server)
    }

    /// Lists `server`'s tools again (it said its list changed, or it was restarted), admits
    /// them and rebuilds the catalogue. Returns whether what is offered changed.
    pub(crate) async fn relist_tools(&self, server: &str) -> bool {
        if self.supervisor.pending(server) {
            // A change it announced while starting: its tools are listed when it joins.
            return false;
        }
        let listed = match self.supervisor.runtime(server, "tools/list") {
            Ok(runtime) => runtime.list_tools(server, self.relist_timeout).await,
            Err(unavailable) => Err(unavailable),
        };
        let offered = match listed {
            Ok(offered) => offered,
            Err(error) => {
                tracing::warn!(server = %server, "listing its tools again failed; keeping the last list: {}", self.mask(&error.to_string()));
                return false;
            }
        };
        let (others, known) = {
            let entries = self.lock_entries();
            let known = entries.tools.get(server).cloned().unwrap_or_default();
            (entries.other_tools(server), known)
        };
        let admitted = admit_tools(
            server,
            &self.policy(server),
            &offered,
            self.pins.as_ref(),
            &others,
            &self.masker(),
            &known,
        );
        let mut entries = self.lock_entries();
        if entries.tools.get(server) == Some(&admitted) {
            return false;
        }
        tracing::info!(server = %server, tools = offered.len(), "the server's tool list changed");
        entries.tools.insert(server.to_owned(), admitted);
        self.rebuild(&mut entries)
    }

    /// [`Shared::relist_tools`] for prompts.
    pub(crate) async fn relist_prompts(&self, server: &str) -> bool {
        if self.supervisor.pending(server) || !self.declares(server, "prompts") {
            return false;
        }
        let listed = match self.supervisor.runtime(server, "prompts/list") {
            Ok(runtime) => {
                list_all(
                    &runtime,
                    server,
                    "prompts/list",
                    "prompts",
                    self.relist_timeout,
                )
                .await
            }
            Err(unavailable) => Err(unavailable),
        };
        let items = match listed {
            Ok(items) => items,
            Err(error) => {
                tracing::warn!(server = %server, "listing its prompts again failed; keeping the last list: {}", self.mask(&error.to_string()));
                return false;
            }
        };
        let known = self
            .lock_entries()
            .prompts
            .get(server)
            .cloned()
            .unwrap_or_default();
        let admitted = admit_prompts(
            server,
            self.policy(server).scan,
            items,
            &self.masker(),
            &known,
        );
        let mut entries = self.lock_entries();
        if entries.prompts.get(server) == Some(&admitted) {
            return false;
        }
        entries.prompts.insert(server.to_owned(), admitted);
        self.rebuild(&mut entries)
    }

    fn lock_entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Replaces the catalogue with one built from `entries`; whether the lists differ.
    fn rebuild(&self, entries: &mut Entries) -> bool {
        // Built before the catalogue is locked (the held `entries` keep rebuilds in order):
        // a search index takes milliseconds, and calls read the catalogue meanwhile.
        let fresh = Catalogue::build(entries, &self.filter, &self.tool_search);
        let mut current = self
            .catalogue
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        announce_mode(&self.tool_search, Some(current.searching), &fresh);
        // What `tools/list` offers follows from the tools and the mode.
        let changed = fresh.tools != current.tools
            || fresh.searching != current.searching
            || fresh.prompts != current.prompts;
        *current = Arc::new(fresh);
        changed
    }

    /// The namespaced tool names offered now, in order (spec order, then each server's order).
    pub(crate) fn tool_names(&self) -> Vec<String> {
        self.catalogue()
            .tools
            .iter()
            .map(|tool| tool.name.to_string())
            .filter(|name| name != STATUS_TOOL)
            .collect()
    }

    /// The `instructions` of an `initialize` answered now (unmasked).
    pub(crate) fn instructions(&self) -> String {
        self.instructions
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The masker of the session's values now.
    pub(crate) fn masker(&self) -> Arc<Masker> {
        Arc::clone(
            &self
                .masker
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Masks `values` from now on too (the session's set after a re-mint).
    pub(crate) fn set_masking(&self, values: &[tether_config::SecretValue]) {
        *self
            .masker
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(Masker::new(values));
    }

    /// `text` masked.
    pub(crate) fn mask(&self, text: &str) -> String {
        self.masker().mask(text)
    }

    fn audit(&self, record: &Record<'_>) {
        if let Some(audit) = &self.audit {
            audit.append(record);
        }
    }

    /// The MCP error a driver error becomes for the client, masked.
    fn error_for(&self, error: &DriverError) -> ErrorData {
        let message = self.mask(&error.to_string());
        match error {
            DriverError::RequestFailed {
                code: Some(code), ..
            } => ErrorData::new(ErrorCode(*code), message, None),
            _ => ErrorData::internal_error(message, None),
        }
    }
}

/// Says on stderr when `auto` turns search mode on or off (`previous`: the last catalogue's).
fn announce_mode(search: &ToolSearch, previous: Option<bool>, catalogue: &Catalogue) {
    if search.mode != ToolMode::Auto || previous.unwrap_or(false) == catalogue.searching {
        return;
    }
    let tools = catalogue.tools.len().saturating_sub(1);
    let tokens = serde_json::to_string(catalogue.tools.as_ref())
        .map_or(0, |json| json.len() / crate::budget::BYTES_PER_TOKEN);
    if catalogue.searching {
        tracing::warn!(
            "the {tools} tools' definitions are about {tokens} tokens, over the tool search budget of {}: tools/list offers {FIND_TOOLS} and {CALL_TOOL} instead (--tool-mode all lists every tool)",
            search.budget_tokens
        );
    } else {
        tracing::warn!(
            "the {tools} tools' definitions are about {tokens} tokens, within the tool search budget of {}: tools/list offers every tool again",
            search.budget_tokens
        );
    }
}

/// Every item of a paginated list method on `server` (`key` is the result's array).
pub async fn list_all(
    runtime: &McpRuntime,
    server: &str,
    method: &str,
    key: &str,
    timeout: Duration,
) -> Result<Vec<Value>, DriverError> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..PAGE_LIMIT {
        let params = match &cursor {
            Some(cursor) => json!({ "cursor": cursor }),
            None => json!({}),
        };
        let page = runtime
            .forward(
                server,
                method,
                params,
                timeout,
                std::future::pending(),
                None,
            )
            .await?;
        if let Some(list) = page.get(key).and_then(Value::as_array) {
            items.extend(list.iter().cloned());
        }
        cursor = page
            .get("nextCursor")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if cursor.is_none() {
            break;
        }
    }
    Ok(items)
}

/// The results kept for one client connection: forgotten when it closes (its handler, and
/// every clone, dropped).
struct ConnectionResults {
    store: Arc<ResultStore>,
    owner: Arc<str>,
}

impl Drop for ConnectionResults {
    fn drop(&mut self) {
        self.store.forget(&self.owner);
    }
}

/// One client connection's handler. Cheap to clone; Streamable HTTP makes one per session.
#[derive(Clone)]
pub struct GatewayHandler {
    shared: Arc<Shared>,
    /// A random id for this connection, used in audit records and as the owner of the
    /// results kept for it.
    session: Arc<str>,
    /// Forgets the connection's kept results when its last handler is dropped.
    _results: Arc<ConnectionResults>,
    /// Answer `tools/list` with the marker the line transport replaces by the catalogue's
    /// pre-serialized list (`lines.rs`), instead of a copy of the list.
    catalogue_marker: bool,
}

impl GatewayHandler {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        let session: Arc<str> = uuid::Uuid::new_v4().simple().to_string().into();
        let results = Arc::new(ConnectionResults {
            store: Arc::clone(&shared.results),
            owner: Arc::clone(&session),
        });
        Self {
            shared,
            session,
            _results: results,
            catalogue_marker: false,
        }
    }

    /// For a connection over the line transport (`lines.rs`).
    pub(crate) fn with_catalogue_marker(mut self) -> Self {
        self.catalogue_marker = true;
        self
    }

    /// Forwards one request and masks the answer; audits it when `audit` names the target.
    async fn forward(
        &self,
        server: &str,
        method: &str,
        params: Value,
        context: &RequestContext<RoleServer>,
    ) -> (Result<Value, DriverError>, Duration) {
        self.forward_with_progress(server, method, params, context, None)
            .await
    }

    /// [`GatewayHandler::forward`], passing the server's progress notifications for this
    /// request to `progress`.
    async fn forward_with_progress(
        &self,
        server: &str,
        method: &str,
        params: Value,
        context: &RequestContext<RoleServer>,
        progress: Option<tokio::sync::mpsc::UnboundedSender<Value>>,
    ) -> (Result<Value, DriverError>, Duration) {
        // From the request's arrival: a wait for a pending server before this (to learn which
        // server offers a name) used up part of the call timeout already.
        let started = received_at(context);
        let mut params = params;
        crate::rounds::strip_request_meta(&mut params);
        let call = self.shared.clients.begin(
            server,
            &context.peer,
            http_session(context),
            context.extensions.get::<Asker>().cloned(),
        );
        let Ok(_call) = call else {
            // DELETE is draining this session: it finishes what runs, starts nothing new.
            let refused = DriverError::RequestFailed {
                server: server.to_owned(),
                method: method.to_owned(),
                code: None,
                message: "the session is being closed".to_owned(),
            };
            return (Err(refused), Duration::ZERO);
        };
        // Cancelled by the client's `notifications/cancelled`, or by its going away over HTTP.
        let gone = client_gone(context);
        let cancelled = async {
            match gone {
                Some(gone) => tokio::select! {
                    () = context.ct.cancelled() => {}
                    () = gone.cancelled() => {}
                },
                None => context.ct.cancelled().await,
            }
        };
        // A server still pending is waited for (within the call timeout, which the wait uses
        // up in part).
        let runtime = self
            .shared
            .supervisor
            .runtime_waiting(server, method, self.shared.call_timeout)
            .await;
        let left = self
            .shared
            .call_timeout
            .saturating_sub(started.elapsed())
            .max(Duration::from_millis(1));
        let answer = match runtime {
            Ok(runtime) => {
                let upstream = crate::telemetry::upstream(server, method);
                crate::telemetry::propagate(&upstream.span, &mut params);
                let answer = runtime
                    .forward(server, method, params, left, cancelled, progress)
                    .instrument(upstream.span.clone())
                    .await;
                crate::telemetry::upstream_done(&upstream, &answer);
                match answer {
                    // The connection broke under this call: say so plainly, and restart now
                    // rather than at the watcher's next look.
                    Err(error @ DriverError::RequestFailed { code: None, .. })
                        if connection_closed(&runtime, server).await =>
                    {
                        self.shared.supervisor.went_down(server);
                        Err(self
                            .shared
                            .supervisor
                            .runtime(server, method)
                            .err()
                            .unwrap_or(error))
                    }
                    answer => answer,
                }
            }
            Err(unavailable) => Err(unavailable),
        };
        let elapsed = started.elapsed();
        let answer = answer.map(|mut value| {
            mask_value(&self.shared.masker(), &mut value);
            value
        });
        (answer, elapsed)
    }

    /// The catalogue to route `name` by: the one offered now, or — when `name` is a lazy
    /// server's pinned tool, or no server offers it yet but its `SERVER__` prefix names a
    /// server still pending — the one offered once that server joined, waiting for it (and
    /// starting a lazy one) within the call timeout. With the server's name when it was
    /// still pending at the end of the wait.
    async fn catalogue_for(
        &self,
        name: &str,
        context: &RequestContext<RoleServer>,
    ) -> (Arc<Catalogue>, Option<String>) {
        let catalogue = self.shared.catalogue();
        let server = match catalogue.server_of(name) {
            // A lazy server's pinned tool: it starts now, and the call is routed by what it
            // offers once it joined (its definition may have changed since it was pinned).
            Some(server) if self.shared.supervisor.pending(server) => server.to_owned(),
            Some(_) => return (catalogue, None),
            None if catalogue.withheld.contains_key(name) => return (catalogue, None),
            None => match self.shared.supervisor.pending_named(name) {
                Some(server) => server,
                None => return (catalogue, None),
            },
        };
        tracing::debug!(server = %server, "a request names a server still starting: waiting for it");
        // The client's cancellation ends the wait too.
        let left = self
            .shared
            .call_timeout
            .saturating_sub(received_at(context).elapsed());
        let joined = tokio::select! {
            joined = self.shared.supervisor.joined(&server, left) => joined,
            () = context.ct.cancelled() => false,
        };
        (self.shared.catalogue(), (!joined).then_some(server))
    }

    /// Why a request for a server still pending failed.
    fn still_pending(&self, server: &str) -> String {
        format!(
            "server '{server}' is still starting: it was not ready within the call timeout ({} s); tether_status shows its state",
            self.shared.call_timeout.as_secs()
        )
    }

    fn refuse(&self, method: &str, target: &str, message: String) -> ErrorData {
        self.refuse_with(method, target, message, &[])
    }

    /// [`GatewayHandler::refuse`], for the secret-scan `findings` (rule names) that caused it.
    fn refuse_with(
        &self,
        method: &str,
        target: &str,
        message: String,
        findings: &[&'static str],
    ) -> ErrorData {
        self.shared.audit(&Record {
            session: &self.session,
            method,
            server: None,
            target,
            duration: Duration::ZERO,
            outcome: Outcome::Refused,
            arguments: None,
            result: None,
            findings,
        });
        ErrorData::invalid_params(message, None)
    }

    /// The server a resource URI goes to: the one that listed it, else the first (spec order)
    /// with a template that can expand to it (`uri_template.rs`), else the only server with
    /// resources. A later server's template, however specific, never takes a URI an earlier
    /// server's template makes: which template the client expanded is unknown, and the spec
    /// order settles every such tie (as for names and listed URIs).
    fn resource_server(&self, uri: &str) -> Option<String> {
        if let Some(server) = self.listed_server(uri) {
            return Some(server);
        }
        if uri.starts_with(GATEWAY_URI_SCHEME) {
            return None;
        }
        match self.shared.declaring("resources").as_slice() {
            [only] => Some(only.clone()),
            _ => None,
        }
    }

    /// The server that listed `uri`, else the first (spec order) with a template that can
    /// expand to it.
    fn listed_server(&self, uri: &str) -> Option<String> {
        if uri.starts_with(GATEWAY_URI_SCHEME) {
            // The gateway's own (`budget.rs`): never a server's, whatever it lists.
            return None;
        }
        let routes = self
            .shared
            .resource_routes
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(server) = routes.get(uri) {
            return Some(server.clone());
        }
        drop(routes);
        let templates = self
            .shared
            .template_routes
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        templates
            .iter()
            .find(|(template, _)| crate::uri_template::fits(template, uri))
            .map(|(_, server)| server.clone())
    }

    /// Lists `method` on every server with resources, merges, and records the routes.
    async fn list_resources_everywhere(&self, method: &str, key: &str) -> Vec<(String, Value)> {
        let shared = &self.shared;
        let resource_servers = shared.declaring("resources");
        let listed =
            futures_util::future::join_all(resource_servers.iter().map(|server| async move {
                let runtime = shared.supervisor.runtime(server, method)?;
                list_all(&runtime, server, method, key, shared.call_timeout).await
            }))
            .await;
        let mut merged = Vec::new();
        for (server, listed) in resource_servers.iter().zip(listed) {
            match listed {
                Ok(items) => merged.extend(items.into_iter().map(|item| (server.clone(), item))),
                Err(error) => tracing::warn!(
                    server = %server,
                    "{method} failed: {}",
                    shared.mask(&error.to_string())
                ),
            }
        }
        merged.retain(|(server, item)| {
            let uri = item
                .get("uri")
                .or_else(|| item.get("uriTemplate"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            if uri.starts_with(GATEWAY_URI_SCHEME) {
                tracing::warn!(server = %server, "a resource under {GATEWAY_URI_SCHEME}, the gateway's own scheme, is left out");
                return false;
            }
            let name = item
                .get("name")
                .or_else(|| item.get("uri"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            let policy = shared.policy(server).scan;
            scanned(policy, server, "resource", name, item, &HashSet::new()).is_none()
        });
        for (_, item) in &mut merged {
            mask_value(&shared.masker(), item);
        }
        merged
    }
}

impl GatewayHandler {
    /// When the client asked for progress (a `progressToken` in the request's `_meta`): a
    /// sender whose messages — the server's progress params — go to the client under the
    /// client's own token, in order, until the request ends.
    fn pass_progress(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Option<(
        tokio::sync::mpsc::UnboundedSender<Value>,
        tokio::task::JoinHandle<()>,
    )> {
        let token = context.meta.get_progress_token()?;
        let token = serde_json::to_value(token).ok()?;
        let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel::<Value>();
        let peer = context.peer.clone();
        let masker = Arc::clone(&self.shared);
        let passing = tokio::spawn(async move {
            while let Some(mut params) = receiver.recv().await {
                params["progressToken"] = token.clone();
                mask_value(&masker.masker(), &mut params);
                match serde_json::from_value(params) {
                    Ok(params) => {
                        if peer.notify_progress(params).await.is_err() {
                            return;
                        }
                    }
                    Err(error) => {
                        tracing::debug!(%error, "a progress notification that is not MCP")
                    }
                }
            }
        });
        Some((sender, passing))
    }

    /// `result` (its JSON `value`, masked) as the client gets it: cut to the budget when it
    /// is over, the whole kept for this connection (`budget.rs`).
    fn within_budget(&self, result: CallToolResult, value: Value) -> CallToolResult {
        let budget = &self.shared.budget;
        if crate::budget::result_bytes(&value) <= budget.max_bytes() {
            return result;
        }
        drop(result);
        let answer = crate::budget::apply(budget, &self.shared.results, &self.session, value);
        tracing::debug!(
            "a tool result over the budget of {} tokens was cut",
            budget.max_tokens
        );
        CallToolResult::deserialize(&answer).unwrap_or_else(|error| {
            CallToolResult::error(vec![ContentBlock::text(format!(
                "tether's gateway could not cut a result over its budget: {error}"
            ))])
        })
    }

    /// `resources/read` of the gateway's own URI: a kept result of this connection.
    fn read_kept(&self, uri: &str, target: &str) -> Result<ReadResourceResponse, ErrorData> {
        const METHOD: &str = "resources/read";
        let read = match uri.strip_prefix(RESULTS_URI_PREFIX) {
            Some(id) => self.shared.results.read(&self.session, id),
            None => Err(ReadFailure::Unknown),
        };
        let outcome = if read.is_ok() {
            Outcome::Ok
        } else {
            Outcome::Refused
        };
        self.shared.audit(&Record {
            session: &self.session,
            method: METHOD,
            server: None,
            target,
            duration: Duration::ZERO,
            outcome,
            arguments: None,
            result: None,
            findings: &[],
        });
        let whole = read.map_err(|failure| {
            let message = match failure {
                ReadFailure::Unknown => format!(
                    "no result {uri} in this session: a tether://results link is read in the session whose tool call made it, while the session lasts"
                ),
                ReadFailure::Dropped => format!(
                    "the result {uri} was dropped to keep the gateway's kept results under {} MiB (the oldest go first); call the tool again",
                    self.shared.budget.stored_bytes / (1024 * 1024)
                ),
            };
            ErrorData::resource_not_found(message, None)
        })?;
        let contents = crate::budget::contents_of(uri, &whole);
        serde_json::from_value::<ReadResourceResult>(json!({ "contents": contents }))
            .map(Into::into)
            .map_err(|e| ErrorData::internal_error(format!("a kept result: {e}"), None))
    }

    /// Forwards `resources/subscribe` or `resources/unsubscribe` to the URI's server.
    async fn pass_subscription(
        &self,
        method: &str,
        uri: &str,
        params: Value,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let Some(server) = self.resource_server(uri) else {
            return Err(ErrorData::invalid_params(
                "no server behind this gateway listed this resource URI",
                None,
            ));
        };
        let (answer, _) = self.forward(&server, method, params, context).await;
        answer.map_err(|e| self.shared.error_for(&e))?;
        if method == "resources/subscribe" {
            self.shared
                .clients
                .subscribe(uri, &self.session, &context.peer);
        } else {
            self.shared.clients.unsubscribe(uri, &self.session);
        }
        Ok(())
    }

    /// `tether__find_tools`'s answer: the offered tools that best match the request.
    fn find_tools(&self, catalogue: &Catalogue, request: &CallToolRequestParams) -> CallToolResult {
        let arguments = request.arguments.clone().unwrap_or_default();
        let found = match &catalogue.index {
            Some(index) => crate::tool_search::find(index, &arguments),
            None => Err("tool search is not on".to_owned()),
        };
        match found {
            Ok(found) => {
                // A lazy server whose tool was found starts now: it is likely to be called.
                let names = found["tools"].as_array().into_iter().flatten();
                for name in names.filter_map(|tool| tool["name"].as_str()) {
                    if let Some(server) = catalogue.server_of(name) {
                        self.shared
                            .supervisor
                            .wake(server, "one of its tools was found");
                    }
                }
                let mut result =
                    CallToolResult::success(vec![ContentBlock::text(found.to_string())]);
                result.structured_content = Some(found);
                result
            }
            Err(message) => CallToolResult::error(vec![ContentBlock::text(message)]),
        }
    }

    /// `tether_status`'s answer: the supervisor's report as JSON text and structured content.
    fn status(&self) -> CallToolResult {
        let catalogue = self.shared.catalogue();
        let offered = |server: &str| {
            catalogue
                .tools
                .iter()
                .filter(|tool| catalogue.server_of(&tool.name) == Some(server))
                .count()
        };
        let mut status = self.shared.supervisor.status(offered);
        if let Some(servers) = status["servers"].as_array_mut() {
            for server in servers {
                let name = server["name"].as_str().unwrap_or_default().to_owned();
                let mut withheld: Vec<&String> = catalogue
                    .withheld
                    .keys()
                    .filter(|n| catalogue.server_of(n) == Some(name.as_str()))
                    .collect();
                withheld.sort();
                server["withheld"] = json!(withheld);
            }
        }
        mask_value(&self.shared.masker(), &mut status);
        let mut result = CallToolResult::success(vec![ContentBlock::text(status.to_string())]);
        result.structured_content = Some(status);
        result
    }
}

/// Whether `server`'s connection in `runtime` is closed, allowing its service loop a moment to
/// notice a write that failed.
async fn connection_closed(runtime: &McpRuntime, server: &str) -> bool {
    for _ in 0..10 {
        if runtime.closed().iter().any(|name| name == server) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    false
}

/// The Streamable HTTP session a request came in on (its `Mcp-Session-Id`), if it came over
/// HTTP. The id is a credential: it is only compared, never shown.
fn http_session(context: &RequestContext<RoleServer>) -> Option<String> {
    context
        .extensions
        .get::<axum::http::request::Parts>()?
        .headers
        .get("mcp-session-id")?
        .to_str()
        .ok()
        .map(str::to_owned)
}

/// Cancelled when the request came over HTTP and its client went away before the answer was
/// written (`http.rs`).
fn client_gone(
    context: &RequestContext<RoleServer>,
) -> Option<tokio_util::sync::CancellationToken> {
    context
        .extensions
        .get::<axum::http::request::Parts>()?
        .extensions
        .get::<crate::clients::ClientGone>()
        .map(|gone| gone.0.clone())
}

/// Serves a request a server may ask its client something during: at once for a session's
/// client, in rounds (`rounds.rs`) for a 2026-07-28 one — the state it echoes and its answers
/// taken out of the request, which is bound to `$bind` (method and target).
macro_rules! in_rounds {
    ($handler:ident, $now:ident, $request:ident, $context:ident, $bind:expr) => {{
        if !modern(&$context) {
            return $handler.$now($request, $context).await;
        }
        let mut $request = $request;
        let bind = $bind;
        let state = $request.request_state.take();
        let responses = $request.input_responses.take();
        $handler
            .in_rounds(
                bind,
                state,
                responses,
                &$context,
                |handler, context| async move {
                    handler
                        .$now($request, context)
                        .await
                        .map(Completed::completed)
                },
            )
            .await
    }};
}

/// A result read back from a server has no `resultType`; 2026-07-28 requires one.
trait Completed {
    fn completed(self) -> Self;
}

macro_rules! completed {
    ($($response:ident),*) => {$(
        impl Completed for $response {
            fn completed(self) -> Self {
                match self {
                    $response::Complete(mut result) => {
                        result.result_type = Some(ResultType::COMPLETE);
                        result.into()
                    }
                    other => other,
                }
            }
        }
    )*};
}

completed!(CallToolResponse, GetPromptResponse, ReadResourceResponse);

/// The three requests a server may ask its client something during, served in full (a
/// 2026-07-28 client's run detached by `rounds.rs`).
impl GatewayHandler {
    /// Runs a 2026-07-28 client's request in rounds (`rounds.rs`): its result, or what the
    /// client must answer first.
    async fn in_rounds<T, F>(
        &self,
        bind: String,
        state: Option<String>,
        responses: Option<InputResponses>,
        context: &RequestContext<RoleServer>,
        work: impl FnOnce(Self, RequestContext<RoleServer>) -> F,
    ) -> Result<T, ErrorData>
    where
        T: From<InputRequiredResult> + Send + 'static,
        F: Future<Output = Result<T, ErrorData>> + Send + 'static,
    {
        // Results cut to the budget are kept for every 2026-07-28 client alike: they have no
        // session to keep them in.
        let mut handler = self.clone();
        handler.session = Arc::from(STATELESS_OWNER);
        let round = self
            .shared
            .rounds
            .run(bind, state, responses, context, |context| {
                work(handler, context)
            });
        Ok(match round.await? {
            Round::Done(result) => result,
            Round::Input(input) => input.into(),
        })
    }

    async fn call_tool_now(
        &self,
        mut request: CallToolRequestParams,
        mut context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        const METHOD: &str = "tools/call";
        mark_received(&mut context);
        if self.shared.catalogue().searching {
            if request.name == FIND_TOOLS {
                // Twenty large definitions can be over the output budget like any result.
                let found = self.find_tools(&self.shared.catalogue(), &request);
                let value = serde_json::to_value(&found).unwrap_or(Value::Null);
                return Ok(self.within_budget(found, value).into());
            }
            if request.name == CALL_TOOL {
                // The named tool takes the call's place: the same path as a direct call of it
                // (routing, withholding, masking, audit, budget).
                let arguments = request.arguments.take().unwrap_or_default();
                match crate::tool_search::call_target(&arguments) {
                    Ok((name, arguments)) => {
                        request.name = name.into();
                        request.arguments = arguments;
                    }
                    Err(message) => {
                        let refused = self.refuse(METHOD, CALL_TOOL, message);
                        let refused = vec![ContentBlock::text(refused.message)];
                        return Ok(CallToolResult::error(refused).into());
                    }
                }
            }
        }
        if request.name == STATUS_TOOL {
            return Ok(self.status().into());
        }
        let (catalogue, still_pending) = self.catalogue_for(&request.name, &context).await;
        if let Some(reason) = catalogue.withheld.get(request.name.as_ref()) {
            let refused = self.refuse(METHOD, &request.name, reason.clone());
            return Ok(CallToolResult::error(vec![ContentBlock::text(refused.message)]).into());
        }
        let Some(route) = catalogue.tool_names.route(&request.name).cloned() else {
            // A tool error, not a protocol error: clients show it to the model, which can
            // then pick a listed name.
            let message = match still_pending {
                Some(server) => self.still_pending(&server),
                None => format!(
                    "no tool named '{}' behind this gateway; its tools are named SERVER__TOOL ({})",
                    request.name,
                    if catalogue.searching {
                        "find them with tether__find_tools"
                    } else {
                        "see tools/list"
                    }
                ),
            };
            let refused = self.refuse(METHOD, &request.name, message);
            return Ok(CallToolResult::error(vec![ContentBlock::text(refused.message)]).into());
        };
        // Credential shapes in the arguments, before the server sees them.
        let scan = self.shared.secret_scan;
        let mut found = Vec::new();
        if let Some(given) = request.arguments.take() {
            let mut given = Value::Object(given);
            found = crate::secret_scan::scan(&mut given, scan.arguments);
            crate::telemetry::secret_findings("arguments", &found);
            if let Value::Object(given) = given {
                request.arguments = Some(given);
            }
        }
        let mut arguments = request.arguments.clone().map(Value::Object);
        if let Some(arguments) = &mut arguments {
            mask_value(&self.shared.masker(), arguments);
        }
        if !found.is_empty() {
            let rules = found.join(", ");
            tracing::warn!(tool = %request.name, "the arguments of a call hold what looks like a secret ({rules})");
            if scan.arguments == SecretScan::Block {
                let message = format!(
                    "the arguments of this call hold what looks like a secret ({rules}); this gateway does not send it on (--secret-scan)"
                );
                let refused = self.refuse_with(METHOD, &request.name, message, &found);
                return Ok(CallToolResult::error(vec![ContentBlock::text(refused.message)]).into());
            }
        }
        let mut params = serde_json::to_value(&request).unwrap_or_else(|_| json!({}));
        params["name"] = Value::String(route.name.clone());
        let (progress, passing) = self.pass_progress(&context).unzip();
        let (answer, duration) = self
            .forward_with_progress(&route.server, METHOD, params, &context, progress)
            .await;
        // The server's progress came before its answer: it reaches the client before it too
        // (a 2026-07-28 client's stream ends with the answer).
        if let Some(passing) = passing {
            let _ = tokio::time::timeout(PROGRESS_DRAIN, passing).await;
        }
        // Credential shapes in the result, before the client sees them.
        let answer = answer.map(|mut value| {
            let in_result = crate::secret_scan::scan(&mut value, scan.results);
            crate::telemetry::secret_findings("results", &in_result);
            if in_result.is_empty() {
                return value;
            }
            let rules = in_result.join(", ");
            tracing::warn!(tool = %request.name, server = %route.server, "the result of a call holds what looks like a secret ({rules})");
            for rule in &in_result {
                if !found.contains(rule) {
                    found.push(rule);
                }
            }
            if scan.results != SecretScan::Block {
                return value;
            }
            let message = format!("the result of this call held what looks like a secret ({rules}); this gateway does not pass it on (--secret-scan)");
            serde_json::to_value(CallToolResult::error(vec![ContentBlock::text(message)]))
                .unwrap_or(Value::Null)
        });
        let (outcome, response) = match answer {
            Ok(value) => match CallToolResult::deserialize(&value) {
                Ok(result) => {
                    let outcome = if result.is_error == Some(true) {
                        Outcome::ToolError
                    } else {
                        Outcome::Ok
                    };
                    (outcome, Ok((result, value)))
                }
                Err(error) => (
                    Outcome::Error,
                    Err(ErrorData::internal_error(
                        format!(
                            "server '{}' sent a tools/call result that is not MCP: {error}",
                            route.server
                        ),
                        None,
                    )),
                ),
            },
            Err(DriverError::Cancelled { .. }) => (
                Outcome::Cancelled,
                Err(ErrorData::internal_error("the call was cancelled", None)),
            ),
            Err(error @ DriverError::RequestFailed { code: Some(_), .. }) => {
                (Outcome::Error, Err(self.shared.error_for(&error)))
            }
            Err(error) => {
                // The server broke off or is not running: the model should read why.
                let text = self.shared.mask(&error.to_string());
                let result = CallToolResult::error(vec![ContentBlock::text(text)]);
                let value = serde_json::to_value(&result).unwrap_or(Value::Null);
                (Outcome::Error, Ok((result, value)))
            }
        };
        let result_value = response.as_ref().ok().map(|(_, value)| value);
        self.shared.audit(&Record {
            session: &self.session,
            method: METHOD,
            server: Some(&route.server),
            target: &route.name,
            duration,
            outcome,
            arguments: arguments.as_ref(),
            result: result_value,
            findings: &found,
        });
        tracing::debug!(tool = %request.name, server = %route.server, ?duration, outcome = outcome.as_str(), "tools/call");
        response.map(|(result, value)| self.within_budget(result, value).into())
    }

    async fn get_prompt_now(
        &self,
        request: GetPromptRequestParams,
        mut context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        mark_received(&mut context);
        const METHOD: &str = "prompts/get";
        let (catalogue, still_pending) = self.catalogue_for(&request.name, &context).await;
        if let Some(reason) = catalogue.withheld.get(&request.name) {
            return Err(self.refuse(METHOD, &request.name, reason.clone()));
        }
        let Some(route) = catalogue.prompt_names.route(&request.name).cloned() else {
            let message = match still_pending {
                Some(server) => self.still_pending(&server),
                None => format!("no prompt named '{}' behind this gateway", request.name),
            };
            return Err(self.refuse(METHOD, &request.name, message));
        };
        let mut params = serde_json::to_value(&request).unwrap_or_else(|_| json!({}));
        params["name"] = Value::String(route.name.clone());
        let arguments = params.get("arguments").cloned().map(|mut a| {
            mask_value(&self.shared.masker(), &mut a);
            a
        });
        let (answer, duration) = self.forward(&route.server, METHOD, params, &context).await;
        let outcome = match &answer {
            Ok(_) => Outcome::Ok,
            Err(DriverError::Cancelled { .. }) => Outcome::Cancelled,
            Err(_) => Outcome::Error,
        };
        self.shared.audit(&Record {
            session: &self.session,
            method: METHOD,
            server: Some(&route.server),
            target: &route.name,
            duration,
            outcome,
            arguments: arguments.as_ref(),
            result: answer.as_ref().ok(),
            findings: &[],
        });
        let value = answer.map_err(|e| self.shared.error_for(&e))?;
        serde_json::from_value::<GetPromptResult>(value)
            .map(Into::into)
            .map_err(|e| ErrorData::internal_error(format!("not an MCP prompt: {e}"), None))
    }

    async fn read_resource_now(
        &self,
        request: ReadResourceRequestParams,
        mut context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        mark_received(&mut context);
        const METHOD: &str = "resources/read";
        let target = uri_target(&request.uri);
        if request.uri.starts_with(GATEWAY_URI_SCHEME) {
            return self.read_kept(&request.uri, &target);
        }
        if self.listed_server(&request.uri).is_none() && self.shared.supervisor.any_pending() {
            // A server still starting may be the one: wait for them all (within the call
            // timeout), then list again to learn who offers what.
            tracing::debug!(
                "resources/read of a URI no ready server listed: waiting for the pending servers"
            );
            let left = self
                .shared
                .call_timeout
                .saturating_sub(received_at(&context).elapsed());
            self.shared.supervisor.all_joined(left).await;
            let _ = self.list_resources(None, context.clone()).await;
            let _ = self.list_resource_templates(None, context.clone()).await;
        }
        let Some(server) = self.resource_server(&request.uri) else {
            let mut refused = self.refuse(
                METHOD,
                &target,
                "no server behind this gateway listed this resource URI (list resources or templates first)".to_owned(),
            );
            // The URI the client sent: nothing a server said.
            refused.data = Some(json!({ "uri": request.uri }));
            return Err(refused);
        };
        let params = serde_json::to_value(&request).unwrap_or_else(|_| json!({}));
        let (answer, duration) = self.forward(&server, METHOD, params, &context).await;
        let outcome = match &answer {
            Ok(_) => Outcome::Ok,
            Err(DriverError::Cancelled { .. }) => Outcome::Cancelled,
            Err(_) => Outcome::Error,
        };
        self.shared.audit(&Record {
            session: &self.session,
            method: METHOD,
            server: Some(&server),
            target: &target,
            duration,
            outcome,
            arguments: None,
            result: answer.as_ref().ok(),
            findings: &[],
        });
        let value = answer.map_err(|e| {
            let mut error = self.shared.error_for(&e);
            // A server's error data does not come through; a URI it did not find is named
            // with the one the client sent.
            if matches!(
                error.code,
                ErrorCode::INVALID_PARAMS | ErrorCode::RESOURCE_NOT_FOUND
            ) {
                error.data = Some(json!({ "uri": request.uri }));
            }
            error
        })?;
        serde_json::from_value::<ReadResourceResult>(value)
            .map(Into::into)
            .map_err(|e| ErrorData::internal_error(format!("not an MCP resource: {e}"), None))
    }
}

impl ServerHandler for GatewayHandler {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(self.shared.capabilities())
            .with_server_info(Implementation::new("tether", env!("CARGO_PKG_VERSION")))
            // Masked again: a re-mint may have added values since they were taken.
            .with_instructions(self.shared.mask(&if self.shared.catalogue().searching {
                crate::instructions::searching(&self.shared.instructions())
            } else {
                self.shared.instructions()
            }))
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        // Sessions (and DELETE) up to 2025-11-25, stateless requests from 2026-07-28 on.
        std::borrow::Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2026_07_28))
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        // rmcp narrows it to what the gateway declares.
        Some(requested.clone())
    }

    async fn listen(&self, subscription: SubscriptionContext) -> Result<(), ErrorData> {
        let mut changes = self.shared.changes.subscribe();
        let uris = subscription
            .accepted()
            .resource_subscriptions
            .clone()
            .unwrap_or_default();
        // The servers send `resources/updated` for what they were subscribed to; a URI no
        // server listed is left out (nothing will come for it).
        for uri in &uris {
            if let Some(server) = self.resource_server(uri) {
                let (answer, _) = self
                    .forward(
                        &server,
                        "resources/subscribe",
                        json!({ "uri": uri }),
                        subscription.request_context(),
                    )
                    .await;
                if let Err(error) = answer {
                    tracing::debug!(server = %server, "resources/subscribe for a listener: {}", self.shared.mask(&error.to_string()));
                }
            }
        }
        loop {
            let change = tokio::select! {
                () = subscription.cancelled() => return Ok(()),
                change = changes.recv() => change,
            };
            match change {
                // Sent only when the listener accepted it; the rest is not for this one.
                Ok(change) => {
                    use rmcp::service::SubscriptionSendError::{Service, SubscriptionClosed};
                    if let Err(Service(_) | SubscriptionClosed) =
                        subscription.sink().send(change).await
                    {
                        return Ok(());
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::debug!(missed, "a subscriptions/listen fell behind");
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(()),
            }
        }
    }

    async fn on_initialized(&self, context: rmcp::service::NotificationContext<RoleServer>) {
        self.shared.clients.connected(context.peer);
    }

    async fn on_roots_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<RoleServer>,
    ) {
        // Servers ask for the roots again; their `roots/list` comes back to a client.
        for runtime in self.shared.supervisor.runtimes() {
            runtime.notify_roots_changed().await;
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let span = crate::telemetry::request("tools/list", None, &context);
        crate::telemetry::traced(span, async {
            if modern(&context) {
                // The line transport's pre-serialized list has no room for the cache hints.
                let mut list = ListToolsResult::with_all_items(
                    self.shared.catalogue().listed.as_ref().clone(),
                );
                list.ttl_ms = Some(self.shared.list_ttl_ms("tools"));
                list.cache_scope = Some(CacheScope::Private);
                return Ok(list);
            }
            if self.catalogue_marker {
                let mut marker = ListToolsResult::with_all_items(Vec::new());
                let mut meta = rmcp::model::MetaObject::new();
                meta.insert(CATALOGUE_MARKER.to_owned(), Value::Bool(true));
                marker.meta = Some(meta);
                return Ok(marker);
            }
            Ok(ListToolsResult::with_all_items(
                self.shared.catalogue().listed.as_ref().clone(),
            ))
        })
        .await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let span = crate::telemetry::request("tools/call", Some(&request.name), &context);
        crate::telemetry::traced(span, async {
            in_rounds!(
                self,
                call_tool_now,
                request,
                context,
                format!("tools/call\0{}", request.name)
            )
        })
        .await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let span = crate::telemetry::request("prompts/get", Some(&request.name), &context);
        crate::telemetry::traced(span, async {
            in_rounds!(
                self,
                get_prompt_now,
                request,
                context,
                format!("prompts/get\0{}", request.name)
            )
        })
        .await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let span = crate::telemetry::request("resources/read", None, &context);
        crate::telemetry::traced(span, async {
            in_rounds!(
                self,
                read_resource_now,
                request,
                context,
                format!("resources/read\0{}", request.uri)
            )
        })
        .await
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let span = crate::telemetry::request("prompts/list", None, &context);
        crate::telemetry::traced(span, async {
            let mut list =
                ListPromptsResult::with_all_items(self.shared.catalogue().prompts.as_ref().clone());
            if modern(&context) {
                list.ttl_ms = Some(self.shared.list_ttl_ms("prompts"));
                list.cache_scope = Some(CacheScope::Private);
            }
            Ok(list)
        })
        .await
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let span = crate::telemetry::request("resources/list", None, &context);
        crate::telemetry::traced(span, async {
            let merged = self
                .list_resources_everywhere("resources/list", "resources")
                .await;
            let mut routes = HashMap::new();
            let mut resources = Vec::new();
            for (server, item) in merged {
                let Some(uri) = item.get("uri").and_then(Value::as_str).map(str::to_owned) else {
                    continue;
                };
                if routes.contains_key(&uri) {
                    tracing::debug!(server = %server, "a resource URI another server listed first is left out");
                    continue;
                }
                if let Ok(resource) = serde_json::from_value::<Resource>(item) {
                    routes.insert(uri, server);
                    resources.push(resource);
                }
            }
            *self
                .shared
                .resource_routes
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = routes;
            Ok(ListResourcesResult::with_all_items(resources))
        })
        .await
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let span = crate::telemetry::request("resources/templates/list", None, &context);
        crate::telemetry::traced(span, async {
            let merged = self
                .list_resources_everywhere("resources/templates/list", "resourceTemplates")
                .await;
            let mut routes = Vec::new();
            let mut templates = Vec::new();
            for (server, item) in merged {
                let Some(template) = item.get("uriTemplate").and_then(Value::as_str) else {
                    continue;
                };
                routes.push((template.to_owned(), server));
                if let Ok(template) = serde_json::from_value::<ResourceTemplate>(item) {
                    templates.push(template);
                }
            }
            *self
                .shared
                .template_routes
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = routes;
            Ok(ListResourceTemplatesResult::with_all_items(templates))
        })
        .await
    }

    #[expect(
        deprecated,
        reason = "logging/setLevel is still part of the protocol versions the gateway speaks"
    )]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let logging_servers = self.shared.declaring("logging");
        if logging_servers.is_empty() && !self.shared.supervisor.any_pending() {
            return Err(ErrorData::method_not_found::<SetLevelRequestMethod>());
        }
        let params = serde_json::to_value(&request).unwrap_or_else(|_| json!({}));
        let answers = futures_util::future::join_all(
            logging_servers
                .iter()
                .map(|server| self.forward(server, "logging/setLevel", params.clone(), &context)),
        )
        .await;
        for (server, (answer, _)) in logging_servers.iter().zip(answers) {
            if let Err(error) = answer {
                tracing::debug!(server = %server, "logging/setLevel: {}", self.shared.mask(&error.to_string()));
            }
        }
        Ok(())
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let params = serde_json::to_value(&request).unwrap_or_else(|_| json!({}));
        self.pass_subscription("resources/subscribe", &request.uri, params, &context)
            .await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let params = serde_json::to_value(&request).unwrap_or_else(|_| json!({}));
        self.pass_subscription("resources/unsubscribe", &request.uri, params, &context)
            .await
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let mut params = serde_json::to_value(&request).unwrap_or_else(|_| json!({}));
        // A prompt reference carries the namespaced name; a resource one carries a URI.
        let server = match params["ref"]["type"].as_str() {
            Some("ref/prompt") => {
                let name = params["ref"]["name"].as_str().unwrap_or_default();
                let route = self.shared.catalogue().prompt_names.route(name).cloned();
                route.map(|route| {
                    params["ref"]["name"] = Value::String(route.name);
                    route.server
                })
            }
            _ => params["ref"]["uri"]
                .as_str()
                .and_then(|uri| self.resource_server(uri)),
        };
        let Some(server) = server.filter(|s| self.shared.declares(s, "completions")) else {
            return Ok(CompleteResult::default());
        };
        let (answer, _) = self
            .forward(&server, "completion/complete", params, &context)
            .await;
        let value = answer.map_err(|e| self.shared.error_for(&e))?;
        let mut result = serde_json::from_value::<CompleteResult>(value)
            .map_err(|e| ErrorData::internal_error(format!("not an MCP completion: {e}"), None))?;
        // A server's result read back has no `resultType`; 2026-07-28 requires one (rmcp
        // strips it for older clients).
        result.result_type = Some(ResultType::COMPLETE);
        Ok(result)
    }
}

/// The tool names of every server but `server`, admitted already or in `offered` (the
/// shadowing rule's list while `offered` is admitted together).
fn others_than(
    entries: &Entries,
    offered: &[(String, Vec<ToolInfo>)],
    server: &str,
) -> HashSet<String> {
    let mut others = entries.other_tools(server);
    let offered = offered.iter().filter(|(other, _)| other != server);
    others.extend(offered.flat_map(|(_, tools)| tools.iter().map(|tool| tool.name.clone())));
    others
}

/// When the gateway received a request ([`mark_received`]): one call timeout covers the whole
/// request, however many waits it has.
#[derive(Clone, Copy)]
struct Received(Instant);

/// Notes the arrival of a request in its context, unless noted already.
fn mark_received(context: &mut RequestContext<RoleServer>) {
    if context.extensions.get::<Received>().is_none() {
        context.extensions.insert(Received(Instant::now()));
    }
}

/// When the request of `context` arrived: now, for one [`mark_received`] did not mark.
fn received_at(context: &RequestContext<RoleServer>) -> Instant {
    context
        .extensions
        .get::<Received>()
        .map_or_else(Instant::now, |received| received.0)
}
