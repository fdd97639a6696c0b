//! Third-party harness formats: rendered MCP servers written the way Claude Code, Codex,
//! Gemini CLI, opencode, GitHub Copilot CLI, VS Code, Cursor, Claude Desktop, Windsurf, Zed,
//! Goose and Antigravity read them.
//!
//! Every harness and format is one row of [`HARNESSES`] (name, program names, config file,
//! secret references, how a run hands it the servers) plus its layout in a format module.
//!
//! Two uses:
//! - [`export`]: the whole config as text, with real or masked values (`tether export`);
//! - [`export_with_references`]: the config with every sensitive value replaced by a reference
//!   to an environment variable the harness expands, plus the variables to set — so a run can
//!   hand the harness its servers with no secret in the file (`tether run -- claude …`). It
//!   returns the config as a structure ([`ServersConfig`]); the caller renders it to text once.
//!
//! ```
//! use tether_config::{parse_config, EmptyEnv, Exposure, Origin, Secrets};
//! use tether_harness::{export, Format};
//!
//! let parsed = parse_config(r#"{"gh":{"command":"npx","env":{"TOKEN":"{{T}}"}}}"#, Origin::User)?;
//! let secrets: Secrets = [("T", "s3cret")].into_iter().collect();
//! let servers: Vec<_> = parsed.servers.into_iter()
//!     .map(|s| s.into_installation().render(&secrets, &EmptyEnv)).collect();
//! let text = export(&servers, Format::Claude, Exposure::Masked)?;
//! assert!(text.contains(r#""TOKEN": "********""#));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **Invariant:** this crate does no I/O: it turns rendered servers into configs and variables;
//! the CLI decides where they go.

#![deny(missing_docs)]

mod codex;
mod json_formats;
mod table;

use std::fmt;

use tether_config::{Exposure, RenderedServer, RenderedText, SecretValue};

pub use table::{
    ConfigPlace, Delivery, Expansion, FolderTrust, HARNESSES, Harness, OwnConfig, References, Run,
    Strict, Syntax, TrustInputs, TrustVerdict, detect,
};

/// An output format: a key into [`HARNESSES`], whose row describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// tether's portable JSON: `{"mcpServers": {name: {command,args,env[,cwd]} | {url,headers,type}}}`.
    Json,
    /// Claude Code (`--mcp-config`, `.mcp.json`).
    Claude,
    /// Codex CLI (`config.toml`, `[mcp_servers.NAME]`).
    Codex,
    /// Gemini CLI (`settings.json`, `mcpServers`).
    Gemini,
    /// opencode (`opencode.json`, `mcp`).
    Opencode,
    /// VS Code (`.vscode/mcp.json`, `servers`).
    Vscode,
    /// Cursor (`.cursor/mcp.json`, `mcpServers`).
    Cursor,
    /// GitHub Copilot CLI (`$COPILOT_HOME/mcp-config.json`, `mcpServers`).
    Copilot,
    /// Claude Desktop (`claude_desktop_config.json`, `mcpServers`, local servers only).
    ClaudeDesktop,
    /// Windsurf (`~/.codeium/windsurf/mcp_config.json`, `mcpServers`, `serverUrl`).
    Windsurf,
    /// Zed (`settings.json`, `context_servers`).
    Zed,
    /// Goose (`~/.config/goose/config.yaml`, `extensions`).
    Goose,
    /// Antigravity (`~/.gemini/antigravity/mcp_config.json`, `mcpServers`, `serverUrl`).
    Antigravity,
}

impl Format {
    /// How many formats there are (checked against [`HARNESSES`] when the crate compiles).
    pub const COUNT: usize = 13;

    /// Every format, in the order help text lists them.
    pub fn all() -> impl Iterator<Item = Format> {
        HARNESSES.iter().map(|h| h.format)
    }

