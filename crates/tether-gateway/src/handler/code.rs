//! Code mode's handler: `tether__run_code` runs the client's script in `tether-code`'s engine;
//! each tool call the script makes takes a direct call's path (`tools.rs`: routing, withheld
//! names, the secret scan, masking, audit, the call timeout) in a span under the run's, and
//! comes back whole; the run's answer is masked, scanned, audited once and budgeted.

use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

use rmcp::RoleServer;
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock};
use rmcp::service::RequestContext;
use serde_json::{Map, Value, json};
use tether_code::Failure;

use super::GatewayHandler;
use super::pipeline::{mark_received_now, received_at};
use crate::audit::{Outcome, Record};
use crate::redact::mask_value;
use crate::tool_search::RUN_CODE;

/// Marks a request context as a script's tool call.
#[derive(Clone, Copy)]
struct Scripted;

/// Whether `context` is that of a script's tool call (its result is not budgeted).
pub(super) fn scripted(context: &RequestContext<RoleServer>) -> bool {
    context.extensions.get::<Scripted>().is_some()
}

type Answer<'a> = Pin<Box<dyn Future<Output = Result<Value, String>> + Send + 'a>>;

impl GatewayHandler {
    /// `tether__run_code`: the script's answer as a result and its JSON.
    pub(super) async fn run_code(
        &self,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> (CallToolResult, Value) {
        let started = Instant::now();
        let arguments = request.arguments.clone().unwrap_or_default();
        let code = match arguments.get("code") {
            Some(Value::String(code)) if !code.trim().is_empty() => code.clone(),
            _ => {
                let refused = self.refuse(
                    "tools/call",
                    RUN_CODE,
                    format!(
                        "{RUN_CODE} needs \"code\": the body of an async JavaScript function that calls `await tools[NAME](args)` and returns the answer"
                    ),
                );
                let result = CallToolResult::error(vec![ContentBlock::text(refused.message)]);
                let value = serde_json::to_value(&result).unwrap_or(Value::Null);
                return (result, value);
            }
        };
        let catalogue = self.shared.catalogue();
        let names: Vec<String> = catalogue
            .tools
            .iter()
            .filter(|tool| catalogue.tool_names.route(&tool.name).is_some())
            .map(|tool| tool.name.to_string())
            .collect();
        drop(catalogue);
        let mut limits = self.shared.tool_search.code.clone();
        // Never past the call's own timeout, counted from the request's arrival.
        let left = self
            .shared
            .call_timeout
            .saturating_sub(received_at(context).elapsed());
        limits.time = limits.time.min(left);
        let cancel = context.ct.child_token();
        let outcome =
            tether_code::run(&code, &names, &limits, &cancel, |name, arguments, token| {
                self.scripted_call(context, token, name, arguments)
            })
            .await;
        let (result, outcome_kind) = self.run_result(outcome);
        let mut value = serde_json::to_value(&result).unwrap_or(Value::Null);
        // A secret a tool returned may be used by the script, never shown to the client.
        mask_value(&self.shared.masker(), &mut value);
        let findings = crate::secret_scan::scan(&mut value, self.shared.secret_scan.results);
        crate::telemetry::secret_findings("results", &findings);
        if !findings.is_empty() {
            tracing::warn!(
                tool = RUN_CODE,
                "the answer of a script holds what looks like a secret ({})",
                findings.join(", ")
            );
        }
        let result: CallToolResult = serde::Deserialize::deserialize(&value).unwrap_or(result);
        let mut audited = json!({ "code": code });
        mask_value(&self.shared.masker(), &mut audited);
        self.shared.audit(&Record {
            session: &self.session,
            method: "tools/call",
            server: None,
            target: RUN_CODE,
            duration: started.elapsed(),
            outcome: outcome_kind,
            arguments: Some(&audited),
            result: Some(&value),
            findings: &findings,
        });
        (result, value)
    }

    /// One tool call of a script: a direct call's path, in a span of its own under the run's,
    /// without the client's progress token; what the script gets back.
    fn scripted_call<'a>(
        &'a self,
        context: &RequestContext<RoleServer>,
        token: tokio_util::sync::CancellationToken,
        name: String,
        arguments: Value,
    ) -> Answer<'a> {
        // Cancelled with the run (the client's cancellation) or when the run ends without it.
        let mut scripted = context.clone();
        scripted.ct = token;
        scripted.meta = rmcp::model::RequestMetaObject::default();
        scripted.extensions.insert(Scripted);
        mark_received_now(&mut scripted);
        let span = crate::telemetry::scripted_call(&name);
        let mut request = CallToolRequestParams::new(name);
        if let Value::Object(arguments) = arguments {
            request = request.with_arguments(arguments);
        }
        Box::pin(tracing::Instrument::instrument(
            async move { for_script(self.call_tool_now(request, scripted).await) },
            span,
        ))
    }

    /// The run's result: its answer (and log) or why there is none, and the audit's outcome.
    fn run_result(&self, outcome: tether_code::Outcome) -> (CallToolResult, Outcome) {
        let mut blocks = Vec::new();
        let (is_error, kind) = match outcome.answer {
            Ok(answer) => {
                blocks.push(ContentBlock::text(answer));
                (false, Outcome::Ok)
            }
            Err(failure) => {
                let kind = match failure {
                    Failure::Cancelled => Outcome::Cancelled,
                    Failure::Thrown { .. } | Failure::NeverSettles => Outcome::ToolError,
                    _ => Outcome::Error,
                };
                blocks.push(ContentBlock::text(format!(
                    "{RUN_CODE}: {failure} after {} tool call{}",
                    outcome.calls,
                    if outcome.calls == 1 { "" } else { "s" }
                )));
                (true, kind)
            }
        };
        if !outcome.log.is_empty() {
            blocks.push(ContentBlock::text(outcome.log));
        }
        let result = if is_error {
            CallToolResult::error(blocks)
        } else {
            CallToolResult::success(blocks)
        };
        (result, kind)
    }
}

