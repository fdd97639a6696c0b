//! The state every connection and transport of one gateway shares ([`Shared`]): the
//! supervisor of the run's servers, the catalogue built from what they offer, the policies
//! (pins, scans, secret scan, tool filter), the masker, the audit log, the output budget and
//! its kept results, the clients and their rounds. The transports (`http.rs`, `lines.rs`,
//! `upstream.rs`) and re-minting (`remint.rs`) depend on this module, not on the MCP handler
//! (`handler/`), which reads it too.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rmcp::ErrorData;
use rmcp::model::{ErrorCode, ServerCapabilities, ServerNotification};
use serde_json::{Map, Value, json};
use tether_config::Masker;
use tether_driver::{DriverError, McpRuntime, ServerStatus, ToolInfo};

use crate::GatewayOptions;
use crate::audit::{AuditLog, Record};
use crate::budget::{ResultBudget, ResultStore};
use crate::catalogue::{Catalogue, Entries, STATUS_TOOL, admit_prompts, admit_tools};
use crate::clients::Clients;
use crate::names::ToolFilter;
use crate::pins::PinStore;
use crate::policy::ToolPolicy;
use crate::rounds::Rounds;
use crate::scan::ScanPolicy;
use crate::secret_scan::SecretScanPolicy;
use crate::supervise::{Joined, Supervisor};
use crate::tool_search::{CALL_TOOL, FIND_TOOLS, ToolMode, ToolSearch};

/// What every connection of one gateway shares.
pub(crate) struct Shared {
    pub(crate) supervisor: Arc<Supervisor>,
    /// What is offered now; replaced whole when a server's list changes.
    pub(crate) catalogue: RwLock<Arc<Catalogue>>,
    /// Every server's admitted tools and prompts, from which the catalogue is built.
    pub(crate) entries: std::sync::Mutex<Entries>,
    /// Per server: where its tools are pinned, and its scan policy.
    pub(crate) policies: HashMap<String, ToolPolicy>,
    /// The scan policy of a server `policies` does not name.
    pub(crate) default_scan: ScanPolicy,
    pub(crate) pins: Option<PinStore>,
    pub(crate) filter: ToolFilter,
    /// Per server that joined: the capabilities it declared when it started (`prompts`,
    /// `resources`, `completions`, `logging`).
    pub(crate) declared: RwLock<HashMap<String, Value>>,
    /// URI → the server that listed it (the last `resources/list`).
    pub(crate) resource_routes: RwLock<HashMap<String, String>>,
    /// Every template with its server, in spec order then each server's order (the last
    /// templates list).
    pub(crate) template_routes: RwLock<Vec<(String, String)>>,
    /// The session's masking set as a masker; replaced when a re-mint adds values.
    pub(crate) masker: RwLock<Arc<Masker>>,
    pub(crate) audit: Option<AuditLog>,
    pub(crate) call_timeout: Duration,
    /// The longest a server may take to list its tools again after a change.
    pub(crate) relist_timeout: Duration,
    /// The connected clients, their running calls and subscriptions.
    pub(crate) clients: Arc<Clients>,
    /// Where `tools/call` results are cut.
    pub(crate) budget: ResultBudget,
    /// The whole of every cut result, for `resources/read` by its connection.
    pub(crate) results: Arc<ResultStore>,
    /// Each joined server's part of the `instructions` (`instructions.rs`).
    pub(crate) instruction_parts: std::sync::Mutex<HashMap<String, String>>,
    /// The `instructions` of the gateway's `initialize` answer, composed from the parts.
    pub(crate) instructions: RwLock<String>,
    /// Whether `tools/list` offers every tool or the search tools (`tool_search.rs`).
    pub(crate) tool_search: ToolSearch,
    /// The scan for credential shapes in tool arguments and results (`tether-scan`).
    pub(crate) secret_scan: SecretScanPolicy,
    /// How long a connection's first `tools/list` may wait for the servers to join
    /// (`GatewayOptions::first_list_grace`).
    pub(crate) first_list_grace: Option<Duration>,
    /// 2026-07-28 clients' calls waiting for their answers to a server's request.
    pub(crate) rounds: Rounds,
    /// List changes and resource updates, for 2026-07-28 clients' `subscriptions/listen`.
    pub(crate) changes: tokio::sync::broadcast::Sender<ServerNotification>,
    /// The tasks the gateway holds for its clients (SEP-2663, `handler/tasks.rs`).
    pub(crate) tasks: crate::tasks::Tasks,
    /// For a client with Tasks calling a server without: the call runs as a task the gateway
    /// holds, answered in place when it ends within this (`GatewayOptions::task_after`).
    pub(crate) task_after: Option<Duration>,
}

