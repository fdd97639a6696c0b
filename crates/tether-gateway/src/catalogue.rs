//! What the gateway offers: each server's tools and prompts as admitted (pinned, scanned,
//! masked) and the namespaced union built from them.
//!
//! A server's entries are admitted when the gateway starts and again when the server says its
//! list changed (or after it was restarted); the union ([`Catalogue`]) is then rebuilt from
//! every server's admitted entries, in spec order, each entry under the name the run's ledger
//! gave it first (`names.rs`), so names never move. The union is serialized once per rebuild
//! (`tools/list` answers from it).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use rmcp::model::{Prompt, Tool};
use serde_json::{Map, Value, json};
use tether_config::Masker;
use tether_driver::ToolInfo;

use crate::names::{Collision, Ledger, Namespace, ToolFilter};
use crate::pins::{Pin, PinStore, Verdict};
use crate::policy::ToolPolicy;
use crate::redact::mask_value;
use crate::scan::{ScanPolicy, scan};
use crate::tool_search::ToolSearch;

/// The gateway's own tool: each server's state, tools, restarts and last error.
pub const STATUS_TOOL: &str = "tether_status";

/// The `_meta` key of a `tools/list` answer the line transport (`lines.rs`) replaces with
/// [`Catalogue::listed_json`].
pub(crate) const CATALOGUE_MARKER: &str = "io.github.tether/catalogue";

/// One tool or prompt of one server, as admitted.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Admitted {
    /// Its name on the server.
    pub own: String,
    /// Its definition, masked (the name is replaced when it is listed).
    pub definition: Value,
    /// Why it is not offered (a changed pin, a blocked scan finding), if it is not.
    pub withheld: Option<String>,
}

/// Every server's admitted entries, in spec order.
#[derive(Debug, Default)]
pub(crate) struct Entries {
    /// Servers in spec order.
    pub order: Vec<String>,
    pub tools: HashMap<String, Vec<Admitted>>,
    pub prompts: HashMap<String, Vec<Admitted>>,
    /// Every tool name given in this run.
    pub tool_ledger: Ledger,
    /// Every prompt name given in this run.
    pub prompt_ledger: Ledger,
    /// Per server, what it says of itself (its part of the instructions, scanned and masked):
    /// tool search reads it, so a request naming the product finds that server's tools.
    pub about: HashMap<String, String>,
}

impl Entries {
    /// The own names of every server's tools but `server`'s (the shadowing rule's list).
    pub fn other_tools(&self, server: &str) -> HashSet<String> {
        self.tools
            .iter()
            .filter(|(name, _)| name.as_str() != server)
            .flat_map(|(_, tools)| tools.iter().map(|t| t.own.clone()))
            .collect()
    }
}

/// The namespaced union offered to clients.
#[derive(Debug, Default)]
pub(crate) struct Catalogue {
    /// Every tool offered, `tether_status` last.
    pub tools: Arc<Vec<Tool>>,
    /// `tools/list`'s items: `tools`, or in search mode the search tools (`tool_search.rs`).
    pub listed: Arc<Vec<Tool>>,
    /// `listed`, serialized once: what the line transport sends (`lines.rs`).
    pub listed_json: Arc<str>,
    /// Whether search mode is on (`--tool-mode`).
    pub searching: bool,
    /// Whether code mode is on (`--tool-mode code`; `searching` is too).
    pub code: bool,
    /// The offered tools' search index, in search mode.
    pub index: Option<Arc<crate::search::ToolIndex>>,
    pub tool_names: Namespace,
    /// `prompts/list`'s items.
    pub prompts: Arc<Vec<Prompt>>,
    pub prompt_names: Namespace,
    /// Namespaced names of tools and prompts not offered, with the reason a call gets.
    pub withheld: HashMap<String, String>,
}

