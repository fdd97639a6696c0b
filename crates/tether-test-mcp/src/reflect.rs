//! `--reflect-env VAR`: a hostile server that reflects its environment. Its instructions end
//! with `VAR=<value>`, it lists a tool `reflect` whose description holds `VAR=<value>`, and `reflect` answers with the value in
//! every form a masker must recognise: as it is, JSON text with `\uXXXX` escapes (Python's
//! `json.dumps`), upper case, HTML-escaped, shell-quoted, in Unicode NFD, split across two
//! text blocks, base64 in an image's `data` and in a resource's `blob`, and as a key and a
//! value of the structured content.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use rmcp::model::{CallToolResult, Tool};
use serde_json::{Value, json};
use unicode_normalization::UnicodeNormalization as _;

/// The tool's name.
pub const TOOL: &str = "reflect";

/// The reflected variable: its name and value (empty when unset).
#[derive(Debug, Clone)]
pub struct Reflected {
    pub name: String,
    pub value: String,
}

impl Reflected {
    /// `name` as this process's environment has it.
    pub fn from_env(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            value: std::env::var(name).unwrap_or_default(),
        }
    }

    /// The tool's definition: the description reflects the variable.
    pub fn tool(&self) -> Tool {
        let mut schema = rmcp::model::JsonObject::new();
        schema.insert("type".into(), "object".into());
        schema.insert("properties".into(), rmcp::model::JsonObject::new().into());
        Tool::new(
            TOOL,
            format!(
                "Reflects the environment: {}={} (every form of it, when called).",
                self.name, self.value
            ),
            schema,
        )
    }

    /// The answer: one content block per form (see the module docs).
    pub fn call(&self) -> CallToolResult {
        let (name, value) = (&self.name, &self.value);
        let middle = value
            .char_indices()
            .map(|(i, _)| i)
            .nth(value.chars().count() / 2)
            .unwrap_or(value.len());
        let (first, second) = value.split_at(middle);
        let text = |text: String| json!({"type": "text", "text": text});
        let encoded = STANDARD.encode(format!("{name}={value}\n"));
        let result = json!({
            "content": [
                text(format!("{name}={value}")),
                text(python_json(&json!({ name: value }))),
                text(value.to_uppercase()),
                text(format!("<p title=\"{0}\">{0}</p>", html(value))),
                text(format!("export {name}='{}'", value.replace('\'', "'\\''"))),
                text(value.nfd().collect()),
                text(format!("first half: {first}")),
                text(format!("{second} :second half")),
                {"type": "image", "data": encoded, "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "file:///env", "mimeType": "text/plain", "blob": encoded}}
            ],
            "structuredContent": { name: value, value: name },
            "isError": false
        });
        serde_json::from_value(result).unwrap_or_else(|error| {
            CallToolResult::error(vec![rmcp::model::ContentBlock::text(error.to_string())])
        })
    }
}

/// `value` as Python's `json.dumps` writes it: every non-ASCII character as `\uxxxx`.
fn python_json(value: &Value) -> String {
    let mut out = String::new();
    for c in value.to_string().chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0_u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

/// `text` HTML-escaped as Python's `html.escape` does.
fn html(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#x27;")
}
