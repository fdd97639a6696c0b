//! MCP specs (`--mcp VALUE`) and the task-config server map.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Map, Value, json};
use tether_config::placeholder::placeholder_names;
use tether_config::{
    InputPrompt, MAX_CONFIG_BYTES, Origin, ParsedConfig, parse_config, raw_server_entries,
};
use uuid::Uuid;

use crate::error::DriverError;

/// Where a JSON spec came from, for messages and ephemeral ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpecSource {
    /// Inline JSON given on the command line or in a task config.
    Inline,
    /// The contents of the file at this path, read when the spec was parsed.
    File(PathBuf),
    /// A config tether built from a registry entry (a test-connect before an install): parsed
    /// with [`Origin::Registry`], so its values are literal.
    Registry,
}

impl SpecSource {
    /// Which rules its text is parsed under.
    pub fn origin(&self) -> Origin {
        match self {
            SpecSource::Inline | SpecSource::File(_) => Origin::User,
            SpecSource::Registry => Origin::Registry,
        }
    }

    /// How messages name a JSON spec from here: `file <path>`, `inline spec #N` (N is 1-based
    /// when `position` is given), or the registry entry's config.
    fn label(&self, position: Option<usize>) -> String {
        match self {
            SpecSource::File(path) => format!("file {}", path.display()),
            SpecSource::Inline => match position {
                Some(n) => format!("inline spec #{}", n + 1),
                None => "inline spec".to_owned(),
            },
            SpecSource::Registry => "the config built from the registry entry".to_owned(),
        }
    }
}

/// One MCP spec of a run.
#[derive(Clone, PartialEq, Eq)]
pub enum McpSpec {
    /// A local or managed installation.
    Uuid(Uuid),
    /// A JSON config, parsed (and so validated) once, when the spec was made.
    Json {
        /// The config text. May hold credentials: never printed.
        text: String,
        /// Inline or a file: how messages name the spec (`inline spec #2`, `file ./mcp.json`).
        source: SpecSource,
        /// `text` parsed under `source`'s origin: what resolution, the inputs asked for and
        /// whether the store is needed are all read from.
        parsed: Arc<ParsedConfig>,
    },
}

impl std::fmt::Debug for McpSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            McpSpec::Uuid(uid) => write!(f, "Uuid({uid})"),
            McpSpec::Json { text, source, .. } => f
                .debug_struct("Json")
                .field("source", source)
                .field("bytes", &text.len())
                .finish_non_exhaustive(),
        }
    }
}

impl McpSpec {
    /// Parses a `--mcp VALUE`: a UUID; else an existing file (its contents are JSON); else
    /// inline JSON. JSON is validated now so a bad spec fails before anything starts.
    /// Errors never echo the value: it may hold a secret.
    pub fn parse(value: &str) -> Result<Self, DriverError> {
        let trimmed = value.trim();
        if let Ok(uid) = Uuid::parse_str(trimmed) {
            return Ok(McpSpec::Uuid(uid));
        }
        let path = Path::new(trimmed);
        // A path that starts like a comment (`//server/x.json`) is still a file when one is there.
        if !trimmed.is_empty() && !trimmed.starts_with(['{', '"']) && path.is_file() {
            return Self::from_file(path);
        }
        if looks_like_json(trimmed) {
            return Self::json(trimmed.to_owned(), SpecSource::Inline);
        }
        let file_hint = if path.exists() {
            "the path exists but is not a regular file"
        } else {
            "no file exists at that path"
        };
        Err(DriverError::InvalidSpec {
            reason: format!(
                "the --mcp value ({} characters) is not a UUID, not an existing file ({file_hint}), and not inline JSON (it does not start with '{{', '\"' or a comment); pass a server UUID, a path to a JSON file, or a JSON object",
                trimmed.chars().count()
            ),
        })
    }

    /// Reads a JSON spec from `path`.
    pub fn from_file(path: &Path) -> Result<Self, DriverError> {
        let too_big = std::fs::metadata(path)
            .map(|m| m.len() > MAX_CONFIG_BYTES as u64)
            .unwrap_or(false);
        if too_big {
            return Err(DriverError::InvalidSpec {
                reason: format!(
                    "the file {} is larger than {MAX_CONFIG_BYTES} bytes",
                    path.display()
                ),
            });
        }
        let text = std::fs::read_to_string(path).map_err(|e| DriverError::InvalidSpec {
            reason: format!("cannot read the file {}: {e}", path.display()),
        })?;
        Self::json(text, SpecSource::File(path.to_owned()))
    }

