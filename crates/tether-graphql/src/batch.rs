//! Batched resolution: one GraphQL operation with one aliased `createManagedMcpClientConfig`
//! field per uid (`m0: createManagedMcpClientConfig(input: $i0) { … }`), so a run's managed
//! servers cost one round trip instead of one per uid.
//!
//! The selection is the single operation's own (cut out of cynic's document), so a batch asks
//! for exactly what a single call asks for. A 2xx answer is split per alias into a body shaped
//! like a single call's answer, which [`crate::response::decode`] maps exactly as it maps a
//! single call: one uid's outcome never depends on another's. The split bodies live in
//! zeroized buffers; `data` is read as borrowed raw JSON, never copied into owned strings.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use uuid::Uuid;
use zeroize::Zeroizing;

use crate::operation;

/// The field every alias selects.
const FIELD: &str = "createManagedMcpClientConfig";

/// The request body of a batch: the document and one `iN` variable per uid.
#[derive(Serialize)]
pub(crate) struct BatchOperation {
    query: String,
    variables: HashMap<String, Input>,
}

#[derive(Serialize)]
struct Input {
    uid: String,
}

/// The alias of the `index`th uid of a batch.
fn alias(index: usize) -> String {
    format!("m{index}")
}

/// The selection set the single operation sends for its field, `{ … }` included.
fn selection() -> String {
    let document = operation::build(Uuid::nil()).query;
    let Some(start) = document
        .find(FIELD)
        .and_then(|at| document[at..].find('{').map(|brace| at + brace))
    else {
        return "{ __typename }".to_owned();
    };
    let mut depth = 0_usize;
    for (offset, character) in document[start..].char_indices() {
        match character {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return document[start..=start + offset].to_owned();
                }
            }
            _ => {}
        }
    }
    "{ __typename }".to_owned()
}

/// The batch operation for `uids`, in their order.
pub(crate) fn build(uids: &[Uuid]) -> BatchOperation {
    let selection = selection();
    let parameters: Vec<String> = (0..uids.len())
        .map(|index| format!("$i{index}: CreateManagedMcpClientConfigInput!"))
        .collect();
    let fields: Vec<String> = (0..uids.len())
        .map(|index| format!("  {}: {FIELD}(input: $i{index}) {selection}", alias(index)))
        .collect();
    let query = format!(
        "mutation CreateManagedMcpClientConfigs({}) {{\n{}\n}}\n",
        parameters.join(", "),
        fields.join("\n")
    );
    let variables = uids
        .iter()
        .enumerate()
        .map(|(index, uid)| {
            (
                format!("i{index}"),
                Input {
                    uid: uid.hyphenated().to_string(),
                },
            )
        })
        .collect();
    BatchOperation { query, variables }
}

/// A batch answer that is not per alias: the server refused the operation as a whole.
#[derive(Debug)]
pub(crate) struct Refused {
    /// Its messages (not shown to users as such: the batch is split and retried).
    pub(crate) messages: Vec<String>,
}

#[derive(Deserialize)]
struct Answer<'a> {
    #[serde(borrow, default)]
    data: Option<HashMap<String, &'a RawValue>>,
    #[serde(default)]
    errors: Option<Vec<ErrorEntry>>,
}

#[derive(Deserialize)]
struct ErrorEntry {
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    path: Option<Vec<serde_json::Value>>,
}

/// One body per uid of a batch of `count`, each shaped like a single call's answer
/// (`{"errors":[…],"data":{"createManagedMcpClientConfig":…}}`), in alias order. An error
/// without a path, or a body without `data`, refuses the whole batch. A body that is not
/// JSON is returned to each alias as it is, so each fails to decode as a single call would.
pub(crate) fn split(body: &[u8], count: usize) -> Result<Vec<Zeroizing<Vec<u8>>>, Refused> {
    let Ok(answer) = serde_json::from_slice::<Answer<'_>>(body) else {
        return Ok((0..count).map(|_| Zeroizing::new(body.to_vec())).collect());
    };
    let errors = answer.errors.unwrap_or_default();
    let scoped = |entry: &ErrorEntry| {
        entry
            .path
            .as_ref()
            .and_then(|path| path.first())
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    };
    let unscoped: Vec<String> = errors
        .iter()
        .filter(|entry| scoped(entry).is_none())
        .map(|entry| entry.message.clone().unwrap_or_default())
        .collect();
    let Some(data) = answer.data.filter(|_| unscoped.is_empty()) else {
        let messages = if unscoped.is_empty() {
            vec!["the answer holds no data".to_owned()]
        } else {
            unscoped
        };
        return Err(Refused { messages });
    };
    let mut bodies = Vec::with_capacity(count);
    for index in 0..count {
        let name = alias(index);
        let messages: Vec<serde_json::Value> = errors
            .iter()
            .filter(|entry| scoped(entry).as_deref() == Some(name.as_str()))
            .map(|entry| serde_json::json!({ "message": entry.message }))
            .collect();
        let mut single = Zeroizing::new(Vec::with_capacity(body.len() / count.max(1) + 64));
        single.extend_from_slice(b"{\"errors\":");
        single.extend_from_slice(
            serde_json::to_string(&messages)
                .unwrap_or_else(|_| "[]".to_owned())
                .as_bytes(),
        );
        match data.get(&name) {
            Some(raw) => {
                single.extend_from_slice(b",\"data\":{\"createManagedMcpClientConfig\":");
                single.extend_from_slice(raw.get().as_bytes());
                single.extend_from_slice(b"}}");
            }
            None => single.extend_from_slice(b",\"data\":null}"),
        }
        bodies.push(single);
    }
    Ok(bodies)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_batch_selects_what_the_single_operation_selects() {
        let single = operation::build(Uuid::nil()).query;
        let batch = build(&[Uuid::nil(), Uuid::max()]);
        let selection = selection();
        assert!(selection.starts_with('{') && selection.ends_with('}'));
        assert!(single.contains(&selection));
        assert!(
            batch
                .query
                .contains("m0: createManagedMcpClientConfig(input: $i0) {")
        );
        assert!(
            batch
                .query
                .contains("m1: createManagedMcpClientConfig(input: $i1) {")
        );
        assert_eq!(batch.query.matches(&selection).count(), 2);
        assert_eq!(batch.variables.len(), 2);
    }

    #[test]
    fn answers_split_per_alias_and_unscoped_errors_refuse_the_batch() {
        let body = br#"{"data":{"m0":{"__typename":"X"},"m1":null},
            "errors":[{"message":"boom","path":["m1"]}]}"#;
        let bodies = split(body, 2).expect("a per-alias answer");
        let text: Vec<String> = bodies
            .iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect();
        assert_eq!(
            text,
            [
                r#"{"errors":[],"data":{"createManagedMcpClientConfig":{"__typename":"X"}}}"#,
                r#"{"errors":[{"message":"boom"}],"data":{"createManagedMcpClientConfig":null}}"#,
            ]
        );
        let refused = split(br#"{"errors":[{"message":"too complex"}]}"#, 2)
            .expect_err("an error without a path refuses the batch");
        assert_eq!(refused.messages, ["too complex"]);
    }
}