/// How many changes a slow `subscriptions/listen` may fall behind before it misses some.
pub(crate) const CHANGES_KEPT: usize = 64;

/// How long a 2026-07-28 client may keep a tools or prompts list no server says can change.
pub(crate) const STABLE_LIST_TTL: Duration = Duration::from_secs(60);

/// A list method that may span pages.
pub(crate) const PAGE_LIMIT: usize = 1000;

/// Whether `runtime`'s `server` declared the capability `what`.
pub(crate) fn declares(runtime: &McpRuntime, server: &str, what: &str) -> bool {
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
            first_list_grace,
            task_after,
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
            first_list_grace,
            rounds: Rounds::new(call_timeout),
            tasks: crate::tasks::Tasks::default(),
            task_after,
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
                entries.about.insert(server.clone(), part.clone());
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
    pub(crate) fn declares(&self, server: &str, what: &str) -> bool {
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
    pub(crate) fn capabilities(&self) -> ServerCapabilities {
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
        // Always: the gateway holds its servers' tasks for its clients (`handler/tasks.rs`).
        capabilities
            .extensions
            .get_or_insert_with(Default::default)
            .insert(rmcp::model::TASKS_EXTENSION_ID.to_owned(), Map::new());
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
    pub(crate) fn policy(&self, server: &str) -> ToolPolicy {
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

    pub(crate) fn lock_entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Replaces the catalogue with one built from `entries`; whether the lists differ.
    pub(crate) fn rebuild(&self, entries: &mut Entries) -> bool {
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

    pub(crate) fn audit(&self, record: &Record<'_>) {
        if let Some(audit) = &self.audit {
            audit.append(record);
        }
    }

    /// The MCP error a driver error becomes for the client, masked.
    pub(crate) fn error_for(&self, error: &DriverError) -> ErrorData {
        let mut message = self.mask(&error.to_string());
        // A server's error message reaches the client like a result: the scan of results
        // applies (an error cannot be withheld, so `block` masks).
        let mode = match self.secret_scan.results {
            crate::secret_scan::SecretScan::Block => crate::secret_scan::SecretScan::Mask,
            mode => mode,
        };
        let mut text = Value::String(message);
        let found = crate::secret_scan::scan(&mut text, mode);
        crate::telemetry::secret_findings("results", &found);
        if !found.is_empty() {
            tracing::warn!(
                "an error a server sent holds what looks like a secret ({})",
                found.join(", ")
            );
        }
        message = match text {
            Value::String(text) => text,
            _ => String::new(),
        };
        match error {
            DriverError::RequestFailed {
                code: Some(code), ..
            } => ErrorData::new(ErrorCode(*code), message, None),
            DriverError::NeedsCapability { required, .. } => ErrorData::new(
                ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
                message,
                Some(json!({ "requiredCapabilities": required })),
            ),
            _ => ErrorData::internal_error(message, None),
        }
    }
}

/// Says on stderr when `auto` turns search mode on or off (`previous`: the last catalogue's).
pub(crate) fn announce_mode(search: &ToolSearch, previous: Option<bool>, catalogue: &Catalogue) {
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

/// The tool names of every server but `server`, admitted already or in `offered` (the
/// shadowing rule's list while `offered` is admitted together).
pub(crate) fn others_than(
    entries: &Entries,
    offered: &[(String, Vec<ToolInfo>)],
    server: &str,
) -> HashSet<String> {
    let mut others = entries.other_tools(server);
    let offered = offered.iter().filter(|(other, _)| other != server);
    others.extend(offered.flat_map(|(_, tools)| tools.iter().map(|tool| tool.name.clone())));
    others
}
