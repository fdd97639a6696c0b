//! The MCP handler: three fixed tools, optional numbered tools, paginated `tools/list`, and the
//! `initialize` delays that `--slow-start` and `--hang` ask for.

use std::time::Duration;

use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    handler::server::{
        router::tool::{ToolRoute, ToolRouter},
        tool::ToolName,
        wrapper::Parameters,
    },
    model::{
        CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock,
        Implementation, InitializeRequestParams, InitializeResult, JsonObject, ListPromptsResult,
        ListResourceTemplatesResult, ListToolsResult, PaginatedRequestParams, Prompt,
        ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
        ResourceContents, ResourceTemplate, ServerCapabilities, ServerConfig, Tool,
    },
    service::RequestContext,
    tool, tool_handler, tool_router,
};
use schemars::JsonSchema;
use serde::Deserialize;

/// How many tools one `tools/list` page holds; longer lists carry a `nextCursor`.
pub const TOOLS_PAGE_SIZE: usize = 50;

/// What the server does when a client sends `initialize`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitializeBehaviour {
    /// Answer at once.
    Answer,
    /// Wait this long, then answer (`--slow-start`).
    AnswerAfter(Duration),
    /// Answer once this file exists (`--start-when-file`).
    AnswerWhenFile(std::path::PathBuf),
    /// Never answer (`--hang`).
    Never,
}

/// Arguments of the `echo` tool.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct EchoArguments {
    /// The text to send back.
    pub text: String,
}

/// Arguments of the `env_check` tool.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct EnvCheckArguments {
    /// The name of the environment variable to look for.
    pub name: String,
}

/// Arguments of the `add` tool.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct AddArguments {
    /// The first addend.
    pub a: i64,
    /// The second addend.
    pub b: i64,
}

/// The test server. Cheap to clone: the HTTP transport builds one per session.
#[derive(Debug, Clone)]
pub struct TestServer {
    tool_router: ToolRouter<Self>,
    initialize: InitializeBehaviour,
    /// How long `echo` waits before answering (`--slow-echo`).
    echo_delay: Duration,
    /// With `--record-cancellations PATH`: where a cancelled `echo` appends a line.
    cancellations: Option<std::path::PathBuf>,
    /// With `--grow-tools`: the names of the tools `add_tool` added so far.
    grown: Option<std::sync::Arc<std::sync::Mutex<Vec<String>>>>,
    /// With `--extra-prompt TEXT`: the description of the one prompt, `extra`, listed (the
    /// server then declares `prompts`).
    extra_prompt: Option<String>,
    /// With `--capabilities-tool`: also serve [`CAPABILITIES_TOOL`].
    capabilities_tool: bool,
    /// With `--resource-template`: the templates listed (the server then declares
    /// `resources`).
    resource_templates: Vec<String>,
    /// With `--reflect-env VAR`: also serve `reflect` (see `reflect.rs`).
    reflect: Option<crate::reflect::Reflected>,
    /// With `--big-tool`: also serve `big` (see `big.rs`).
    big: bool,
    /// With `--probe-tool`: also serve `probe` (see `probe.rs`).
    probe: bool,
    /// With `--instructions TEXT`: the instructions of the `initialize` answer.
    instructions: Option<String>,
    /// `--modern-only` (see `modern.rs`).
    modern_only: bool,
}

/// The tool `--capabilities-tool` adds: it answers with the capabilities the client declared
/// in its `initialize`, as JSON (what a gateway declared on its client's behalf, say).
const CAPABILITIES_TOOL: &str = "client_capabilities";

/// The tool `--grow-tools` adds: it adds a tool and says the list changed.
const ADD_TOOL: &str = "add_tool";

