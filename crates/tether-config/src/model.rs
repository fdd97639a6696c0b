//! Templates, templatable servers and installations.
//!
//! A [`TemplatableServer`] is a server config whose strings may hold `{{NAME}}` placeholders,
//! plus the list of its variables. An [`Installation`] is a templatable server plus a value for
//! every variable. Credentials never live in a template: parsing moves every `env` and header
//! value into a variable value and leaves `{{KEY}}` in the template.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use tether_secret::SecretValue;

/// Who wrote a config, which decides the rules applied to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// Written by the user (inline spec, file, local installation): `${VAR}` expands from the
    /// process environment, and a secret may replace any captured value.
    User,
    /// Returned by the managed server (`mcpConfigJson`): no `${VAR}` expansion, and captured
    /// literal values are locked against local secrets.
    Managed,
    /// Built by tether from a registry entry (`tether add`, `tether setup-mcp`), and the local
    /// installations added that way: every value is literal — no `${VAR}`, `$VAR`, `{env:VAR}`
    /// or `${input:ID}` is read from anywhere — and the only `{{NAME}}` placeholders are the
    /// ones the builder put there for the entry's secret inputs (it refuses published text
    /// that would read as one). Captured values are not locked and not sensitive as a whole,
    /// as a user's are: the person's own stored values replace them.
    Registry,
}

/// How a remote server is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RemoteTransport {
    /// MCP Streamable HTTP (the default).
    #[default]
    StreamableHttp,
    /// The older HTTP + Server-Sent Events transport.
    Sse,
}

impl RemoteTransport {
    /// The `type` value Claude Code and Gemini CLI use for it (`http` or `sse`).
    pub fn type_name(self) -> &'static str {
        match self {
            RemoteTransport::StreamableHttp => "http",
            RemoteTransport::Sse => "sse",
        }
    }
}

/// A local process speaking MCP on stdin/stdout. Strings may hold placeholders.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StdioTemplate {
    /// The program to run (no shell).
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its environment; after parsing every value is `{{KEY}}` (a captured variable).
    pub env: IndexMap<String, String>,
    /// Its working directory.
    pub cwd: Option<String>,
}

/// A server reached over HTTP. Strings may hold placeholders.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteTemplate {
    /// The endpoint.
    pub url: String,
    /// Request headers; after parsing every value is `{{KEY}}` (a captured variable).
    pub headers: IndexMap<String, String>,
    /// Streamable HTTP or SSE.
    pub transport: RemoteTransport,
}

/// A server's launch description, before secrets are applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ServerTemplate {
    /// A stdio server.
    Stdio(StdioTemplate),
    /// A remote server.
    Remote(RemoteTemplate),
}

/// Where a variable was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VariableSource {
    /// An `env` entry whose value was captured.
    Env,
    /// A header whose value was captured.
    Header,
    /// A `{{NAME}}` placeholder in another field.
    Placeholder,
}

/// One variable of a templatable server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Variable {
    /// The name: an env or header key (any text), or a placeholder name.
    pub name: String,
    /// Where it was found.
    pub source: VariableSource,
}

/// What a config says about a server besides how to launch it: kept in the model
/// so that tether honours it and exports it to the formats that can express it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ServerOptions {
    /// `"disabled": true` (Windsurf, Cline, Roo, Claude Desktop): not started, reported as
    /// disabled, exported with the flag where the format has one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disabled: bool,
    /// Only these tools are offered (Gemini `includeTools`, Codex `enabled_tools`); `None`:
    /// all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_tools: Option<Vec<String>>,
    /// These tools are never offered (Gemini `excludeTools`, Codex `disabled_tools`); wins
    /// over `include_tools`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude_tools: Vec<String>,
    /// Tools the harness may call without asking (Roo/Cline `alwaysAllow`, Cline
    /// `autoApprove`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub always_allow: Vec<String>,
    /// Gemini's `trust`: the harness calls every tool without asking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust: Option<bool>,
    /// Per-request (tool call) timeout in milliseconds (Gemini/Claude `timeout`, Codex
    /// `tool_timeout_sec`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Startup timeout in milliseconds (Codex `startup_timeout_sec`/`startup_timeout_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_timeout_ms: Option<u64>,
    /// Names of environment variables a stdio server gets from tether's own environment,
    /// besides the short allowlist every server gets (`passEnv`, or `--pass-env NAME`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pass_env: Vec<String>,
    /// `"sandbox": MODE` (tether's own key): the sandbox this stdio server starts in —
    /// `none`, `default`, `strict` or a permission profile's path — unless `--sandbox` says
    /// otherwise for the whole run (see `specs/sandbox/TECH.md`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// `"alwaysLoad": true`: in the gateway's search mode (`tether serve --tool-mode`), every
    /// tool of this server is listed too, not only found. Only tether's gateway reads it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub always_load: bool,
    /// `"headersHelper"` (Claude Code's key) of a remote server: a program and its arguments
    /// whose stdout is a JSON object of headers, added to the server's own before each
    /// connection and run again before they expire or when the server answers 401. Run
    /// without a shell (a string is split into words as a shell would, nothing expanded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers_helper: Option<Vec<String>>,
    /// The config gave a remote `url` (or `serverUrl`) without a `type`: the launcher tries
    /// Streamable HTTP and falls back to the legacy SSE transport, as the MCP specification's
    /// backwards-compatibility section recommends. Not written back: a stored template says
    /// `"type": "http"`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub transport_guessed: bool,
    /// `"serves": {"url": URL, "type": "http"|"sse"}` (tether's own key) beside a `command`:
    /// the started process serves MCP over HTTP on a loopback port instead of stdio; the
    /// driver starts it, waits for the port and connects (`specs/registry/TECH.md`,
    /// HTTP-port packages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serves: Option<ServedUrl>,
}