    /// The format's row in [`HARNESSES`].
    pub const fn harness(self) -> &'static Harness {
        // In range and in order: checked at compile time in `table.rs`.
        &HARNESSES[self as usize]
    }

    /// The format's name on the command line.
    pub const fn name(self) -> &'static str {
        self.harness().name
    }

    /// The format named `name` on the command line.
    pub fn from_name(name: &str) -> Option<Format> {
        HARNESSES.iter().find(|h| h.name == name).map(|h| h.format)
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a config cannot be written in a format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HarnessError {
    /// The harness cannot express something a server needs (e.g. SSE for Codex). The user
    /// should use another harness for that server or drop it.
    #[error("MCP server '{server}': {harness} cannot {what}")]
    Unsupported {
        /// The server.
        server: String,
        /// The harness.
        harness: Format,
        /// What it cannot do.
        what: String,
    },
    /// `--no-secrets-on-disk` was asked, but this field can only be written inline.
    #[error(
        "MCP server '{server}': {harness} cannot read '{field}' from the environment, so its secret would have to be written to a (private, temporary) file; drop --no-secrets-on-disk to allow that"
    )]
    SecretWouldBeOnDisk {
        /// The server.
        server: String,
        /// The harness.
        harness: Format,
        /// The field (e.g. `args[1]`).
        field: String,
    },
    /// A sensitive value holds text the harness rewrites when it reads its config (its
    /// [`Expansion`]) and the format has no escape for it, so written with real values it would
    /// arrive changed. The user should hand the servers over with `tether run` (or export the
    /// gateway), which writes no value into the file.
    #[error(
        "MCP server '{server}': the value of {field} holds text that {harness} rewrites when it reads its config ({syntax}), and {harness} has no escape for it, so it would arrive changed; {remedy}"
    )]
    WouldExpand {
        /// The server.
        server: String,
        /// The harness.
        harness: Format,
        /// The field (`env.API_TOKEN`, `headers.Authorization`, `args[1]`); never the value.
        field: String,
        /// What the harness expands ([`Expansion::syntax`]).
        syntax: &'static str,
        /// What to do instead.
        remedy: String,
    },
    /// The user's own config file (read by the caller for [`ServersConfig::merged_into`])
    /// does not parse. The user should fix or move that file.
    #[error("cannot read your {title} {file}: {message}")]
    UserConfig {
        /// The harness's title ("Gemini CLI").
        title: &'static str,
        /// The file's name.
        file: &'static str,
        /// The parser's message.
        message: String,
    },
}

/// A config built for one format, not yet written as text: render it once with
/// [`ServersConfig::to_text`] or [`ServersConfig::merged_into`].
#[derive(Clone, PartialEq)]
pub struct ServersConfig {
    format: Format,
    document: Document,
    notes: Vec<String>,
    masked: usize,
    /// Whether the text is written with the format's escape ([`Expansion::escape_text`]):
    /// set when a real value holds text the harness would expand.
    escaped: bool,
}

/// The config's document.
#[derive(Clone, PartialEq)]
enum Document {
    Json(serde_json::Value),
    Toml(toml::Table),
}

impl fmt::Debug for ServersConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The document may hold real values: never printed.
        f.debug_struct("ServersConfig")
            .field("format", &self.format)
            .finish_non_exhaustive()
    }
}

impl ServersConfig {
    /// The format it was built for.
    pub fn format(&self) -> Format {
        self.format
    }

    /// What the config says that the format cannot express, one line each, naming servers
    /// and fields (never values): for the user's stderr. Empty when nothing was lost.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// How many fields were written masked (`********` in place of a secret, an environment
    /// value, a server-issued value, a credential-named entry or a URL's password): 0 unless
    /// built by [`export_config`] with [`Exposure::Masked`].
    pub fn masked(&self) -> usize {
        self.masked
    }

    /// The whole config as the harness reads it.
    pub fn to_text(&self) -> String {
        let text = match &self.document {
            // A pretty-printed serde_json value is always valid JSON, whatever the values hold.
            Document::Json(value) => serde_json::to_string_pretty(value).unwrap_or_default() + "\n",
            Document::Toml(table) => toml::to_string(table).unwrap_or_default(),
        };
        if self.escaped {
            self.format.harness().expansion.escape_text(&text)
        } else {
            text
        }
    }

