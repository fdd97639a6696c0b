//! Search mode (`--tool-mode`): instead of every tool's definition, `tools/list` offers two
//! tools — [`FIND_TOOLS`], which ranks the offered tools against a request in words
//! (the `tether-search` crate), and [`CALL_TOOL`], which calls one by name exactly as a direct call would —
//! plus the tools named to be always loaded and `tether_status`. The tools themselves stay
//! offered: a direct `tools/call` of one still works, and a withheld one (changed pin, blocked
//! scan finding, filtered out) is neither found nor called, as it is not listed in `all` mode.
//!
//! `auto` (the default) searches when the offered definitions, serialized, are over a budget
//! of tokens (bytes / 4, as `budget.rs` counts), measured on every change of the offered set.
//!
//! `code` (code mode, specs/code-mode/TECH.md) lists [`RUN_CODE`], which runs a script that
//! calls the tools (`handler/code.rs`), and [`FIND_TOOLS`], which then answers with each
//! match's TypeScript-style declaration (`tether_code::declare`).

use std::sync::Arc;

use rmcp::model::Tool;
use serde_json::{Map, Value, json};

use crate::budget::BYTES_PER_TOKEN;
use crate::names::Namespace;
use crate::search::{DEFAULT_LIMIT, Indexed, MAX_LIMIT, Ranking, ToolIndex};

/// The search tool's name.
pub const FIND_TOOLS: &str = "tether__find_tools";
/// The call-by-name tool's name.
pub const CALL_TOOL: &str = "tether__call_tool";
/// Code mode's tool: runs a script that calls the offered tools.
pub const RUN_CODE: &str = "tether__run_code";
/// `auto`'s budget for the offered tool definitions, in tokens (≈ 40 KB of JSON).
pub const DEFAULT_SEARCH_BUDGET_TOKENS: usize = 10_000;

/// How `tools/list` offers the tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ToolMode {
    /// Every offered tool's definition.
    All,
    /// [`FIND_TOOLS`] and [`CALL_TOOL`] (and the tools always loaded).
    Search,
    /// `Search` when the definitions are over the budget, else `All`.
    #[default]
    Auto,
    /// [`RUN_CODE`] and [`FIND_TOOLS`] (declarations), and the tools always loaded.
    Code,
}

impl std::str::FromStr for ToolMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "all" => Ok(Self::All),
            "search" => Ok(Self::Search),
            "auto" => Ok(Self::Auto),
            "code" => Ok(Self::Code),
            other => Err(format!(
                "'{other}' is not a tool mode: use all, search, auto or code"
            )),
        }
    }
}

/// Search mode's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolSearch {
    /// How `tools/list` offers the tools.
    pub mode: ToolMode,
    /// `auto` searches when the offered definitions are over this many tokens.
    pub budget_tokens: usize,
    /// Listed in search mode too: a namespaced tool name (`SERVER__TOOL`), or a server's name
    /// for all its tools.
    pub always_load: Vec<String>,
    /// `--lazy`: a server with pinned tools is not started with the gateway; its pinned
    /// definitions are offered (and searched) until one of its tools is found or called,
    /// which starts it (specs/tool-search/TECH.md, "Lazy start").
    pub lazy: bool,
    /// What one code-mode run may use (`--code-timeout`, `--code-memory`, `--code-max-calls`).
    pub code: tether_code::Limits,
}

impl Default for ToolSearch {
    fn default() -> Self {
        Self {
            mode: ToolMode::Auto,
            budget_tokens: DEFAULT_SEARCH_BUDGET_TOKENS,
            always_load: Vec::new(),
            lazy: false,
            code: tether_code::Limits::default(),
        }
    }
}

/// Declarations made so far, by tool definition (`tether_code::declare::Declarations`).
static DECLARATIONS: std::sync::LazyLock<tether_code::declare::Declarations> =
    std::sync::LazyLock::new(Default::default);

/// Parses a search budget in tokens (`--tool-search-budget`, `tool_search_budget`).
pub fn parse_budget_tokens(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(tokens) if tokens > 0 => Ok(tokens),
        _ => Err(format!(
            "'{text}' is not a number of tokens: give a whole number above 0 (the default is {DEFAULT_SEARCH_BUDGET_TOKENS})"
        )),
    }
}

