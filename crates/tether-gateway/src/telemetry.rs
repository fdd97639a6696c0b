//! The spans `tether serve` exports when OpenTelemetry is on (`tether_log::telemetry`): one
//! per client request (`mcp.request`) and a child per upstream call (`mcp.upstream`).
//!
//! Attributes are names and numbers only: the method, the server, the tool or prompt name,
//! the outcome, the response size; never an argument, a result, a resource URI or a header.
//! Off, the spans are disabled callsites and nothing here serializes or records anything.

use crate::budget::json_len;
use rmcp::ErrorData;
use rmcp::RoleServer;
use rmcp::model::{
    CallToolResponse, GetPromptResponse, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, ReadResourceResponse,
};
use rmcp::service::RequestContext;
use serde_json::Value;
use tracing::Span;
use tracing::field::Empty;

/// The span of one client request; `name` is the tool's or prompt's. It continues the
/// client's trace when the request carries a W3C `traceparent`: in `params._meta`, else as an
/// HTTP header (`tether serve --listen`).
pub(crate) fn request(
    method: &'static str,
    name: Option<&str>,
    context: &RequestContext<RoleServer>,
) -> Span {
    // The target is `tether_log::telemetry::TARGET`: only its spans are exported.
    let span = tracing::info_span!(
        target: "tether_telemetry",
        "mcp.request",
        otel.name = method,
        otel.kind = "server",
        otel.status_code = Empty,
        mcp.method = method,
        mcp.server = Empty,
        mcp.tool = Empty,
        mcp.prompt = Empty,
        mcp.outcome = Empty,
        mcp.error.code = Empty,
        mcp.response.bytes = Empty,
    );
    if span.is_disabled() {
        return span;
    }
    if let Some(traceparent) = client_traceparent(context) {
        tether_log::telemetry::continue_trace(&span, traceparent);
    }
    if let Some(name) = name {
        let field = if method == "prompts/get" {
            "mcp.prompt"
        } else {
            "mcp.tool"
        };
        span.record(field, name);
    }
    span
}

fn client_traceparent(context: &RequestContext<RoleServer>) -> Option<&str> {
    context
        .meta
        .get("traceparent")
        .and_then(Value::as_str)
        .or_else(|| {
            context
                .extensions
                .get::<axum::http::request::Parts>()?
                .headers
                .get("traceparent")?
                .to_str()
                .ok()
        })
}

/// Sets `_meta.traceparent` of an upstream request's `params` to name `span` (the upstream
/// call's) as the parent, replacing the client's; nothing when export is off.
pub(crate) fn propagate(span: &Span, params: &mut Value) {
    let Some(traceparent) = tether_log::telemetry::traceparent(span) else {
        return;
    };
    if !params.is_object() {
        *params = Value::Object(serde_json::Map::new());
    }
    if let Some(params) = params.as_object_mut() {
        let meta = params
            .entry("_meta")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert("traceparent".to_owned(), Value::String(traceparent));
        }
    }
}

/// The span of a call to `server`, a child of the current request's; names the server on the
/// request's span too.
pub(crate) fn upstream(server: &str, method: &str) -> Span {
    let span = tracing::info_span!(
        target: "tether_telemetry",
        "mcp.upstream",
        otel.name = Empty,
        otel.kind = "client",
        otel.status_code = Empty,
        mcp.method = method,
        mcp.server = server,
        mcp.outcome = Empty,
    );
    if !span.is_disabled() {
        span.record("otel.name", format!("{method} {server}"));
        Span::current().record("mcp.server", server);
    }
    span
}

/// Records how an upstream call ended.
pub(crate) fn upstream_done<T, E>(span: &Span, answer: &Result<T, E>) {
    if span.is_disabled() {
        return;
    }
    let outcome = if answer.is_ok() { "ok" } else { "error" };
    span.record("mcp.outcome", outcome);
    if answer.is_err() {
        span.record("otel.status_code", "ERROR");
    }
}

/// Runs a request's `work` in its `span`, then records how it ended ([`finish`]).
pub(crate) async fn traced<T: Answer>(
    span: Span,
    work: impl Future<Output = Result<T, ErrorData>>,
) -> Result<T, ErrorData> {
    let result = tracing::Instrument::instrument(work, span.clone()).await;
    finish(&span, &result);
    result
}

/// Records how a request ended: `ok`, `tool_error` (a result with `isError`) or `error`, and
/// the size of the answer in bytes of JSON.
fn finish<T: Answer>(span: &Span, result: &Result<T, ErrorData>) {
    if span.is_disabled() {
        return;
    }
    match result {
        Ok(answer) => {
            let (bytes, failed) = answer.measure();
            span.record("mcp.outcome", if failed { "tool_error" } else { "ok" });
            span.record("mcp.response.bytes", bytes);
            if failed {
                span.record("otel.status_code", "ERROR");
            }
        }
        Err(error) => {
            span.record("mcp.outcome", "error");
            span.record("mcp.error.code", error.code.0);
            span.record("otel.status_code", "ERROR");
        }
    }
}

/// An answer to a client: the size of the JSON it is sent as, and whether it is a tool's
/// error result (`isError`). Serialized once, into a counter: no copy is kept.
pub(crate) trait Answer {
    fn measure(&self) -> (usize, bool);
}

macro_rules! serialized {
    ($($type:ty),*) => {$(
        impl Answer for $type {
            fn measure(&self) -> (usize, bool) {
                (json_len(self), false)
            }
        }
    )*};
}

serialized!(
    ListToolsResult,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult
);

impl Answer for CallToolResponse {
    fn measure(&self) -> (usize, bool) {
        match self {
            Self::Complete(result) => (json_len(result), result.is_error == Some(true)),
            Self::InputRequired(input) => (json_len(input), false),
            Self::Task(task) => (json_len(task), false),
            _ => (0, false),
        }
    }
}

/// Answers that are a result or a request for input, never an error result.
macro_rules! complete_or_input {
    ($($type:ty),*) => {$(
        impl Answer for $type {
            fn measure(&self) -> (usize, bool) {
                match self {
                    Self::Complete(result) => (json_len(result), false),
                    Self::InputRequired(input) => (json_len(input), false),
                    _ => (0, false),
                }
            }
        }
    )*};
}

complete_or_input!(GetPromptResponse, ReadResourceResponse);
