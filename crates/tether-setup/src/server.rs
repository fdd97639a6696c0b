//! The MCP server: the five `mcp_setup_*` tools.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::{InputResponses, RequestState};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams, ElicitResult,
    ElicitationAction, InputRequest, ProtocolVersion,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tether_config::{SecretValue, Secrets};
use tether_install::{Trial, TrialOptions, choose, install_built, local_name, test_connect};
use tether_registry::add::{Answers, BuildError};
use tether_registry::{Registries, SearchQuery};
use tether_store::Store;

use crate::refs::{self, Binding, RefError, Refs, masked};
use crate::rounds::{INPUT_KEY, SecretRounds, Waiting};

/// What the setup server borrows from the program that runs it: its settings, its display and
/// its stored OAuth tokens.
pub trait Host: Send + Sync {
    /// The local store an install goes into, opened as the program's settings say (created
    /// when there is none). The error is the line the tool result shows after "storing … failed,
    /// nothing was stored: ".
    fn open_store(&self) -> Result<Store, String>;

    /// Called with the store after an install wrote to it (the program tells the person of a
    /// secrets file the write created).
    fn installed(&self, store: &Store);

    /// A progress display for one test-connect; dropped when the test-connect ends.
    fn progress(&self) -> Box<dyn tether_install::Progress>;

    /// The program's stored OAuth tokens, for a remote server's test-connect.
    fn tokens(&self) -> Option<Arc<dyn tether_install::StoredTokens>>;
}

/// What the server needs besides its refs.
pub struct Settings {
    /// The registries.
    pub registries: Registries,
    /// How long a test-connect's server may take to initialize and list its tools.
    pub test_timeout: Duration,
    /// How long a URL elicitation waits for the value.
    pub elicitation_timeout: Duration,
    /// `http://127.0.0.1:PORT` of the entry page.
    pub page_base: String,
    /// The program around the server.
    pub host: Arc<dyn Host>,
}

struct Shared {
    settings: Settings,
    refs: Arc<Refs>,
    /// 2026-07-28 clients' URL elicitations waiting for their answer.
    rounds: SecretRounds,
}

/// The setup server. Cheap to clone.
#[derive(Clone)]
pub struct SetupServer {
    tool_router: ToolRouter<Self>,
    shared: Arc<Shared>,
}

/// Arguments of `mcp_setup_search`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SearchArgs {
    /// Text to look for in server names (and descriptions); empty or absent lists everything.
    pub query: Option<String>,
    /// Page number, from 1 (default 1).
    pub page: Option<u32>,
    /// Servers per page, 1 to 50 (default 10).
    pub page_size: Option<u32>,
    /// A registry's name (`official`, `smithery`, a configured one); absent: every enabled
    /// registry.
    pub source: Option<String>,
}

/// Arguments of `mcp_setup_get`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct GetArgs {
    /// The server's name as `mcp_setup_search` gave it (e.g. `io.github.owner/server`).
    pub qualified_name: String,
}

/// Arguments of `mcp_setup_request_secret`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct RequestSecretArgs {
    /// The server the value is for, as `mcp_setup_get` was given it: the ref works for this
    /// server (and the package or remote tether runs it as) only.
    pub qualified_name: String,
    /// The key (one of `required_env_keys`, or another input the server declares that is not
    /// a command-line argument).
    pub key_name: String,
    /// One sentence shown to the person: what the value is and where to find it.
    pub prompt: String,
}

/// Arguments of `mcp_setup_test_connection` and `mcp_setup_install_and_connect`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ConnectArgs {
    /// The server's name.
    pub qualified_name: String,
    /// Each required key → the `secret://` ref `mcp_setup_request_secret` returned for it.
    #[serde(default)]
    pub env_refs: BTreeMap<String, String>,
    /// Plain values of non-secret inputs by name (those of `required_values`, e.g. a
    /// directory argument): visible to you and on the server's command line, so never a
    /// secret.
    #[serde(default)]
    pub values: BTreeMap<String, String>,
}

