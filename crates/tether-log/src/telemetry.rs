//! OpenTelemetry traces and metrics over OTLP/HTTP (protobuf), off unless an OTLP endpoint is
//! configured.
//!
//! Turned on by the standard variables: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` /
//! `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` (used as they are) or `OTEL_EXPORTER_OTLP_ENDPOINT`
//! (`/v1/traces`, `/v1/metrics` appended); `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`
//! name the service (default `tether`), `OTEL_EXPORTER_OTLP_HEADERS`,
//! `OTEL_EXPORTER_OTLP_TIMEOUT`, the `OTEL_BSP_*` batch settings and
//! `OTEL_METRIC_EXPORT_INTERVAL` are the SDK's own; `OTEL_SDK_DISABLED=true`,
//! `OTEL_TRACES_EXPORTER=none` or `OTEL_METRICS_EXPORTER=none` keep them off.
//!
//! Only spans of the target [`TARGET`] are exported (the gateway's request and upstream
//! spans); no log event is. Off, no layer exists and the stderr filter turns that target off,
//! so a span there costs a disabled callsite check; with metrics off [`meter`] is `None` and
//! no instrument exists. Every exported span string (span names, attribute values, status
//! text) passes through [`crate::mask`] first, and span events are dropped; metric attributes
//! are masked by whoever records them (names only, never a value): a registered secret value
//! never leaves in an export.

use opentelemetry::trace::{Status, TracerProvider as _};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use std::sync::OnceLock;
use tether_env::EnvVars;

/// The tracing target of the spans that are exported.
pub const TARGET: &str = "tether_telemetry";

/// The exporter pipelines while they run; dropping it flushes what is left (spans, a last
/// collection of metrics) and shuts them down.
#[derive(Debug)]
pub struct Telemetry {
    traces: Option<SdkTracerProvider>,
    metrics: Option<SdkMeterProvider>,
    /// The runtime gRPC exports run on (tonic's channel needs one; the SDK exports from its
    /// own threads): made only when a signal goes over gRPC, stopped after the flush.
    grpc: Option<tokio::runtime::Runtime>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        let traces = self.traces.as_ref().map(SdkTracerProvider::shutdown);
        let metrics = self.metrics.as_ref().map(SdkMeterProvider::shutdown);
        for error in [traces, metrics]
            .into_iter()
            .flatten()
            .filter_map(Result::err)
        {
            crate::eprintln_masked!("warning: OpenTelemetry export at exit: {error}");
        }
        if let Some(runtime) = self.grpc.take() {
            runtime.shutdown_background();
        }
    }
}

/// How a signal is sent: `OTEL_EXPORTER_OTLP_{SIGNAL}_PROTOCOL`, else
/// `OTEL_EXPORTER_OTLP_PROTOCOL`, else HTTP with protobuf (the OTLP specification's default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    HttpProtobuf,
    Grpc,
}

/// `[telemetry]` in `config.toml`: what the `OTEL_*` variables say when they are unset (a
/// variable that is set wins).
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// The collector's base URL, like `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub endpoint: Option<String>,
    /// `http/protobuf` or `grpc`, like `OTEL_EXPORTER_OTLP_PROTOCOL`.
    pub protocol: Option<String>,
    /// Like `OTEL_SERVICE_NAME`.
    pub service_name: Option<String>,
    /// `false`: no traces, like `OTEL_TRACES_EXPORTER=none`.
    pub traces: Option<bool>,
    /// `false`: no metrics, like `OTEL_METRICS_EXPORTER=none`.
    pub metrics: Option<bool>,
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();

/// Sets the `config.toml` settings, before [`layer`] (once; later calls are ignored).
pub fn configure(settings: Settings) {
    let _ = SETTINGS.set(settings);
}

fn settings() -> &'static Settings {
    SETTINGS.get_or_init(Settings::default)
}

/// One signal's variables.
struct Signal {
    name: &'static str,
    endpoint: &'static str,
    protocol: &'static str,
    exporter: &'static str,
    path: &'static str,
    enabled: fn(&Settings) -> Option<bool>,
}

const TRACES: Signal = Signal {
    name: "trace",
    endpoint: EnvVars::OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
    protocol: EnvVars::OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
    exporter: EnvVars::OTEL_TRACES_EXPORTER,
    path: "/v1/traces",
    enabled: |settings| settings.traces,
};

const METRICS: Signal = Signal {
    name: "metric",
    endpoint: EnvVars::OTEL_EXPORTER_OTLP_METRICS_ENDPOINT,
    protocol: EnvVars::OTEL_EXPORTER_OTLP_METRICS_PROTOCOL,
    exporter: EnvVars::OTEL_METRICS_EXPORTER,
    path: "/v1/metrics",
    enabled: |settings| settings.metrics,
};