/// What a script gets from a tool's answer: its structured content when it has one, else its
/// text (blocks joined by newlines; images, audio and resources as their JSON objects); a tool
/// error, protocol error or an answer a script cannot wait for is the error's text.
fn for_script(response: Result<CallToolResponse, rmcp::ErrorData>) -> Result<Value, String> {
    let result = match response {
        Ok(CallToolResponse::Complete(result)) => result,
        Ok(CallToolResponse::InputRequired(_)) => {
            return Err(
                "the tool asked the client for input, which a script cannot give: call it directly"
                    .to_owned(),
            );
        }
        Ok(CallToolResponse::Task(_)) => {
            return Err(
                "the tool answered with a task to poll, which a script does not wait for: call it directly"
                    .to_owned(),
            );
        }
        Err(error) => return Err(error.message.to_string()),
        Ok(_) => return Err("the tool answered in a form a script cannot read".to_owned()),
    };
    let value = serde_json::to_value(&result).unwrap_or(Value::Null);
    let content = value["content"].as_array().cloned().unwrap_or_default();
    let texts: Vec<&str> = content
        .iter()
        .filter_map(|block| block["text"].as_str())
        .collect();
    if result.is_error == Some(true) {
        let text = texts.join("\n");
        return Err(if text.is_empty() {
            "the tool failed and said nothing".to_owned()
        } else {
            text
        });
    }
    if let Some(structured) = value.get("structuredContent").filter(|v| !v.is_null()) {
        return Ok(structured.clone());
    }
    if texts.len() == content.len() {
        return Ok(Value::String(texts.join("\n")));
    }
    Ok(Value::Array(
        content
            .into_iter()
            .map(|block| match block["text"].as_str() {
                Some(text) => Value::String(text.to_owned()),
                None => Value::Object(block.as_object().cloned().unwrap_or_else(Map::new)),
            })
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_gets_structured_content_else_text_else_blocks() {
        let mut structured = CallToolResult::success(vec![ContentBlock::text("{\"n\":1}")]);
        structured.structured_content = Some(json!({"n": 1}));
        assert_eq!(for_script(Ok(structured.into())), Ok(json!({"n": 1})));
        let text = CallToolResult::success(vec![ContentBlock::text("a"), ContentBlock::text("b")]);
        assert_eq!(for_script(Ok(text.into())), Ok(json!("a\nb")));
        let failed = CallToolResult::error(vec![ContentBlock::text("disk full")]);
        assert_eq!(for_script(Ok(failed.into())), Err("disk full".to_owned()));
        let image = CallToolResult::success(vec![
            ContentBlock::text("see"),
            ContentBlock::image("aGk=", "image/png"),
        ]);
        let blocks = for_script(Ok(image.into())).expect("blocks");
        assert_eq!(blocks[0], json!("see"));
        assert_eq!(blocks[1]["mimeType"], json!("image/png"));
        let protocol = rmcp::ErrorData::invalid_params("bad arguments", None);
        assert_eq!(for_script(Err(protocol)), Err("bad arguments".to_owned()));
    }
}
