//! `--big-tool`: a tool `big` answering with as many bytes of text as asked (for the gateway's
//! output budget), optionally with a binary blob and with an environment variable's value at
//! the start and at the end of the text (for the masking of both parts of a cut result).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, ResourceContents, Tool};
use serde_json::{Value, json};

/// The tool's name.
pub const TOOL: &str = "big";

/// The most bytes of text or blob one call may ask for.
const MAX_BYTES: usize = 64 * 1024 * 1024;

/// The line the text repeats (58 bytes, one of them a two-byte character).
const LINE: &str = "the quick brown fox jumps over the lazy dog, café 0123456\n";

/// The tool's definition.
pub fn tool() -> Tool {
    let schema = json!({
        "type": "object",
        "properties": {
            "bytes": {"type": "integer", "description": "How many bytes of text (UTF-8) to answer with."},
            "blob_bytes": {"type": "integer", "description": "Also answer with an embedded binary resource of this many bytes."},
            "env": {"type": "string", "description": "Put this environment variable's NAME=VALUE at the start and at the end of the text."}
        },
        "required": ["bytes"]
    });
    let schema: JsonObject = serde_json::from_value(schema).unwrap_or_default();
    Tool::new(
        TOOL,
        "Answer with BYTES bytes of text (lines of 58 bytes), and optionally a blob.",
        schema,
    )
}

/// The answer to a call with `arguments`.
pub fn call(arguments: Option<&JsonObject>) -> Result<CallToolResult, String> {
    let number = |key: &str| -> Result<usize, String> {
        let value = arguments.and_then(|a| a.get(key)).and_then(Value::as_u64);
        let n = usize::try_from(value.unwrap_or(0)).map_err(|e| e.to_string())?;
        if n > MAX_BYTES {
            return Err(format!("{key}: at most {MAX_BYTES} bytes"));
        }
        Ok(n)
    };
    let bytes = number("bytes")?;
    let blob_bytes = number("blob_bytes")?;
    let marker = match arguments.and_then(|a| a.get("env")).and_then(Value::as_str) {
        Some(name) => format!("{name}={}", std::env::var(name).unwrap_or_default()),
        None => String::new(),
    };
    let mut content = vec![ContentBlock::text(text_of(bytes, &marker))];
    if blob_bytes > 0 {
        let data: Vec<u8> = (0..blob_bytes)
            .map(|i| u8::try_from(i % 251).unwrap_or_default())
            .collect();
        content.push(ContentBlock::resource(
            ResourceContents::blob(STANDARD.encode(data), "file:///big.bin")
                .with_mime_type("application/octet-stream"),
        ));
    }
    Ok(CallToolResult::success(content))
}

/// Exactly `bytes` bytes of text: `marker` and a newline first, lines of [`LINE`], a newline
/// and `marker` last, padded with `.` before the last marker.
fn text_of(bytes: usize, marker: &str) -> String {
    let ends = match 2 * (marker.len() + 1) {
        _ if marker.is_empty() => 0,
        ends if ends > bytes => 0,
        ends => ends,
    };
    let body = bytes - ends;
    let mut text = String::with_capacity(bytes);
    if ends > 0 {
        text.push_str(marker);
        text.push('\n');
    }
    while text.len() + LINE.len() <= body + ends / 2 {
        text.push_str(LINE);
    }
    while text.len() < body + ends / 2 {
        text.push('.');
    }
    if ends > 0 {
        text.push('\n');
        text.push_str(marker);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_has_exactly_the_bytes_asked_for() {
        for bytes in [0, 1, 57, 58, 59, 1000, 100_003] {
            assert_eq!(text_of(bytes, "").len(), bytes, "{bytes}");
            let marked = text_of(bytes + 40, "V=s3cr3t");
            assert_eq!(marked.len(), bytes + 40, "{bytes}");
            assert!(marked.starts_with("V=s3cr3t\n") && marked.ends_with("\nV=s3cr3t"));
        }
    }
}