impl Signal {
    /// Whether it is exported: an endpoint (its variable, the base one, or config.toml's),
    /// and nothing turning it off.
    fn on(&self) -> bool {
        let endpoint = set(self.endpoint)
            .or_else(|| set(EnvVars::OTEL_EXPORTER_OTLP_ENDPOINT))
            .or_else(|| settings().endpoint.clone())
            .is_some();
        endpoint
            && !sdk_disabled()
            && !exporter_none(self.exporter)
            && (self.enabled)(settings()) != Some(false)
    }

    /// config.toml's endpoint when no variable names one: the base URL for gRPC, with the
    /// signal's path for HTTP (as the SDK does with `OTEL_EXPORTER_OTLP_ENDPOINT`).
    fn file_endpoint(&self, protocol: Protocol) -> Option<String> {
        if set(self.endpoint).is_some() || set(EnvVars::OTEL_EXPORTER_OTLP_ENDPOINT).is_some() {
            return None;
        }
        let base = settings().endpoint.as_deref()?.trim_end_matches('/');
        Some(match protocol {
            Protocol::Grpc => base.to_owned(),
            Protocol::HttpProtobuf => format!("{base}{}", self.path),
        })
    }
}

fn protocol(signal_variable: &str) -> Result<Protocol, String> {
    match set(signal_variable)
        .or_else(|| set(EnvVars::OTEL_EXPORTER_OTLP_PROTOCOL))
        .or_else(|| settings().protocol.clone())
        .as_deref()
    {
        None | Some("http/protobuf") => Ok(Protocol::HttpProtobuf),
        Some("grpc") => Ok(Protocol::Grpc),
        Some(other) => Err(format!(
            "the OTLP protocol is '{other}' ({signal_variable} or OTEL_EXPORTER_OTLP_PROTOCOL); tether sends 'grpc' or 'http/protobuf'"
        )),
    }
}

/// The runtime of gRPC exports, made on first use.
fn grpc_runtime(
    runtime: &mut Option<tokio::runtime::Runtime>,
) -> Result<&tokio::runtime::Runtime, String> {
    if runtime.is_none() {
        let built = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("tether-otlp")
            .enable_all()
            .build()
            .map_err(|error| format!("cannot start the gRPC exporter's runtime: {error}"))?;
        *runtime = Some(built);
    }
    runtime.as_ref().ok_or_else(|| "no gRPC runtime".to_owned())
}

/// Builds `signal`'s exporter over the protocol it asks for: `http`, or `grpc` inside the
/// gRPC runtime (which its channel is bound to); each is given config.toml's endpoint when no
/// variable names one. A failure is said on stderr.
fn exporter<E>(
    signal: &Signal,
    runtime: &mut Option<tokio::runtime::Runtime>,
    http: impl FnOnce(Option<String>) -> Result<E, opentelemetry_otlp::ExporterBuildError>,
    grpc: impl FnOnce(Option<String>) -> Result<E, opentelemetry_otlp::ExporterBuildError>,
) -> Option<E> {
    let built = match protocol(signal.protocol) {
        Ok(Protocol::HttpProtobuf) => {
            http(signal.file_endpoint(Protocol::HttpProtobuf)).map_err(|error| error.to_string())
        }
        Ok(Protocol::Grpc) => grpc_runtime(runtime).and_then(|runtime| {
            let _entered = runtime.enter();
            grpc(signal.file_endpoint(Protocol::Grpc)).map_err(|error| error.to_string())
        }),
        Err(problem) => Err(problem),
    };
    built
        .inspect_err(|error| {
            crate::eprintln_masked!(
                "warning: OpenTelemetry {} export is off: {error}",
                signal.name
            );
        })
        .ok()
}

/// `builder` with `endpoint` when given.
fn endpoint<B: opentelemetry_otlp::WithExportConfig>(builder: B, endpoint: Option<String>) -> B {
    match endpoint {
        Some(endpoint) => builder.with_endpoint(endpoint),
        None => builder,
    }
}

/// Whether metrics are exported (then [`meter`] gives the meter).
static METRICS_ON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The meter tether's instruments are made from; `None` when metric export is off, so that
/// callers make no instrument and record nothing.
pub fn meter() -> Option<opentelemetry::metrics::Meter> {
    METRICS_ON
        .load(std::sync::atomic::Ordering::Acquire)
        .then(|| opentelemetry::global::meter("tether"))
}

