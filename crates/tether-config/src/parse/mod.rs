//! From config text to validated templatable servers.
//!
//! Accepted forms, tried in this order:
//! 1. a wrapper: the first of `mcpServers`, `servers`, `mcp.servers`, `mcp_servers` whose value
//!    is an object is the server map;
//! 2. a single server: a top-level `command`, `url`, `serverUrl` or `httpUrl`; it is named by
//!    its `name` field, else the file name of `command`, else the host of the URL;
//! 3. otherwise the whole object is the server map.
//!
//! Text missing its outer braces (`"mcpServers": {...}`) is accepted, and a user's text may be
//! JSONC (`//` and `/* */` comments, trailing commas); a managed server's is plain JSON.

use std::collections::HashSet;
use std::fmt;

use uuid::Uuid;

use crate::error::ConfigError;
use crate::json::{self, Json, Syntax};
use crate::model::{Origin, ParsedServer};
use crate::placeholder::{is_valid_name, placeholder};

mod server;

use server::parse_server;

/// Wrapper keys, in the order they are looked for. A path of more than one key is nested.
const WRAPPERS: [&[&str]; 5] = [
    &["mcpServers"],
    &["servers"],
    &["mcp", "servers"],
    &["mcp_servers"],
    // opencode's `opencode.json`: `{"mcp": {name: {"type": "local", …}}}`.
    &["mcp"],
];

/// Keys that make a top-level object a single server.
const SINGLE_SERVER_KEYS: [&str; 4] = ["command", "url", "serverUrl", "httpUrl"];

/// Option keys a server object may hold besides its launch description (read by
/// `ServerFields::options`).
const OPTION_KEYS: &[&str] = &[
    "disabled",
    "enabled",
    "includeTools",
    "enabled_tools",
    "tools",
    "excludeTools",
    "disabled_tools",
    "alwaysAllow",
    "autoApprove",
    "trust",
    "timeout",
    "tool_timeout_sec",
    "startup_timeout_sec",
    "startup_timeout_ms",
    "passEnv",
    "sandbox",
    "alwaysLoad",
    "serves",
];

/// Keys that give a remote server's URL.
const URL_KEYS: [&str; 3] = ["url", "serverUrl", "httpUrl"];

/// A config entry that refers to an installation by UUID (`{"warp_id": "<uuid>"}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerReference {
    /// The entry's name in the config.
    pub name: String,
    /// The UUID: a local installation, or a managed one.
    pub uid: Uuid,
}

/// Something ignored while parsing. Names a field, never a value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ConfigWarning {
    /// A field tether does not use.
    UnknownField {
        /// The server's name.
        server: String,
        /// The field's name.
        field: String,
    },
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigWarning::UnknownField { server, field } => {
                write!(f, "MCP server '{server}': ignoring unknown field '{field}'")
            }
        }
    }
}

/// One entry of VS Code's `inputs` array: a value VS Code prompts for, referenced in the
/// servers as `${input:ID}`. tether reads such a reference as the secret named ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputPrompt {
    /// The input's id: the name of the secret that fills `${input:ID}`.
    pub id: String,
    /// Its `type` (`promptString`, `pickString`, …), when given.
    pub kind: Option<String>,
    /// The text VS Code shows when it prompts, when given.
    pub description: Option<String>,
    /// Whether VS Code hides what is typed (`password: true`).
    pub password: bool,
}

/// The result of parsing one config.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ParsedConfig {
    /// Servers with a launch description, in document order.
    pub servers: Vec<ParsedServer>,
    /// `warp_id` entries, in document order.
    pub references: Vec<ServerReference>,
    /// VS Code's `inputs` (beside the server map, or at the top level), in document order.
    pub inputs: Vec<InputPrompt>,
    /// Fields that were ignored.
    pub warnings: Vec<ConfigWarning>,
}