/// What `tools/list` answers, decided from the offered tools.
pub(crate) struct Listing {
    /// Whether search mode is on.
    pub searching: bool,
    /// Whether code mode is on (search is too: [`FIND_TOOLS`] answers with declarations).
    pub code: bool,
    /// The offered tools' index, when searching.
    pub index: Option<Arc<ToolIndex>>,
    /// `tools/list`'s items when searching; `None`: every offered tool.
    pub listed: Option<Vec<Tool>>,
}

/// `tools/list`'s answer under `search` for the `offered` tools (`tether_status` last, its
/// JSON `offered_json`), named in `names`.
pub(crate) fn listing(
    search: &ToolSearch,
    offered: &[Tool],
    offered_json: &str,
    names: &Namespace,
    about: &std::collections::HashMap<String, String>,
) -> Listing {
    let searching = match search.mode {
        ToolMode::All => false,
        ToolMode::Search | ToolMode::Code => true,
        ToolMode::Auto => offered_json.len() / BYTES_PER_TOKEN > search.budget_tokens,
    };
    let code = search.mode == ToolMode::Code;
    if !searching {
        return Listing {
            searching,
            code,
            index: None,
            listed: None,
        };
    }
    let mut indexed = Vec::new();
    let mut always_loaded = Vec::new();
    for tool in offered {
        let Some(route) = names.route(&tool.name) else {
            // tether_status: listed last, as in `all` mode.
            continue;
        };
        if search
            .always_load
            .iter()
            .any(|name| *name == tool.name || *name == route.server)
        {
            always_loaded.push(tool.clone());
        }
        indexed.push(Indexed {
            name: tool.name.to_string(),
            server: route.server.clone(),
            own: route.name.clone(),
            definition: serde_json::to_value(tool).unwrap_or(Value::Null),
            about: about.get(&route.server).cloned().unwrap_or_default(),
        });
    }
    let mut listed = if code {
        vec![
            run_code_tool(&indexed, search.budget_tokens),
            find_tools_tool(true),
        ]
    } else {
        vec![find_tools_tool(false), call_tool_tool()]
    };
    listed.extend(always_loaded);
    listed.extend(
        offered
            .iter()
            .filter(|tool| names.route(&tool.name).is_none())
            .cloned(),
    );
    Listing {
        searching,
        code,
        index: Some(Arc::new(ToolIndex::new(indexed))),
        listed: Some(listed),
    }
}

/// Parses a code-mode limit (`--code-timeout`, `--code-memory`, `--code-max-calls`): a whole
/// number above 0.
pub fn parse_code_limit(text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(value) if value > 0 => Ok(value),
        _ => Err(format!("'{text}' is not a whole number above 0")),
    }
}

/// The declaration of `tool` (its definition as JSON), made once per definition.
pub(crate) fn declaration(tool: &Value) -> Arc<str> {
    DECLARATIONS.of(tool)
}

