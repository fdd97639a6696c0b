//! Reading config text into a JSON tree that keeps every key, in order, duplicates included.
//!
//! `serde_json::Value` keeps only the last of two equal keys, which would turn a duplicate
//! server name into a silent overwrite. This tree keeps them all so that validation can name
//! the duplicate. Nesting is bounded by serde_json's recursion limit (128), and input size by
//! [`MAX_CONFIG_BYTES`], so no input overflows the stack or runs for long.
//!
//! Config text may be JSONC, as VS Code and Gemini CLI read it: `//` and `/* */` comments and
//! trailing commas are blanked out first (by `json-strip-comments`, byte for byte, with every
//! line break put back), so an error's line and column still point into the user's text.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::error::ConfigError;

/// The largest config text accepted, in bytes.
pub const MAX_CONFIG_BYTES: usize = 16 * 1024 * 1024;

/// A JSON value whose objects keep all their entries in document order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Json {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    /// A word for the value's type, for error messages (never the value itself).
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "a boolean",
            Json::Number(_) => "a number",
            Json::String(_) => "a string",
            Json::Array(_) => "an array",
            Json::Object(_) => "an object",
        }
    }

    /// The value as `serde_json::Value` (for a duplicated key, the last one is kept; callers
    /// validate first).
    pub(crate) fn to_value(&self) -> serde_json::Value {
        match self {
            Json::Null => serde_json::Value::Null,
            Json::Bool(b) => serde_json::Value::Bool(*b),
            Json::Number(n) => serde_json::Value::Number(n.clone()),
            Json::String(s) => serde_json::Value::String(s.clone()),
            Json::Array(items) => {
                serde_json::Value::Array(items.iter().map(Json::to_value).collect())
            }
            Json::Object(entries) => serde_json::Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_value()))
                    .collect(),
            ),
        }
    }

    pub(crate) fn as_object(&self) -> Option<&[(String, Json)]> {
        match self {
            Json::Object(entries) => Some(entries),
            _ => None,
        }
    }
}

/// How strictly config text is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Syntax {
    /// Plain JSON (a managed server's `mcpConfigJson`: machine-written, so a stray comma is a
    /// server defect to report, not to paper over).
    Json,
    /// JSON with `//` and `/* */` comments and trailing commas (what a user pastes), or TOML
    /// (Codex's `config.toml`) when the text does not start like JSON.
    Jsonc,
}

/// Parses config text. Accepts a leading byte-order mark and text that lacks its outer braces
/// (`"mcpServers": {...}`); under [`Syntax::Jsonc`], comments and trailing commas. Errors carry
/// line and column in the text as given and never echo the input.
pub(crate) fn parse(text: &str, syntax: Syntax) -> Result<Json, ConfigError> {
    if text.len() > MAX_CONFIG_BYTES {
        return Err(ConfigError::TooLarge {
            size: text.len(),
            limit: MAX_CONFIG_BYTES,
        });
    }
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let strip = |text: &str| match syntax {
        Syntax::Json => text.to_owned(),
        Syntax::Jsonc => strip_jsonc(text),
    };
    let stripped = strip(text);
    let first = stripped.trim_start().chars().next();
    if syntax == Syntax::Jsonc && first.is_some_and(|c| c != '{' && c != '"') {
        return parse_toml(text, &stripped);
    }
    if first == Some('"') {
        // Missing outer braces: parse `{` + text + `}` (stripped again, so that a trailing
        // comma after the last entry goes too) and shift line-1 columns back by one.
        let wrapped = strip(&format!("{{{text}\n}}"));
        return parse_exact(&wrapped).map_err(|err| match err {
            ConfigError::InvalidJson {
                line: 1,
                column,
                reason,
            } => ConfigError::InvalidJson {
                line: 1,
                column: column.saturating_sub(1).max(1),
                reason,
            },
            other => other,
        });
    }
    parse_exact(&stripped)
}

/// `text` with comments and trailing commas replaced by spaces, byte for byte, so that every
/// byte keeps its offset. The stripper also blanks the line breaks inside a block comment;
/// they are put back so that line numbers stay true. Text the stripper refuses (a `/` that
/// starts no comment) is returned unchanged: the JSON reader then reports the `/` where it is.
fn strip_jsonc(text: &str) -> String {
    let mut stripped = text.to_owned();
    if json_strip_comments::strip_comments_in_place(&mut stripped).is_err() {
        return text.to_owned();
    }
    let original = text.as_bytes();
    let mut bytes = stripped.into_bytes();
    for (index, byte) in bytes.iter_mut().enumerate() {
        if matches!(original[index], b'\n' | b'\r') {
            *byte = original[index];
        }
    }
    // Only ASCII bytes changed (to spaces or back to line breaks), each replacing a whole
    // character's bytes, so the text is still UTF-8.
    String::from_utf8(bytes).unwrap_or_else(|_| text.to_owned())
}