/// Whether metric export is asked for: an OTLP endpoint for metrics (the variable for
/// metrics, the base one or config.toml's), and neither `OTEL_SDK_DISABLED=true`,
/// `OTEL_METRICS_EXPORTER=none` nor `metrics = false`.
pub fn metrics_configured() -> bool {
    METRICS.on()
}

fn sdk_disabled() -> bool {
    set(EnvVars::OTEL_SDK_DISABLED).is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

fn exporter_none(variable: &str) -> bool {
    set(variable).is_some_and(|v| v.eq_ignore_ascii_case("none"))
}

/// The resource every export names: `OTEL_SERVICE_NAME` / `OTEL_RESOURCE_ATTRIBUTES` (read by
/// the SDK), else the service name `tether`.
fn resource() -> opentelemetry_sdk::Resource {
    let mut resource = opentelemetry_sdk::Resource::builder();
    let named = set(EnvVars::OTEL_SERVICE_NAME).is_some()
        || set(EnvVars::OTEL_RESOURCE_ATTRIBUTES).is_some_and(|a| a.contains("service.name="));
    if !named {
        let name = settings().service_name.as_deref().unwrap_or("tether");
        resource = resource.with_service_name(name.to_owned());
    }
    resource.build()
}

/// Starts metric export when [`metrics_configured`]: a periodic reader (every
/// `OTEL_METRIC_EXPORT_INTERVAL` ms, default 60 s, and once more at exit) over OTLP/HTTP, the
/// global meter provider. `None` when off or (said on stderr) when it cannot be built.
fn start_metrics(runtime: &mut Option<tokio::runtime::Runtime>) -> Option<SdkMeterProvider> {
    use opentelemetry_otlp::{MetricExporter, WithExportConfig as _};
    if !METRICS.on() {
        return None;
    }
    let exporter = exporter(
        &METRICS,
        runtime,
        |at| endpoint(MetricExporter::builder().with_http(), at).build(),
        |at| {
            let grpc = MetricExporter::builder().with_tonic();
            endpoint(grpc.with_protocol(opentelemetry_otlp::Protocol::Grpc), at).build()
        },
    )?;
    let provider = SdkMeterProvider::builder()
        .with_resource(resource())
        .with_reader(opentelemetry_sdk::metrics::PeriodicReader::builder(exporter).build())
        .build();
    opentelemetry::global::set_meter_provider(provider.clone());
    METRICS_ON.store(true, std::sync::atomic::Ordering::Release);
    Some(provider)
}

fn set(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .map(|value| value.trim().to_owned())
        .filter(|value| !value.is_empty())
}

/// Whether trace export is asked for (as [`metrics_configured`], for traces).
pub fn configured() -> bool {
    TRACES.on()
}

/// The pipelines the environment asks for, to keep until exit, and the layer that exports
/// [`TARGET`]'s spans when traces are [`configured`] (and the exporter could be built: else
/// said on stderr). `None` for the pipelines when nothing is exported.
pub fn layer<S>() -> (Option<impl tracing_subscriber::Layer<S>>, Option<Telemetry>)
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    let mut grpc = None;
    let metrics = start_metrics(&mut grpc);
    let traced = traces(&mut grpc);
    let telemetry = (metrics.is_some() || traced.is_some()).then(|| Telemetry {
        traces: traced.as_ref().map(|(_, provider)| provider.clone()),
        metrics,
        grpc,
    });
    (traced.map(|(layer, _)| layer), telemetry)
}

/// The span export layer and its provider, when [`configured`].
fn traces<S>(
    runtime: &mut Option<tokio::runtime::Runtime>,
) -> Option<(
    impl tracing_subscriber::Layer<S> + use<S>,
    SdkTracerProvider,
)>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    use opentelemetry_otlp::{SpanExporter, WithExportConfig as _};
    use tracing_subscriber::Layer as _;
    if !TRACES.on() {
        return None;
    }
    let exporter = exporter(
        &TRACES,
        runtime,
        |at| endpoint(SpanExporter::builder().with_http(), at).build(),
        |at| {
            let grpc = SpanExporter::builder().with_tonic();
            endpoint(grpc.with_protocol(opentelemetry_otlp::Protocol::Grpc), at).build()
        },
    )?;
    let provider = SdkTracerProvider::builder()
        .with_resource(resource())
        .with_batch_exporter(Masked(exporter))
        .build();
    let tracer = provider.tracer("tether");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(
            tracing_subscriber::filter::Targets::new().with_target(TARGET, tracing::Level::TRACE),
        );
    Some((layer, provider))
}

