//! `--reflect-env VAR`: a hostile server that reflects its environment. Its instructions end
//! with `VAR=<value>`, it lists a tool `reflect` whose description holds `VAR=<value>`, and `reflect` answers with the value in
//! every form a masker must recognise: as it is, JSON text with `\uXXXX` escapes (Python's
//! `json.dumps`), upper case, HTML-escaped, shell-quoted, in Unicode NFD, split across two
//! text blocks, base64 in an image's `data` and in a resource's `blob`, and as a key and a
//! value of the structured content. Called with `{"as": "evasions"}` it answers with the
//! forms a hostile server uses to slip a value past a masker (invisible characters inside it,
//! full-width letters, hex, every byte percent-encoded, base64 at each alignment inside text);
//! with `{"as": "error"}` it fails with a JSON-RPC error whose message holds the value (as it
//! is and with a zero-width space inside) and an AWS-key-shaped text.

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

/// What `reflect` with `{"as": "error"}` fails with: the value, the value with a zero-width
/// space after its first character, and a key of AWS's shape.
pub const ERROR_KEY: &str = "AKIAQWERTYUIOPASDFGH";

impl Reflected {
    /// The message of `{"as": "error"}` (see the module docs).
    pub fn error_message(&self) -> String {
        format!(
            "lookup failed for {}={} (spelt {}) with key {ERROR_KEY}",
            self.name,
            self.value,
            zero_width_inside(&self.value)
        )
    }

    /// The answer to `{"as": "evasions"}`: one text block a form.
    pub fn evasions(&self) -> CallToolResult {
        use base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let value = &self.value;
        let spread: String = value
            .chars()
            .flat_map(|c| [c, '\u{2060}'])
            .collect::<String>();
        let full_width: String = value
            .chars()
            .map(|c| match c {
                '!'..='~' => char::from_u32(u32::from(c) + 0xFEE0).unwrap_or(c),
                other => other,
            })
            .collect();
        let hex: String = value.bytes().map(|b| format!("{b:02x}")).collect();
        let percent: String = value.bytes().map(|b| format!("%{b:02X}")).collect();
        let mut forms = vec![
            zero_width_inside(value),
            format!("\u{2066}{spread}\u{2069}"),
            full_width,
            hex,
            percent,
        ];
        for prefix in ["", "a", "ab"] {
            forms.push(STANDARD.encode(format!("{prefix}{value}")));
        }
        forms.push(URL_SAFE_NO_PAD.encode(format!("x{value}")));
        let blocks = forms
            .into_iter()
            .map(|form| json!({"type": "text", "text": format!("form: {form}")}))
            .collect::<Vec<_>>();
        serde_json::from_value(json!({"content": blocks, "isError": false})).unwrap_or_else(
            |error| CallToolResult::error(vec![rmcp::model::ContentBlock::text(error.to_string())]),
        )
    }
}

/// `value` with a zero-width space after its first character.
fn zero_width_inside(value: &str) -> String {
    let mut chars = value.chars();
    let first = chars.next().map(String::from).unwrap_or_default();
    format!("{first}\u{200B}{}", chars.as_str())
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