fn tool_error(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

/// `values`' text replaced by `***` wherever it appears in `text` (a last guard: the driver
/// already masks what it reports).
fn redact(mut text: String, values: &[SecretValue]) -> String {
    for value in values {
        if !value.is_empty() {
            text = text.replace(value.expose(), "***");
        }
    }
    text
}

fn summary_keys(env_refs: &BTreeMap<String, String>) -> (Vec<&str>, Vec<String>) {
    (
        env_refs.keys().map(String::as_str).collect(),
        env_refs.values().map(|r| masked(r)).collect(),
    )
}

/// Why a value typed on the page never goes to a command-line argument.
fn argv_refusal(key: &str, server: &str) -> String {
    format!(
        "{key} is a command-line argument of {server}: a value typed on tether's page is never put on a command line, where every process of this computer can read it (/proc/PID/cmdline). If it is not a secret, pass it in `values`; a secret argument cannot be set up this way"
    )
}

/// A registry entry as fetched.
struct Prepared {
    response: tether_registry::model::ServerResponse,
    freshness: tether_registry::Freshness,
    /// The registry that had it.
    registry: String,
}

impl SetupServer {
    /// A server over `settings`, handing out refs from `refs`.
    pub fn new(settings: Settings, refs: Arc<Refs>) -> Self {
        Self {
            tool_router: Self::tool_router(),
            shared: Arc::new(Shared {
                rounds: SecretRounds::new(settings.elicitation_timeout),
                settings,
                refs,
            }),
        }
    }

    /// Once the person consented (`action`) to enter `key`'s value on the page of `nonce`:
    /// the ref when the value came in within the elicitation timeout, else a tool error
    /// (and the ref is discarded).
    async fn after_consent(
        &self,
        reference: &str,
        nonce: &str,
        key: String,
        action: ElicitationAction,
    ) -> CallToolResult {
        let timeout = self.shared.settings.elicitation_timeout;
        let why = match action {
            ElicitationAction::Accept => {
                if self.shared.refs.wait_submitted(nonce, timeout).await {
                    return CallToolResult::structured(json!({ "ref": reference }));
                }
                format!("nothing was submitted within {} s", timeout.as_secs())
            }
            ElicitationAction::Decline => "the user declined".to_owned(),
            _ => "the user cancelled".to_owned(),
        };
        self.shared.refs.discard(reference);
        tool_error(RefError::Declined { key, why }.to_string())
    }

    /// A 2026-07-28 client's retry of `mcp_setup_request_secret` with the state of the
    /// `InputRequiredResult` it was given and its answer to the URL elicitation.
    async fn resume_secret(
        &self,
        state: &str,
        mut responses: rmcp::model::InputResponses,
    ) -> CallToolResponse {
        let waiting = match self.shared.rounds.resume(state) {
            Ok(waiting) => waiting,
            Err(why) => {
                return tool_error(format!(
                    "{why}: call mcp_setup_request_secret again without requestState"
                ))
                .into();
            }
        };
        let answer = responses
            .remove(INPUT_KEY)
            .and_then(|answer| serde_json::from_value::<ElicitResult>(answer).ok());
        let Some(answer) = answer else {
            // Not answered (or not an elicitation result): asked again.
            return match self.shared.rounds.ask(waiting) {
                Some(asked) => asked.into(),
                None => tool_error("the URL elicitation was not answered").into(),
            };
        };
        self.after_consent(
            &waiting.reference,
            &waiting.nonce,
            waiting.key,
            answer.action,
        )
        .await
        .into()
    }

    async fn entry(&self, name: &str) -> Result<Prepared, String> {
        if name.starts_with('@') {
            return Err(format!(
                "{name} is a Smithery name; setup installs entries of the official registry only (for now)"
            ));
        }
        let (response, freshness, registry) = self
            .shared
            .settings
            .registries
            .official_server(name, None)
            .await
            .map_err(|e| e.to_string())?;
        if registry == tether_registry::SMITHERY_NAME {
            return Err(format!(
                "{name} is a Smithery entry; setup installs entries of official-API registries only (for now)"
            ));
        }
        Ok(Prepared {
            response,
            freshness,
            registry,
        })
    }

    /// The answers for `env_refs` (secret inputs as secrets, others as values) and `values`
    /// (plain, non-secret inputs), each ref resolved (or consumed) through `take` for its
    /// binding to this entry, this launch option and its key. A ref for an input that goes on
    /// the command line is refused: a value typed on the page is never put in argv.
    fn answers(
        server: &tether_registry::model::ServerJson,
        choice: &tether_install::Choice<'_>,
        args: &ConnectArgs,
        take: impl Fn(&Binding, &str) -> Result<SecretValue, RefError>,
    ) -> Result<(Answers, Secrets, Vec<SecretValue>), String> {
        // `choose` never downloads a bundle: the registry's description of its inputs.
        let inputs = choice.registry_inputs();
        let on_argv = choice.argument_inputs();
        let launch = choice.describe();
        let unknown = |key: &str| {
            let names: Vec<&str> = inputs.iter().map(|i| i.name.as_str()).collect();
            format!(
                "{key}: {} has no input of that name (its inputs: {})",
                server.name,
                if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                }
            )
        };
        let mut answers = Answers::default();
        let mut given = Secrets::new();
        let mut values = Vec::new();
        let mut errors = Vec::new();
        for (key, reference) in &args.env_refs {
            let binding = Binding {
                server: server.name.clone(),
                launch: launch.clone(),
                key: key.clone(),
            };
            let value = match take(&binding, reference) {
                Ok(value) => value,
                Err(error) => {
                    errors.push(error.to_string());
                    continue;
                }
            };
            let Some(input) = inputs.iter().find(|i| &i.name == key) else {
                errors.push(unknown(key));
                continue;
            };
            if on_argv.contains(key) {
                errors.push(argv_refusal(key, &server.name));
                continue;
            }
            values.push(value.clone());
            if input.secret {
                answers.secret(key);
                given.insert(key.clone(), value);
            } else {
                answers.set(key, value.expose());
            }
        }
        for (key, value) in &args.values {
            match inputs.iter().find(|i| &i.name == key) {
                None => errors.push(unknown(key)),
                Some(input) if input.secret => errors.push(format!(
                    "{key} is a secret input of {}: request it with mcp_setup_request_secret and pass the ref in env_refs, never in values",
                    server.name
                )),
                Some(_) if args.env_refs.contains_key(key) => {
                    errors.push(format!("{key} is in both env_refs and values; keep one"));
                }
                Some(_) => answers.set(key, value),
            }
        }
        if !errors.is_empty() {
            return Err(errors.join("\n"));
        }
        Ok((answers, given, values))
    }

    /// What a ref requested for `key` of the entry `name` is bound to: the entry, the launch
    /// option tether runs it as, the key. Refused (the line the agent reads) when the entry
    /// declares no such input for that option, or when the input is a command-line argument.
    async fn binding(&self, name: &str, key: &str) -> Result<Binding, String> {
        let prepared = self.entry(name).await?;
        let server = &prepared.response.server;
        let choice = choose(server, None).map_err(|e| e.to_string())?;
        let inputs = choice.registry_inputs();
        if !inputs.iter().any(|i| i.name == key) {
            let names: Vec<&str> = inputs.iter().map(|i| i.name.as_str()).collect();
            return Err(format!(
                "{key}: {} ({}) declares no input of that name, so tether asks for no value for it (its inputs: {})",
                server.name,
                choice.describe(),
                if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                }
            ));
        }
        if choice.argument_inputs().iter().any(|n| n == key) {
            return Err(argv_refusal(key, &server.name));
        }
        Ok(Binding {
            server: server.name.clone(),
            launch: choice.describe(),
            key: key.to_owned(),
        })
    }

    /// Build, test-connect, and (when `install`) store: the tool's result.
    async fn connect(&self, args: ConnectArgs, install: bool) -> CallToolResult {
        let prepared = match self.entry(&args.qualified_name).await {
            Ok(prepared) => prepared,
            Err(error) => {
                if install {
                    // Spent whatever the outcome.
                    for reference in args.env_refs.values() {
                        self.shared.refs.spend(&args.qualified_name, reference);
                    }
                }
                return tool_error(error);
            }
        };
        let refs = &self.shared.refs;
        let server = &prepared.response.server;
        let choice = match choose(server, None) {
            Ok(choice) => choice,
            Err(error) => {
                if install {
                    for reference in args.env_refs.values() {
                        refs.spend(&server.name, reference);
                    }
                }
                return tool_error(error.to_string());
            }
        };
        let outcome = if install {
            Self::answers(server, &choice, &args, |b, r| refs.consume(b, r))
        } else {
            Self::answers(server, &choice, &args, |b, r| refs.resolve(b, r))
        };
        if install {
            // A ref of this entry that was not taken above (another key, an argument input) is
            // spent as well.
            for reference in args.env_refs.values() {
                refs.spend(&server.name, reference);
            }
        }
        let (answers, given, values) = match outcome {
            Ok(outcome) => outcome,
            Err(error) => return tool_error(error),
        };
        // Sandboxed as `tether add` does: the test-connect and every later start.
        let built = match choice
            .build(&answers)
            .map(|built| choice.sandboxed(built, None))
        {
            Ok(Ok(built)) => built,
            Ok(Err(error)) => return tool_error(redact(error.to_string(), &values)),
            Err(BuildError::Missing(missing)) => {
                let names: Vec<&str> = missing.iter().map(|m| m.name.as_str()).collect();
                return tool_error(format!(
                    "{} still needs: {}; call mcp_setup_request_secret for each and pass the refs in env_refs",
                    server.name,
                    names.join(", ")
                ));
            }
            Err(error) => return tool_error(redact(error.to_string(), &values)),
        };
        let local = local_name(server);
        let host = &self.shared.settings.host;
        let options = TrialOptions {
            startup_timeout: self.shared.settings.test_timeout,
            tokens: host.tokens(),
        };
        let progress = host.progress();
        let trial = test_connect(&local, &built, &given, &options, progress.as_ref()).await;
        drop(progress);
        let tools = match trial {
            Ok(Trial::Ready(tools)) => tools,
            Ok(Trial::Failed(reason)) => {
                let reason = redact(reason, &values);
                return if install {
                    tool_error(format!(
                        "the test-connect of {} failed, nothing was stored: {reason}; the refs are consumed, request the secrets again to retry",
                        server.name
                    ))
                } else {
                    CallToolResult::structured(json!({ "ok": false, "error": reason }))
                };
            }
            Err(error) => return tool_error(redact(tether_log::error_chain(&error), &values)),
        };
        let tools: Vec<Value> = tools
            .iter()
            .map(|t| json!({ "name": t.name, "description": t.description }))
            .collect();
        if !install {
            return CallToolResult::structured(
                json!({ "ok": true, "tools": tools, "sandbox": built.server.get("sandbox") }),
            );
        }
        let installed = tokio::task::block_in_place(|| {
            let mut store = host.open_store()?;
            let uid = install_built(
                &mut store,
                (&prepared.registry, server),
                &choice,
                &local,
                &built,
                &given,
            )
            .map_err(|error| tether_log::error_chain(&error))?;
            host.installed(&store);
            Ok::<_, String>(uid)
        });
        match installed {
            Ok(uid) => {
                tracing::info!(server = %server.name, %uid, "installed");
                CallToolResult::structured(json!({
                    "server_id": uid.to_string(),
                    "status": "installed",
                    "tools": tools,
                    "sandbox": built.server.get("sandbox"),
                }))
            }
            Err(error) => tool_error(redact(
                format!(
                    "storing {} failed, nothing was stored: {error}",
                    server.name
                ),
                &values,
            )),
        }
    }
}

