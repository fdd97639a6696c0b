//! Masking what a server sends back (MCP results, tool and prompt definitions, notifications)
//! as parsed JSON: every string value and object key goes through the [`Masker`], never the
//! JSON text itself, so a value can never break the protocol around it (with a secret `x`,
//! masking raw JSON turned `"type":"text"` into `"type":"te********t"`).
//!
//! - The MCP schema's own words — field names (`type`, `text`, `content`, `mimeType`, …) and
//!   tag values (`text`, `image`, `resource`, `user`, JSON Schema's `object`, …) — are left as
//!   they are where a key or a whole string is exactly one of them: they are public, and a
//!   client must read them to parse the answer. Any other key or string is masked, inside
//!   words too when the value is long enough (see [`crate::SHORT_SECRET_CHARS`]).
//! - Base64 payloads (`blob` of resource contents, `data` of image and audio content) are
//!   decoded and searched; one that holds a value is replaced by the base64 of its masked
//!   text (an image that held a secret no longer displays: it is not passed on).
//! - A value split across consecutive text blocks (`{"type":"text","text":…}` items of one
//!   array) is found in their concatenation and masked in each block.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use serde_json::{Map, Value};
use zeroize::Zeroizing;

use crate::mask::Masker;

/// Masks every string and object key in `value` (an MCP message's params or result, or a
/// part of one), in place, as the module docs describe. Returns how many strings changed.
pub fn mask_json(masker: &Masker, value: &mut Value) -> usize {
    if masker.is_empty() {
        return 0;
    }
    walk(masker, value)
}

fn walk(masker: &Masker, value: &mut Value) -> usize {
    match value {
        Value::String(text) => mask_text(masker, text),
        Value::Array(items) => {
            let across = mask_split_text(masker, items);
            across
                + items
                    .iter_mut()
                    .map(|item| walk(masker, item))
                    .sum::<usize>()
        }
        Value::Object(map) => mask_object(masker, map),
        Value::Null | Value::Bool(_) | Value::Number(_) => 0,
    }
}

fn mask_object(masker: &Masker, map: &mut Map<String, Value>) -> usize {
    let mut changed = 0;
    let renamed: Vec<(String, String)> = map
        .keys()
        .filter(|key| !is_protocol_word(key))
        .filter_map(|key| {
            let masked = masker.mask(key);
            (masked != *key).then(|| (key.clone(), masked))
        })
        .collect();
    for (key, masked) in renamed {
        if let Some(inner) = map.shift_remove(&key) {
            map.insert(masked, inner);
            changed += 1;
        }
    }
    let media = matches!(
        map.get("type").and_then(Value::as_str),
        Some("image" | "audio")
    );
    for (key, inner) in map.iter_mut() {
        let base64 = key == "blob" || (media && key == "data");
        changed += match inner {
            Value::String(encoded) if base64 => mask_base64(masker, encoded),
            _ => walk(masker, inner),
        };
    }
    changed
}

fn mask_text(masker: &Masker, text: &mut String) -> usize {
    if is_protocol_word(text) {
        return 0;
    }
    replace_if_changed(text, masker.mask(text))
}

fn replace_if_changed(text: &mut String, masked: String) -> usize {
    if masked == *text {
        0
    } else {
        *text = masked;
        1
    }
}

/// A base64 payload: decoded, searched, and replaced by the base64 of its masked text when it
/// held a value. Text that is not base64 is masked as text.
fn mask_base64(masker: &Masker, encoded: &mut String) -> usize {
    let decoded = STANDARD
        .decode(encoded.as_bytes())
        .or_else(|_| STANDARD_NO_PAD.decode(encoded.as_bytes()));
    let Ok(decoded) = decoded.map(Zeroizing::new) else {
        return mask_text(masker, encoded);
    };
    let text = Zeroizing::new(String::from_utf8_lossy(&decoded).into_owned());
    let masked = Zeroizing::new(masker.mask(&text));
    if *masked == *text {
        return 0;
    }
    *encoded = STANDARD.encode(masked.as_bytes());
    1
}

