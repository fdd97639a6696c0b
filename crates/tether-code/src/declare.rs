//! TypeScript-style declarations of tools, from their JSON Schemas: what a model reads to
//! write `await tools["github__search_issues"]({q: "…"})` right the first time.
//!
//! ```
//! use serde_json::json;
//! let tool = json!({
//!     "name": "math__add",
//!     "description": "Adds two numbers.",
//!     "inputSchema": {"type": "object", "properties": {
//!         "a": {"type": "number"}, "b": {"type": "number"}, "round": {"type": "boolean"}
//!     }, "required": ["a", "b"]},
//!     "outputSchema": {"type": "object", "properties": {"sum": {"type": "number"}}, "required": ["sum"]}
//! });
//! assert_eq!(
//!     tether_code::declare::declaration(&tool),
//!     "/** Adds two numbers. */\nmath__add(args: { a: number; b: number; round?: boolean }): Promise<{ sum: number }>"
//! );
//! ```
//!
//! What JSON Schema says that a type cannot (formats, lengths, patterns) is left out; a
//! property's description is kept, shortened to its first sentence. `$ref`s into the schema's
//! own `$defs`/`definitions` are resolved (a cycle, or a reference elsewhere, is `unknown`),
//! nesting deeper than [`MAX_DEPTH`] is `unknown`, and a declaration is cut at [`MAX_BYTES`].

use std::collections::HashMap;
use std::hash::{Hash as _, Hasher as _};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

/// Nesting deeper than this is `unknown`.
pub const MAX_DEPTH: usize = 6;
/// A declaration's longest form; past it, its argument type is cut to `object`.
pub const MAX_BYTES: usize = 4 * 1024;
/// A description kept in a declaration is cut to this many characters.
const DESCRIPTION_CHARS: usize = 160;

/// The declaration of `tool` (an MCP tool definition): its description as a comment, then
/// `NAME(args: {…}): Promise<…>` (the name quoted when it is not an identifier, as in a
/// TypeScript interface) — the output schema's type, or `string` (the text a tool without one
/// answers).
pub fn declaration(tool: &Value) -> String {
    let name = tool["name"].as_str().unwrap_or_default();
    let input = tool.get("inputSchema").unwrap_or(&Value::Null);
    let output = tool.get("outputSchema").filter(|schema| schema.is_object());
    let returns = output.map_or_else(|| "string".to_owned(), |schema| Types::of(schema).render());
    let mut arguments = Types::of(input).render();
    if arguments == "unknown" {
        arguments = "{}".to_owned();
    }
    let comment = tool["description"]
        .as_str()
        .map(|text| format!("/** {} */\n", short(text, DESCRIPTION_CHARS * 2)))
        .unwrap_or_default();
    let name = key(name);
    let whole = format!("{comment}{name}(args: {arguments}): Promise<{returns}>");
    if whole.len() <= MAX_BYTES {
        return whole;
    }
    let returns = if returns.len() > MAX_BYTES / 4 {
        "object".to_owned()
    } else {
        returns
    };
    format!("{comment}{name}(args: object): Promise<{returns}>")
}

/// Declarations already made, by the definition they were made of: a catalogue rebuilt for
/// one server's change does not make the others' again.
#[derive(Default)]
pub struct Declarations {
    made: Mutex<HashMap<u64, Arc<str>>>,
}

impl Declarations {
    /// [`declaration`] of `tool`, made once per definition.
    pub fn of(&self, tool: &Value) -> Arc<str> {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        tool.to_string().hash(&mut hasher);
        let key = hasher.finish();
        let mut made = self
            .made
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(
            made.entry(key)
                .or_insert_with(|| Arc::from(declaration(tool))),
        )
    }
}

/// A schema's types, with its root for `$ref`.
struct Types<'a> {
    root: &'a Value,
}

impl<'a> Types<'a> {
    fn of(root: &'a Value) -> Self {
        Self { root }
    }

    fn render(&self) -> String {
        self.type_of(self.root, 0, &mut Vec::new())
    }

