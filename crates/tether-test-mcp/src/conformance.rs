//! `--conformance`: the tools, prompts and resources the official MCP conformance suite's
//! server scenarios call (`@modelcontextprotocol/conformance`, the `--requirements` sets of
//! 2025-11-25 and 2026-07-28), speaking 2025-11-25 only — so that, run behind `tether serve`,
//! what the suite measures at 2026-07-28 is the gateway's translation.
//!
//! The suite's `test_input_required_result_*` tools and prompt describe a 2026-07-28 server
//! answering with an `InputRequiredResult`; a 2025-11-25 server cannot, so here each asks its
//! client with the matching server-to-client request(s) — `elicitation/create`,
//! `sampling/createMessage`, `roots/list` — which the gateway turns into the round trip.
//! `test_missing_capability` asks for sampling and answers a refusal with -32021 (missing
//! required client capability).

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    ErrorCode, GetPromptRequestParams, GetPromptResponse, GetPromptResult, Implementation,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, ServerConfig, ServerRequest, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// A 1×1 red PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
/// An empty 8 kHz mono 16-bit WAV.
const WAV: &str = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA=";

/// The conformance-mode server. Clones share the subscriptions.
#[derive(Clone, Default)]
pub struct ConformanceServer {
    subscribed: Arc<Mutex<HashSet<String>>>,
    /// How many tools and prompts `test_trigger_tool_change` and `test_trigger_prompt_change`
    /// added (`test_added_tool_N`, `test_added_prompt_N`).
    added_tools: Arc<AtomicUsize>,
    added_prompts: Arc<AtomicUsize>,
    /// The Tasks fixtures' tasks (`tasks.rs`).
    tasks: rmcp::task_manager::TaskManager,
}

/// `value` read as `T`; an internal error when it does not fit (a bug in this file).
fn typed<T: DeserializeOwned>(value: Value) -> Result<T, ErrorData> {
    serde_json::from_value(value).map_err(|e| ErrorData::internal_error(e.to_string(), None))
}

fn text(text: impl Into<String>) -> Value {
    json!({"type": "text", "text": text.into()})
}

/// A tool: name, description, and the properties of its input (all required).
fn tool(name: &str, description: &str, arguments: &[&str]) -> Value {
    let properties: serde_json::Map<String, Value> = arguments
        .iter()
        .map(|argument| ((*argument).to_owned(), json!({"type": "string"})))
        .collect();
    json!({
        "name": name,
        "description": description,
        "inputSchema": {"type": "object", "properties": properties, "required": arguments},
    })
}

/// The tools that answer at once or ask through a request of their own: name, description,
/// arguments (strings, all required).
const TOOLS: [(&str, &str, &[&str]); 15] = [
    ("test_simple_text", "Returns a simple text", &[]),
    ("test_image_content", "Returns an image", &[]),
    ("test_audio_content", "Returns audio", &[]),
    (
        "test_embedded_resource",
        "Returns an embedded resource",
        &[],
    ),
    (
        "test_multiple_content_types",
        "Returns text, an image and a resource",
        &[],
    ),
    (
        "test_tool_with_logging",
        "Logs three messages while it runs",
        &[],
    ),
    ("test_error_handling", "Always fails", &[]),
    (
        "test_tool_with_progress",
        "Reports progress while it runs",
        &[],
    ),
    ("test_sampling", "Asks the client to sample", &["prompt"]),
    ("test_elicitation", "Asks the user for input", &["message"]),
    (
        "test_elicitation_sep1034_defaults",
        "Elicits with defaults",
        &[],
    ),
    (
        "test_elicitation_sep1330_enums",
        "Elicits with every enum form",
        &[],
    ),
    (
        "test_missing_capability",
        "Needs the client's sampling",
        &[],
    ),
    ("test_trigger_tool_change", "Adds a tool", &[]),
    ("test_trigger_prompt_change", "Adds a prompt", &[]),
];

/// Every tool, with the `added` ones `test_trigger_tool_change` made.
fn tools(added: usize) -> Value {
    let mut tools: Vec<Value> = TOOLS
        .iter()
        .map(|(name, description, arguments)| tool(name, description, arguments))
        .collect();
    for (name, description) in INPUT_TOOLS {
        tools.push(tool(name, description, &[]));
    }
    tools.push(json_schema_2020_12_tool());
    for n in 1..=added {
        tools.push(tool(
            &format!("test_added_tool_{n}"),
            "Added by test_trigger_tool_change",
            &[],
        ));
    }
    Value::Array(tools)
}

