//! Redaction of what goes back to a client: every string of a result (text content, resource
//! contents, prompt messages, structured content, object keys) and every error message passes
//! through the run's [`Masker`], the same one the logs use, so a secret value — and each form
//! libraries print it in (percent-encoded, escaped, lower-cased) — reaches the client as the
//! mask.
//!
//! The masking is [`tether_config::mask_json`], the one every command that prints a server's
//! answer uses: it masks parsed strings, never the JSON text (so no value can break the
//! protocol), decodes base64 payloads (`blob`, image and audio `data`) and finds a value split
//! across consecutive text blocks.

use serde_json::Value;
use tether_config::Masker;

/// Masks every string and object key in `value`, in place. Returns how many strings changed.
pub fn mask_value(masker: &Masker, value: &mut Value) -> usize {
    tether_config::mask_json(masker, value)
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;
    use tether_config::{MASK, SecretValue};

    use super::*;

    #[test]
    fn every_string_and_key_is_masked() {
        let secret = SecretValue::from("s3cr3t-$HOME-\"q\"");
        let masker = Masker::new([&secret]);
        let mut value = json!({
            "content": [
                {"type": "text", "text": "TOKEN=s3cr3t-$HOME-\"q\" and more"},
                {"type": "text", "text": "url ?t=s3cr3t-%24HOME-%22q%22"}
            ],
            "structuredContent": {"s3cr3t-$HOME-\"q\"": 1, "n": 2},
            "isError": false
        });
        let changed = mask_value(&masker, &mut value);
        assert_eq!(changed, 3);
        let text = value.to_string();
        assert!(!text.contains("s3cr3t"), "{text}");
        assert!(text.contains(MASK), "{text}");
        assert_eq!(value["isError"], json!(false));
        assert_eq!(value["structuredContent"]["n"], json!(2));
    }

    #[test]
    fn values_without_secrets_are_unchanged() {
        let secret = SecretValue::from("unrelated-sentinel");
        let masker = Masker::new([&secret]);
        let original = json!({"content": [{"type": "text", "text": "hello"}]});
        let mut value = original.clone();
        assert_eq!(mask_value(&masker, &mut value), 0);
        assert_eq!(value, original);
    }
}
