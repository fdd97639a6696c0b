//! What the server counts, in the Prometheus text exposition format (OpenMetrics 1.0 text,
//! which Prometheus scrapes as it is).
//!
//! Every counter is a lock-free atomic bumped on the request path; a scrape encodes them all.
//! Label values come from fixed sets (outcomes, status classes, limit names): never a uid, a
//! key id, a team or anything a client sent, so the series stay few and nothing a tenant
//! chose reaches the scraper.

use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// One label `name="value"`, the value from a fixed set.
pub(crate) type Label = [(&'static str, &'static str); 1];

type Histograms = Family<Label, Histogram, fn() -> Histogram>;

/// The content type of [`ServerMetrics::encode`]'s text.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The server's metrics and the registry they are encoded from.
#[derive(Debug)]
pub struct ServerMetrics {
    registry: Registry,
    /// `createManagedMcpClientConfig` resolutions by outcome.
    resolutions: Family<Label, Counter>,
    /// GraphQL requests that passed authentication, by HTTP status class.
    graphql_requests: Family<Label, Counter>,
    graphql_seconds: Histograms,
    /// Proxied requests by outcome.
    proxy_requests: Family<Label, Counter>,
    proxy_seconds: Histograms,
    /// Proxy tokens minted.
    tokens_minted: Counter,
    /// Proxy requests refused for an expired token.
    tokens_expired: Counter,
    /// Expired proxy tokens purged from the store.
    tokens_purged: Counter,
    /// Requests or connections refused by a limit (rate limit included), by limit.
    pub(crate) limit_refusals: Family<Label, Counter>,
}

/// Latency buckets from 1 ms to ~16 s, doubling.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

impl Default for ServerMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl ServerMetrics {
    /// Registers every metric, `tether_server_build_info` set to 1 with this version.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("tether_server");
        let resolutions = Family::<Label, Counter>::default();
        registry.register(
            "resolutions",
            "createManagedMcpClientConfig resolutions that passed authentication, by outcome (config, not_found, inactive, error)",
            resolutions.clone(),
        );
        let graphql_requests = Family::<Label, Counter>::default();
        registry.register(
            "graphql_requests",
            "Authenticated GraphQL requests, by HTTP status class",
            graphql_requests.clone(),
        );
        let graphql_seconds: Histograms = Family::new_with_constructor(latency_histogram);
        registry.register(
            "graphql_request_duration_seconds",
            "Time to answer an authenticated GraphQL request, by HTTP status class",
            graphql_seconds.clone(),
        );
        let proxy_requests = Family::<Label, Counter>::default();
        registry.register(
            "proxy_requests",
            "Requests to /mcp-proxy, by outcome (forwarded, unauthorized, expired, inactive, refused, upstream_error, error)",
            proxy_requests.clone(),
        );
        let proxy_seconds: Histograms = Family::new_with_constructor(latency_histogram);
        registry.register(
            "proxy_request_duration_seconds",
            "Time from a proxied request to its response head (a streamed body runs on), by outcome",
            proxy_seconds.clone(),
        );
        let tokens_minted = Counter::default();
        registry.register(
            "proxy_tokens_minted",
            "Proxy tokens minted for URL installations",
            tokens_minted.clone(),
        );
        let tokens_expired = Counter::default();
        registry.register(
            "proxy_tokens_expired",
            "Proxy requests refused because their token had expired",
            tokens_expired.clone(),
        );
        let tokens_purged = Counter::default();
        registry.register(
            "proxy_tokens_purged",
            "Expired proxy tokens deleted from the store",
            tokens_purged.clone(),
        );
        let limit_refusals = Family::<Label, Counter>::default();
        registry.register(
            "limit_refusals",
            "Requests or connections refused by a limit, by limit (rate_limit, max_connections, header_timeout, body_timeout, body_too_large, body_bytes_in_flight, upstream_timeout)",
            limit_refusals.clone(),
        );
        let build_info = Family::<Label, Gauge>::default();
        build_info
            .get_or_create(&[("version", env!("CARGO_PKG_VERSION"))])
            .set(1);
        registry.register(
            "build_info",
            "Always 1; the version label tells the build",
            build_info,
        );
        Self {
            registry,
            resolutions,
            graphql_requests,
            graphql_seconds,
            proxy_requests,
            proxy_seconds,
            tokens_minted,
            tokens_expired,
            tokens_purged,
            limit_refusals,
        }
    }

    /// The registry in the text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String does not fail.
        let _ = encode(&mut text, &self.registry);
        text
    }

    pub(crate) fn resolution(&self, outcome: &'static str) {
        self.resolutions
            .get_or_create(&[("outcome", outcome)])
            .inc();
    }

    pub(crate) fn graphql_request(&self, status: u16, took: Duration) {
        let class = [("status", status_class(status))];
        self.graphql_requests.get_or_create(&class).inc();
        self.graphql_seconds
            .get_or_create(&class)
            .observe(took.as_secs_f64());
    }

    pub(crate) fn proxy_request(&self, outcome: &'static str, took: Duration) {
        let outcome = [("outcome", outcome)];
        self.proxy_requests.get_or_create(&outcome).inc();
        self.proxy_seconds
            .get_or_create(&outcome)
            .observe(took.as_secs_f64());
    }

    pub(crate) fn token_minted(&self) {
        self.tokens_minted.inc();
    }

    pub(crate) fn token_expired(&self) {
        self.tokens_expired.inc();
    }

    pub(crate) fn tokens_purged(&self, purged: u64) {
        self.tokens_purged.inc_by(purged);
    }
}