/// The `json-schema-2020-12` scenario's tool: an input schema with 2020-12 keywords a client
/// or gateway must keep whole (`$schema`, `$defs` with an `$anchor`, `$ref`, `allOf`/`anyOf`,
/// `if`/`then`/`else`, `additionalProperties`).
fn json_schema_2020_12_tool() -> Value {
    json!({
        "name": "json_schema_2020_12_tool",
        "description": "Tool with JSON Schema 2020-12 features",
        "inputSchema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {"address": {"$anchor": "addressDef", "type": "object",
                "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
            "properties": {
                "name": {"type": "string"},
                "address": {"$ref": "#/$defs/address"},
                "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                "phone": {"type": "string"},
                "email": {"type": "string"},
            },
            "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
            "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
            "then": {"required": ["phone"]},
            "else": {"required": ["email"]},
            "additionalProperties": false,
        },
    })
}

/// The tools that ask their client something (through the gateway: an `InputRequiredResult`).
const INPUT_TOOLS: [(&str, &str); 8] = [
    (
        "test_input_required_result_elicitation",
        "Asks the user's name",
    ),
    (
        "test_input_required_result_sampling",
        "Asks the client to sample",
    ),
    (
        "test_input_required_result_list_roots",
        "Asks the client's roots",
    ),
    (
        "test_input_required_result_request_state",
        "Asks for a confirmation",
    ),
    (
        "test_input_required_result_multiple_inputs",
        "Asks three things at once",
    ),
    (
        "test_input_required_result_multi_round",
        "Asks twice, one after the other",
    ),
    (
        "test_input_required_result_tampered_state",
        "Asks for a confirmation",
    ),
    (
        "test_input_required_result_capabilities",
        "Asks for sampling and elicitation",
    ),
];

fn elicit(message: &str, properties: Value) -> Value {
    let required: Vec<&String> = properties
        .as_object()
        .map(|p| p.keys().collect())
        .unwrap_or_default();
    json!({"message": message, "requestedSchema": {"type": "object", "properties": properties, "required": required}})
}

fn sample(prompt: &str, max_tokens: u32) -> Value {
    json!({"messages": [{"role": "user", "content": text(prompt)}], "maxTokens": max_tokens})
}

/// Asks the client `method`: its result, or why it refused.
async fn ask(peer: &Peer<RoleServer>, method: &str, params: Value) -> Result<Value, ErrorData> {
    let mut message = json!({"method": method});
    if params.as_object().is_some_and(|p| !p.is_empty()) {
        message["params"] = params;
    }
    let request: ServerRequest = typed(message)?;
    match peer.send_request(request).await {
        Ok(result) => {
            serde_json::to_value(result).map_err(|e| ErrorData::internal_error(e.to_string(), None))
        }
        Err(rmcp::ServiceError::McpError(error)) => Err(error),
        Err(error) => Err(ErrorData::internal_error(error.to_string(), None)),
    }
}

fn done(content: Vec<Value>) -> Result<CallToolResponse, ErrorData> {
    typed::<CallToolResult>(json!({"content": content})).map(Into::into)
}