impl TestServer {
    /// A server with the three fixed tools plus `numbered_tools` tools named `tool_0`, `tool_1`, ….
    pub fn new(numbered_tools: usize, initialize: InitializeBehaviour) -> Self {
        let mut tool_router = Self::tool_router();
        for index in 0..numbered_tools {
            let attr = Tool::new(
                format!("tool_{index}"),
                "A numbered filler tool (from --tools); answers with its own name.",
                empty_object_schema(),
            );
            tool_router.add_route(ToolRoute::new(attr, numbered_tool));
        }
        Self {
            tool_router,
            initialize,
            echo_delay: Duration::ZERO,
            cancellations: None,
            grown: None,
            extra_prompt: None,
            capabilities_tool: false,
            resource_templates: Vec::new(),
            reflect: None,
            big: false,
            probe: false,
            instructions: None,
            modern_only: false,
        }
    }

    /// The same server speaking only MCP 2026-07-28, with `ask_name` (`--modern-only`).
    pub fn with_modern_only(mut self, on: bool) -> Self {
        self.modern_only = on;
        self
    }

    /// The same server whose `echo` waits `delay` before answering (`--slow-echo`).
    pub fn with_echo_delay(mut self, delay: Duration) -> Self {
        self.echo_delay = delay;
        self
    }

    /// The same server whose `echo`, when cancelled while it waits, appends
    /// `echo cancelled: TEXT` to `path` (`--record-cancellations`).
    pub fn with_cancellations(mut self, path: Option<std::path::PathBuf>) -> Self {
        self.cancellations = path;
        self
    }
}

impl TestServer {
    /// With `grow`, also serves `add_tool {name}`, which adds a tool `name` (answering
    /// "NAME answered") and sends `notifications/tools/list_changed` (`--grow-tools`).
    #[must_use]
    pub fn with_tool_growth(mut self, grow: bool) -> Self {
        self.grown = grow.then(Default::default);
        self
    }

    /// `add_tool`'s definition and every tool it added.
    fn grown_tools(&self) -> Vec<Tool> {
        let Some(grown) = &self.grown else {
            return Vec::new();
        };
        let mut schema = empty_object_schema();
        schema.insert(
            "properties".into(),
            serde_json::json!({"name": {"type": "string", "description": "The new tool's name."}}),
        );
        schema.insert("required".into(), serde_json::json!(["name"]));
        let mut tools = vec![Tool::new(
            ADD_TOOL,
            "Add a tool called NAME (it answers with its own name) and say the tool list changed.",
            schema,
        )];
        let names = grown.lock().map(|names| names.clone()).unwrap_or_default();
        tools.extend(names.into_iter().map(|name| {
            Tool::new(
                name,
                "A tool add_tool added; answers with its own name.",
                empty_object_schema(),
            )
        }));
        tools
    }

    /// Also serves `reflect`, which reflects `variable` (`--reflect-env`).
    #[must_use]
    pub fn with_reflected(mut self, variable: Option<&str>) -> Self {
        self.reflect = variable.map(crate::reflect::Reflected::from_env);
        self
    }

    /// With `on`, also serves `big` (`--big-tool`).
    #[must_use]
    pub fn with_big_tool(mut self, on: bool) -> Self {
        self.big = on;
        self
    }

    /// With `on`, also serves `probe` (`--probe-tool`).
    #[must_use]
    pub fn with_probe_tool(mut self, on: bool) -> Self {
        self.probe = on;
        self
    }

    /// Gives `instructions` in the `initialize` answer instead of the default ones
    /// (`--instructions`).
    #[must_use]
    pub fn with_instructions(mut self, instructions: Option<&str>) -> Self {
        self.instructions = instructions.map(str::to_owned);
        self
    }

    /// The instructions of the `initialize` answer: `--instructions` or a sentence naming
    /// the tools, then, with `--reflect-env VAR`, `VAR=<value>`.
    fn instructions_text(&self) -> String {
        let mut text = self.instructions.clone().unwrap_or_else(|| {
            "A test server: echo, env_check and add, plus numbered filler tools.".to_owned()
        });
        if let Some(reflected) = &self.reflect {
            text.push_str(&format!(" {}={}", reflected.name, reflected.value));
        }
        text
    }