/// Where a started stdio-shaped server serves MCP over HTTP: a loopback `http://` URL with
/// an explicit port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServedUrl {
    /// `http://127.0.0.1:PORT/PATH` (or `localhost`, `[::1]`).
    pub url: String,
    /// Streamable HTTP or SSE.
    #[serde(default)]
    pub transport: RemoteTransport,
    /// `"anyInterface": true`: the user lets the package listen on every interface
    /// (`0.0.0.0`, `::`), its tools reachable from the network; otherwise such a start is
    /// refused.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub any_interface: bool,
}

impl ServedUrl {
    /// `url` when it is `http://` on a loopback host with an explicit port and holds no
    /// placeholder; else what is wrong with it.
    pub fn check(url: &str) -> Result<(), &'static str> {
        let Some(rest) = url.strip_prefix("http://") else {
            return Err("must start with http:// (a started package serves on this machine)");
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
                (host, port)
            }
            _ => return Err("must name its port (http://127.0.0.1:PORT/…)"),
        };
        if !matches!(host, "127.0.0.1" | "localhost" | "[::1]") {
            return Err("must be on a loopback host (127.0.0.1, localhost or [::1])");
        }
        if port.parse::<u16>().map_or(true, |p| p == 0) {
            return Err("has a port outside 1..65535");
        }
        if url.contains("{{") || url.contains('{') {
            return Err("may not hold a placeholder");
        }
        Ok(())
    }

    /// Its port.
    pub fn port(&self) -> Option<u16> {
        self.address().rsplit(':').next()?.parse().ok()
    }

    /// The `host:port` to dial (`localhost` as `127.0.0.1`).
    pub fn address(&self) -> String {
        let rest = self.url.strip_prefix("http://").unwrap_or(&self.url);
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        authority.replacen("localhost", "127.0.0.1", 1)
    }
}

/// A named server template with its variables.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplatableServer {
    /// The server's name (unique within a run).
    pub name: String,
    /// The launch description.
    pub template: ServerTemplate,
    /// The variables, captured ones first, in document order.
    pub variables: Vec<Variable>,
    /// Options besides the launch description (a stored template without them has none).
    #[serde(default)]
    pub options: ServerOptions,
}

impl TemplatableServer {
    /// The variable names, in order.
    pub fn variable_names(&self) -> impl Iterator<Item = &str> {
        self.variables.iter().map(|v| v.name.as_str())
    }

    /// Whether `name` is one of the variables.
    pub fn has_variable(&self, name: &str) -> bool {
        self.variables.iter().any(|v| v.name == name)
    }

    /// The portable server JSON of the template (placeholders in place, no values), in the
    /// form [`crate::parse_config`] reads back.
    pub fn template_json(&self) -> Value {
        let mut server = self.launch_json();
        self.options.write_json(&mut server);
        server
    }

    fn launch_json(&self) -> Value {
        match &self.template {
            ServerTemplate::Stdio(stdio) => {
                let mut server = json!({
                    "command": stdio.command,
                    "args": stdio.args,
                    "env": stdio.env,
                });
                if let Some(cwd) = &stdio.cwd {
                    server["cwd"] = json!(cwd);
                }
                server
            }
            ServerTemplate::Remote(remote) => json!({
                "url": remote.url,
                "headers": remote.headers,
                "type": remote.transport.type_name(),
            }),
        }
    }
}