/// [`FIND_TOOLS`]'s answer to `arguments`: the best tools' definitions (`name`,
/// `description`, `inputSchema`; in code mode `name`, `description`, `declaration`), best
/// first, as structured content and the same JSON in a text block; `Err` names what is wrong
/// with the arguments.
pub(crate) fn find(
    index: &ToolIndex,
    arguments: &Map<String, Value>,
    code: bool,
) -> Result<Value, String> {
    let query = match arguments.get("query") {
        Some(Value::String(query)) if !query.trim().is_empty() => query,
        _ => {
            return Err(format!(
                "{FIND_TOOLS} needs \"query\": what the tool should do, in words (for example \"read a file\")"
            ));
        }
    };
    let limit = match arguments.get("limit") {
        None | Some(Value::Null) => DEFAULT_LIMIT,
        Some(value) => match value.as_u64() {
            Some(limit @ 1..) => usize::try_from(limit).unwrap_or(MAX_LIMIT).min(MAX_LIMIT),
            _ => {
                return Err(format!(
                    "{FIND_TOOLS}: \"limit\" is a whole number from 1 to {MAX_LIMIT} (default {DEFAULT_LIMIT})"
                ));
            }
        },
    };
    let server = match arguments.get("server") {
        None | Some(Value::Null) => None,
        Some(Value::String(server)) => Some(server.as_str()),
        Some(_) => return Err(format!("{FIND_TOOLS}: \"server\" is a server's name")),
    };
    let tools: Vec<Value> = index
        .find(query, limit, server, Ranking::Fused)
        .into_iter()
        .map(|tool| {
            let definition = &tool.definition;
            let mut found = if code {
                json!({
                    "name": tool.name,
                    "description": definition.get("description").cloned().unwrap_or(Value::Null),
                    "declaration": declaration(definition).as_ref(),
                })
            } else {
                json!({
                    "name": tool.name,
                    "description": definition.get("description").cloned().unwrap_or(Value::Null),
                    "inputSchema": definition.get("inputSchema").cloned().unwrap_or_else(|| json!({"type": "object"})),
                })
            };
            // An app's tool: the host needs its `_meta.ui` (apps.rs) to show the app.
            if let Some(ui) = crate::apps::ui_of(definition) {
                found["_meta"] = json!({ "ui": ui });
            }
            found
        })
        .collect();
    Ok(json!({ "tools": tools }))
}

/// [`CALL_TOOL`]'s arguments: the tool's namespaced name and its arguments.
pub(crate) fn call_target(
    arguments: &Map<String, Value>,
) -> Result<(String, Option<Map<String, Value>>), String> {
    let Some(Value::String(name)) = arguments.get("name") else {
        return Err(format!(
            "{CALL_TOOL} needs \"name\": a tool's SERVER__TOOL name as {FIND_TOOLS} gives it"
        ));
    };
    if name == FIND_TOOLS || name == CALL_TOOL {
        return Err(format!("{CALL_TOOL} calls a server's tool, not '{name}'"));
    }
    let arguments = match arguments.get("arguments") {
        None | Some(Value::Null) => None,
        Some(Value::Object(arguments)) => Some(arguments.clone()),
        Some(_) => {
            return Err(format!(
                "{CALL_TOOL}: \"arguments\" is an object of the tool's arguments"
            ));
        }
    };
    Ok((name.clone(), arguments))
}

fn find_tools_tool(code: bool) -> Tool {
    let description = if code {
        format!(
            "tether gateway: find the tools of the MCP servers behind this gateway that can do what you describe. Returns the best matches, best first, each with its name, description and TypeScript declaration; call them from a script in {RUN_CODE} as `await tools[\"NAME\"](args)`. Describe the task in plain words, e.g. \"create a pull request\" or \"read a file\"."
        )
    } else {
        format!(
            "tether gateway: find the tools of the MCP servers behind this gateway that can do what you describe. Returns the best matches, best first, each with its name, description and inputSchema; call one with {CALL_TOOL} (or by its name). Describe the task in plain words, e.g. \"create a pull request\" or \"read a file\"."
        )
    };
    let mut tool = tool(
        FIND_TOOLS,
        description,
        json!({
            "query": {"type": "string", "description": "What the tool should do, in words."},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT, "description": "How many tools to return."},
            "server": {"type": "string", "description": "Only this server's tools."}
        }),
        "query",
    );
    tool.annotations =
        serde_json::from_value(json!({"readOnlyHint": true, "openWorldHint": false})).ok();
    tool
}