    /// With `on`, also serves `client_capabilities` (`--capabilities-tool`).
    #[must_use]
    pub fn with_capabilities_tool(mut self, on: bool) -> Self {
        self.capabilities_tool = on;
        self
    }

    /// Lists `templates` as resource templates (no resources when empty).
    #[must_use]
    pub fn with_resource_templates(mut self, templates: Vec<String>) -> Self {
        self.resource_templates = templates;
        self
    }

    /// Lists a prompt `extra` described by `description` (no prompts when `None`).
    #[must_use]
    pub fn with_extra_prompt(mut self, description: Option<&str>) -> Self {
        self.extra_prompt = description.map(str::to_owned);
        self
    }

    /// Adds a tool `extra` described by `description` (none when `None`), taking `schema` as
    /// its input schema (an empty object schema when `None`) and `meta` as its `_meta`.
    #[must_use]
    pub fn with_extra_tool(
        mut self,
        description: Option<&str>,
        schema: Option<JsonObject>,
        meta: Option<JsonObject>,
    ) -> Self {
        if let Some(description) = description {
            let schema = schema.unwrap_or_else(empty_object_schema);
            let mut attr = Tool::new("extra", description.to_owned(), schema);
            attr.meta = meta.map(rmcp::model::MetaObject::from);
            self.tool_router
                .add_route(ToolRoute::new(attr, numbered_tool));
        }
        self
    }
}

#[tool_router]
impl TestServer {
    /// Sends the text back unchanged.
    #[tool(description = "Return the given text unchanged, as text content.")]
    async fn echo(
        &self,
        Parameters(EchoArguments { text }): Parameters<EchoArguments>,
        cancelled: tokio_util::sync::CancellationToken,
    ) -> String {
        if !self.echo_delay.is_zero() {
            tokio::select! {
                () = tokio::time::sleep(self.echo_delay) => {}
                () = cancelled.cancelled() => {
                    if let Some(path) = &self.cancellations {
                        record_line(path, &format!("echo cancelled: {text}"));
                    }
                    return "cancelled".to_owned();
                }
            }
        }
        text
    }

    /// Tells whether a variable is set in the server's environment, never its value.
    #[tool(
        description = "Tell whether an environment variable is set in the server's environment. \
                       Returns {\"name\": NAME, \"set\": true|false} as JSON text; never the value."
    )]
    fn env_check(
        &self,
        Parameters(EnvCheckArguments { name }): Parameters<EnvCheckArguments>,
    ) -> Result<String, String> {
        if name.is_empty() || name.contains(['=', '\0']) {
            return Err(format!("{name:?} is not a valid environment variable name"));
        }
        let set = std::env::var_os(&name).is_some();
        Ok(serde_json::json!({ "name": name, "set": set }).to_string())
    }

    /// Adds two integers.
    #[tool(description = "Add two integers a and b; returns the sum as text.")]
    fn add(
        &self,
        Parameters(AddArguments { a, b }): Parameters<AddArguments>,
    ) -> Result<String, String> {
        a.checked_add(b)
            .map(|sum| sum.to_string())
            .ok_or_else(|| format!("{a} + {b} overflows a 64-bit integer"))
    }
}

/// The handler behind every `tool_N`.
fn numbered_tool(ToolName(name): ToolName) -> String {
    format!("{name} answered")
}

fn empty_object_schema() -> JsonObject {
    let mut schema = JsonObject::new();
    schema.insert("type".into(), "object".into());
    schema.insert("properties".into(), JsonObject::new().into());
    schema
}