/// Masks the values that run from one text block into the next among `items` (consecutive
/// `{"type":"text","text":…}` objects). Returns how many blocks changed.
fn mask_split_text(masker: &Masker, items: &mut [Value]) -> usize {
    let is_text = |item: &Value| {
        item.get("type").and_then(Value::as_str) == Some("text")
            && item.get("text").is_some_and(Value::is_string)
    };
    let mut changed = 0;
    let mut start = 0;
    while start < items.len() {
        if !is_text(&items[start]) {
            start += 1;
            continue;
        }
        let end = (start..items.len())
            .find(|&i| !is_text(&items[i]))
            .unwrap_or(items.len());
        if end - start >= 2 {
            let run = &mut items[start..end];
            let texts: Vec<&str> = run
                .iter()
                .map(|item| item["text"].as_str().unwrap_or_default())
                .collect();
            let masked = masker.mask_pieces(&texts);
            for (item, masked) in run.iter_mut().zip(masked) {
                if let Some(Value::String(text)) = item.get_mut("text") {
                    changed += replace_if_changed(text, masked);
                }
            }
        }
        start = end;
    }
    changed
}

/// Whether `word` is one of the MCP schema's own field names or tag values (JSON-RPC's and
/// JSON Schema's included): text a client parses, never masked.
fn is_protocol_word(word: &str) -> bool {
    PROTOCOL_WORDS.binary_search(&word).is_ok()
}

/// Sorted (byte order) for the binary search.
const PROTOCOL_WORDS: &[&str] = &[
    "$schema",
    "_meta",
    "additionalProperties",
    "annotations",
    "anyOf",
    "arguments",
    "array",
    "assistant",
    "audience",
    "audio",
    "blob",
    "boolean",
    "code",
    "completion",
    "content",
    "contents",
    "data",
    "default",
    "description",
    "destructiveHint",
    "enum",
    "error",
    "format",
    "hasMore",
    "icons",
    "id",
    "idempotentHint",
    "image",
    "inputSchema",
    "instructions",
    "integer",
    "isError",
    "items",
    "jsonrpc",
    "lastModified",
    "level",
    "logger",
    "message",
    "messages",
    "method",
    "mimeType",
    "name",
    "nextCursor",
    "null",
    "number",
    "object",
    "oneOf",
    "openWorldHint",
    "outputSchema",
    "params",
    "priority",
    "progress",
    "progressToken",
    "prompts",
    "properties",
    "readOnlyHint",
    "required",
    "resource",
    "resourceTemplates",
    "resource_link",
    "resources",
    "result",
    "role",
    "size",
    "string",
    "structuredContent",
    "text",
    "title",
    "tools",
    "total",
    "type",
    "uri",
    "uriTemplate",
    "user",
    "values",
];

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;
    use crate::secret::{MASK, SecretValue};

    #[test]
    fn the_protocol_words_are_sorted() {
        let mut sorted = PROTOCOL_WORDS.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted, PROTOCOL_WORDS);
    }

    #[test]
    fn a_one_character_value_never_breaks_the_protocol() {
        let masker = Masker::new([&SecretValue::from("x"), &SecretValue::from("text")]);
        let mut value = json!({
            "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "next: x"}],
            "structuredContent": {"x": "exit", "text": "text"},
            "isError": false
        });
        mask_json(&masker, &mut value);
        assert_eq!(
            value,
            json!({
                "content": [{"type": "text", "text": MASK}, {"type": "text", "text": format!("next: {MASK}")}],
                "structuredContent": {MASK: "exit", "text": "text"},
                "isError": false
            })
        );
    }

    #[test]
    fn base64_payloads_and_split_values_are_masked() {
        let secret = "sk-B64-\"q\"-é";
        let masker = Masker::new([&SecretValue::from(secret)]);
        let encoded = STANDARD.encode(format!("token={secret};"));
        let mut value = json!({
            "content": [
                {"type": "image", "data": encoded, "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "file:///k", "blob": encoded}},
                {"type": "text", "text": "first sk-B64"},
                {"type": "text", "text": "-\"q\"-é last"},
                {"type": "image", "data": STANDARD.encode([0_u8, 159, 146, 150]), "mimeType": "image/png"}
            ]
        });
        assert_eq!(mask_json(&masker, &mut value), 4);
        let masked = STANDARD.encode(format!("token={MASK};"));
        assert_eq!(value["content"][0]["data"], json!(masked));
        assert_eq!(value["content"][1]["resource"]["blob"], json!(masked));
        assert_eq!(value["content"][2]["text"], json!(format!("first {MASK}")));
        assert_eq!(value["content"][3]["text"], json!(format!("{MASK} last")));
        assert_eq!(
            value["content"][4]["data"],
            json!(STANDARD.encode([0_u8, 159, 146, 150]))
        );
    }
}