fn status_class(status: u16) -> &'static str {
    match status {
        200..=299 => "2xx",
        400..=499 => "4xx",
        500..=599 => "5xx",
        _ => "other",
    }
}

/// The exported span of one HTTP request to `route` (`graphql`, `mcp-proxy`), continuing the
/// caller's W3C `traceparent` header. Its attributes are the route, the status and the
/// outcome: never a uid, a key, a team or a header. Off (no OTLP endpoint), a disabled span.
pub(crate) fn request_span(route: &'static str, headers: &axum::http::HeaderMap) -> tracing::Span {
    let span = tracing::info_span!(
        target: "tether_telemetry",
        "http.request",
        otel.name = route,
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        http.route = route,
        http.response.status_code = tracing::field::Empty,
        tether.outcome = tracing::field::Empty,
    );
    if !span.is_disabled()
        && let Some(parent) = headers.get("traceparent").and_then(|v| v.to_str().ok())
    {
        tether_log::telemetry::continue_trace(&span, parent);
    }
    span
}

/// Records how a request of [`request_span`] ended.
pub(crate) fn request_done(span: &tracing::Span, status: u16, outcome: Option<&'static str>) {
    if span.is_disabled() {
        return;
    }
    span.record("http.response.status_code", status);
    if let Some(outcome) = outcome {
        span.record("tether.outcome", outcome);
    }
    if status >= 500 {
        span.record("otel.status_code", "ERROR");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_counters_histograms_and_build_info() {
        let metrics = ServerMetrics::new();
        metrics.resolution("config");
        metrics.resolution("config");
        metrics.resolution("not_found");
        metrics.graphql_request(200, Duration::from_millis(3));
        metrics.proxy_request("expired", Duration::from_millis(1));
        metrics.tokens_purged(4);
        let text = metrics.encode();
        for line in [
            "tether_server_resolutions_total{outcome=\"config\"} 2",
            "tether_server_resolutions_total{outcome=\"not_found\"} 1",
            "tether_server_graphql_requests_total{status=\"2xx\"} 1",
            "tether_server_graphql_request_duration_seconds_count{status=\"2xx\"} 1",
            "tether_server_proxy_requests_total{outcome=\"expired\"} 1",
            "tether_server_proxy_tokens_purged_total 4",
            "# TYPE tether_server_build_info gauge",
            "# EOF",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing in:\n{text}"
            );
        }
        assert!(text.contains(&format!(
            "tether_server_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        )));
    }
}