fn sampled_text(result: &Value) -> String {
    result["content"]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

impl ConformanceServer {
    #[expect(
        deprecated,
        reason = "notifications/message is part of 2025-11-25, which this server speaks"
    )]
    async fn log(peer: &Peer<RoleServer>, message: &str) {
        if let Ok(params) =
            typed(json!({"level": "info", "logger": "conformance", "data": message}))
        {
            let _ = peer.notify_logging_message(params).await;
        }
    }

    async fn call(
        &self,
        name: &str,
        arguments: &Value,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let peer = &context.peer;
        let argument = |key: &str| arguments[key].as_str().unwrap_or_default().to_owned();
        match name {
            "test_simple_text" => done(vec![text("This is a simple text response for testing.")]),
            "test_image_content" => done(vec![
                json!({"type": "image", "data": PNG, "mimeType": "image/png"}),
            ]),
            "test_audio_content" => done(vec![
                json!({"type": "audio", "data": WAV, "mimeType": "audio/wav"}),
            ]),
            "test_embedded_resource" => done(vec![json!({"type": "resource", "resource": {
                "uri": "test://embedded-resource", "mimeType": "text/plain",
                "text": "This is an embedded resource content."}})]),
            "test_multiple_content_types" => done(vec![
                text("Multiple content types test:"),
                json!({"type": "image", "data": PNG, "mimeType": "image/png"}),
                json!({"type": "resource", "resource": {"uri": "test://mixed-content-resource",
                    "mimeType": "application/json", "text": "{\"test\":\"data\",\"value\":123}"}}),
            ]),
            "test_tool_with_logging" => {
                for (step, message) in [
                    "Tool execution started",
                    "Tool processing data",
                    "Tool execution completed",
                ]
                .iter()
                .enumerate()
                {
                    if step > 0 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Self::log(peer, message).await;
                }
                done(vec![text("Tool with logging executed successfully")])
            }
            "test_error_handling" => typed::<CallToolResult>(json!({"isError": true,
                "content": [text("This tool intentionally returns an error for testing")]}))
            .map(Into::into),
            "test_tool_with_progress" => {
                let token = context.meta.get_progress_token();
                for progress in [0, 50, 100] {
                    if progress > 0 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    if let Some(token) = &token {
                        let params = typed(
                            json!({"progressToken": token, "progress": progress, "total": 100}),
                        )?;
                        let _ = peer.notify_progress(params).await;
                    }
                }
                done(vec![text("Tool with progress executed successfully")])
            }
            "test_sampling" => {
                let result = ask(
                    peer,
                    "sampling/createMessage",
                    sample(&argument("prompt"), 100),
                )
                .await?;
                done(vec![text(format!(
                    "LLM response: {}",
                    sampled_text(&result)
                ))])
            }
            "test_elicitation" => {
                let properties = json!({
                    "username": {"type": "string", "description": "User's response"},
                    "email": {"type": "string", "description": "User's email address"}});
                let result = ask(
                    peer,
                    "elicitation/create",
                    elicit(&argument("message"), properties),
                )
                .await?;
                done(vec![text(format!(
                    "User response: action: {}, content: {}",
                    result["action"], result["content"]
                ))])
            }
            "test_elicitation_sep1034_defaults" => {
                let properties = json!({
                    "name": {"type": "string", "default": "John Doe"},
                    "age": {"type": "integer", "default": 30},
                    "score": {"type": "number", "default": 95.5},
                    "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
                    "verified": {"type": "boolean", "default": true}});
                let mut params = elicit("Please review your information", properties);
                params["requestedSchema"]["required"] = json!([]);
                let result = ask(peer, "elicitation/create", params).await?;
                done(vec![text(format!(
                    "Elicitation completed: action={}, content={}",
                    result["action"], result["content"]
                ))])
            }
            "test_elicitation_sep1330_enums" => {
                let properties = json!({
                    "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
                    "titledSingle": {"type": "string", "oneOf": [
                        {"const": "value1", "title": "First Option"},
                        {"const": "value2", "title": "Second Option"},
                        {"const": "value3", "title": "Third Option"}]},
                    "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
                        "enumNames": ["Option One", "Option Two", "Option Three"]},
                    "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                    "titledMulti": {"type": "array", "items": {"anyOf": [
                        {"const": "value1", "title": "First Choice"},
                        {"const": "value2", "title": "Second Choice"},
                        {"const": "value3", "title": "Third Choice"}]}}});
                let mut params = elicit("Please choose", properties);
                params["requestedSchema"]["required"] = json!([]);
                let result = ask(peer, "elicitation/create", params).await?;
                done(vec![text(format!(
                    "Elicitation completed: action={}, content={}",
                    result["action"], result["content"]
                ))])
            }
            "test_trigger_tool_change" => {
                self.added_tools.fetch_add(1, Ordering::SeqCst);
                let _ = peer.notify_tool_list_changed().await;
                done(vec![text("added a tool")])
            }
            "test_trigger_prompt_change" => {
                self.added_prompts.fetch_add(1, Ordering::SeqCst);
                let _ = peer.notify_prompt_list_changed().await;
                done(vec![text("added a prompt")])
            }
            added if added.starts_with("test_added_tool_") => done(vec![text("an added tool")]),
            "json_schema_2020_12_tool" => done(vec![text(format!("received {arguments}"))]),
            "test_missing_capability" => {
                match ask(peer, "sampling/createMessage", sample("Say hi", 10)).await {
                    Ok(result) => done(vec![text(format!(
                        "LLM response: {}",
                        sampled_text(&result)
                    ))]),
                    Err(refused) => Err(ErrorData::new(
                        ErrorCode(-32021),
                        format!("this tool needs the client's sampling: {}", refused.message),
                        Some(json!({"requiredCapabilities": {"sampling": {}}})),
                    )),
                }
            }
            _ => self.call_asking(name, context).await,
        }
    }

    /// The `test_input_required_result_*` tools.
    async fn call_asking(
        &self,
        name: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let peer = &context.peer;
        let name_schema = json!({"name": {"type": "string"}});
        match name {
            "test_input_required_result_elicitation" => {
                let result = ask(
                    peer,
                    "elicitation/create",
                    elicit("What is your name?", name_schema),
                )
                .await?;
                done(vec![text(format!(
                    "Hello, {}!",
                    result["content"]["name"].as_str().unwrap_or("stranger")
                ))])
            }
            "test_input_required_result_sampling" => {
                let result = ask(
                    peer,
                    "sampling/createMessage",
                    sample("What is the capital of France?", 100),
                )
                .await?;
                done(vec![text(format!("The answer: {}", sampled_text(&result)))])
            }
            "test_input_required_result_list_roots" => {
                let result = ask(peer, "roots/list", json!({})).await?;
                done(vec![text(format!("Roots: {}", result["roots"]))])
            }
            "test_input_required_result_request_state"
            | "test_input_required_result_tampered_state" => {
                let confirm = elicit("Please confirm", json!({"ok": {"type": "boolean"}}));
                let result = ask(peer, "elicitation/create", confirm).await?;
                done(vec![text(format!(
                    "state-ok: confirmed {}",
                    result["content"]["ok"]
                ))])
            }
            "test_input_required_result_multiple_inputs" => {
                let (named, greeting, roots) = tokio::join!(
                    ask(
                        peer,
                        "elicitation/create",
                        elicit("What is your name?", name_schema)
                    ),
                    ask(
                        peer,
                        "sampling/createMessage",
                        sample("Generate a greeting", 50)
                    ),
                    ask(peer, "roots/list", json!({})),
                );
                let (named, greeting, roots) = (named?, greeting?, roots?);
                done(vec![text(format!(
                    "{} {}, roots: {}",
                    sampled_text(&greeting),
                    named["content"]["name"].as_str().unwrap_or("stranger"),
                    roots["roots"]
                ))])
            }
            "test_input_required_result_multi_round" => {
                let first = ask(
                    peer,
                    "elicitation/create",
                    elicit("Step 1: What is your name?", name_schema),
                )
                .await?;
                let color = json!({"color": {"type": "string"}});
                let second = ask(
                    peer,
                    "elicitation/create",
                    elicit("Step 2: What is your favorite color?", color),
                )
                .await?;
                done(vec![text(format!(
                    "{} likes {}",
                    first["content"]["name"], second["content"]["color"]
                ))])
            }
            "test_input_required_result_capabilities" => {
                // Each is asked; what the client cannot answer is left out.
                let (sampled, elicited) = tokio::join!(
                    ask(peer, "sampling/createMessage", sample("Say hi", 10)),
                    ask(
                        peer,
                        "elicitation/create",
                        elicit("What is your name?", name_schema)
                    ),
                );
                done(vec![text(format!(
                    "sampling answered: {}, elicitation answered: {}",
                    sampled.is_ok(),
                    elicited.is_ok()
                ))])
            }
            _ => Err(ErrorData::invalid_params(
                format!("no tool named {name}"),
                None,
            )),
        }
    }
}