    /// `schema`'s type at `depth`, `seen` the references being resolved (cycles).
    fn type_of(&self, schema: &'a Value, depth: usize, seen: &mut Vec<&'a str>) -> String {
        let Value::Object(schema) = schema else {
            // `true` (anything) and `false` (nothing) and what is not a schema.
            return if *schema == Value::Bool(false) {
                "never"
            } else {
                "unknown"
            }
            .to_owned();
        };
        if depth > MAX_DEPTH {
            return "unknown".to_owned();
        }
        if let Some(Value::String(reference)) = schema.get("$ref") {
            return self.reference(reference, depth, seen);
        }
        if let Some(constant) = schema.get("const") {
            return literal(constant);
        }
        if let Some(Value::Array(values)) = schema.get("enum") {
            return union(values.iter().map(literal).collect());
        }
        for (key, joiner) in [("anyOf", " | "), ("oneOf", " | "), ("allOf", " & ")] {
            if let Some(Value::Array(parts)) = schema.get(key) {
                let parts: Vec<String> = parts
                    .iter()
                    .map(|part| self.type_of(part, depth + 1, seen))
                    .collect();
                let parts: Vec<String> = parts
                    .into_iter()
                    .map(|part| {
                        if part.contains(' ') && !part.starts_with('{') {
                            format!("({part})")
                        } else {
                            part
                        }
                    })
                    .collect();
                let mut joined = dedup(parts).join(joiner);
                if schema.get("nullable") == Some(&Value::Bool(true)) {
                    joined.push_str(" | null");
                }
                return joined;
            }
        }
        let kinds: Vec<&str> = match schema.get("type") {
            Some(Value::String(kind)) => vec![kind.as_str()],
            Some(Value::Array(kinds)) => kinds.iter().filter_map(Value::as_str).collect(),
            _ if schema.contains_key("properties") => vec!["object"],
            _ if schema.contains_key("items") => vec!["array"],
            _ => Vec::new(),
        };
        if kinds.is_empty() {
            return "unknown".to_owned();
        }
        let mut types: Vec<String> = kinds
            .into_iter()
            .map(|kind| self.kind(kind, schema, depth, seen))
            .collect();
        if schema.get("nullable") == Some(&Value::Bool(true)) {
            types.push("null".to_owned());
        }
        union(types)
    }

    fn kind(
        &self,
        kind: &str,
        schema: &'a Map<String, Value>,
        depth: usize,
        seen: &mut Vec<&'a str>,
    ) -> String {
        match kind {
            "string" => "string".to_owned(),
            "number" | "integer" => "number".to_owned(),
            "boolean" => "boolean".to_owned(),
            "null" => "null".to_owned(),
            "array" => {
                let item = schema.get("items").map_or_else(
                    || "unknown".to_owned(),
                    |items| self.type_of(items, depth + 1, seen),
                );
                if item.contains(' ') && !item.starts_with('{') {
                    format!("({item})[]")
                } else {
                    format!("{item}[]")
                }
            }
            "object" => self.object(schema, depth, seen),
            _ => "unknown".to_owned(),
        }
    }

    fn object(
        &self,
        schema: &'a Map<String, Value>,
        depth: usize,
        seen: &mut Vec<&'a str>,
    ) -> String {
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|names| names.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut members = Vec::new();
        if let Some(Value::Object(properties)) = schema.get("properties") {
            for (name, property) in properties {
                let optional = if required.contains(&name.as_str()) {
                    ""
                } else {
                    "?"
                };
                let comment = property
                    .get("description")
                    .and_then(Value::as_str)
                    .map(|text| format!("/** {} */ ", short(text, DESCRIPTION_CHARS)))
                    .unwrap_or_default();
                members.push(format!(
                    "{comment}{}{optional}: {}",
                    key(name),
                    self.type_of(property, depth + 1, seen)
                ));
            }
        }
        match schema.get("additionalProperties") {
            Some(Value::Bool(false)) | None => {}
            Some(Value::Bool(true)) if !members.is_empty() => {}
            Some(rest) => members.push(format!(
                "[key: string]: {}",
                self.type_of(rest, depth + 1, seen)
            )),
        }
        if members.is_empty() {
            return "{ [key: string]: unknown }".to_owned();
        }
        format!("{{ {} }}", members.join("; "))
    }

    fn reference(&self, reference: &'a str, depth: usize, seen: &mut Vec<&'a str>) -> String {
        if seen.contains(&reference) {
            return "unknown".to_owned();
        }
        let Some(target) = reference
            .strip_prefix('#')
            .and_then(|pointer| self.root.pointer(pointer))
        else {
            return "unknown".to_owned();
        };
        seen.push(reference);
        let resolved = self.type_of(target, depth + 1, seen);
        seen.pop();
        resolved
    }
}