/// [`RUN_CODE`]'s definition: the contract of a script, then the declarations of the `indexed`
/// tools (the offered ones, definitions serialized once for the index) when they fit in
/// `budget_tokens`, else how to find them.
fn run_code_tool(indexed: &[Indexed], budget_tokens: usize) -> Tool {
    let mut declarations = String::new();
    for tool in indexed {
        declarations.push_str(&declaration(&tool.definition));
        declarations.push('\n');
    }
    let count = indexed.len();
    let tools = if declarations.len() / BYTES_PER_TOKEN <= budget_tokens {
        format!("\n\nThe tools (`tools[NAME]`):\n{declarations}")
    } else {
        format!(
            "\n\nThere are {count} tools: find the ones you need with {FIND_TOOLS}, which gives their declarations."
        )
    };
    tool(
        RUN_CODE,
        format!(
            "tether gateway, code mode: runs JavaScript (ES2020+), the body of an async function, that calls this gateway's tools and returns only what you need. `await tools[\"SERVER__TOOL\"](args)` calls a tool: it returns the tool's structured content when it has one, else its text; a tool error throws an Error you can catch. Use loops, filters and Promise.all (calls started together run together); `console.log` output comes back after the answer. Return the answer: a string as is, anything else as JSON. There is no file system, network, timer, require or import: only `tools`.{tools}"
        ),
        json!({
            "code": {"type": "string", "description": "The body of an async JavaScript function: call tools with `await tools[NAME](args)` and `return` the answer."}
        }),
        "code",
    )
}

fn call_tool_tool() -> Tool {
    tool(
        CALL_TOOL,
        format!(
            "tether gateway: call a tool {FIND_TOOLS} returned, by its SERVER__TOOL name, with its arguments. Returns exactly what the tool returns."
        ),
        json!({
            "name": {"type": "string", "description": "The tool's SERVER__TOOL name."},
            "arguments": {"type": "object", "description": "The tool's arguments, as its inputSchema describes them."}
        }),
        "name",
    )
}

/// A tool of the gateway's own: an object schema of `properties`, `required` needed.
fn tool(name: &'static str, description: String, properties: Value, required: &str) -> Tool {
    let schema = json!({"type": "object", "properties": properties, "required": [required]});
    let schema = schema.as_object().cloned().unwrap_or_default();
    Tool::new(name, description, schema)
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    #[test]
    fn modes_and_budgets_parse_and_bad_ones_say_what_to_give() {
        assert_eq!("search".parse::<ToolMode>(), Ok(ToolMode::Search));
        assert_eq!("all".parse::<ToolMode>(), Ok(ToolMode::All));
        assert_eq!("auto".parse::<ToolMode>(), Ok(ToolMode::Auto));
        assert_eq!("code".parse::<ToolMode>(), Ok(ToolMode::Code));
        assert!(
            "some"
                .parse::<ToolMode>()
                .unwrap_err()
                .contains("all, search, auto or code")
        );
        assert_eq!(parse_budget_tokens("2000"), Ok(2000));
        assert!(parse_budget_tokens("0").unwrap_err().contains("above 0"));
        assert!(parse_budget_tokens("lots").is_err());
    }

    #[test]
    fn the_two_tools_parse_as_mcp_tools() {
        assert_eq!(find_tools_tool(false).name, FIND_TOOLS);
        assert_eq!(call_tool_tool().name, CALL_TOOL);
        assert!(find_tools_tool(true).description.is_some());
    }

    fn find_plain(index: &ToolIndex, arguments: &Map<String, Value>) -> Result<Value, String> {
        find(index, arguments, false)
    }

    #[test]
    fn find_and_call_arguments_are_checked() {
        let index = ToolIndex::new(Vec::new());
        let args = |v: Value| v.as_object().cloned().unwrap_or_default();
        assert!(
            find_plain(&index, &args(json!({})))
                .unwrap_err()
                .contains("\"query\"")
        );
        assert!(find_plain(&index, &args(json!({"query": "x", "limit": 0}))).is_err());
        assert!(find_plain(&index, &args(json!({"query": "x", "server": 3}))).is_err());
        assert_eq!(
            find_plain(&index, &args(json!({"query": "read", "limit": 99}))),
            Ok(json!({"tools": []}))
        );
        assert!(call_target(&args(json!({"arguments": {}}))).is_err());
        assert!(call_target(&args(json!({"name": CALL_TOOL}))).is_err());
        assert!(call_target(&args(json!({"name": "a__b", "arguments": 1}))).is_err());
        assert_eq!(
            call_target(&args(json!({"name": "a__b", "arguments": {"x": 1}}))),
            Ok(("a__b".to_owned(), Some(args(json!({"x": 1})))))
        );
    }
}