/// One page of `tools` starting at `cursor` (an index, as the previous page's `nextCursor` gave it).
fn tools_page(tools: Vec<Tool>, cursor: Option<&str>) -> Result<ListToolsResult, ErrorData> {
    let start = match cursor {
        None => 0,
        Some(cursor) => cursor
            .parse::<usize>()
            .ok()
            .filter(|start| *start <= tools.len())
            .ok_or_else(|| ErrorData::invalid_params(format!("unknown cursor {cursor:?}"), None))?,
    };
    let end = tools.len().min(start.saturating_add(TOOLS_PAGE_SIZE));
    let next_cursor = (end < tools.len()).then(|| end.to_string());
    let page = tools.into_iter().skip(start).take(end - start).collect();
    let mut result = ListToolsResult::with_all_items(page);
    result.next_cursor = next_cursor;
    Ok(result)
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for TestServer {
    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        crate::modern::versions(self.modern_only)
    }

    fn get_info(&self) -> ServerConfig {
        // `prompts` only with `--extra-prompt`, `resources` only with `--resource-template`:
        // a client then lists them.
        let mut capabilities = ServerCapabilities::builder().enable_tools().build();
        if self.extra_prompt.is_some() {
            capabilities.prompts = ServerCapabilities::builder()
                .enable_prompts()
                .build()
                .prompts;
        }
        if !self.resource_templates.is_empty() {
            capabilities.resources = ServerCapabilities::builder()
                .enable_resources()
                .build()
                .resources;
        }
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new(
                "tether-test-mcp",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(self.instructions_text())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let prompts = self
            .extra_prompt
            .iter()
            .map(|description| Prompt::new("extra", Some(description.clone()), None))
            .collect();
        Ok(ListPromptsResult::with_all_items(prompts))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let templates = self
            .resource_templates
            .iter()
            .enumerate()
            .map(|(index, template)| {
                ResourceTemplate::new(template.clone(), format!("template_{index}"))
            })
            .collect();
        Ok(ListResourceTemplatesResult::with_all_items(templates))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        if self.resource_templates.is_empty() {
            return Err(ErrorData::resource_not_found(
                "this server has no resources",
                None,
            ));
        }
        let text = format!(
            "{} read by the server of {}",
            request.uri,
            self.resource_templates.join(" ")
        );
        Ok(ReadResourceResult::new(vec![ResourceContents::text(text, request.uri)]).into())
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        match &self.initialize {
            InitializeBehaviour::Answer => {}
            InitializeBehaviour::AnswerAfter(delay) => {
                tracing::info!(?delay, "delaying the initialize answer (--slow-start)");
                tokio::time::sleep(*delay).await;
            }
            InitializeBehaviour::AnswerWhenFile(path) => {
                tracing::info!(path = %path.display(), "holding the initialize answer until the file exists (--start-when-file)");
                while !path.exists() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            InitializeBehaviour::Never => {
                tracing::info!("never answering initialize (--hang)");
                std::future::pending::<()>().await;
            }
        }
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let cursor = request.as_ref().and_then(|params| params.cursor.as_deref());
        let mut tools = self.tool_router.list_all();
        tools.extend(self.grown_tools());
        tools.extend(self.reflect.iter().map(crate::reflect::Reflected::tool));
        if self.probe {
            tools.push(crate::probe::tool());
        }
        if self.big {
            tools.push(crate::big::tool());
        }
        if self.modern_only {
            tools.push(crate::modern::tool());
        }
        if self.capabilities_tool {
            tools.push(Tool::new(
                CAPABILITIES_TOOL,
                "Answer with the capabilities the client declared in its initialize, as JSON.",
                empty_object_schema(),
            ));
        }
        let mut result = tools_page(tools, cursor)?;
        // Protocol 2026-07-28 wants cache hints; the list can change between runs, so none is fresh.
        if context
            .protocol_version()
            .is_some_and(|version| version >= ProtocolVersion::V_2026_07_28)
        {
            result = result.with_ttl_ms(0).with_cache_scope(CacheScope::Public);
        }
        Ok(result)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if let Some(reflected) = &self.reflect
            && request.name == crate::reflect::TOOL
        {
            let form = request
                .arguments
                .as_ref()
                .and_then(|a| a.get("as"))
                .and_then(serde_json::Value::as_str);
            return match form {
                Some("evasions") => Ok(reflected.evasions().into()),
                Some("error") => Err(ErrorData::internal_error(reflected.error_message(), None)),
                _ => Ok(reflected.call().into()),
            };
        }
        if self.probe && request.name == crate::probe::TOOL {
            return crate::probe::call(request.arguments.as_ref())
                .map(Into::into)
                .map_err(|message| ErrorData::invalid_params(message, None));
        }
        if self.big && request.name == crate::big::TOOL {
            return crate::big::call(request.arguments.as_ref())
                .map(Into::into)
                .map_err(|message| ErrorData::invalid_params(message, None));
        }
        if self.modern_only && request.name == crate::modern::TOOL {
            return crate::modern::call(&request);
        }
        if self.capabilities_tool && request.name == CAPABILITIES_TOOL {
            let declared = context
                .peer
                .peer_info()
                .map(|info| serde_json::to_string(&info.capabilities))
                .transpose()
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?
                .unwrap_or_else(|| "no initialize seen".to_owned());
            return Ok(CallToolResult::success(vec![ContentBlock::text(declared)]).into());
        }
        if let Some(grown) = &self.grown {
            if request.name == ADD_TOOL {
                let name = request
                    .arguments
                    .as_ref()
                    .and_then(|arguments| arguments.get("name"))
                    .and_then(serde_json::Value::as_str)
                    .filter(|name| !name.is_empty())
                    .ok_or_else(|| ErrorData::invalid_params("add_tool takes a name", None))?
                    .to_owned();
                if let Ok(mut names) = grown.lock() {
                    names.push(name.clone());
                }
                context
                    .peer
                    .notify_tool_list_changed()
                    .await
                    .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                return Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                    "added {name}"
                ))])
                .into());
            }
            let known = grown
                .lock()
                .is_ok_and(|names| names.contains(&request.name.to_string()));
            if known {
                return Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                    "{} answered",
                    request.name
                ))])
                .into());
            }
        }
        let context = rmcp::handler::server::tool::ToolCallContext::new(self, request, context);
        self.tool_router.call(context).await
    }
}