/// A JSON value as a TypeScript literal type.
fn literal(value: &Value) -> String {
    match value {
        Value::String(_) | Value::Number(_) | Value::Bool(_) | Value::Null => value.to_string(),
        _ => "unknown".to_owned(),
    }
}

fn union(types: Vec<String>) -> String {
    match dedup(types).join(" | ") {
        empty if empty.is_empty() => "never".to_owned(),
        joined => joined,
    }
}

fn dedup(types: Vec<String>) -> Vec<String> {
    let mut kept: Vec<String> = Vec::new();
    for kind in types {
        if !kept.contains(&kind) {
            kept.push(kind);
        }
    }
    kept
}

/// A property's name as a key: as is when it is an identifier, else quoted.
fn key(name: &str) -> String {
    let identifier = name
        .chars()
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_' || first == '$')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
    if identifier {
        name.to_owned()
    } else {
        Value::String(name.to_owned()).to_string()
    }
}

/// `text`'s first sentence (or line), at most `chars` characters, with nothing that would end
/// the comment it goes in.
fn short(text: &str, chars: usize) -> String {
    let first = text.lines().next().unwrap_or_default().trim();
    let sentence = first
        .find(". ")
        .map_or(first, |end| &first[..=end])
        .replace("*/", "* /");
    let mut cut: String = sentence.chars().take(chars).collect();
    if cut.len() < sentence.len() {
        cut.push('…');
    }
    cut
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    fn args(schema: Value) -> String {
        declaration(&json!({"name": "s__t", "inputSchema": schema}))
    }

    #[test]
    fn objects_arrays_enums_and_optional_fields() {
        assert_eq!(
            args(json!({"type": "object", "properties": {
                "state": {"type": "string", "enum": ["open", "closed"], "description": "Which issues. Default open."},
                "labels": {"type": "array", "items": {"type": "string"}},
                "page-size": {"type": ["integer", "null"]}
            }, "required": ["state"]})),
            "s__t(args: { /** Which issues. */ state: \"open\" | \"closed\"; labels?: string[]; \"page-size\"?: number | null }): Promise<string>"
        );
        assert_eq!(
            args(json!({"type": "object"})),
            "s__t(args: { [key: string]: unknown }): Promise<string>"
        );
        assert_eq!(args(Value::Null), "s__t(args: {}): Promise<string>");
    }

    #[test]
    fn a_name_that_is_not_an_identifier_is_quoted() {
        let tool = json!({"name": "ev__get-sum", "inputSchema": {"type": "object"}});
        assert_eq!(
            declaration(&tool),
            "\"ev__get-sum\"(args: { [key: string]: unknown }): Promise<string>"
        );
    }

    #[test]
    fn refs_resolve_and_cycles_end() {
        let schema = json!({
            "type": "object",
            "properties": {"node": {"$ref": "#/$defs/node"}, "other": {"$ref": "https://example.com/x"}},
            "required": ["node"],
            "$defs": {"node": {"type": "object", "properties": {
                "id": {"type": "string"},
                "next": {"$ref": "#/$defs/node"},
                "kind": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "number"}}]}
            }, "required": ["id"]}}
        });
        assert_eq!(
            args(schema),
            "s__t(args: { node: { id: string; next?: unknown; kind?: string | number[] }; other?: unknown }): Promise<string>"
        );
    }

    #[test]
    fn deep_or_huge_schemas_stay_bounded() {
        let mut deep = json!({"type": "string"});
        for _ in 0..20 {
            deep = json!({"type": "object", "properties": {"x": deep}, "required": ["x"]});
        }
        let declared = args(deep);
        assert!(declared.contains("unknown"), "{declared}");
        let mut properties = Map::new();
        for i in 0..2_000 {
            properties.insert(format!("field{i}"), json!({"type": "string"}));
        }
        let huge = args(json!({"type": "object", "properties": properties}));
        assert_eq!(huge, "s__t(args: object): Promise<string>");
    }

    #[test]
    fn descriptions_cannot_end_the_comment_and_are_cached_per_definition() {
        let tool = json!({"name": "s__t", "description": "Reads. */ evil(); /*", "inputSchema": {"type": "object"}});
        let declared = declaration(&tool);
        assert!(!declared.contains("*/ evil"), "{declared}");
        let made = Declarations::default();
        assert!(Arc::ptr_eq(&made.of(&tool), &made.of(&tool)));
    }
}