impl Catalogue {
    /// The union of `entries`: names from their ledgers (a name given now for the first time
    /// may collide; those collisions are reported on stderr), `filter` applied to tools, listed
    /// as `search` says.
    pub fn build(entries: &mut Entries, filter: &ToolFilter, search: &ToolSearch) -> Self {
        let mut tool_names = Namespace::default();
        let mut prompt_names = Namespace::default();
        let mut tools = Vec::new();
        let mut prompts = Vec::new();
        let mut withheld = HashMap::new();
        let mut unnamed = 0usize;
        for server in &entries.order {
            for entry in entries.tools.get(server).into_iter().flatten() {
                let Some(name) = tool_names.add(&mut entries.tool_ledger, server, &entry.own)
                else {
                    unnamed += 1;
                    continue;
                };
                if !filter.allows_entry(&name, server, &entry.own) {
                    withheld.insert(
                        name,
                        format!(
                            "the tool '{}' of server '{server}' is left out by this gateway's --include-tools/--exclude-tools",
                            entry.own
                        ),
                    );
                } else if let Some(reason) = &entry.withheld {
                    withheld.insert(name, reason.clone());
                } else {
                    let mut definition = entry.definition.clone();
                    definition["name"] = Value::String(name);
                    crate::apps::offer_tool(&mut definition, server);
                    if crate::apps::app_only(&definition) {
                        // Its app's alone: callable by name (the host), never offered to the
                        // model nor searched.
                        continue;
                    }
                    match serde_json::from_value::<Tool>(definition) {
                        Ok(tool) => tools.push(tool),
                        Err(error) => tracing::warn!(
                            server = %server,
                            tool = %entry.own,
                            %error,
                            "the tool's definition does not parse as MCP; it is not offered"
                        ),
                    }
                }
            }
            for entry in entries.prompts.get(server).into_iter().flatten() {
                let Some(name) = prompt_names.add(&mut entries.prompt_ledger, server, &entry.own)
                else {
                    unnamed += 1;
                    continue;
                };
                if let Some(reason) = &entry.withheld {
                    withheld.insert(name, reason.clone());
                    continue;
                }
                let mut definition = entry.definition.clone();
                definition["name"] = Value::String(name);
                if let Ok(prompt) = serde_json::from_value::<Prompt>(definition) {
                    prompts.push(prompt);
                }
            }
        }
        tools.push(status_tool());
        report_collisions("tool", tool_names.collisions());
        report_collisions("prompt", prompt_names.collisions());
        if unnamed > 0 {
            tracing::debug!(
                unnamed,
                "entries not offered: listed twice by their server, or past the {} names a gateway gives in a run",
                crate::names::MAX_NAMES
            );
        }
        let tools_json = serde_json::to_string(&tools).unwrap_or_else(|_| "[]".to_owned());
        let listing =
            crate::tool_search::listing(search, &tools, &tools_json, &tool_names, &entries.about);
        let tools = Arc::new(tools);
        // In `all` mode the list is the offered tools themselves: shared, not copied.
        let (listed, listed_json) = match listing.listed {
            Some(listed) => {
                let json = serde_json::to_string(&listed).unwrap_or_else(|_| "[]".to_owned());
                (Arc::new(listed), json)
            }
            None => (Arc::clone(&tools), tools_json),
        };
        Self {
            listed_json: listed_json.into(),
            listed,
            searching: listing.searching,
            code: listing.code,
            index: listing.index,
            tools,
            tool_names,
            prompts: Arc::new(prompts),
            prompt_names,
            withheld,
        }
    }

    /// Whether `name`, the target of a `method` request, is a name this gateway offers or
    /// withholds — bounded by what the servers list — rather than any name a client sends.
    /// Telemetry labels requests with such names only (others as `unknown`), so a client
    /// cannot grow the metric series without end or put text of its choosing in them.
    pub fn knows(&self, method: &str, name: &str) -> bool {
        let offered = if method == "prompts/get" {
            self.prompt_names.route(name).is_some()
        } else {
            self.tool_names.route(name).is_some()
                || name == STATUS_TOOL
                || (self.searching
                    && (name == crate::tool_search::FIND_TOOLS
                        || name == crate::tool_search::CALL_TOOL))
                || (self.code && name == crate::tool_search::RUN_CODE)
        };
        offered || self.withheld.contains_key(name)
    }

    /// The server a namespaced tool or prompt name leads to.
    pub fn server_of(&self, namespaced: &str) -> Option<&str> {
        self.tool_names
            .route(namespaced)
            .or_else(|| self.prompt_names.route(namespaced))
            .map(|route| route.server.as_str())
    }
}