fn prompts(added: usize) -> Value {
    let argument = |name: &str, description: &str| json!({"name": name, "description": description, "required": true});
    let mut prompts = json!([
        {"name": "test_simple_prompt", "description": "A simple prompt"},
        {"name": "test_prompt_with_arguments", "description": "A prompt with arguments",
            "arguments": [argument("arg1", "First test argument"), argument("arg2", "Second test argument")]},
        {"name": "test_prompt_with_embedded_resource", "description": "A prompt with an embedded resource",
            "arguments": [argument("resourceUri", "URI of the resource to embed")]},
        {"name": "test_prompt_with_image", "description": "A prompt with an image"},
        {"name": "test_input_required_result_prompt", "description": "A prompt that asks the user first"},
    ]);
    if let Value::Array(list) = &mut prompts {
        for n in 1..=added {
            let name = format!("test_added_prompt_{n}");
            list.push(json!({"name": name, "description": "Added by test_trigger_prompt_change"}));
        }
    }
    prompts
}

fn user(content: Value) -> Value {
    json!({"role": "user", "content": content})
}

fn static_resources() -> Value {
    json!([
        {"uri": "test://static-text", "name": "static-text", "description": "A static text resource", "mimeType": "text/plain"},
        {"uri": "test://static-binary", "name": "static-binary", "description": "A static binary resource", "mimeType": "image/png"},
        {"uri": "test://watched-resource", "name": "watched-resource", "description": "A resource to subscribe to", "mimeType": "text/plain"},
    ])
}