    /// `user_text` (the user's own config file for this format, if any) with this config's
    /// servers in place of theirs and everything else kept.
    pub fn merged_into(&self, user_text: Option<&str>) -> Result<String, HarnessError> {
        let harness = self.format.harness();
        let key = harness.servers_key;
        let unreadable = |message: String| HarnessError::UserConfig {
            title: harness.title,
            file: harness.config_file,
            message,
        };
        match &self.document {
            Document::Json(ours) => {
                let mut user: serde_json::Value = match user_text {
                    Some(text) => {
                        serde_json::from_str(text).map_err(|e| unreadable(e.to_string()))?
                    }
                    None => serde_json::json!({}),
                };
                if !user.is_object() {
                    user = serde_json::json!({});
                }
                user[key] = ours[key].clone();
                Ok(serde_json::to_string_pretty(&user).unwrap_or_default())
            }
            Document::Toml(ours) => {
                let mut user: toml::Table = match user_text {
                    Some(text) => {
                        toml::from_str(text).map_err(|e| unreadable(e.message().to_owned()))?
                    }
                    None => toml::Table::new(),
                };
                if let Some(servers) = ours.get(key) {
                    user.insert(key.to_owned(), servers.clone());
                }
                Ok(toml::to_string(&user).unwrap_or_default())
            }
        }
    }

    /// Writes VS Code's `inputs` array (before `servers`): one `promptString` entry per input
    /// with its id, its description when it had one, and `password: true` (tether treats every
    /// `${input:ID}` as a secret, so VS Code hides what is typed). The servers must already
    /// hold `${input:ID}` where the values go (see `RenderedServer::declassify`). Only the VS
    /// Code format has prompts (its row's `input_prompts`); for any other this does nothing.
    pub fn set_inputs(&mut self, inputs: &[tether_config::InputPrompt]) {
        let Document::Json(root) = &mut self.document else {
            return;
        };
        if !self.format.harness().input_prompts || inputs.is_empty() {
            return;
        }
        let entries: Vec<serde_json::Value> = inputs
            .iter()
            .map(|input| {
                let mut entry = serde_json::json!({"type": "promptString", "id": input.id});
                if let Some(description) = &input.description {
                    entry["description"] = description.clone().into();
                }
                entry["password"] = true.into();
                entry
            })
            .collect();
        let mut ordered = serde_json::Map::new();
        ordered.insert("inputs".into(), entries.into());
        if let Some(old) = root.as_object_mut() {
            ordered.extend(std::mem::take(old));
        }
        *root = serde_json::Value::Object(ordered);
    }

    /// Sets `name = value` in the environment of every stdio server that does not set `name`
    /// already.
    pub fn set_default_stdio_env(&mut self, name: &str, value: &str) {
        let key = self.format.harness().servers_key;
        match &mut self.document {
            Document::Json(root) => {
                let env_key = json_formats::stdio_env_key(self.format);
                if let Some(servers) = root[key].as_object_mut() {
                    for server in servers.values_mut() {
                        if server.get("command").is_some() && server[env_key].get(name).is_none() {
                            server[env_key][name] = serde_json::Value::String(value.to_owned());
                        }
                    }
                }
            }
            Document::Toml(root) => {
                let servers = root.get_mut(key).and_then(toml::Value::as_table_mut);
                for server in servers
                    .into_iter()
                    .flat_map(|s| s.iter_mut().map(|(_, v)| v))
                {
                    let Some(server) = server.as_table_mut() else {
                        continue;
                    };
                    if !server.contains_key("command") {
                        continue;
                    }
                    let env = server
                        .entry("env")
                        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                    if let Some(env) = env.as_table_mut()
                        && !env.contains_key(name)
                    {
                        env.insert(name.to_owned(), toml::Value::String(value.to_owned()));
                    }
                }
            }
        }
    }
}

