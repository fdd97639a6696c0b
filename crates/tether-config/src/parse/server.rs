//! One server's entry, from its JSON fields to a validated [`TemplatableServer`]: the fields
//! read and checked ([`ServerFields`]), the transport chosen, placeholders found, and the
//! template built.

use indexmap::IndexMap;
use uuid::Uuid;

use super::{
    ConfigWarning, OPTION_KEYS, ParsedConfig, ServerReference, URL_KEYS, input_references, unique,
};
use crate::error::ConfigError;
use crate::json::Json;
use crate::model::{
    Origin, ParsedServer, RemoteTemplate, RemoteTransport, ServedUrl, ServerOptions,
    ServerTemplate, StdioTemplate, TemplatableServer, Variable, VariableSource, VariableValue,
};
use crate::placeholder::{Segment, has_placeholders, placeholder, segments};

/// The kind a `type` or `transport` field asks for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum DeclaredKind {
    Stdio,
    Remote(RemoteTransport),
}

fn declared_kind(server: &str, field: &str, value: &Json) -> Result<DeclaredKind, ConfigError> {
    let Json::String(text) = value else {
        return Err(ConfigError::field(
            server,
            field,
            format!("must be a string, found {}", value.kind()),
        ));
    };
    match text.as_str() {
        "stdio" => Ok(DeclaredKind::Stdio),
        "http" | "streamable-http" | "streamable_http" | "streamableHttp" => {
            Ok(DeclaredKind::Remote(RemoteTransport::StreamableHttp))
        }
        "sse" => Ok(DeclaredKind::Remote(RemoteTransport::Sse)),
        // opencode's kinds; its remote servers speak Streamable HTTP.
        "local" => Ok(DeclaredKind::Stdio),
        "remote" => Ok(DeclaredKind::Remote(RemoteTransport::StreamableHttp)),
        _ => Err(ConfigError::field(
            server,
            field,
            "must be one of \"stdio\", \"http\", \"streamable-http\", \"sse\", \"local\" or \"remote\"",
        )),
    }
}

/// Reads the fields of one server object. `single` allows a `name` field.
struct ServerFields<'a> {
    name: &'a str,
    entries: &'a [(String, Json)],
}