/// `server`'s tools, admitted: checked against the pins under `policy.pin_key` (a
/// changed definition is withheld), scanned under `policy.scan` (a blocked finding is
/// withheld), masked. `others` are the other servers' tool names (shadowing). A tool `known`
/// (the server's entries before a list change) holds with the same definition keeps its
/// verdict, without its findings being reported again.
pub(crate) fn admit_tools(
    server: &str,
    policy: &ToolPolicy,
    offered: &[ToolInfo],
    pins: Option<&PinStore>,
    others: &HashSet<String>,
    masker: &Masker,
    known: &[Admitted],
) -> Vec<Admitted> {
    let verdicts: HashMap<String, Verdict> = match pins {
        Some(pins) => {
            let definitions: Vec<(String, Value)> = offered
                .iter()
                .map(|info| (info.name.clone(), info.definition.clone()))
                .collect();
            match pins.check(&policy.pin_key, &definitions) {
                Ok(verdicts) => verdicts.into_iter().collect(),
                Err(error) => {
                    tracing::warn!("{error}; tools are offered without pinning");
                    HashMap::new()
                }
            }
        }
        None => HashMap::new(),
    };
    offered
        .iter()
        .map(|info| {
            let mut definition = info.definition.clone();
            mask_value(masker, &mut definition);
            if let Some(same) = known
                .iter()
                .find(|k| k.own == info.name && k.definition == definition)
            {
                return same.clone();
            }
            let withheld = if let Some(Verdict::Changed { pinned }) = verdicts.get(&info.name) {
                tracing::warn!(
                    server = %server,
                    "tool '{}' changed since it was pinned (sha256 {} → {}); withheld until `tether trust {}{server} {}`",
                    info.name,
                    &pinned.sha256[..12],
                    &Pin::of(&info.definition).sha256[..12],
                    policy.trust_with,
                    info.name
                );
                Some(format!(
                    "the tool '{}' of server '{server}' is withheld: its definition changed since it was first seen; run `tether trust {}{server} {}` to review the change and accept it",
                    info.name, policy.trust_with, info.name
                ))
            } else {
                scanned(policy.scan, server, "tool", &info.name, &info.definition, others)
            };
            Admitted {
                own: info.name.clone(),
                definition,
                withheld,
            }
        })
        .collect()
}

/// `server`'s prompts (as `prompts/list` items), admitted: scanned and masked; one `known`
/// unchanged keeps its verdict, unreported (as [`admit_tools`]).
pub(crate) fn admit_prompts(
    server: &str,
    policy: ScanPolicy,
    items: Vec<Value>,
    masker: &Masker,
    known: &[Admitted],
) -> Vec<Admitted> {
    items
        .into_iter()
        .filter_map(|item| {
            let own = item.get("name").and_then(Value::as_str)?.to_owned();
            let mut definition = item.clone();
            mask_value(masker, &mut definition);
            if let Some(same) = known
                .iter()
                .find(|k| k.own == own && k.definition == definition)
            {
                return Some(same.clone());
            }
            let withheld = scanned(policy, server, "prompt", &own, &item, &HashSet::new());
            Some(Admitted {
                own,
                definition,
                withheld,
            })
        })
        .collect()
}

/// Runs the scan on one entry under `policy`; reports findings on stderr. `Some(reason)` when
/// the entry is to be withheld.
pub(crate) fn scanned(
    policy: ScanPolicy,
    server: &str,
    kind: &str,
    name: &str,
    definition: &Value,
    other_tools: &HashSet<String>,
) -> Option<String> {
    if policy == ScanPolicy::Off {
        return None;
    }
    let findings = scan(definition, other_tools);
    if findings.is_empty() {
        return None;
    }
    crate::telemetry::injection_findings(server, findings.iter().map(|f| f.rule));
    let listed: Vec<String> = findings
        .iter()
        .map(|f| format!("{}: {}", f.rule, f.excerpt))
        .collect();
    let blocked = policy == ScanPolicy::Block;
    tracing::warn!(
        server,
        "{kind} '{name}' looks like a prompt injection ({}){}",
        listed.join("; "),
        if blocked {
            "; blocked"
        } else {
            "; offered anyway (--scan block withholds it)"
        }
    );
    blocked.then(|| {
        format!(
            "the {kind} '{name}' of server '{server}' is withheld by tether's prompt-injection scan ({})",
            listed.join("; ")
        )
    })
}

fn report_collisions(kind: &str, collisions: &[Collision]) {
    for collision in collisions {
        tracing::warn!(
            "{kind} name collision: '{}' of server '{}' would be '{}', which '{}' of server '{}' has; it is offered as '{}'",
            collision.renamed.name,
            collision.renamed.server,
            collision.wanted,
            collision.kept_by.name,
            collision.kept_by.server,
            collision.renamed_to
        );
    }
}

/// The definition of `tether_status`.
fn status_tool() -> Tool {
    let schema = json!({"type": "object", "properties": {}});
    let definition = json!({
        "name": STATUS_TOOL,
        "description": "tether gateway: the state of each MCP server behind this gateway (pending: still starting; retrying: its start failed and is tried again; ready; restarting; stopped; failed), its tool count, restarts and last error.",
        "inputSchema": schema,
        "annotations": {"readOnlyHint": true, "openWorldHint": false}
    });
    serde_json::from_value(definition)
        .unwrap_or_else(|_| Tool::new(STATUS_TOOL, "tether gateway: server status", Map::new()))
}