/// The result of [`export_with_references`].
pub struct ReferencedExport {
    /// The config. Holds no sensitive value unless `inlined` is not empty.
    pub config: ServersConfig,
    /// Environment variables the harness process must get: name → value.
    pub env: Vec<(String, SecretValue)>,
    /// Fields whose secret had to be written into `config` (the harness cannot reference
    /// them): `server: field`. Empty unless the harness lacks references for some field.
    pub inlined: Vec<String>,
}

impl fmt::Debug for ReferencedExport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReferencedExport")
            .field("config", &self.config)
            .field("env", &self.env.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .field("inlined", &self.inlined)
            .finish()
    }
}

/// How field values are written while building a JSON config.
pub(crate) enum Values<'a> {
    /// Real or masked values.
    Show(Shown),
    /// Sensitive values become references; the values are collected.
    Refer {
        syntax: ReferenceSyntax,
        env: &'a mut Vec<(String, SecretValue)>,
    },
}

/// How references are written in a JSON config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReferenceSyntax {
    /// `${NAME}`.
    Dollar,
    /// `{env:NAME}`.
    OpencodeEnv,
}

/// Values written as they are or masked, and what writing them found.
pub(crate) struct Shown {
    exposure: Exposure,
    /// What the harness expands in the values of its file.
    expansion: Expansion,
    /// How many fields were written masked.
    masked: usize,
    /// Whether a real value holds text the harness expands and the format escapes.
    escape: bool,
    /// The first field whose real value holds text the harness expands and the format
    /// cannot escape.
    unescapable: Option<String>,
    /// The current server's `${VAR}` references tether left as the user wrote them (the
    /// variable unset): meant for whoever reads the config next, so not counted.
    left_as_written: Vec<String>,
}

impl Shown {
    pub(crate) fn new(exposure: Exposure, format: Format) -> Self {
        Self {
            exposure,
            expansion: format.harness().expansion,
            masked: 0,
            escape: false,
            unescapable: None,
            left_as_written: Vec::new(),
        }
    }

    /// Starts `server`: its references left as written (`${VAR}`, `${env:VAR}`, `$VAR`,
    /// `{env:VAR}` of an unset VAR) are the user's, for the harness to expand.
    pub(crate) fn start_server(&mut self, server: &RenderedServer) {
        self.left_as_written = server
            .unset_env_vars()
            .iter()
            .flat_map(|name| {
                [
                    format!("${{{name}}}"),
                    format!("${{env:{name}}}"),
                    format!("{{env:{name}}}"),
                    format!("${name}"),
                ]
            })
            .collect();
    }

    /// Whether the harness would rewrite something in `value` other than the references
    /// the user wrote and tether left as written.
    fn expands(&self, value: &str) -> bool {
        if self.left_as_written.is_empty() {
            return self.expansion.expands(value);
        }
        let mut rest = value.to_owned();
        for reference in &self.left_as_written {
            rest = rest.replace(reference.as_str(), "");
        }
        self.expansion.expands(&rest)
    }

    /// The refusal for `server` if one of its real values cannot be written intact; takes
    /// the finding, so the next server starts clean.
    pub(crate) fn refusal(&mut self, server: &str, format: Format) -> Option<HarnessError> {
        let field = self.unescapable.take()?;
        let harness = format.harness();
        let remedy = match harness.run {
            Some(_) => format!(
                "hand the servers over with `tether run -- {format} …`, or write `tether export --gateway --format {format}`: neither puts a value in the file"
            ),
            None => format!(
                "write `tether export --gateway --format {format}`, which puts no value in the file, or run the servers with `tether run`"
            ),
        };
        Some(HarnessError::WouldExpand {
            server: server.to_owned(),
            harness: format,
            field,
            syntax: harness.expansion.syntax(),
            remedy,
        })
    }
}