impl<'a> ServerFields<'a> {
    fn get(&self, key: &str) -> Result<Option<&'a Json>, ConfigError> {
        unique(self.entries, key)
            .map_err(|key| ConfigError::field(self.name, key, "appears twice in the server object"))
    }

    /// An optional field; JSON `null` counts as absent.
    fn optional(&self, key: &str) -> Result<Option<&'a Json>, ConfigError> {
        Ok(self.get(key)?.filter(|v| !matches!(v, Json::Null)))
    }

    fn non_empty_string(&self, key: &str, value: &'a Json) -> Result<String, ConfigError> {
        match value {
            Json::String(s) if !s.trim().is_empty() => Ok(s.clone()),
            Json::String(_) => Err(ConfigError::field(
                self.name,
                key,
                "must be a non-empty string",
            )),
            other => Err(ConfigError::field(
                self.name,
                key,
                format!("must be a non-empty string, found {}", other.kind()),
            )),
        }
    }

    fn string_array(&self, key: &str) -> Result<Vec<String>, ConfigError> {
        match self.optional(key)? {
            None => Ok(Vec::new()),
            Some(Json::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Json::String(s) => Ok(s.clone()),
                    other => Err(ConfigError::field(
                        self.name,
                        format!("{key}[{i}]"),
                        format!(
                            "must be a string, found {} ({key} is an array of strings)",
                            other.kind()
                        ),
                    )),
                })
                .collect(),
            Some(other) => Err(ConfigError::field(
                self.name,
                key,
                format!("must be an array of strings, found {}", other.kind()),
            )),
        }
    }

    fn string_map(&self, key: &str) -> Result<IndexMap<String, String>, ConfigError> {
        match self.optional(key)? {
            None => Ok(IndexMap::new()),
            Some(Json::Object(entries)) => {
                let mut map = IndexMap::with_capacity(entries.len());
                for (k, v) in entries {
                    let Json::String(value) = v else {
                        return Err(ConfigError::field(
                            self.name,
                            format!("{key}.{k}"),
                            format!(
                                "must be a string, found {} ({key} maps names to strings)",
                                v.kind()
                            ),
                        ));
                    };
                    if map.insert(k.clone(), value.clone()).is_some() {
                        return Err(ConfigError::field(
                            self.name,
                            key,
                            format!("has the key '{k}' twice"),
                        ));
                    }
                }
                Ok(map)
            }
            Some(other) => Err(ConfigError::field(
                self.name,
                key,
                format!("must be an object of string values, found {}", other.kind()),
            )),
        }
    }

    /// The map under whichever of two spellings is present (`env`/`environment`,
    /// `headers`/`http_headers`); both present is an error.
    fn either_map(
        &self,
        first: &str,
        second: &str,
    ) -> Result<IndexMap<String, String>, ConfigError> {
        let (a, b) = (self.optional(first)?, self.optional(second)?);
        match (a, b) {
            (Some(_), Some(_)) => Err(ConfigError::server(
                self.name,
                format!("has both '{first}' and '{second}'; keep one"),
            )),
            (None, Some(_)) => self.string_map(second),
            _ => self.string_map(first),
        }
    }

    fn boolean(&self, key: &str) -> Result<Option<bool>, ConfigError> {
        match self.optional(key)? {
            None => Ok(None),
            Some(Json::Bool(value)) => Ok(Some(*value)),
            Some(other) => Err(ConfigError::field(
                self.name,
                key,
                format!("must be true or false, found {}", other.kind()),
            )),
        }
    }

    /// A non-negative number of `unit` milliseconds (1 for ms, 1000 for seconds), as whole
    /// milliseconds.
    fn millis(&self, key: &str, unit: f64) -> Result<Option<u64>, ConfigError> {
        match self.optional(key)? {
            None => Ok(None),
            Some(Json::Number(number)) => match number.as_f64() {
                Some(value) if value >= 0.0 && (value * unit) < u64::MAX as f64 => {
                    Ok(Some((value * unit).round() as u64))
                }
                _ => Err(ConfigError::field(
                    self.name,
                    key,
                    "must be a non-negative number",
                )),
            },
            Some(other) => Err(ConfigError::field(
                self.name,
                key,
                format!("must be a number, found {}", other.kind()),
            )),
        }
    }

    /// The value of whichever of two spellings is present; both present is an error.
    fn either<T>(
        &self,
        (first, a): (&str, Option<T>),
        (second, b): (&str, Option<T>),
    ) -> Result<Option<T>, ConfigError> {
        match (a, b) {
            (Some(_), Some(_)) => Err(ConfigError::server(
                self.name,
                format!("has both '{first}' and '{second}'; keep one"),
            )),
            (a, b) => Ok(a.or(b)),
        }
    }

    /// A string array when the key is present, `None` when absent.
    fn present_array(&self, key: &str) -> Result<Option<Vec<String>>, ConfigError> {
        Ok(match self.optional(key)? {
            None => None,
            Some(_) => Some(self.string_array(key)?),
        })
    }

    /// The server's options (see [`OPTION_KEYS`]); each tool's spelling is read, and two
    /// spellings of one option in one server are an error.
    fn options(&self, opencode: bool) -> Result<ServerOptions, ConfigError> {
        let disabled = self.either(
            ("disabled", self.boolean("disabled")?),
            ("enabled", self.boolean("enabled")?.map(|enabled| !enabled)),
        )?;
        let include_tools = self.either(
            ("includeTools", self.present_array("includeTools")?),
            ("enabled_tools", self.present_array("enabled_tools")?),
        )?;
        // GitHub Copilot CLI's `tools`: the tools to offer, `["*"]` (all) being no filter.
        let copilot_tools = self
            .present_array("tools")?
            .filter(|tools| tools.as_slice() != ["*"]);
        let include_tools =
            self.either(("includeTools", include_tools), ("tools", copilot_tools))?;
        let exclude_tools = self.either(
            ("excludeTools", self.present_array("excludeTools")?),
            ("disabled_tools", self.present_array("disabled_tools")?),
        )?;
        let mut always_allow = self.string_array("alwaysAllow")?;
        for tool in self.string_array("autoApprove")? {
            if !always_allow.contains(&tool) {
                always_allow.push(tool);
            }
        }
        let timeout = self.millis("timeout", 1.0)?;
        let (request_timeout, startup_timeout) = if opencode {
            (None, timeout)
        } else {
            (timeout, None)
        };
        let timeout_ms = self.either(
            ("timeout", request_timeout),
            ("tool_timeout_sec", self.millis("tool_timeout_sec", 1000.0)?),
        )?;
        let startup_timeout_ms = self.either(
            (
                "startup_timeout_sec",
                self.millis("startup_timeout_sec", 1000.0)?,
            ),
            (
                "startup_timeout_ms",
                self.millis("startup_timeout_ms", 1.0)?,
            ),
        )?;
        let startup_timeout_ms = self.either(
            ("timeout", startup_timeout),
            ("startup_timeout_sec", startup_timeout_ms),
        )?;
        Ok(ServerOptions {
            disabled: disabled.unwrap_or(false),
            include_tools,
            exclude_tools: exclude_tools.unwrap_or_default(),
            always_allow,
            trust: self.boolean("trust")?,
            timeout_ms,
            startup_timeout_ms,
            pass_env: self.string_array("passEnv")?,
            sandbox: self
                .optional("sandbox")?
                .map(|value| self.non_empty_string("sandbox", value))
                .transpose()?,
            always_load: self.boolean("alwaysLoad")?.unwrap_or(false),
            headers_helper: None,
            transport_guessed: false,
            serves: self.serves()?,
        })
    }

    /// A remote server's `headersHelper`: an array of words (a program and its arguments) or,
    /// as Claude Code writes it, one string, split into words as a shell would but with nothing
    /// expanded. No shell runs it, so a string using a shell's operators is refused.
    fn headers_helper(&self) -> Result<Option<Vec<String>>, ConfigError> {
        const KEY: &str = "headersHelper";
        let words = match self.optional(KEY)? {
            None => return Ok(None),
            Some(Json::Array(_)) => self.string_array(KEY)?,
            Some(value) => {
                let line = self.non_empty_string(KEY, value)?;
                shlex::split(&line).ok_or_else(|| {
                    ConfigError::field(self.name, KEY, "has an unclosed quote or a trailing '\\'")
                })?
            }
        };
        const OPERATORS: [&str; 9] = ["|", "||", "&&", "&", ";", ">", ">>", "<", "2>"];
        if let Some(operator) = words.iter().find(|w| OPERATORS.contains(&w.as_str())) {
            return Err(ConfigError::field(
                self.name,
                KEY,
                format!(
                    "runs without a shell, so '{operator}' would be an argument; put the command line in a script and name the script"
                ),
            ));
        }
        match words.first() {
            Some(program) if !program.trim().is_empty() => Ok(Some(words)),
            _ => Err(ConfigError::field(self.name, KEY, "must name a program")),
        }
    }

    /// `"serves": {"url": URL, "type": "http"|"streamable-http"|"sse", "anyInterface": BOOL}`.
    fn serves(&self) -> Result<Option<ServedUrl>, ConfigError> {
        let Some(value) = self.optional("serves")? else {
            return Ok(None);
        };
        let bad = |problem: String| ConfigError::field(self.name, "serves", problem);
        let Json::Object(entries) = value else {
            return Err(bad(format!("must be an object, not {}", value.kind())));
        };
        let (mut url, mut transport) = (None, RemoteTransport::StreamableHttp);
        let mut any_interface = false;
        for (key, value) in entries {
            match (key.as_str(), value) {
                ("url", Json::String(text)) => url = Some(text.clone()),
                ("type", Json::String(kind)) => {
                    transport = match kind.as_str() {
                        "http" | "streamable-http" | "streamableHttp" => {
                            RemoteTransport::StreamableHttp
                        }
                        "sse" => RemoteTransport::Sse,
                        _ => return Err(bad("type must be \"http\" or \"sse\"".to_owned())),
                    }
                }
                ("anyInterface", Json::Bool(allowed)) => any_interface = *allowed,
                _ => {
                    return Err(bad(format!(
                        "has {key:?}; it takes \"url\", \"type\" and \"anyInterface\" (true or false)"
                    )));
                }
            }
        }
        let url = url.ok_or_else(|| bad("needs a \"url\"".to_owned()))?;
        ServedUrl::check(&url).map_err(|why| bad(format!("url {why}")))?;
        Ok(Some(ServedUrl {
            url,
            transport,
            any_interface,
        }))
    }

    fn warn_unknown(&self, known: &[&str], parsed: &mut ParsedConfig) {
        for (key, _) in self.entries {
            if !known.contains(&key.as_str()) {
                parsed.warnings.push(ConfigWarning::UnknownField {
                    server: self.name.to_owned(),
                    field: key.clone(),
                });
            }
        }
    }
}

