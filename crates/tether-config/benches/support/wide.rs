//! Inputs of the placeholder-scaling measurements, shared by `benches/render.rs` and
//! `examples/placeholders.rs` (included with `#[path]`), so both measure the same thing.

use serde_json::{Map, Value, json};
use tether_config::Secrets;

/// One stdio server with `count` distinct placeholders: half in args (`--a{i}={{P{i}}}`), half
/// in env values (`v-{{S{i}}}`).
pub fn spread_config(count: usize) -> String {
    let half = count / 2;
    let server = json!({
        "command": "/opt/mcp/wide",
        "args": (0..half).map(|i| format!("--a{i}={{{{P{i}}}}}")).collect::<Vec<_>>(),
        "env": (0..count - half)
            .map(|i| (format!("E{i}"), Value::from(format!("v-{{{{S{i}}}}}"))))
            .collect::<Map<_, _>>(),
    });
    json!({ "mcpServers": { "wide": server } }).to_string()
}

/// One stdio server whose single arg holds `count` distinct placeholders.
pub fn one_string_config(count: usize) -> String {
    let arg: String = (0..count).map(|i| format!("{{{{P{i}}}}} ")).collect();
    json!({ "mcpServers": { "wide": { "command": "/opt/mcp/wide", "args": [arg] } } }).to_string()
}

/// A secret for every `P{i}` and `S{i}` below `count`.
pub fn wide_secrets(count: usize) -> Secrets {
    (0..count)
        .flat_map(|i| {
            [
                (format!("P{i}"), format!("p-value-{i}")),
                (format!("S{i}"), format!("s-value-{i}")),
            ]
        })
        .collect()
}