impl ServerHandler for ConformanceServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = json!({
            "tools": {"listChanged": true},
            "prompts": {"listChanged": true},
            "resources": {"subscribe": true, "listChanged": true},
            "logging": {},
            "completions": {},
            "extensions": {rmcp::model::TASKS_EXTENSION_ID: {}},
        });
        ServerConfig::new(serde_json::from_value(capabilities).unwrap_or_default())
            .with_server_info(Implementation::new(
                "tether-test-mcp-conformance",
                env!("CARGO_PKG_VERSION"),
            ))
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(ProtocolVersion::known_up_to(
            &ProtocolVersion::LATEST_WITH_INITIALIZE,
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut tools = tools(self.added_tools.load(Ordering::SeqCst));
        if let Value::Array(listed) = &mut tools {
            listed.extend(crate::tasks::tools());
        }
        typed(json!({ "tools": tools }))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = Value::Object(request.arguments.clone().unwrap_or_default());
        if crate::tasks::serves(&request.name) {
            return crate::tasks::call(&self.tasks, &request.name, &arguments, &context).await;
        }
        self.call(&request.name, &arguments, &context).await
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        typed(json!({"prompts": prompts(self.added_prompts.load(Ordering::SeqCst))}))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let argument = |key: &str| {
            request
                .arguments
                .as_ref()
                .and_then(|a| a.get(key))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let messages = match request.name.as_str() {
            "test_simple_prompt" => json!([user(text("This is a simple prompt for testing."))]),
            "test_prompt_with_arguments" => json!([user(text(format!(
                "Prompt with arguments: arg1='{}', arg2='{}'",
                argument("arg1"),
                argument("arg2")
            )))]),
            "test_prompt_with_embedded_resource" => json!([
                user(
                    json!({"type": "resource", "resource": {"uri": argument("resourceUri"),
                    "mimeType": "text/plain", "text": "Embedded resource content for testing."}})
                ),
                user(text("Please process the embedded resource above.")),
            ]),
            "test_prompt_with_image" => json!([
                user(json!({"type": "image", "data": PNG, "mimeType": "image/png"})),
                user(text("Please analyze the image above.")),
            ]),
            added if added.starts_with("test_added_prompt_") => {
                json!([user(text("an added prompt"))])
            }
            "test_input_required_result_prompt" => {
                let asked = elicit(
                    "What context should the prompt use?",
                    json!({"context": {"type": "string"}}),
                );
                let result = ask(&context.peer, "elicitation/create", asked).await?;
                json!([user(text(format!(
                    "Use this context: {}",
                    result["content"]["context"]
                )))])
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("no prompt named {other}"),
                    None,
                ));
            }
        };
        typed::<GetPromptResult>(json!({"messages": messages})).map(Into::into)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        typed(json!({"resources": static_resources()}))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        typed(
            json!({"resourceTemplates": [{"uriTemplate": "test://template/{id}/data", "name": "template",
            "description": "A resource template", "mimeType": "application/json"}]}),
        )
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri.as_str();
        let content = match uri {
            "test://static-text" => {
                json!({"uri": uri, "mimeType": "text/plain", "text": "This is the content of the static text resource."})
            }
            "test://static-binary" => json!({"uri": uri, "mimeType": "image/png", "blob": PNG}),
            "test://watched-resource" => {
                json!({"uri": uri, "mimeType": "text/plain", "text": "Watched resource content."})
            }
            _ => match uri
                .strip_prefix("test://template/")
                .and_then(|rest| rest.strip_suffix("/data"))
            {
                Some(id) if !id.is_empty() && !id.contains('/') => {
                    json!({"uri": uri, "mimeType": "application/json",
                    "text": json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")}).to_string()})
                }
                _ => {
                    return Err(ErrorData::invalid_params(
                        "Resource not found",
                        Some(json!({"uri": uri})),
                    ));
                }
            },
        };
        typed::<ReadResourceResult>(json!({"contents": [content]})).map(Into::into)
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscribed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(request.uri);
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscribed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&request.uri);
        Ok(())
    }

    #[expect(
        deprecated,
        reason = "logging/setLevel is part of 2025-11-25, which this server speaks"
    )]
    async fn set_level(
        &self,
        _request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Ok(())
    }

    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, ErrorData> {
        crate::tasks::get(&self.tasks, &request.task_id)
    }

    async fn update_task(
        &self,
        request: rmcp::model::UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks
            .update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks.cancel_task(&request.task_id)
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let typed_so_far = request.argument.value.to_lowercase();
        let values: Vec<&str> = ["paris", "park", "party"]
            .into_iter()
            .filter(|v| v.starts_with(&typed_so_far))
            .collect();
        typed(json!({"completion": {"values": values, "total": values.len(), "hasMore": false}}))
    }
}
