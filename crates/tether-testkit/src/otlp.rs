//! A small OTLP/HTTP trace receiver on loopback: takes `POST /v1/traces` (protobuf, decoded
//! with the official definitions in `opentelemetry-proto`), keeps every body as received, and
//! answers 200 with an empty `ExportTraceServiceResponse`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message as _;

/// One received span, flattened.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    /// The span's name.
    pub name: String,
    /// The trace id, lower-case hex.
    pub trace_id: String,
    /// The span id, lower-case hex.
    pub span_id: String,
    /// The parent's span id, lower-case hex (empty for a root).
    pub parent_span_id: String,
    /// String, integer and boolean attributes, as text.
    pub attributes: BTreeMap<String, String>,
    /// The resource's `service.name`.
    pub service_name: String,
}

type Bodies = Arc<Mutex<Vec<Bytes>>>;

/// A running receiver; stops when dropped.
#[derive(Debug)]
pub struct OtlpReceiver {
    /// `http://127.0.0.1:PORT`, the value for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub endpoint: String,
    bodies: Bodies,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn receive(State(bodies): State<Bodies>, body: Bytes) -> impl IntoResponse {
    bodies
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(body);
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        Vec::new(),
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(value: Option<&AnyValue>) -> String {
    match value {
        Some(AnyValue::StringValue(s)) => s.clone(),
        Some(AnyValue::IntValue(i)) => i.to_string(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(AnyValue::DoubleValue(d)) => d.to_string(),
        _ => String::new(),
    }
}

impl OtlpReceiver {
    /// Listens on a free loopback port.
    pub async fn start() -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let bodies = Bodies::default();
        let routes = axum::Router::new()
            .route("/v1/traces", axum::routing::post(receive))
            .with_state(Arc::clone(&bodies));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, routes).await;
        });
        Ok(Self {
            endpoint,
            bodies,
            task,
        })
    }

    /// Every byte received so far, bodies one after another.
    pub fn raw(&self) -> Vec<u8> {
        self.bodies
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .flat_map(|body| body.iter().copied())
            .collect()
    }

    /// Every span received so far; a body that is not an `ExportTraceServiceRequest` panics.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        let bodies = self
            .bodies
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut spans = Vec::new();
        for body in bodies {
            let request = ExportTraceServiceRequest::decode(body)
                .unwrap_or_else(|e| panic!("an OTLP body that is not a trace export: {e}"));
            for resource in request.resource_spans {
                let service_name = resource
                    .resource
                    .iter()
                    .flat_map(|r| r.attributes.iter())
                    .find(|a| a.key == "service.name")
                    .map(|a| text(a.value.as_ref().and_then(|v| v.value.as_ref())))
                    .unwrap_or_default();
                for scope in resource.scope_spans {
                    for span in scope.spans {
                        let attributes = span
                            .attributes
                            .iter()
                            .map(|a| {
                                (
                                    a.key.clone(),
                                    text(a.value.as_ref().and_then(|v| v.value.as_ref())),
                                )
                            })
                            .collect();
                        spans.push(ReceivedSpan {
                            name: span.name,
                            trace_id: hex(&span.trace_id),
                            span_id: hex(&span.span_id),
                            parent_span_id: hex(&span.parent_span_id),
                            attributes,
                            service_name: service_name.clone(),
                        });
                    }
                }
            }
        }
        spans
    }
}
