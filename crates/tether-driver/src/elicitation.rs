//! Answering a server's elicitation without a person (`tether call --accept-elicitation-defaults`):
//! a form is accepted with the defaults its requested schema gives, and declined when a field
//! it requires has none. Nothing is invented: a field without a default is never filled.
//! A URL elicitation (a page to open) is declined; sampling and roots are refused.

use std::sync::Arc;

use rmcp::model::ClientCapabilities;
use serde_json::{Map, Value, json};

use crate::launch::{ClientRequests, RequestRefused};

/// The answer to an `elicitation/create` with `params`: accept with every property's
/// `default`, or decline when a required property has none (or it is not a form).
pub fn answer_with_defaults(params: &Value) -> Value {
    if params.get("mode").and_then(Value::as_str) == Some("url") {
        return json!({"action": "decline"});
    }
    let schema = &params["requestedSchema"];
    let mut content = Map::new();
    if let Some(properties) = schema["properties"].as_object() {
        for (name, property) in properties {
            if let Some(default) = property.get("default") {
                content.insert(name.clone(), default.clone());
            }
        }
    }
    let required = schema["required"].as_array().into_iter().flatten();
    let missing = required
        .filter_map(Value::as_str)
        .any(|name| !content.contains_key(name));
    if missing {
        return json!({"action": "decline"});
    }
    json!({"action": "accept", "content": content})
}

/// Answers elicitation with [`answer_with_defaults`]; refuses every other request.
pub fn defaults_answerer() -> ClientRequests {
    Arc::new(|_server, method, params| {
        Box::pin(async move {
            if method == "elicitation/create" {
                Ok(answer_with_defaults(&params))
            } else {
                Err(RequestRefused {
                    code: -32601,
                    message: format!("this client answers elicitation only, not {method}"),
                })
            }
        })
    })
}

/// The capabilities [`defaults_answerer`] can answer: form elicitation.
pub fn form_elicitation() -> ClientCapabilities {
    serde_json::from_value(json!({"elicitation": {"form": {}}})).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_accepted_and_a_required_field_without_one_declines() {
        let params = json!({"message": "m", "requestedSchema": {"type": "object",
            "properties": {"name": {"type": "string", "default": "John Doe"}, "age": {"type": "integer", "default": 30},
                           "note": {"type": "string"}},
            "required": ["name"]}});
        assert_eq!(
            answer_with_defaults(&params),
            json!({"action": "accept", "content": {"name": "John Doe", "age": 30}})
        );
        let mut without = params.clone();
        without["requestedSchema"]["required"] = json!(["note"]);
        assert_eq!(answer_with_defaults(&without), json!({"action": "decline"}));
        let url = json!({"mode": "url", "url": "https://example.com", "message": "m"});
        assert_eq!(answer_with_defaults(&url), json!({"action": "decline"}));
        assert!(form_elicitation().elicitation.is_some());
    }
}