/// Makes `span` continue the W3C trace context `traceparent` (a client's): same trace id, the
/// client's span as parent. Nothing happens when `span` is disabled (export off) or the value
/// is not a valid `traceparent`.
pub fn continue_trace(span: &tracing::Span, traceparent: &str) {
    use opentelemetry::propagation::TextMapPropagator as _;
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    if span.is_disabled() {
        return;
    }
    let carrier = std::collections::HashMap::from([(
        "traceparent".to_owned(),
        traceparent.trim().to_owned(),
    )]);
    let context = opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&carrier);
    if context.span().span_context().is_valid() {
        let _ = span.set_parent(context);
    }
}

/// The W3C `traceparent` naming `span` as the parent, for a request it makes; `None` when
/// `span` is disabled (export off).
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    use opentelemetry::propagation::TextMapPropagator as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    if span.is_disabled() {
        return None;
    }
    let mut carrier = std::collections::HashMap::<String, String>::new();
    opentelemetry_sdk::propagation::TraceContextPropagator::new()
        .inject_context(&span.context(), &mut carrier);
    carrier.remove("traceparent")
}

/// An exporter that masks every string before the wrapped one sends it.
#[derive(Debug)]
struct Masked<E>(E);

fn mask_attributes(attributes: &mut [KeyValue]) {
    for attribute in attributes {
        if let Value::String(text) = &attribute.value {
            let masked = crate::mask(text.as_str());
            if masked != text.as_str() {
                attribute.value = Value::String(masked.into());
            }
        }
    }
}

/// `span` with its strings masked and its events dropped.
fn masked(mut span: SpanData) -> SpanData {
    let name = crate::mask(&span.name);
    if name != span.name {
        span.name = name.into();
    }
    mask_attributes(&mut span.attributes);
    span.events = opentelemetry_sdk::trace::SpanEvents::default();
    if let Status::Error { description } = &span.status {
        span.status = Status::error(crate::mask(description));
    }
    span
}

impl<E: SpanExporter> SpanExporter for Masked<E> {
    fn export(
        &self,
        batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        self.0.export(batch.into_iter().map(masked).collect())
    }

    fn shutdown_with_timeout(&self, timeout: std::time::Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.0.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_traceparent_is_continued_and_a_child_one_made() {
        use tracing_subscriber::layer::SubscriberExt as _;
        let provider = SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("request");
            continue_trace(
                &span,
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            );
            let ours = traceparent(&span).expect("a traceparent while a tracer runs");
            assert!(
                ours.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
                "{ours}"
            );
            assert!(!ours.contains("00f067aa0ba902b7"), "{ours}");
            // Garbage is ignored: a new trace starts.
            let other = tracing::info_span!("other");
            continue_trace(&other, "not-a-traceparent");
            let fresh = traceparent(&other).expect("a traceparent");
            assert!(
                !fresh.contains("4bf92f3577b34da6a3ce929d0e0e4736"),
                "{fresh}"
            );
        });
        assert_eq!(traceparent(&tracing::Span::none()), None);
    }

    #[test]
    fn exported_strings_are_masked_and_events_dropped() {
        let secret = tether_secret::SecretValue::from("telemetry-sentinel-5f1c2a");
        crate::register([&secret]);
        let mut span = SpanData {
            span_context: opentelemetry::trace::SpanContext::empty_context(),
            parent_span_id: opentelemetry::trace::SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: opentelemetry::trace::SpanKind::Internal,
            name: "call telemetry-sentinel-5f1c2a".into(),
            start_time: std::time::SystemTime::UNIX_EPOCH,
            end_time: std::time::SystemTime::UNIX_EPOCH,
            attributes: vec![
                KeyValue::new("mcp.tool", "echo-telemetry-sentinel-5f1c2a"),
                KeyValue::new("mcp.response.bytes", 12_i64),
            ],
            dropped_attributes_count: 0,
            events: opentelemetry_sdk::trace::SpanEvents::default(),
            links: opentelemetry_sdk::trace::SpanLinks::default(),
            status: Status::error("failed with telemetry-sentinel-5f1c2a"),
            instrumentation_scope: opentelemetry::InstrumentationScope::builder("t").build(),
        };
        span.events
            .events
            .push(opentelemetry::trace::Event::with_name("e"));
        let span = masked(span);
        let text = format!("{span:?}");
        assert!(!text.contains("telemetry-sentinel-5f1c2a"), "{text}");
        assert!(text.contains("mcp.response.bytes"), "{text}");
        assert!(span.events.events.is_empty());
    }
}