/// Appends `line` to `path` (a test reads it; failures go to stderr).
fn record_line(path: &std::path::Path, line: &str) {
    use std::io::Write as _;
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut file| writeln!(file, "{line}"));
    if let Err(error) = written {
        eprintln!(
            "tether-test-mcp: cannot record to {}: {error}",
            path.display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(result: &ListToolsResult) -> Vec<&str> {
        result.tools.iter().map(|tool| tool.name.as_ref()).collect()
    }

    #[test]
    fn pages_follow_the_cursor_to_the_end() -> Result<(), ErrorData> {
        let tools = TestServer::new(120, InitializeBehaviour::Answer)
            .tool_router
            .list_all();
        assert_eq!(tools.len(), 123);

        let first = tools_page(tools.clone(), None)?;
        assert_eq!(first.tools.len(), TOOLS_PAGE_SIZE);
        assert_eq!(names(&first)[..3], ["add", "echo", "env_check"]);
        assert_eq!(first.next_cursor.as_deref(), Some("50"));

        let second = tools_page(tools.clone(), Some("50"))?;
        assert_eq!(second.next_cursor.as_deref(), Some("100"));

        let last = tools_page(tools.clone(), Some("100"))?;
        assert_eq!(last.tools.len(), 23);
        assert_eq!(last.next_cursor, None);
        Ok(())
    }

    #[test]
    fn a_short_list_is_one_page() -> Result<(), ErrorData> {
        let tools = TestServer::new(0, InitializeBehaviour::Answer)
            .tool_router
            .list_all();
        let page = tools_page(tools, None)?;
        assert_eq!(names(&page), ["add", "echo", "env_check"]);
        assert_eq!(page.next_cursor, None);
        Ok(())
    }

    #[test]
    fn a_foreign_cursor_is_an_invalid_params_error() {
        let tools = TestServer::new(0, InitializeBehaviour::Answer)
            .tool_router
            .list_all();
        for cursor in ["x", "4", "-1"] {
            assert!(tools_page(tools.clone(), Some(cursor)).is_err(), "{cursor}");
        }
    }
}