pub(super) fn parse_server(
    name: &str,
    entries: &[(String, Json)],
    origin: Origin,
    single: bool,
    parsed: &mut ParsedConfig,
) -> Result<(), ConfigError> {
    let fields = ServerFields { name, entries };
    let command = fields.get("command")?;
    let url_keys: Vec<&str> = URL_KEYS
        .iter()
        .copied()
        .filter(|key| entries.iter().any(|(k, _)| k == key))
        .collect();
    let warp_id = fields.get("warp_id")?;
    if url_keys.len() > 1 {
        return Err(ConfigError::server(
            name,
            format!("has both '{}' and '{}'; keep one", url_keys[0], url_keys[1]),
        ));
    }
    let present: Vec<&str> = [
        command.map(|_| "command"),
        url_keys.first().copied(),
        warp_id.map(|_| "warp_id"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if present.len() != 1 {
        let found = if present.is_empty() {
            "none".to_owned()
        } else {
            present
                .iter()
                .map(|k| format!("'{k}'"))
                .collect::<Vec<_>>()
                .join(" and ")
        };
        return Err(ConfigError::server(
            name,
            format!(
                "needs exactly one of 'command' (a program to run), 'url' (a remote server) or 'warp_id' (the UUID of an installation, resolved locally or by your team's server) (found {found})"
            ),
        ));
    }

    let declared = match (fields.optional("type")?, fields.optional("transport")?) {
        (Some(t), Some(u)) => {
            let (a, b) = (
                declared_kind(name, "type", t)?,
                declared_kind(name, "transport", u)?,
            );
            if a != b {
                return Err(ConfigError::server(
                    name,
                    "'type' and 'transport' disagree; keep one",
                ));
            }
            Some(a)
        }
        (Some(t), None) => Some(declared_kind(name, "type", t)?),
        (None, Some(u)) => Some(declared_kind(name, "transport", u)?),
        (None, None) => None,
    };
    let name_field: &[&str] = if single { &["name"] } else { &[] };

    if let Some(value) = warp_id {
        let Json::String(text) = value else {
            return Err(ConfigError::field(name, "warp_id", "must be a UUID string"));
        };
        let uid = Uuid::parse_str(text.trim())
            .map_err(|_| ConfigError::field(name, "warp_id", "must be a UUID"))?;
        fields.warn_unknown(&[&["warp_id"], name_field].concat(), parsed);
        parsed.references.push(ServerReference {
            name: name.to_owned(),
            uid,
        });
        return Ok(());
    }

    // In opencode's shape (`type` `local`/`remote`), `timeout` bounds fetching the tools.
    let opencode =
        matches!(fields.optional("type")?, Some(Json::String(t)) if t == "local" || t == "remote");
    let mut options = fields.options(opencode)?;
    let mut builder = TemplateBuilder::new(origin);
    // VS Code's `${input:ID}` is the secret ID, in text a user wrote only.
    let inputs = |text: String| match origin {
        Origin::User => input_references(&text),
        Origin::Managed | Origin::Registry => text,
    };
    let input_map = |map: IndexMap<String, String>| -> IndexMap<String, String> {
        map.into_iter().map(|(k, v)| (k, inputs(v))).collect()
    };
    let template = if let Some(command) = command {
        if let Some(DeclaredKind::Remote(_)) = declared {
            return Err(ConfigError::server(
                name,
                "declares a remote 'type' but has a 'command'; remove one",
            ));
        }
        let (command, args) = match command {
            // opencode: the program and its arguments in one array.
            Json::Array(_) => {
                if fields.optional("args")?.is_some() {
                    return Err(ConfigError::server(
                        name,
                        "has 'args' beside a 'command' array; put every argument in one of them",
                    ));
                }
                let mut argv = fields.string_array("command")?.into_iter();
                let program = argv
                    .next()
                    .filter(|program| !program.trim().is_empty())
                    .ok_or_else(|| {
                        ConfigError::field(name, "command", "must start with the program to run")
                    })?;
                (program, argv.collect())
            }
            _ => (
                fields.non_empty_string("command", command)?,
                fields.string_array("args")?,
            ),
        };
        let command = inputs(command);
        let args: Vec<String> = args.into_iter().map(inputs).collect();
        let mut env = fields.either_map("env", "environment")?;
        // Codex's `env_vars`: names passed on from the environment.
        for var in fields.string_array("env_vars")? {
            env.entry(var.clone())
                .or_insert_with(|| format!("${{{var}}}"));
        }
        let env = input_map(env);
        let cwd = match (
            fields.optional("cwd")?,
            fields.optional("working_directory")?,
        ) {
            (Some(a), Some(b)) if a != b => {
                return Err(ConfigError::server(
                    name,
                    "has both 'cwd' and 'working_directory'; keep one",
                ));
            }
            (Some(value), _) => Some(inputs(fields.non_empty_string("cwd", value)?)),
            (None, Some(value)) => {
                Some(inputs(fields.non_empty_string("working_directory", value)?))
            }
            (None, None) => None,
        };
        fields.warn_unknown(
            &[
                &[
                    "command",
                    "args",
                    "env",
                    "environment",
                    "env_vars",
                    "cwd",
                    "working_directory",
                    "type",
                    "transport",
                ],
                OPTION_KEYS,
                name_field,
            ]
            .concat(),
            parsed,
        );
        let env = builder.capture(env, VariableSource::Env);
        builder.scan(&command);
        args.iter().for_each(|arg| builder.scan(arg));
        if let Some(cwd) = &cwd {
            builder.scan(cwd);
        }
        ServerTemplate::Stdio(StdioTemplate {
            command,
            args,
            env,
            cwd,
        })
    } else {
        if options.serves.is_some() {
            return Err(ConfigError::server(
                name,
                "has 'serves' beside a url; 'serves' goes with the 'command' that starts it",
            ));
        }
        let url_key = url_keys[0];
        let transport = match (url_key, declared) {
            (_, Some(DeclaredKind::Stdio)) => {
                return Err(ConfigError::server(
                    name,
                    format!("declares type \"stdio\" but has a '{url_key}'; remove one"),
                ));
            }
            ("httpUrl", Some(DeclaredKind::Remote(RemoteTransport::Sse))) => {
                return Err(ConfigError::server(
                    name,
                    "'httpUrl' is Streamable HTTP but the type says \"sse\"; use 'url' for SSE",
                ));
            }
            (_, Some(DeclaredKind::Remote(transport))) => transport,
            ("httpUrl", None) => RemoteTransport::StreamableHttp,
            (_, None) => {
                options.transport_guessed = true;
                RemoteTransport::StreamableHttp
            }
        };
        options.headers_helper = fields.headers_helper()?;
        let url_value = fields.get(url_key)?.unwrap_or(&Json::Null);
        let url = inputs(fields.non_empty_string(url_key, url_value)?);
        let mut headers = fields.either_map("headers", "http_headers")?;
        // Codex's `env_http_headers` (header → variable) and `bearer_token_env_var`.
        for (header, var) in fields.string_map("env_http_headers")? {
            headers
                .entry(header)
                .or_insert_with(|| format!("${{{var}}}"));
        }
        if let Some(value) = fields.optional("bearer_token_env_var")? {
            let var = fields.non_empty_string("bearer_token_env_var", value)?;
            headers
                .entry("Authorization".to_owned())
                .or_insert_with(|| format!("Bearer ${{{var}}}"));
        }
        let headers = input_map(headers);
        fields.warn_unknown(
            &[
                &[
                    url_key,
                    "headers",
                    "http_headers",
                    "env_http_headers",
                    "bearer_token_env_var",
                    "type",
                    "transport",
                    "headersHelper",
                ],
                OPTION_KEYS,
                name_field,
            ]
            .concat(),
            parsed,
        );
        let headers = builder.capture(headers, VariableSource::Header);
        builder.scan(&url);
        ServerTemplate::Remote(RemoteTemplate {
            url,
            headers,
            transport,
        })
    };
    parsed.servers.push(ParsedServer {
        server: TemplatableServer {
            name: name.to_owned(),
            template,
            variables: builder.variables(),
            options,
        },
        captured: builder.captured,
        origin,
    });
    Ok(())
}

/// Collects variables and captured values while a template is built. The variables are an
/// ordered map from name to source: adding one is a lookup, and each name is owned once.
struct TemplateBuilder {
    origin: Origin,
    variables: IndexMap<String, VariableSource>,
    captured: IndexMap<String, VariableValue>,
}

impl TemplateBuilder {
    fn new(origin: Origin) -> Self {
        Self {
            origin,
            variables: IndexMap::new(),
            captured: IndexMap::new(),
        }
    }

    /// Adds the variable `name` unless it already is one.
    fn add(&mut self, name: &str, source: VariableSource) {
        if !self.variables.contains_key(name) {
            self.variables.insert(name.to_owned(), source);
        }
    }

    /// The variables in order of first appearance.
    fn variables(&mut self) -> Vec<Variable> {
        std::mem::take(&mut self.variables)
            .into_iter()
            .map(|(name, source)| Variable { name, source })
            .collect()
    }

    /// Moves each value into a captured variable named by its key and returns the template
    /// map with `{{KEY}}` in its place. Works for any key, including ones that are not valid
    /// placeholder names (`1KEY`, `A.B`): the link is structural, by key.
    fn capture(
        &mut self,
        values: IndexMap<String, String>,
        source: VariableSource,
    ) -> IndexMap<String, String> {
        let mut template = IndexMap::with_capacity(values.len());
        for (key, value) in values {
            let locked = self.origin == Origin::Managed && !has_placeholders(&value);
            template.insert(key.clone(), placeholder(&key));
            self.add(&key, source);
            self.captured.insert(
                key,
                VariableValue {
                    value: value.into(),
                    locked,
                },
            );
        }
        template
    }

    /// Adds each placeholder in `text` as a variable, unless it already is one.
    fn scan(&mut self, text: &str) {
        for segment in segments(text) {
            if let Segment::Placeholder(name) = segment {
                self.add(name, VariableSource::Placeholder);
            }
        }
    }
}
