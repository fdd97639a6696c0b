//! What `tether serve` exports when OpenTelemetry is on (`tether_log::telemetry`): a span per
//! client request (`mcp.request`) with a child per upstream call (`mcp.upstream`), and
//! metrics — requests and their durations per method, tool and outcome, upstream calls per
//! server, servers by state, tools offered and withheld, restarts, scan findings.
//!
//! Attributes are names and numbers only: the method, the server, the tool or prompt name,
//! the outcome, the response size, a rule's name; never an argument, a result, a resource URI
//! or a header (and the names pass through the log masking before a metric records them).
//! Off, the spans are disabled callsites, no instrument exists, and nothing here serializes,
//! times or records anything.

use crate::budget::json_len;
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram};
use rmcp::ErrorData;
use rmcp::RoleServer;
use rmcp::model::{
    CallToolResponse, GetPromptResponse, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, ReadResourceResponse,
};
use rmcp::service::RequestContext;
use serde_json::Value;
use std::sync::OnceLock;
use std::time::Instant;
use tracing::Span;
use tracing::field::Empty;

/// The gateway's metric instruments, made once, when metric export is on.
struct Instruments {
    requests: Counter<u64>,
    request_duration: Histogram<f64>,
    upstream_duration: Histogram<f64>,
    restarts: Counter<u64>,
    secret_findings: Counter<u64>,
    injection_findings: Counter<u64>,
}

/// Histogram bounds in seconds: 1 ms to 2 min.
const SECONDS: [f64; 16] = [
    0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

fn instruments() -> Option<&'static Instruments> {
    static INSTRUMENTS: OnceLock<Option<Instruments>> = OnceLock::new();
    INSTRUMENTS
        .get_or_init(|| {
            let meter = tether_log::telemetry::meter()?;
            let seconds = |name: &'static str, what: &'static str| {
                meter
                    .f64_histogram(name)
                    .with_unit("s")
                    .with_description(what)
                    .with_boundaries(SECONDS.to_vec())
                    .build()
            };
            let counter = |name: &'static str, what: &'static str| {
                meter.u64_counter(name).with_description(what).build()
            };
            Some(Instruments {
                requests: counter("tether.gateway.requests", "client requests answered"),
                request_duration: seconds(
                    "tether.gateway.request.duration",
                    "time to answer a client request",
                ),
                upstream_duration: seconds(
                    "tether.gateway.upstream.duration",
                    "time a server took to answer a forwarded request",
                ),
                restarts: counter("tether.gateway.server.restarts", "servers restarted"),
                secret_findings: counter(
                    "tether.gateway.secret_scan.findings",
                    "credential shapes found in tool arguments and results",
                ),
                injection_findings: counter(
                    "tether.gateway.injection_scan.findings",
                    "prompt-injection findings in tool and prompt definitions",
                ),
            })
        })
        .as_ref()
}

/// A name as an attribute, masked like a log line.
fn attribute(key: &'static str, text: &str) -> KeyValue {
    KeyValue::new(key, tether_log::mask(text))
}

/// Counts a restart of `server`.
pub(crate) fn restarted(server: &str) {
    if let Some(instruments) = instruments() {
        instruments
            .restarts
            .add(1, &[attribute("mcp.server", server)]);
    }
}

/// Counts the secret-scan findings `rules` in `direction` (`arguments` or `results`).
pub(crate) fn secret_findings(direction: &'static str, rules: &[&'static str]) {
    if let Some(instruments) = instruments() {
        for rule in rules {
            instruments.secret_findings.add(
                1,
                &[
                    KeyValue::new("direction", direction),
                    KeyValue::new("rule", *rule),
                ],
            );
        }
    }
}

/// Counts the prompt-injection findings `rules` in a definition of `server`'s.
pub(crate) fn injection_findings<'a>(server: &str, rules: impl Iterator<Item = &'a str>) {
    if let Some(instruments) = instruments() {
        for rule in rules {
            instruments.injection_findings.add(
                1,
                &[attribute("mcp.server", server), attribute("rule", rule)],
            );
        }
    }
}

/// Reports, at each collection, the servers by state (`tether.gateway.servers`, from
/// `status`: the supervisor's report) and the tools offered and withheld
/// (`tether.gateway.tools`, from `tools`); each gives `None` once the gateway is gone.
pub(crate) fn observe(
    status: impl Fn() -> Option<Value> + Send + Sync + 'static,
    tools: impl Fn() -> Option<(usize, usize)> + Send + Sync + 'static,
) {
    let Some(meter) = tether_log::telemetry::meter() else {
        return;
    };
    meter
        .u64_observable_gauge("tether.gateway.servers")
        .with_description(
            "servers by state: ready, pending, lazy, retrying, restarting, stopped, failed",
        )
        .with_callback(move |observer| {
            let Some(status) = status() else {
                return;
            };
            let mut states: std::collections::BTreeMap<String, u64> = [
                "ready",
                "pending",
                "lazy",
                "retrying",
                "restarting",
                "stopped",
                "failed",
            ]
            .into_iter()
            .map(|state| (state.to_owned(), 0))
            .collect();
            for server in status["servers"].as_array().into_iter().flatten() {
                if let Some(state) = server["state"].as_str() {
                    *states.entry(state.to_owned()).or_default() += 1;
                }
            }
            for (state, count) in states {
                observer.observe(count, &[KeyValue::new("state", state)]);
            }
        })
        .build();
    meter
        .u64_observable_gauge("tether.gateway.tools")
        .with_description("tools offered to clients and withheld from them")
        .with_callback(move |observer| {
            let Some((offered, withheld)) = tools() else {
                return;
            };
            let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
            observer.observe(count(offered), &[KeyValue::new("state", "offered")]);
            observer.observe(count(withheld), &[KeyValue::new("state", "withheld")]);
        })
        .build();
}