impl Values<'_> {
    /// The text for one field (`field` names it in a refusal: `env.TOKEN`, never a value).
    pub(crate) fn write(&mut self, field: impl FnOnce() -> String, text: &RenderedText) -> String {
        match self {
            Values::Show(shown) => {
                if shown.exposure == Exposure::Masked && text.is_sensitive() {
                    shown.masked += 1;
                }
                let value = text.show(shown.exposure);
                // A value the user wrote in plain text may use the harness's variables on
                // purpose (`${workspaceFolder}`); one from a secret, the environment or a
                // managed server must arrive as it is.
                if shown.exposure == Exposure::Real && text.is_sensitive() && shown.expands(&value)
                {
                    if shown.expansion.has_escape() {
                        shown.escape = true;
                    } else if shown.unescapable.is_none() {
                        shown.unescapable = Some(field());
                    }
                }
                value
            }
            Values::Refer { syntax, env } => {
                let exposed = text.expose();
                if !text.is_sensitive() && !syntax.would_expand(&exposed) {
                    return exposed;
                }
                // Sensitive values, and plain ones the harness would otherwise expand, go
                // through the environment.
                let name = format!("TETHER_SECRET_{}", env.len() + 1);
                let value = match syntax {
                    ReferenceSyntax::Dollar => exposed,
                    // opencode pastes `{env:…}` text into the JSON before parsing it: the
                    // variable holds the JSON-escaped form so the parsed value is exact.
                    ReferenceSyntax::OpencodeEnv => json_escaped(&exposed),
                };
                env.push((name.clone(), SecretValue::new(value)));
                match syntax {
                    ReferenceSyntax::Dollar => format!("${{{name}}}"),
                    ReferenceSyntax::OpencodeEnv => format!("{{env:{name}}}"),
                }
            }
        }
    }
}

impl ReferenceSyntax {
    /// Whether the harness would rewrite `text` on its own: `$NAME`/`${NAME}` for Claude Code and
    /// Gemini CLI, `{env:…}`/`{file:…}` for opencode.
    fn would_expand(self, text: &str) -> bool {
        match self {
            ReferenceSyntax::Dollar => text.contains('$'),
            ReferenceSyntax::OpencodeEnv => text.contains("{env:") || text.contains("{file:"),
        }
    }
}

/// `text` as the inside of a JSON string literal (no surrounding quotes).
fn json_escaped(text: &str) -> String {
    let quoted = serde_json::Value::String(text.to_owned()).to_string();
    quoted[1..quoted.len() - 1].to_owned()
}

/// An HTTP-port package (`"serves"`) in `servers`: no harness format can say "start this,
/// then connect to its port", so it is refused rather than written as a stdio server that
/// would never answer on stdin.
fn refuse_served(servers: &[RenderedServer], format: Format) -> Result<(), HarnessError> {
    match servers.iter().find(|s| s.options.serves.is_some()) {
        Some(server) => Err(HarnessError::Unsupported {
            server: server.name.clone(),
            harness: format,
            what: "start a package and then connect to the HTTP port it serves on (\"serves\"); export with --gateway, whose gateway does".to_owned(),
        }),
        None => Ok(()),
    }
}

/// The config for `servers` in `format`, with real or masked values, as a structure.
pub fn export_config(
    servers: &[RenderedServer],
    format: Format,
    exposure: Exposure,
) -> Result<ServersConfig, HarnessError> {
    refuse_served(servers, format)?;
    let mut notes = Vec::new();
    let masked;
    let mut escaped = false;
    let document = match format.harness().syntax {
        Syntax::Toml => {
            let mut values = codex::CodexValues::Show(exposure, 0);
            let built = codex::config(servers, &mut values)?;
            notes = built.notes;
            masked = values.masked();
            Document::Toml(built.table)
        }
        Syntax::Json => {
            let mut values = Values::Show(Shown::new(exposure, format));
            let document = json_formats::config(servers, format, &mut values, &mut notes)?;
            (masked, escaped) = match values {
                Values::Show(shown) => (shown.masked, shown.escape),
                Values::Refer { .. } => (0, false),
            };
            Document::Json(document)
        }
    };
    Ok(ServersConfig {
        format,
        document,
        notes,
        masked,
        escaped,
    })
}

/// A server option, by the name users know it by (Gemini's, or Roo's for `alwaysAllow`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ServerOption {
    IncludeTools,
    ExcludeTools,
    AlwaysAllow,
    Trust,
    Timeout,
    StartupTimeout,
    PassEnv,
    HeadersHelper,
}

