//! A small OTLP/HTTP receiver on loopback: takes `POST /v1/traces` and `POST /v1/metrics`
//! (protobuf, decoded with the official definitions in `opentelemetry-proto`), keeps every body
//! as received, and answers 200 with an empty export response.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
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

/// One received metric data point, flattened.
#[derive(Debug, Clone)]
pub struct ReceivedPoint {
    /// The metric's name.
    pub name: String,
    /// The point's attributes, as text.
    pub attributes: BTreeMap<String, String>,
    /// A sum's or gauge's value, or a histogram's count.
    pub value: f64,
}

/// Every body received, with the signal it was posted for (`traces`, `metrics`).
type Bodies = Arc<Mutex<Vec<(&'static str, Bytes)>>>;

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

async fn receive(
    State((bodies, signal)): State<(Bodies, &'static str)>,
    body: Bytes,
) -> impl IntoResponse {
    bodies
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push((signal, body));
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
        let signal = |name: &'static str| {
            axum::routing::post(receive).with_state((Arc::clone(&bodies), name))
        };
        let routes = axum::Router::new()
            .route("/v1/traces", signal("traces"))
            .route("/v1/metrics", signal("metrics"));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, routes).await;
        });
        Ok(Self {
            endpoint,
            bodies,
            task,
        })
    }

    /// Listens on a free loopback port for OTLP over gRPC (`TraceService/Export`,
    /// `MetricsService/Export`); each request is kept as its protobuf encoding, so
    /// [`OtlpReceiver::spans`], [`OtlpReceiver::points`] and [`OtlpReceiver::raw`] read it as
    /// they read an HTTP body.
    pub async fn start_grpc() -> std::io::Result<Self> {
        use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::MetricsServiceServer;
        use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceServiceServer;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let bodies = Bodies::default();
        let collector = Grpc(Arc::clone(&bodies));
        let server = tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(collector.clone()))
            .add_service(MetricsServiceServer::new(collector));
        let task = tokio::spawn(async move {
            let incoming = tonic::transport::server::TcpIncoming::from(listener);
            let _ = server.serve_with_incoming(incoming).await;
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
            .flat_map(|(_, body)| body.iter().copied())
            .collect()
    }

    fn bodies(&self, signal: &str) -> Vec<Bytes> {
        self.bodies
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(posted, _)| *posted == signal)
            .map(|(_, body)| body.clone())
            .collect()
    }

    /// Every metric data point received so far, oldest first; a body that is not an
    /// `ExportMetricsServiceRequest` panics.
    pub fn points(&self) -> Vec<ReceivedPoint> {
        use opentelemetry_proto::tonic::metrics::v1::metric::Data;
        use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as Number;
        let number = |value: Option<Number>| match value {
            Some(Number::AsDouble(d)) => d,
            Some(Number::AsInt(i)) => i as f64,
            None => f64::NAN,
        };
        let mut points = Vec::new();
        for body in self.bodies("metrics") {
            let request = ExportMetricsServiceRequest::decode(body)
                .unwrap_or_else(|e| panic!("an OTLP body that is not a metrics export: {e}"));
            let metrics = request
                .resource_metrics
                .into_iter()
                .flat_map(|r| r.scope_metrics)
                .flat_map(|s| s.metrics);
            for metric in metrics {
                let flattened: Vec<(Vec<_>, f64)> = match metric.data {
                    Some(Data::Sum(sum)) => sum
                        .data_points
                        .into_iter()
                        .map(|p| (p.attributes, number(p.value)))
                        .collect(),
                    Some(Data::Gauge(gauge)) => gauge
                        .data_points
                        .into_iter()
                        .map(|p| (p.attributes, number(p.value)))
                        .collect(),
                    Some(Data::Histogram(histogram)) => histogram
                        .data_points
                        .into_iter()
                        .map(|p| (p.attributes, p.count as f64))
                        .collect(),
                    _ => Vec::new(),
                };
                for (attributes, value) in flattened {
                    points.push(ReceivedPoint {
                        name: metric.name.clone(),
                        attributes: attributes
                            .iter()
                            .map(|a| {
                                (
                                    a.key.clone(),
                                    text(a.value.as_ref().and_then(|v| v.value.as_ref())),
                                )
                            })
                            .collect(),
                        value,
                    });
                }
            }
        }
        points
    }

    /// Every span received so far; a body that is not an `ExportTraceServiceRequest` panics.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        let mut spans = Vec::new();
        for body in self.bodies("traces") {
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

/// The gRPC side of the receiver: keeps each export request's encoding.
#[derive(Clone)]
struct Grpc(Bodies);

impl Grpc {
    fn keep(&self, signal: &'static str, request: &impl prost::Message) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((signal, Bytes::from(request.encode_to_vec())));
    }
}

#[tonic::async_trait]
impl opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<
        tonic::Response<
            opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse,
        >,
        tonic::Status,
    > {
        self.keep("traces", request.get_ref());
        Ok(tonic::Response::new(Default::default()))
    }
}

#[tonic::async_trait]
impl opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::MetricsService
    for Grpc
{
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<
        tonic::Response<
            opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse,
        >,
        tonic::Status,
    > {
        self.keep("metrics", request.get_ref());
        Ok(tonic::Response::new(Default::default()))
    }
}