#[tool_router]
impl SetupServer {
    /// Searches the registries.
    #[tool(
        name = "mcp_setup_search",
        description = "Step 1 of setting up an MCP server: search the MCP registries. Returns {servers:[{name,title,description,transports,version,source,registry,status}], total_pages}. Pass a server's `name` as qualified_name to mcp_setup_get (`registry:name` to take it from that registry when several have it). Flow: search → get → request_secret per key → test_connection → install_and_connect; you never see secret values."
    )]
    async fn mcp_setup_search(
        &self,
        Parameters(args): Parameters<SearchArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let page = args.page.unwrap_or(1).max(1) as usize;
        let page_size = args.page_size.unwrap_or(10).clamp(1, 50) as usize;
        tracing::info!(tool = "mcp_setup_search", query = ?args.query, page, page_size, source = ?args.source, "tool call");
        let source = args.source.filter(|s| !s.is_empty());
        let limit = (page * page_size).min(100);
        let query = SearchQuery {
            text: args.query.unwrap_or_default(),
            limit,
            source,
            include_hidden: false,
        };
        let results = match self.shared.settings.registries.search(&query).await {
            Ok(results) => results,
            Err(error) => return Ok(tool_error(error.to_string())),
        };
        let total_pages = results.rows.len().div_ceil(page_size);
        let servers: Vec<Value> = results
            .rows
            .iter()
            .skip((page - 1) * page_size)
            .take(page_size)
            .map(|row| serde_json::to_value(row).unwrap_or(Value::Null))
            .collect();
        Ok(CallToolResult::structured(
            json!({ "servers": servers, "total_pages": total_pages }),
        ))
    }

    /// One entry and the keys it really needs.
    #[tool(
        name = "mcp_setup_get",
        description = "Step 2: describe one server. Returns {detail, required_env_keys, required_values}: the inputs the server cannot start without (no default), for the launch option tether would use (detail.launch). For each of required_env_keys call mcp_setup_request_secret with this qualified_name; you never see the values. required_values are plain command-line arguments (e.g. a directory), never secrets: pass them in `values`."
    )]
    async fn mcp_setup_get(
        &self,
        Parameters(args): Parameters<GetArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        tracing::info!(tool = "mcp_setup_get", qualified_name = %args.qualified_name, "tool call");
        let prepared = match self.entry(&args.qualified_name).await {
            Ok(prepared) => prepared,
            Err(error) => return Ok(tool_error(error)),
        };
        let server = &prepared.response.server;
        let choice = match choose(server, None) {
            Ok(choice) => choice,
            Err(error) => return Ok(tool_error(error.to_string())),
        };
        let missing = match choice.build(&Answers::default()) {
            Ok(_) => Vec::new(),
            Err(BuildError::Missing(missing)) => missing,
            Err(error) => return Ok(tool_error(error.to_string())),
        };
        // A plain argument is a value, not a ref; a secret one is listed with the keys (and
        // refused with the reason when it is requested).
        let on_argv = choice.argument_inputs();
        let (values, keys): (Vec<_>, Vec<_>) = missing
            .iter()
            .partition(|m| !m.secret && on_argv.contains(&m.name));
        let names = |inputs: Vec<&tether_registry::add::MissingInput>| -> Vec<Value> {
            inputs
                .into_iter()
                .map(|m| Value::String(m.name.clone()))
                .collect()
        };
        let mut detail = tether_registry::official_details(&prepared.response, prepared.freshness);
        detail.registry = prepared.registry;
        let mut detail = serde_json::to_value(&detail).unwrap_or(Value::Null);
        if let Some(object) = detail.as_object_mut() {
            object.remove("freshness");
            object.insert("launch".to_owned(), json!(choice.describe()));
        }
        Ok(CallToolResult::structured(json!({
            "detail": detail,
            "required_env_keys": names(keys),
            "required_values": names(values),
        })))
    }

    /// A ref for a value the person enters out of band.
    #[tool(
        name = "mcp_setup_request_secret",
        description = "Step 3, once per key of required_env_keys, naming the server (qualified_name): ask the person for the value out of band. tether shows them a local page (through the client's URL elicitation when it supports it) where they type it; you never see it. Returns {ref:\"secret://…\"} once the value is in, or, when the client cannot open URLs, {ref, status:\"pending\", url, message} at once: pass the message to the person, word for word, and wait for them to say they submitted it. Use the ref in env_refs of this server only: it is bound to it."
    )]
    async fn mcp_setup_request_secret(
        &self,
        Parameters(args): Parameters<RequestSecretArgs>,
        RequestState(state): RequestState,
        InputResponses(responses): InputResponses,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // A 2026-07-28 client's retry: the answer to the URL elicitation asked in its result.
        if let Some(state) = state {
            return Ok(self
                .resume_secret(&state, responses.unwrap_or_default())
                .await);
        }
        let key = args.key_name.trim().to_owned();
        if key.is_empty() {
            return Ok(tool_error("key_name is empty").into());
        }
        let binding = match self.binding(&args.qualified_name, &key).await {
            Ok(binding) => binding,
            Err(error) => return Ok(tool_error(error).into()),
        };
        let (requested, url) = match self.shared.refs.request(
            binding.clone(),
            &args.prompt,
            &self.shared.settings.page_base,
        ) {
            Ok(requested) => requested,
            Err(error) => return Ok(tool_error(error.to_string()).into()),
        };
        // The ref and the page's nonce are masked in every log line from now on (rmcp's
        // trace of the messages included).
        if let Some(id) = requested.reference.strip_prefix(refs::SCHEME) {
            tether_log::register([
                &SecretValue::new(id.to_owned()),
                &SecretValue::new(requested.nonce.clone()),
            ]);
        }
        let elicit = context
            .peer
            .supported_elicitation_modes()
            .contains(&rmcp::service::ElicitationMode::Url);
        tracing::info!(tool = "mcp_setup_request_secret", key = %key, r#ref = %masked(&requested.reference), url_elicitation = elicit, "tool call");
        let purpose = format!(
            " for the MCP server {} (run as {})",
            binding.server, binding.launch
        );
        let message = format!(
            "tether needs {key}{purpose}: {}. Open {url} in your browser and enter it there (the agent never sees it).",
            args.prompt.trim_end_matches('.')
        );
        let modern = context
            .protocol_version()
            .is_some_and(|version| version >= ProtocolVersion::V_2026_07_28);
        let url_declared = context
            .client_capabilities()
            .and_then(|caps| caps.elicitation)
            .is_some_and(|elicitation| elicitation.url.is_some());
        let asking = ElicitRequestParams::UrlElicitationParams {
            meta: None,
            message: message.clone(),
            url: url.clone(),
            elicitation_id: requested.nonce.clone(),
        };
        if modern && url_declared {
            let request = serde_json::to_value(&asking)
                .ok()
                .map(|params| json!({"method": "elicitation/create", "params": params}))
                .and_then(|request| serde_json::from_value::<InputRequest>(request).ok());
            let asked = request.and_then(|request| {
                self.shared.rounds.ask(Waiting {
                    reference: requested.reference.clone(),
                    nonce: requested.nonce.clone(),
                    key: key.clone(),
                    request,
                })
            });
            if let Some(asked) = asked {
                return Ok(asked.into());
            }
        }
        if elicit {
            let timeout = self.shared.settings.elicitation_timeout;
            let elicitation = context
                .peer
                .create_elicitation_with_timeout(asking, Some(timeout))
                .await;
            match elicitation.map(|r| r.action) {
                Ok(action) => {
                    return Ok(self
                        .after_consent(&requested.reference, &requested.nonce, key, action)
                        .await
                        .into());
                }
                Err(error) => {
                    // E.g. a protocol version that forbids server-to-client requests: the
                    // person opens the page themselves.
                    tracing::info!(
                        "URL elicitation failed ({error}); returning the page URL instead"
                    );
                }
            }
        }
        Ok(CallToolResult::structured(json!({
            "ref": requested.reference,
            "status": "pending",
            "url": url,
            "message": message,
        }))
        .into())
    }

    /// Test-connects without storing anything.
    #[tool(
        name = "mcp_setup_test_connection",
        description = "Step 4: start the server with the values behind env_refs ({KEY: \"secret://…\"}) in a scratch directory, run initialize and tools/list, and stop it; nothing is stored. Returns {ok, tools?, sandbox?, error?} (sandbox: the mode it ran under, `default` for a package or bundle). The refs stay usable after a failure (request a new one for a wrong value)."
    )]
    async fn mcp_setup_test_connection(
        &self,
        Parameters(args): Parameters<ConnectArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let (keys, refs) = summary_keys(&args.env_refs);
        tracing::info!(tool = "mcp_setup_test_connection", qualified_name = %args.qualified_name, ?keys, ?refs, "tool call");
        Ok(self.connect(args, false).await)
    }

    /// Test-connects and installs.
    #[tool(
        name = "mcp_setup_install_and_connect",
        description = "Step 5: test-connect as mcp_setup_test_connection does and, only if the server is ready, install it with its secrets in the OS credential store, atomically. Returns {server_id, status, tools, sandbox}. The refs are consumed whatever the outcome: after a failure, request the secrets again."
    )]
    async fn mcp_setup_install_and_connect(
        &self,
        Parameters(args): Parameters<ConnectArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let (keys, refs) = summary_keys(&args.env_refs);
        tracing::info!(tool = "mcp_setup_install_and_connect", qualified_name = %args.qualified_name, ?keys, ?refs, "tool call");
        Ok(self.connect(args, true).await)
    }
}

#[tool_handler(
    router = self.tool_router,
    name = "tether-setup-mcp",
    instructions = "Sets up MCP servers from the registries. Flow: mcp_setup_search → mcp_setup_get → mcp_setup_request_secret for each of required_env_keys → mcp_setup_test_connection → mcp_setup_install_and_connect. You never see a secret value: the person types it on a local tether page, and you only pass opaque secret:// refs."
)]
impl ServerHandler for SetupServer {}