/// One client request: its span, and what its metrics need when they are on.
pub(crate) struct Request {
    span: Span,
    method: &'static str,
    /// The tool's or prompt's name as the client sent it.
    name: Option<String>,
    /// Whether a name is one the gateway offers (else it is labelled [`UNKNOWN_NAME`]).
    knows: Box<dyn Fn(&str) -> bool + Send>,
    started: Option<Instant>,
}

/// The label of a tool or prompt name no server offers: a client's names are its own choice,
/// so they would make unbounded metric series and could carry any text.
pub(crate) const UNKNOWN_NAME: &str = "unknown";

/// The span of one client request; `name` is the tool's or prompt's. It continues the
/// client's trace when the request carries a W3C `traceparent`: in `params._meta`, else as an
/// HTTP header (`tether serve --listen`).
pub(crate) fn request(
    method: &'static str,
    name: Option<&str>,
    context: &RequestContext<RoleServer>,
    knows: Box<dyn Fn(&str) -> bool + Send>,
) -> Request {
    let measured = instruments().is_some();
    Request {
        span: request_span(method, context),
        method,
        name: name.map(str::to_owned),
        knows,
        started: measured.then(Instant::now),
    }
}

/// The span field or metric attribute of a request's tool or prompt name.
fn name_key(method: &str) -> &'static str {
    if method == "prompts/get" {
        "mcp.prompt"
    } else {
        "mcp.tool"
    }
}

fn request_span(method: &'static str, context: &RequestContext<RoleServer>) -> Span {
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
    span
}

/// The span of one tool call a code-mode script makes: a child of the run's request span
/// (the current one), named by the tool, masked.
pub(crate) fn scripted_call(tool: &str) -> Span {
    tracing::info_span!(
        target: "tether_telemetry",
        "mcp.scripted_call",
        otel.name = "tools/call",
        otel.kind = "internal",
        mcp.method = "tools/call",
        mcp.tool = tether_log::mask(tool).as_str(),
    )
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

/// One forwarded request: its span, and what its metrics need when they are on.
pub(crate) struct Upstream {
    pub(crate) span: Span,
    /// The server and method as attributes, and the start, when metrics are on.
    measured: Option<([KeyValue; 2], Instant)>,
}

/// The span of a call to `server`, a child of the current request's (naming the server on
/// the request's span too), and its start when metrics are on.
pub(crate) fn upstream(server: &str, method: &str) -> Upstream {
    Upstream {
        span: upstream_span(server, method),
        measured: instruments().map(|_| {
            (
                [
                    attribute("mcp.server", server),
                    KeyValue::new("mcp.method", method.to_owned()),
                ],
                Instant::now(),
            )
        }),
    }
}

fn upstream_span(server: &str, method: &str) -> Span {
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
pub(crate) fn upstream_done<T, E>(upstream: &Upstream, answer: &Result<T, E>) {
    let outcome = if answer.is_ok() { "ok" } else { "error" };
    if let (Some(instruments), Some((attributes, started))) = (instruments(), &upstream.measured) {
        let [server, method] = attributes.clone();
        instruments.upstream_duration.record(
            started.elapsed().as_secs_f64(),
            &[server, method, KeyValue::new("mcp.outcome", outcome)],
        );
    }
    let span = &upstream.span;
    if span.is_disabled() {
        return;
    }
    span.record("mcp.outcome", outcome);
    if answer.is_err() {
        span.record("otel.status_code", "ERROR");
    }
}

/// Runs a request's `work` in its span, then records how it ended ([`finish`]) and, with
/// metrics on, counts it and its duration.
pub(crate) async fn traced<T: Answer>(
    request: Request,
    work: impl Future<Output = Result<T, ErrorData>>,
) -> Result<T, ErrorData> {
    let Request {
        span,
        method,
        name,
        knows,
        started,
    } = request;
    let result = tracing::Instrument::instrument(work, span.clone()).await;
    let name = name.map(|name| {
        if knows(&name) {
            name
        } else {
            UNKNOWN_NAME.to_owned()
        }
    });
    if let Some(name) = &name {
        span.record(name_key(method), tether_log::mask(name).as_str());
    }
    finish(&span, &result);
    if let (Some(instruments), Some(started)) = (instruments(), started) {
        let outcome = match &result {
            Ok(answer) if answer.is_tool_error() => "tool_error",
            Ok(_) => "ok",
            Err(_) => "error",
        };
        let mut attributes = vec![
            KeyValue::new("mcp.method", method),
            KeyValue::new("mcp.outcome", outcome),
        ];
        attributes.extend(name.map(|name| attribute(name_key(method), &name)));
        instruments.requests.add(1, &attributes);
        instruments
            .request_duration
            .record(started.elapsed().as_secs_f64(), &attributes);
    }
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

    /// Whether it is a tool's error result, without serializing it.
    fn is_tool_error(&self) -> bool {
        false
    }
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
    ListResourceTemplatesResult,
    rmcp::model::GetTaskResult
);

/// The empty acknowledgement of `tasks/update` and `tasks/cancel`.
impl Answer for () {
    fn measure(&self) -> (usize, bool) {
        (0, false)
    }
}

impl Answer for CallToolResponse {
    fn is_tool_error(&self) -> bool {
        matches!(self, Self::Complete(result) if result.is_error == Some(true))
    }

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