/// Parses MCP config text (a user's JSON or a managed server's `mcpConfigJson`).
///
/// Every server's `env` and header values are captured as variable values, with `{{KEY}}` left
/// in the template; `{{NAME}}` placeholders in any other string become variables. Under
/// [`Origin::Managed`], captured values without placeholders are locked.
///
/// ```
/// use tether_config::{parse_config, Origin};
/// let parsed = parse_config(r#"{"mcpServers":{"gh":{"command":"npx","env":{"T":"x"}}}}"#, Origin::User)?;
/// assert_eq!(parsed.servers[0].server.name, "gh");
/// # Ok::<(), tether_config::ConfigError>(())
/// ```
pub fn parse_config(text: &str, origin: Origin) -> Result<ParsedConfig, ConfigError> {
    let root = json::parse(text, syntax(origin))?;
    let mut parsed = ParsedConfig {
        inputs: find_inputs(&root),
        ..ParsedConfig::default()
    };
    match locate_servers(&root)? {
        Located::Map(map) => parse_server_map(&map, origin, &mut parsed)?,
        Located::Single(name, entries) => parse_server(&name, entries, origin, true, &mut parsed)?,
    }
    log_once(&parsed.warnings);
    Ok(parsed)
}

/// Logs each warning at `warn` the first time this process sees it. A spec is parsed several
/// times in a run (validated when it is read, stored, resolved), and one `ignoring unknown
/// field` line is enough. Warnings name servers and fields only, so keeping them is harmless.
fn log_once(warnings: &[ConfigWarning]) {
    static LOGGED: std::sync::Mutex<Option<HashSet<ConfigWarning>>> = std::sync::Mutex::new(None);
    let Ok(mut logged) = LOGGED.lock() else {
        return;
    };
    let logged = logged.get_or_insert_with(HashSet::new);
    for warning in warnings {
        if logged.insert(warning.clone()) {
            tracing::warn!("{warning}");
        }
    }
}

/// The servers of a config as written: each name with its server object, unvalidated fields
/// and all, after the same normalization as [`parse_config`] (wrappers, missing braces, a
/// single server named by the same rule). The config is validated first, so an invalid config
/// is the same error here as there. Used to store user specs in a task config unchanged.
pub fn raw_server_entries(text: &str) -> Result<Vec<(String, serde_json::Value)>, ConfigError> {
    parse_config(text, Origin::User)?;
    let root = json::parse(text, syntax(Origin::User))?;
    let raw = match locate_servers(&root)? {
        Located::Map(map) => map
            .into_iter()
            .map(|(name, server)| (name.clone(), server.to_value()))
            .collect(),
        Located::Single(name, entries) => {
            let object = entries
                .iter()
                .filter(|(k, _)| k != "name")
                .map(|(k, v)| (k.clone(), v.to_value()))
                .collect();
            vec![(name, serde_json::Value::Object(object))]
        }
    };
    Ok(raw)
}

/// User text is JSONC (comments, trailing commas); a managed server's config is plain JSON.
fn syntax(origin: Origin) -> Syntax {
    match origin {
        Origin::User => Syntax::Jsonc,
        Origin::Managed | Origin::Registry => Syntax::Json,
    }
}

/// Whether `text` (a user's config) holds a server map under one of the wrapper keys
/// (`mcpServers`, `servers`, `mcp.servers`, `mcp_servers`, `mcp`): how a harness's own settings
/// file that configures no server (`~/.claude.json` before any `claude mcp add`) is told apart
/// from one that does. Unreadable text is `false`.
pub fn declares_servers(text: &str) -> bool {
    json::parse(text, syntax(Origin::User))
        .ok()
        .and_then(|root| {
            root.as_object()
                .and_then(|entries| find_wrapped_map(entries).ok().flatten())
                .map(|_| ())
        })
        .is_some()
}

/// Where a config's servers are.
enum Located<'a> {
    /// A map of name → server object (a bare map without its `inputs` array).
    Map(Vec<&'a (String, Json)>),
    /// One server object and the name given to it.
    Single(String, &'a [(String, Json)]),
}

fn locate_servers(root: &Json) -> Result<Located<'_>, ConfigError> {
    let Some(root_entries) = root.as_object() else {
        return Err(ConfigError::NotAnObject { found: root.kind() });
    };
    if let Some(map) = find_wrapped_map(root_entries)? {
        return Ok(Located::Map(map.iter().collect()));
    }
    if SINGLE_SERVER_KEYS
        .iter()
        .any(|key| root_entries.iter().any(|(k, _)| k == key))
    {
        return Ok(Located::Single(
            single_server_name(root_entries),
            root_entries,
        ));
    }
    Ok(Located::Map(
        root_entries
            .iter()
            .filter(|(key, value)| !(key == "inputs" && matches!(value, Json::Array(_))))
            .collect(),
    ))
}