/// Reads Codex-style TOML (`[mcp_servers.NAME]` tables) into the same tree. Text that is no
/// TOML but is JSON (`[]`, say) gives the JSON reading, so that the error says what it is; so
/// does text that looks like neither (no `[table]` start, no `key = value` first line).
fn parse_toml(text: &str, stripped: &str) -> Result<Json, ConfigError> {
    match toml::from_str::<toml::Table>(text) {
        Ok(table) => Ok(toml_to_json(toml::Value::Table(table))),
        Err(err) => {
            let json = parse_exact(stripped);
            let significant = stripped.trim_start();
            let looks_like_toml = significant.starts_with('[')
                || significant
                    .lines()
                    .next()
                    .is_some_and(|line| line.contains('='));
            if json.is_ok() || !looks_like_toml {
                return json;
            }
            let offset = err.span().map_or(0, |span| span.start).min(text.len());
            let before = &text[..offset];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |at| at + 1) + 1;
            // The message names what was expected (and keys); the toml crate's Display would
            // also quote the input line, so it is not used.
            Err(ConfigError::InvalidToml {
                line,
                column,
                reason: err.message().trim().replace('\n', "; "),
            })
        }
    }
}

fn toml_to_json(value: toml::Value) -> Json {
    match value {
        toml::Value::String(text) => Json::String(text),
        toml::Value::Integer(n) => Json::Number(n.into()),
        toml::Value::Float(f) => serde_json::Number::from_f64(f).map_or(Json::Null, Json::Number),
        toml::Value::Boolean(b) => Json::Bool(b),
        toml::Value::Datetime(when) => Json::String(when.to_string()),
        toml::Value::Array(items) => Json::Array(items.into_iter().map(toml_to_json).collect()),
        toml::Value::Table(table) => Json::Object(
            table
                .into_iter()
                .map(|(key, value)| (key, toml_to_json(value)))
                .collect(),
        ),
    }
}

fn parse_exact(text: &str) -> Result<Json, ConfigError> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let value = Json::deserialize(&mut deserializer).map_err(json_error)?;
    deserializer.end().map_err(json_error)?;
    Ok(value)
}

