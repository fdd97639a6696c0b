//! `--modern-only`: the server speaks MCP 2026-07-28 and nothing older (no `initialize`), and
//! serves `ask_name`, which asks its client for a name through an `InputRequiredResult`
//! (2026-07-28's multi-round-trip result) and greets it once answered. Without the flag the
//! server speaks only the revisions that have `initialize` (up to 2025-11-25), so a client
//! that probes with `server/discover` sees a legacy server.

use std::borrow::Cow;

use rmcp::{
    ErrorData,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ProtocolVersion,
        Tool,
    },
};
use serde_json::{Value, json};

/// The tool `--modern-only` adds.
pub const TOOL: &str = "ask_name";

/// The `requestState` the first round hands out; the second round must send it back.
const STATE: &str = "ask_name:waiting-for-name";

/// The revisions served: 2026-07-28 alone with `--modern-only`, else those with `initialize`.
pub fn versions(modern_only: bool) -> Cow<'static, [ProtocolVersion]> {
    if modern_only {
        Cow::Owned(vec![ProtocolVersion::V_2026_07_28])
    } else {
        Cow::Borrowed(ProtocolVersion::known_up_to(
            &ProtocolVersion::LATEST_WITH_INITIALIZE,
        ))
    }
}

/// `ask_name`'s listing.
pub fn tool() -> Tool {
    let schema = json!({"type": "object", "properties": {}});
    Tool::new(
        TOOL,
        "Ask the client for a name (an elicitation in an InputRequiredResult), then greet it.",
        serde_json::from_value::<rmcp::model::JsonObject>(schema).unwrap_or_default(),
    )
}

/// A call of `ask_name`: the elicitation first, the greeting once the answer comes back with
/// the state handed out (a missing or altered state is asked again).
pub fn call(request: &CallToolRequestParams) -> Result<CallToolResponse, ErrorData> {
    let answer = request
        .input_responses
        .as_ref()
        .and_then(|responses| serde_json::to_value(responses).ok())
        .and_then(|responses| responses.get("name").cloned());
    if let Some(answer) = answer
        && request.request_state.as_deref() == Some(STATE)
    {
        let text = match answer.get("action").and_then(Value::as_str) {
            Some("accept") => format!(
                "hello {}",
                answer
                    .pointer("/content/name")
                    .and_then(Value::as_str)
                    .unwrap_or("(no name)")
            ),
            Some(action) => format!("no name given ({action})"),
            None => {
                return Err(ErrorData::invalid_params(
                    "the name answer has no action",
                    None,
                ));
            }
        };
        return Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into());
    }
    let asked = json!({
        "resultType": "input_required",
        "inputRequests": {"name": {
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": "What is your name?",
                "requestedSchema": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}},
                    "required": ["name"]
                }
            }
        }},
        "requestState": STATE
    });
    serde_json::from_value(asked)
        .map(CallToolResponse::InputRequired)
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))
}

/// `--ignore-discover`: the stdio transport with every `server/discover` request dropped
/// unanswered, as a legacy server that ignores unknown methods would (for the bound on a
/// client's probe).
pub struct IgnoreDiscover<T>(pub T);

impl<T: rmcp::transport::Transport<rmcp::RoleServer>> rmcp::transport::Transport<rmcp::RoleServer>
    for IgnoreDiscover<T>
{
    type Error = T::Error;

    fn send(
        &mut self,
        item: rmcp::model::ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.0.send(item)
    }

    async fn receive(&mut self) -> Option<rmcp::model::ClientJsonRpcMessage> {
        loop {
            let message = self.0.receive().await?;
            if let rmcp::model::ClientJsonRpcMessage::Request(request) = &message
                && matches!(
                    request.request,
                    rmcp::model::ClientRequest::DiscoverRequest(_)
                )
            {
                tracing::info!("dropping server/discover unanswered (--ignore-discover)");
                continue;
            }
            return Some(message);
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.0.close()
    }
}