impl ServerOption {
    fn name(self) -> &'static str {
        match self {
            ServerOption::IncludeTools => "includeTools",
            ServerOption::ExcludeTools => "excludeTools",
            ServerOption::AlwaysAllow => "alwaysAllow",
            ServerOption::Trust => "trust",
            ServerOption::Timeout => "timeout",
            ServerOption::StartupTimeout => "startup timeout",
            ServerOption::PassEnv => "passEnv",
            ServerOption::HeadersHelper => "headersHelper",
        }
    }

    /// The options `server` sets, in a fixed order.
    pub(crate) fn set_in(options: &tether_config::ServerOptions) -> Vec<ServerOption> {
        [
            (options.include_tools.is_some(), ServerOption::IncludeTools),
            (
                !options.exclude_tools.is_empty(),
                ServerOption::ExcludeTools,
            ),
            (!options.always_allow.is_empty(), ServerOption::AlwaysAllow),
            (options.trust.is_some(), ServerOption::Trust),
            (options.timeout_ms.is_some(), ServerOption::Timeout),
            (
                options.startup_timeout_ms.is_some(),
                ServerOption::StartupTimeout,
            ),
            (!options.pass_env.is_empty(), ServerOption::PassEnv),
            (
                options.headers_helper.is_some(),
                ServerOption::HeadersHelper,
            ),
        ]
        .into_iter()
        .filter_map(|(set, option)| set.then_some(option))
        .collect()
    }
}

/// The note for options a format cannot express, or `None` when there are none.
pub(crate) fn left_out_options(
    server: &str,
    format: Format,
    options: &[ServerOption],
) -> Option<String> {
    if options.is_empty() {
        return None;
    }
    let names: Vec<&str> = options.iter().map(|o| o.name()).collect();
    Some(format!(
        "MCP server '{server}': {format} has no place for {}: left out of the {format} config",
        names.join(", ")
    ))
}

/// The note for a disabled server left out of a format that has no flag for it.
pub(crate) fn left_out_disabled(server: &str, format: Format) -> String {
    format!(
        "MCP server '{server}' is disabled and {format} has no flag for that: left out of the {format} config"
    )
}

/// The config text for `servers` in `format`, with real or masked values.
pub fn export(
    servers: &[RenderedServer],
    format: Format,
    exposure: Exposure,
) -> Result<String, HarnessError> {
    export_config(servers, format, exposure).map(|config| config.to_text())
}

/// The config for `servers` in `format` with every sensitive value replaced by a reference to
/// an environment variable the harness expands, and those variables. Formats whose harness
/// cannot expand references in some field (Codex args, say) write that value inline and list
/// it in [`ReferencedExport::inlined`]; with `forbid_inline` that is an error instead.
pub fn export_with_references(
    servers: &[RenderedServer],
    format: Format,
    forbid_inline: bool,
) -> Result<ReferencedExport, HarnessError> {
    refuse_served(servers, format)?;
    let mut env = Vec::new();
    let syntax = match format.harness().references {
        References::CodexEnvNames => {
            let mut values = codex::CodexValues::Refer {
                env: &mut env,
                forbid_inline,
            };
            let built = codex::config(servers, &mut values)?;
            return Ok(ReferencedExport {
                config: ServersConfig {
                    format,
                    document: Document::Toml(built.table),
                    notes: built.notes,
                    masked: 0,
                    escaped: false,
                },
                env,
                inlined: built.inlined,
            });
        }
        References::Dollar => ReferenceSyntax::Dollar,
        References::OpencodeEnv => ReferenceSyntax::OpencodeEnv,
    };
    let mut values = Values::Refer {
        syntax,
        env: &mut env,
    };
    let mut notes = Vec::new();
    let document = Document::Json(json_formats::config(
        servers,
        format,
        &mut values,
        &mut notes,
    )?);
    Ok(ReferencedExport {
        config: ServersConfig {
            format,
            document,
            notes,
            masked: 0,
            escaped: false,
        },
        env,
        inlined: Vec::new(),
    })
}