/// Turns a serde_json error into ours, keeping the position and a reason that holds no input.
fn json_error(err: serde_json::Error) -> ConfigError {
    let (line, column) = (err.line(), err.column());
    let message = err.to_string();
    // serde_json appends " at line L column C"; keep only the reason before it. The reasons
    // for syntax and end-of-input errors are fixed phrases; this tree accepts every JSON
    // type, so no "invalid type: <value>" message can arise.
    let reason = message
        .rsplit_once(" at line ")
        .map_or(message.as_str(), |(reason, _)| reason);
    if reason.contains("recursion limit") {
        return ConfigError::TooDeep { line, column };
    }
    ConfigError::InvalidJson {
        line,
        column,
        reason: reason.to_owned(),
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_bool<E>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Json, E> {
        serde_json::Number::from_f64(v)
            .map(Json::Number)
            .ok_or_else(|| E::custom("number out of range"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Json, E> {
        Ok(Json::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Json, E> {
        Ok(Json::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut entries = Vec::new();
        while let Some((key, value)) = map.next_entry::<String, Json>()? {
            entries.push((key, value));
        }
        Ok(Json::Object(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_duplicate_keys_in_order() {
        let json = parse(r#"{"a":1,"b":2,"a":3}"#, Syntax::Json).ok();
        let keys: Vec<&str> = json
            .as_ref()
            .and_then(Json::as_object)
            .map(|o| o.iter().map(|(k, _)| k.as_str()).collect())
            .unwrap_or_default();
        assert_eq!(keys, ["a", "b", "a"]);
    }

    #[test]
    fn errors_give_position_and_never_the_input() {
        let secret = "sk-SENTINEL-123";
        let text = format!("{{\"a\":{{\"env\":{{\"K\":\"{secret}\",}}}}}}");
        let err = parse(&text, Syntax::Json)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("line 1"), "{err}");
        assert!(err.contains("column"), "{err}");
        assert!(!err.contains("SENTINEL"), "{err}");
        let unterminated = format!("{{\"a\": \"{secret}");
        let err = parse(&unterminated, Syntax::Json)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("column") && !err.contains("SENTINEL"), "{err}");
    }

    #[test]
    fn missing_outer_braces_keep_true_columns() {
        assert!(parse(r#""mcpServers": {"a": {"command": "x"}}"#, Syntax::Json).is_ok());
        match parse(r#""a": {"command": "x",}"#, Syntax::Json) {
            Err(ConfigError::InvalidJson { line, column, .. }) => {
                assert_eq!((line, column), (1, 22));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn jsonc_comments_and_trailing_commas_are_accepted() {
        let text = "// ~/.gemini/settings.json\n{\n  /* servers\n     block */ \"mcpServers\": {\n    \"a\": {\"command\": \"x\", // run x\n      \"args\": [\"//not a comment\", \"/*nor this*/\",],\n    },\n  },\n}\n";
        let value = parse(text, Syntax::Jsonc).map(|json| json.to_value()).ok();
        assert_eq!(
            value,
            Some(
                serde_json::json!({"mcpServers": {"a": {"command": "x", "args": ["//not a comment", "/*nor this*/"]}}})
            )
        );
        // Without outer braces too.
        assert!(parse("// header\n\"a\": {\"command\": \"x\",},", Syntax::Jsonc).is_ok());
    }

    #[test]
    fn jsonc_errors_point_into_the_original_text() {
        // Line 4 column 11 is the `x` after the multi-line block comment and a comment with
        // multi-byte characters.
        let text = "{\n/* a\n   é comment ü */\n  \"a\": 1, x\n}";
        match parse(text, Syntax::Jsonc) {
            Err(ConfigError::InvalidJson { line, column, .. }) => {
                assert_eq!((line, column), (4, 11));
            }
            other => panic!("unexpected {other:?}"),
        }
        // A `/` that starts no comment is reported where it is.
        match parse("{\"a\": 1, / }", Syntax::Jsonc) {
            Err(ConfigError::InvalidJson { line, column, .. }) => {
                assert_eq!((line, column), (1, 10));
            }
            other => panic!("unexpected {other:?}"),
        }
        // The duplicate-keeping tree is kept under comments.
        let keys: Vec<String> = parse("{\"a\":1, // one\n\"a\":2,}", Syntax::Jsonc)
            .ok()
            .and_then(|json| {
                json.as_object()
                    .map(|o| o.iter().map(|(k, _)| k.clone()).collect())
            })
            .unwrap_or_default();
        assert_eq!(keys, ["a", "a"]);
    }

    #[test]
    fn codex_toml_is_read_into_the_same_tree() {
        let text = "# ~/.codex/config.toml\nmodel = \"o3\"\n\n[mcp_servers.docs]\ncommand = \"docs-server\"\nargs = [\"--port\", \"4000\"]\nstartup_timeout_sec = 20\n\n[mcp_servers.docs.env]\nAPI_KEY = \"k\"\n";
        let value = parse(text, Syntax::Jsonc).map(|json| json.to_value()).ok();
        assert_eq!(
            value,
            Some(serde_json::json!({"model": "o3", "mcp_servers": {"docs": {
                "command": "docs-server", "args": ["--port", "4000"], "startup_timeout_sec": 20,
                "env": {"API_KEY": "k"}}}}))
        );
        // Not TOML and not JSON: a TOML error with a position, and no value from the input.
        let broken = "[mcp_servers.a]\ncommand = \"sk-SENTINEL\nargs = []\n";
        match parse(broken, Syntax::Jsonc) {
            Err(err @ ConfigError::InvalidToml { line: 2, .. }) => {
                assert!(!err.to_string().contains("SENTINEL"), "{err}");
            }
            other => panic!("unexpected {other:?}"),
        }
        // JSON that is not an object still reads as JSON.
        assert_eq!(
            parse("[]", Syntax::Jsonc).map(|json| json.to_value()).ok(),
            Some(serde_json::json!([]))
        );
        // A managed config is never TOML.
        assert!(matches!(
            parse("[mcp_servers.a]\ncommand = \"x\"\n", Syntax::Json),
            Err(ConfigError::InvalidJson { .. })
        ));
    }

    #[test]
    fn deep_nesting_is_a_clear_error() {
        let deep = "[".repeat(100_000);
        assert!(matches!(
            parse(&deep, Syntax::Json),
            Err(ConfigError::TooDeep { .. })
        ));
        let deep_objects = "{\"a\":".repeat(10_000);
        assert!(matches!(
            parse(&deep_objects, Syntax::Json),
            Err(ConfigError::TooDeep { .. })
        ));
    }

    #[test]
    fn huge_input_is_refused_before_parsing() {
        let huge = " ".repeat(MAX_CONFIG_BYTES + 1);
        assert!(matches!(
            parse(&huge, Syntax::Json),
            Err(ConfigError::TooLarge { .. })
        ));
    }

    #[test]
    fn trailing_garbage_is_an_error() {
        assert!(matches!(
            parse("{} x", Syntax::Json),
            Err(ConfigError::InvalidJson { .. })
        ));
    }
}