impl ServerOptions {
    /// Adds the options to a server object in tether's own JSON form (what
    /// [`crate::parse_config`] reads back): only those that differ from the default.
    pub fn write_json(&self, server: &mut Value) {
        if self.disabled {
            server["disabled"] = Value::Bool(true);
        }
        if let Some(include) = &self.include_tools {
            server["includeTools"] = json!(include);
        }
        if !self.exclude_tools.is_empty() {
            server["excludeTools"] = json!(self.exclude_tools);
        }
        if !self.always_allow.is_empty() {
            server["alwaysAllow"] = json!(self.always_allow);
        }
        if let Some(trust) = self.trust {
            server["trust"] = Value::Bool(trust);
        }
        if let Some(timeout) = self.timeout_ms {
            server["timeout"] = json!(timeout);
        }
        if let Some(timeout) = self.startup_timeout_ms {
            server["startup_timeout_ms"] = json!(timeout);
        }
        if !self.pass_env.is_empty() {
            server["passEnv"] = json!(self.pass_env);
        }
        if let Some(sandbox) = &self.sandbox {
            server["sandbox"] = json!(sandbox);
        }
        if self.always_load {
            server["alwaysLoad"] = Value::Bool(true);
        }
        if let Some(helper) = &self.headers_helper {
            server["headersHelper"] = json!(helper);
        }
    }

    /// Whether the config lets a run offer the tool `name`: not excluded, and included when
    /// an include list is given.
    pub fn allows_tool(&self, name: &str) -> bool {
        !self.exclude_tools.iter().any(|t| t == name)
            && self
                .include_tools
                .as_ref()
                .is_none_or(|include| include.iter().any(|t| t == name))
    }
}

/// A variable's value in an installation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VariableValue {
    /// The value; may itself hold `{{NAME}}` references rendered from the run's secrets.
    pub value: SecretValue,
    /// A locked value is never replaced by a local secret (server-issued literals).
    pub locked: bool,
}

impl VariableValue {
    /// An unlocked value.
    pub fn new(value: impl Into<SecretValue>) -> Self {
        Self {
            value: value.into(),
            locked: false,
        }
    }
}

/// A templatable server with its variable values: ready to render once secrets are known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installation {
    /// The template.
    pub server: TemplatableServer,
    /// Values by variable name. A variable without a value renders as its placeholder.
    pub values: IndexMap<String, VariableValue>,
    /// Which rules apply when rendering.
    pub origin: Origin,
}

impl Installation {
    /// The server's name.
    pub fn name(&self) -> &str {
        &self.server.name
    }

    /// Variables that have no value, in order.
    pub fn missing_variables(&self) -> Vec<&str> {
        self.server
            .variable_names()
            .filter(|name| !self.values.contains_key(*name))
            .collect()
    }
}

/// One server as parsed: its template and the values captured from the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedServer {
    /// The template.
    pub server: TemplatableServer,
    /// Values captured from `env` and header entries.
    pub captured: IndexMap<String, VariableValue>,
    /// Which rules apply.
    pub origin: Origin,
}

impl ParsedServer {
    /// The installation, when every variable has a captured value; `None` means the template
    /// needs values (e.g. an arg `--token={{API_TOKEN}}`).
    pub fn installation(&self) -> Option<Installation> {
        self.server
            .variable_names()
            .all(|name| self.captured.contains_key(name))
            .then(|| Installation {
                server: self.server.clone(),
                values: self.captured.clone(),
                origin: self.origin,
            })
    }

    /// The installation with every missing value synthesized as the literal `{{NAME}}`, so that
    /// rendering fills it from the run's secrets or leaves the placeholder in place.
    pub fn into_installation(self) -> Installation {
        let mut values = self.captured;
        let missing: Vec<&str> = self
            .server
            .variables
            .iter()
            .map(|v| v.name.as_str())
            .filter(|name| !values.contains_key(*name))
            .collect();
        // The `{{NAME}}` texts share one buffer: with thousands of them, a buffer each was two
        // allocations per variable and memory all over the heap for rendering to visit.
        let texts = SecretValue::placeholders(&missing);
        values.reserve(missing.len());
        for (name, value) in missing.iter().zip(texts) {
            values.insert((*name).to_owned(), VariableValue::new(value));
        }
        Installation {
            server: self.server,
            values,
            origin: self.origin,
        }
    }
}