    /// A JSON spec, parsed under `source`'s origin: the one place a spec's text is parsed.
    pub fn json(text: String, source: SpecSource) -> Result<Self, DriverError> {
        match parse_config(&text, source.origin()) {
            Ok(parsed) => Ok(McpSpec::Json {
                text,
                source,
                parsed: Arc::new(parsed),
            }),
            Err(error) => Err(DriverError::Config {
                spec: source.label(None),
                source: error,
            }),
        }
    }

    /// The parsed config of a JSON spec; `None` for a UUID.
    pub fn config(&self) -> Option<&ParsedConfig> {
        match self {
            McpSpec::Uuid(_) => None,
            McpSpec::Json { parsed, .. } => Some(parsed),
        }
    }

    /// Whether resolving this spec reads installations (a UUID, or a config with `warp_id`
    /// references): the local store and, for what it lacks, the managed client.
    pub fn needs_store(&self) -> bool {
        self.config()
            .is_none_or(|parsed| !parsed.references.is_empty())
    }

    /// A short description for messages: `managed or local installation <uid>`, `file <path>`,
    /// `inline spec #N` (N is 1-based when `position` is given).
    pub fn label(&self, position: Option<usize>) -> String {
        match self {
            McpSpec::Uuid(uid) => format!("installation {uid}"),
            McpSpec::Json { source, .. } => source.label(position),
        }
    }

    /// The stable text identifying the spec within a task, for ephemeral ids.
    pub(crate) fn identity(&self) -> String {
        match self {
            McpSpec::Uuid(uid) => uid.to_string(),
            McpSpec::Json { text, .. } => text.clone(),
        }
    }
}

/// The VS Code inputs (`${input:ID}`) that the JSON specs' servers use, once each, in spec
/// order.
pub fn used_inputs(specs: &[McpSpec]) -> Vec<InputPrompt> {
    let mut used_inputs: Vec<InputPrompt> = Vec::new();
    for parsed in specs.iter().filter_map(McpSpec::config) {
        for input in &parsed.inputs {
            // In a template string (a variable) or inside a captured env/header value.
            let used = parsed.servers.iter().any(|server| {
                server.server.has_variable(&input.id)
                    || server.captured.values().any(|value| {
                        placeholder_names(value.value.expose()).contains(&input.id.as_str())
                    })
            });
            if used && !used_inputs.iter().any(|u| u.id == input.id) {
                used_inputs.push(input.clone());
            }
        }
    }
    used_inputs
}

/// JSON or JSONC: an object, an object without its braces, or either after a comment.
fn looks_like_json(text: &str) -> bool {
    text.starts_with('{')
        || text.starts_with('"')
        || text.starts_with("//")
        || text.starts_with("/*")
}

/// Specs → the task config's unwrapped server map. A UUID becomes
/// `{"<uuid>": {"warp_id": "<uuid>"}}`; a JSON spec's servers are kept as written (never
/// rendered, never with secrets applied). A name used twice is an error.
pub fn specs_to_server_map(specs: &[McpSpec]) -> Result<Map<String, Value>, DriverError> {
    let mut map = Map::new();
    let mut sources: Vec<(String, String)> = Vec::new();
    for (position, spec) in specs.iter().enumerate() {
        let entries = match spec {
            McpSpec::Uuid(uid) => vec![(uid.to_string(), json!({ "warp_id": uid.to_string() }))],
            McpSpec::Json { text, .. } => {
                raw_server_entries(text).map_err(|source| DriverError::Config {
                    spec: spec.label(Some(position)),
                    source,
                })?
            }
        };
        for (name, server) in entries {
            let label = spec.label(Some(position));
            if let Some((_, first)) = sources.iter().find(|(n, _)| *n == name) {
                // The same UUID twice is one server, not a conflict.
                if map.get(&name) == Some(&server) && matches!(spec, McpSpec::Uuid(_)) {
                    continue;
                }
                return Err(DriverError::DuplicateServerName {
                    name,
                    sources: vec![first.clone(), label],
                });
            }
            sources.push((name.clone(), label));
            map.insert(name, server);
        }
    }
    Ok(map)
}