/// VS Code's `inputs`: the array at the top level, else the one in `mcp` (VS Code's
/// `settings.json` form). An entry without a string `id` is skipped.
fn find_inputs(root: &Json) -> Vec<InputPrompt> {
    let Some(entries) = root.as_object() else {
        return Vec::new();
    };
    let field = |entries: &[(String, Json)], key: &str| {
        entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, value)| value.clone())
    };
    let nested =
        field(entries, "mcp").and_then(|mcp| mcp.as_object().and_then(|mcp| field(mcp, "inputs")));
    let Some(Json::Array(items)) = field(entries, "inputs").or(nested) else {
        return Vec::new();
    };
    let text = |entries: &[(String, Json)], key: &str| match field(entries, key) {
        Some(Json::String(text)) => Some(text),
        _ => None,
    };
    items
        .iter()
        .filter_map(Json::as_object)
        .filter_map(|input| {
            Some(InputPrompt {
                id: text(input, "id")?,
                kind: text(input, "type"),
                description: text(input, "description"),
                password: matches!(field(input, "password"), Some(Json::Bool(true))),
            })
        })
        .collect()
}

/// `text` with each VS Code `${input:ID}` turned into the placeholder `{{ID}}`, so that the
/// secret ID fills it. An ID that is not a placeholder name, and the escape `$${input:…}`,
/// stay as written.
fn input_references(text: &str) -> String {
    const OPEN: &str = "${input:";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(OPEN) {
        let escaped = rest[..at].ends_with('$');
        let after = &rest[at + OPEN.len()..];
        match after.find('}') {
            Some(close) if !escaped && is_valid_name(&after[..close]) => {
                out.push_str(&rest[..at]);
                out.push_str(&placeholder(&after[..close]));
                rest = &after[close + 1..];
            }
            _ => {
                out.push_str(&rest[..at + OPEN.len()]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The value of `key` in `entries`; a key present twice is an error.
fn unique<'a>(entries: &'a [(String, Json)], key: &str) -> Result<Option<&'a Json>, String> {
    let mut found = entries.iter().filter(|(k, _)| k == key).map(|(_, v)| v);
    let first = found.next();
    if found.next().is_some() {
        return Err(key.to_owned());
    }
    Ok(first)
}

fn find_wrapped_map(root: &[(String, Json)]) -> Result<Option<&[(String, Json)]>, ConfigError> {
    for path in WRAPPERS {
        let mut current = root;
        let mut found = None;
        for (depth, key) in path.iter().enumerate() {
            let value = unique(current, key).map_err(|key| ConfigError::DuplicateKey { key })?;
            match value.and_then(Json::as_object) {
                // A server named `mcp` in a bare map is not opencode's wrapper.
                Some(object)
                    if *path == ["mcp"]
                        && SINGLE_SERVER_KEYS
                            .iter()
                            .any(|key| object.iter().any(|(k, _)| k == key)) =>
                {
                    break;
                }
                Some(object) if depth + 1 == path.len() => found = Some(object),
                Some(object) => current = object,
                None => break,
            }
        }
        if found.is_some() {
            return Ok(found);
        }
    }
    Ok(None)
}

fn single_server_name(entries: &[(String, Json)]) -> String {
    if let Some((_, Json::String(name))) = entries.iter().find(|(k, _)| k == "name")
        && !name.trim().is_empty()
    {
        return name.trim().to_owned();
    }
    let derived = match entries.iter().find(|(k, _)| k == "command") {
        Some((_, Json::String(command))) => command_stem(command),
        _ => URL_KEYS
            .iter()
            .find_map(|key| match entries.iter().find(|(k, _)| k == key) {
                Some((_, Json::String(url))) => Some(url_host(url)),
                _ => None,
            })
            .unwrap_or_default(),
    };
    if derived.is_empty() {
        "server".to_owned()
    } else {
        derived
    }
}

/// `/usr/local/bin/my-server` → `my-server`.
fn command_stem(command: &str) -> String {
    command
        .trim()
        .rsplit(['/', '\\'])
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// `https://user@mcp.example.com:8443/x?y` → `mcp.example.com`.
fn url_host(url: &str) -> String {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = after_scheme
        .split(['/', '?', '#'])
        .next()
        .unwrap_or_default();
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let host = if let Some(bracketed) = host_port.strip_prefix('[') {
        bracketed.split(']').next().unwrap_or_default()
    } else {
        host_port.split(':').next().unwrap_or_default()
    };
    host.to_owned()
}

fn parse_server_map(
    map: &[&(String, Json)],
    origin: Origin,
    parsed: &mut ParsedConfig,
) -> Result<(), ConfigError> {
    let mut seen = HashSet::new();
    for (name, _) in map {
        if !seen.insert(name.as_str()) {
            return Err(ConfigError::DuplicateServerName { name: name.clone() });
        }
    }
    for (name, value) in map.iter().copied() {
        if name.trim().is_empty() {
            return Err(ConfigError::server(name, "a server name must not be empty"));
        }
        let Some(entries) = value.as_object() else {
            return Err(ConfigError::server(
                name,
                format!("must be a JSON object, found {}", value.kind()),
            ));
        };
        parse_server(name, entries, origin, false, parsed)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{RemoteTransport, ServerTemplate, TemplatableServer};
    use pretty_assertions::assert_eq;

    fn names(text: &str) -> Vec<String> {
        match parse_config(text, Origin::User) {
            Ok(parsed) => parsed
                .servers
                .iter()
                .map(|s| s.server.name.clone())
                .chain(parsed.references.iter().map(|r| r.name.clone()))
                .collect(),
            Err(err) => panic!("{text}: {err}"),
        }
    }

    fn error(text: &str) -> String {
        match parse_config(text, Origin::User) {
            Ok(parsed) => panic!("{text} parsed: {parsed:?}"),
            Err(err) => err.to_string(),
        }
    }

    #[test]
    fn a_headers_helper_is_words_from_an_array_or_a_string_and_never_a_shell_line() {
        let words = |text: &str| {
            let parsed = parse_config(text, Origin::User).expect("parses");
            let server = &parsed.servers[0].server;
            (
                server.options.headers_helper.clone(),
                server.template_json(),
            )
        };
        let (helper, json) =
            words(r#"{"r":{"url":"https://h/mcp","headersHelper":"/opt/get \"a b\" '$HOME'"}}"#);
        let expected = vec!["/opt/get".to_owned(), "a b".to_owned(), "$HOME".to_owned()];
        assert_eq!(helper.as_ref(), Some(&expected));
        assert_eq!(json["headersHelper"], serde_json::json!(expected));
        let (helper, _) = words(r#"{"r":{"url":"https://h/mcp","headersHelper":["p","x y"]}}"#);
        assert_eq!(helper, Some(vec!["p".to_owned(), "x y".to_owned()]));
        assert!(
            error(r#"{"r":{"url":"https://h","headersHelper":"get | jq ."}}"#)
                .contains("runs without a shell, so '|' would be an argument")
        );
        assert!(
            error(r#"{"r":{"url":"https://h","headersHelper":"get 'x"}}"#)
                .contains("unclosed quote")
        );
        assert!(
            error(r#"{"r":{"url":"https://h","headersHelper":[]}}"#)
                .contains("must name a program")
        );
        assert!(error(r#"{"r":{"url":"https://h","headersHelper":7}}"#).contains("headersHelper"));
    }

    #[test]
    fn serves_is_a_loopback_url_beside_a_command() {
        let parsed = parse_config(
            r#"{"p":{"command":"npx","args":["--port","8080"],"serves":{"url":"http://localhost:8080/mcp","type":"sse"}}}"#,
            Origin::Registry,
        )
        .expect("parsing");
        let served = parsed.servers[0]
            .server
            .options
            .serves
            .clone()
            .expect("serves");
        assert_eq!(served.transport, RemoteTransport::Sse);
        assert_eq!(
            (served.address(), served.port()),
            ("127.0.0.1:8080".to_owned(), Some(8080))
        );
        assert!(!served.any_interface);
        let allowed = parse_config(
            r#"{"p":{"command":"x","serves":{"url":"http://127.0.0.1:1/mcp","anyInterface":true}}}"#,
            Origin::User,
        )
        .expect("parsing");
        let allowed = allowed.servers[0].server.options.serves.as_ref();
        assert!(allowed.is_some_and(|s| s.any_interface));
        for (config, problem) in [
            (
                r#"{"p":{"command":"x","serves":{"url":"http://127.0.0.1:1/","anyInterface":"yes"}}}"#,
                "it takes \"url\", \"type\" and \"anyInterface\" (true or false)",
            ),
            (
                r#"{"p":{"url":"http://127.0.0.1:1/mcp","serves":{"url":"http://127.0.0.1:1/"}}}"#,
                "beside a url",
            ),
            (
                r#"{"p":{"command":"x","serves":{"url":"https://example.com:1/mcp"}}}"#,
                "must start with http://",
            ),
            (
                r#"{"p":{"command":"x","serves":{"url":"http://10.0.0.1:80/mcp"}}}"#,
                "loopback host",
            ),
            (
                r#"{"p":{"command":"x","serves":{"url":"http://127.0.0.1/mcp"}}}"#,
                "must name its port",
            ),
            (
                r#"{"p":{"command":"x","serves":{"url":"http://127.0.0.1:{{P}}/mcp"}}}"#,
                "must name its port",
            ),
            (
                r#"{"p":{"command":"x","serves":{"url":"http://127.0.0.1:1/{{T}}"}}}"#,
                "placeholder",
            ),
            (
                r#"{"p":{"command":"x","serves":{"url":"http://127.0.0.1:1/","type":"ws"}}}"#,
                "type must be",
            ),
            (
                r#"{"p":{"command":"x","serves":"http://127.0.0.1:1/"}}"#,
                "must be an object",
            ),
        ] {
            let message = error(config);
            assert!(message.contains(problem), "{config}: {message}");
        }
    }

    #[test]
    fn single_server_names_are_deterministic() {
        assert_eq!(names(r#"{"command":"/usr/bin/my-srv"}"#), ["my-srv"]);
        assert_eq!(names(r#"{"command":"npx","name":"gh"}"#), ["gh"]);
        assert_eq!(
            names(r#"{"url":"https://u@mcp.example.com:8443/mcp?x=1"}"#),
            ["mcp.example.com"]
        );
        assert_eq!(names(r#"{"httpUrl":"http://[::1]:9/mcp"}"#), ["::1"]);
        assert_eq!(names(r#"{"command":"/"}"#), ["server"]);
    }

    #[test]
    fn wrapper_order_and_fallbacks() {
        // `mcpServers` is looked for before `servers`.
        assert_eq!(
            names(r#"{"servers":{"b":{"command":"x"}},"mcpServers":{"a":{"command":"x"}}}"#),
            ["a"]
        );
        // A wrapper key whose value is not an object is skipped.
        assert_eq!(
            names(r#"{"mcpServers":[],"mcp_servers":{"c":{"command":"x"}}}"#),
            ["c"]
        );
        assert_eq!(
            names(r#"{"a":{"warp_id":"8d3c9f4e-2b1a-4c5d-9e8f-7a6b5c4d3e2f"}}"#),
            ["a"]
        );
    }

    #[test]
    fn validation_errors_name_server_and_field() {
        assert_eq!(
            error(r#"{"a":{"command":"x","url":"https://h"}}"#),
            "MCP server 'a': needs exactly one of 'command' (a program to run), 'url' (a remote server) or 'warp_id' (the UUID of an installation, resolved locally or by your team's server) (found 'command' and 'url')"
        );
        assert_eq!(
            error(r#"{"a":{}}"#),
            "MCP server 'a': needs exactly one of 'command' (a program to run), 'url' (a remote server) or 'warp_id' (the UUID of an installation, resolved locally or by your team's server) (found none)"
        );
        assert!(
            error(r#"{"a":{"command":"x","args":"y"}}"#).contains("'a': args must be an array")
        );
        assert!(
            error(r#"{"a":{"url":"h","headers":{"H":true}}}"#)
                .contains("headers.H must be a string")
        );
        assert!(error(r#"{"a":{"url":"h","serverUrl":"h"}}"#).contains("'url' and 'serverUrl'"));
        assert!(error(r#"{"a":{"command":"x","type":"http"}}"#).contains("remote 'type'"));
        assert!(error(r#"{"a":{"url":"h","type":"stdio"}}"#).contains("\"stdio\""));
        assert!(error(r#"{"a":{"url":"h","type":"ws"}}"#).contains("type must be one of"));
        assert!(error(r#"{"a":{"warp_id":"nope"}}"#).contains("warp_id must be a UUID"));
        assert!(error(r#"{"a":{"command":"x","env":{"K":"1","K":"2"}}}"#).contains("'K' twice"));
        assert!(error(r#"{"a":{"command":"x","command":"y"}}"#).contains("command appears twice"));
        assert!(error(r#"{"a":1}"#).contains("must be a JSON object, found a number"));
        assert!(error("[]").contains("found an array"));
        assert!(error(r#"{"mcpServers":{},"mcpServers":{}}"#).contains("'mcpServers' twice"));
    }

    #[test]
    fn unknown_fields_warn_by_name_only() {
        let parsed = parse_config(
            r#"{"a":{"command":"x","description":"sk-SENTINEL","headers":{}}}"#,
            Origin::User,
        );
        let warnings: Vec<String> = parsed
            .map(|p| p.warnings.iter().map(ToString::to_string).collect())
            .unwrap_or_default();
        assert_eq!(
            warnings,
            [
                "MCP server 'a': ignoring unknown field 'description'",
                "MCP server 'a': ignoring unknown field 'headers'"
            ]
        );
    }

    #[test]
    fn captures_env_values_including_invalid_placeholder_names() {
        let parsed = parse_config(
            r#"{"s":{"command":"x","args":["{{A}}"],"env":{"1KEY":"one","A.B":"two","A":"{{A}}"}}}"#,
            Origin::User,
        );
        let Ok(parsed) = parsed else {
            panic!("parse failed")
        };
        let server = &parsed.servers[0];
        let ServerTemplate::Stdio(stdio) = &server.server.template else {
            panic!("not stdio")
        };
        assert_eq!(stdio.env["1KEY"], "{{1KEY}}");
        assert_eq!(server.captured["1KEY"].value.expose(), "one");
        assert_eq!(server.captured["A.B"].value.expose(), "two");
        let names: Vec<&str> = server.server.variable_names().collect();
        assert_eq!(names, ["1KEY", "A.B", "A"]);
        assert!(server.installation().is_some());
    }

    #[test]
    fn template_without_values_has_no_installation() {
        let Ok(parsed) = parse_config(
            r#"{"s":{"command":"x","args":["--token={{API_TOKEN}}"]}}"#,
            Origin::Managed,
        ) else {
            panic!("parse failed")
        };
        let server = parsed.servers[0].clone();
        assert!(server.installation().is_none());
        let installation = server.into_installation();
        assert_eq!(
            installation.values["API_TOKEN"].value.expose(),
            "{{API_TOKEN}}"
        );
        assert!(!installation.values["API_TOKEN"].locked);
    }

    #[test]
    fn managed_literals_are_locked_and_user_ones_are_not() {
        let text =
            r#"{"s":{"url":"https://p/mcp","headers":{"Authorization":"Bearer t","X":"{{Y}}"}}}"#;
        let locks = |origin| {
            parse_config(text, origin)
                .map(|p| {
                    p.servers[0]
                        .captured
                        .values()
                        .map(|v| v.locked)
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        };
        assert_eq!(locks(Origin::Managed), [true, false]);
        assert_eq!(locks(Origin::User), [false, false]);
    }

    #[test]
    fn template_json_parses_back_to_the_same_template() {
        let text = r#"{"s":{"command":"x","args":["{{A}}","--f={{json .}}"],"env":{"K":"v"},"cwd":"/tmp"},
                       "r":{"url":"https://h/{{P}}","headers":{"H":"v"},"type":"sse"}}"#;
        let Ok(first) = parse_config(text, Origin::User) else {
            panic!("parse failed")
        };
        let map: serde_json::Map<String, serde_json::Value> = first
            .servers
            .iter()
            .map(|s| (s.server.name.clone(), s.server.template_json()))
            .collect();
        let again = parse_config(&serde_json::Value::Object(map).to_string(), Origin::User);
        let Ok(again) = again else {
            panic!("reparse failed")
        };
        let templates = |p: &ParsedConfig| -> Vec<TemplatableServer> {
            p.servers.iter().map(|s| s.server.clone()).collect()
        };
        assert_eq!(templates(&again), templates(&first));
    }
}

#[cfg(test)]
mod dialect_tests {
    use super::*;
    use crate::model::ServerTemplate;
    use pretty_assertions::assert_eq;

    #[test]
    fn input_references_become_placeholders() {
        assert_eq!(
            input_references("Bearer ${input:github_token}"),
            "Bearer {{github_token}}"
        );
        assert_eq!(input_references("${input:a}${input:b-c}"), "{{a}}{{b-c}}");
        for kept in [
            "$${input:a}",
            "${input:a.b}",
            "${input:}",
            "${input:a",
            "${inputs:a}",
        ] {
            assert_eq!(input_references(kept), kept);
        }
    }

    #[test]
    fn vscode_inputs_are_kept_and_are_not_servers() {
        // The shape of VS Code's `.vscode/mcp.json` in GitHub's github-mcp-server README.
        let text = r#"{
          "inputs": [
            {"type": "promptString", "id": "github_token", "description": "GitHub Personal Access Token", "password": true}
          ],
          "servers": {
            "github": {"type": "http", "url": "https://api.githubcopilot.com/mcp/",
                       "headers": {"Authorization": "Bearer ${input:github_token}"}}
          }
        }"#;
        let Ok(parsed) = parse_config(text, Origin::User) else {
            panic!("parse failed")
        };
        assert_eq!(
            parsed.inputs,
            [InputPrompt {
                id: "github_token".into(),
                kind: Some("promptString".into()),
                description: Some("GitHub Personal Access Token".into()),
                password: true,
            }]
        );
        assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
        let server = &parsed.servers[0];
        assert_eq!(
            server.captured["Authorization"].value.expose(),
            "Bearer {{github_token}}"
        );
        // A bare map beside `inputs`, and `mcp.inputs` in VS Code's settings.json.
        let bare = r#"{"inputs": [{"id": "k"}], "s": {"command": "x", "args": ["${input:k}"]}}"#;
        let Ok(parsed) = parse_config(bare, Origin::User) else {
            panic!("parse failed")
        };
        assert_eq!(parsed.inputs.len(), 1);
        assert_eq!(
            parsed.servers[0]
                .server
                .variable_names()
                .collect::<Vec<_>>(),
            ["k"]
        );
        let settings = r#"{"mcp": {"inputs": [{"id": "k", "password": false}], "servers": {"s": {"command": "x"}}}}"#;
        let inputs = parse_config(settings, Origin::User)
            .map(|p| p.inputs)
            .unwrap_or_default();
        assert_eq!(inputs.len(), 1);
        assert!(!inputs[0].password);
        // Managed configs are left as written.
        let managed = parse_config(
            bare.replace("\"inputs\": [{\"id\": \"k\"}], ", "").as_str(),
            Origin::Managed,
        );
        let Ok(managed) = managed else {
            panic!("parse failed")
        };
        let ServerTemplate::Stdio(stdio) = &managed.servers[0].server.template else {
            panic!("not stdio")
        };
        assert_eq!(stdio.args, ["${input:k}"]);
    }
}

#[cfg(test)]
mod raw_tests {

    use super::*;
    use serde_json::json;

    #[test]
    fn raw_entries_keep_servers_as_written() {
        let text = r#""mcpServers": {"a": {"command": "x", "env": {"K": "${T}"}, "timeout": 5}}"#;
        let raw = raw_server_entries(text).unwrap_or_default();
        assert_eq!(
            raw,
            vec![(
                "a".to_owned(),
                json!({"command": "x", "env": {"K": "${T}"}, "timeout": 5})
            )]
        );
        let single =
            raw_server_entries(r#"{"name": "gh", "url": "https://h/{{P}}"}"#).unwrap_or_default();
        assert_eq!(
            single,
            vec![("gh".to_owned(), json!({"url": "https://h/{{P}}"}))]
        );
        assert!(raw_server_entries(r#"{"a":{"command":"x"},"a":{"command":"y"}}"#).is_err());
    }
}