/// The task config's server map → specs: `warp_id` entries become UUID specs (sorted,
/// de-duplicated), every other entry goes into one inline JSON spec (in map order).
pub fn server_map_to_specs(map: &Map<String, Value>) -> Result<Vec<McpSpec>, DriverError> {
    let mut uids = Vec::new();
    let mut rest = Map::new();
    for (name, server) in map {
        match server.get("warp_id") {
            Some(Value::String(id)) => {
                let uid = Uuid::parse_str(id.trim()).map_err(|_| DriverError::InvalidSpec {
                    reason: format!("task config server '{name}': warp_id must be a UUID"),
                })?;
                uids.push(uid);
            }
            Some(_) => {
                return Err(DriverError::InvalidSpec {
                    reason: format!("task config server '{name}': warp_id must be a UUID string"),
                });
            }
            None => {
                rest.insert(name.clone(), server.clone());
            }
        }
    }
    uids.sort();
    uids.dedup();
    let mut specs: Vec<McpSpec> = uids.into_iter().map(McpSpec::Uuid).collect();
    if !rest.is_empty() {
        let text = Value::Object(Map::from_iter([(
            "mcpServers".to_owned(),
            Value::Object(rest),
        )]))
        .to_string();
        specs.push(McpSpec::json(text, SpecSource::Inline)?);
    }
    Ok(specs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const A: &str = "8d3c9f4e-2b1a-4c5d-9e8f-7a6b5c4d3e2f";
    const B: &str = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";

    fn uid(text: &str) -> Uuid {
        Uuid::parse_str(text).expect("parsing a UUID constant")
    }

    #[test]
    fn parses_uuid_file_and_inline_json() {
        assert_eq!(
            McpSpec::parse(&format!(" {A} ")).ok(),
            Some(McpSpec::Uuid(uid(A)))
        );
        let dir = tempfile::tempdir().expect("creating a temporary directory");
        let file = dir.path().join("mcp.json");
        std::fs::write(&file, r#"{"mcpServers":{"a":{"command":"x"}}}"#).expect("writing the file");
        let spec =
            McpSpec::parse(file.to_str().unwrap_or_default()).expect("parsing the test spec");
        assert!(matches!(
            spec,
            McpSpec::Json {
                source: SpecSource::File(_),
                ..
            }
        ));
        let inline = McpSpec::parse(r#"{"a":{"command":"x"}}"#).expect("parsing the test spec");
        assert!(matches!(
            inline,
            McpSpec::Json {
                source: SpecSource::Inline,
                ..
            }
        ));
    }

    #[test]
    fn errors_say_what_was_tried_without_echoing() {
        let err = McpSpec::parse("sk-SENTINEL-not-a-spec")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("not a UUID"), "{err}");
        assert!(err.contains("not an existing file"), "{err}");
        assert!(err.contains("not inline JSON"), "{err}");
        assert!(!err.contains("SENTINEL"), "{err}");
        let err = McpSpec::parse(r#"{"a":{"command":"x","env":{"K":"sk-SENTINEL"} x}}"#)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("inline spec") && err.contains("column"),
            "{err}"
        );
        assert!(!err.contains("SENTINEL"), "{err}");
        assert!(
            !format!("{:?}", McpSpec::parse(r#"{"a":{"command":"sk-SENTINEL"}}"#))
                .contains("SENTINEL")
        );
    }

    #[test]
    fn task_config_round_trip() {
        let specs = vec![
            McpSpec::Uuid(uid(B)),
            McpSpec::parse(r#"{"mcpServers":{"gh":{"command":"npx","env":{"T":"${TOKEN}"}}}}"#)
                .expect("parsing the test spec"),
            McpSpec::Uuid(uid(A)),
            McpSpec::Uuid(uid(B)),
        ];
        let map = specs_to_server_map(&specs).expect("turning specs into a task map");
        assert_eq!(
            Value::Object(map.clone()),
            json!({
                B: {"warp_id": B},
                "gh": {"command": "npx", "env": {"T": "${TOKEN}"}},
                A: {"warp_id": A},
            })
        );
        let back = server_map_to_specs(&map).expect("turning a task map into specs");
        // Sorted: B (0a1b…) before A (8d3c…), the duplicate B gone.
        assert_eq!(back[0], McpSpec::Uuid(uid(B)));
        assert_eq!(back[1], McpSpec::Uuid(uid(A)));
        assert_eq!(back.len(), 3);
        // And once more: map → specs → map is stable.
        let again = specs_to_server_map(&back).expect("turning specs into a task map");
        assert_eq!(
            server_map_to_specs(&again).expect("turning a task map into specs"),
            back
        );
        let mut sorted_keys: Vec<&String> = again.keys().collect();
        sorted_keys.sort();
        let mut original_keys: Vec<&String> = map.keys().collect();
        original_keys.sort();
        assert_eq!(sorted_keys, original_keys);
    }

    #[test]
    fn duplicate_names_across_specs_are_errors() {
        let specs = vec![
            McpSpec::parse(r#"{"a":{"command":"x"}}"#).expect("parsing the test spec"),
            McpSpec::parse(r#"{"a":{"command":"y"}}"#).expect("parsing the test spec"),
        ];
        let err = specs_to_server_map(&specs)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert_eq!(
            err,
            "Duplicate MCP server name 'a' (from inline spec #1 and inline spec #2): rename one of them (a single-server spec is named by its \"name\" field, else by its command's file name or its URL's host)"
        );
    }
}
