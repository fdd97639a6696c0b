//! What a hostile or broken client (or upstream) may hold of the server: connections, time,
//! body bytes. Every limit is configurable (`serve` flags) and logs when it is hit, at most once
//! a second per limit with the count since the last line (a flood must not flood the log too).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes, HttpBody as _};
use axum::http::{HeaderMap, StatusCode, header};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::metrics::ServerMetrics;

/// Default time a client has to send a request's headers, also the idle time allowed between
/// two requests on a kept-alive connection.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time a client has to send a whole request body.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Default time an upstream has to answer a proxied request (status and headers), and the
/// longest silence allowed inside a POST or DELETE response body.
pub const DEFAULT_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(120);
/// Default bound on open client connections (lowered to fit the open-file limit).
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// Default bound on request body bytes held in memory at once, over all requests.
pub const DEFAULT_MAX_BODY_BYTES_IN_FLIGHT: usize = 64 * 1024 * 1024;
/// The largest GraphQL request body (queries are small).
pub const MAX_GRAPHQL_REQUEST_BYTES: usize = 2 * 1024 * 1024;

/// File descriptors kept for everything but client connections (store, upstreams, logs).
const RESERVED_FILES: u64 = 128;

/// The server's limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Time to send a request's headers; also the keep-alive idle time between requests.
    pub header_timeout: Duration,
    /// Time to send a request's whole body.
    pub body_timeout: Duration,
    /// Time an upstream has to answer; also the longest silence inside a non-GET response.
    pub upstream_timeout: Duration,
    /// Open client connections; more are closed as soon as accepted.
    pub max_connections: usize,
    /// Request body bytes buffered at once over all requests; past it requests get 503.
    pub max_body_bytes_in_flight: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            upstream_timeout: DEFAULT_UPSTREAM_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_body_bytes_in_flight: DEFAULT_MAX_BODY_BYTES_IN_FLIGHT,
        }
    }
}

/// `max_connections` fitted to the open-file limit: the soft limit is raised towards the hard
/// one if needed, and if that is not enough the connection bound is lowered (with a warning),
/// so that the listener never runs out of descriptors (which would stop `/healthz` silently).
pub(crate) fn fit_connections_to_file_limit(max_connections: usize) -> usize {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let wanted = u64::try_from(max_connections)
        .unwrap_or(u64::MAX)
        .saturating_add(RESERVED_FILES);
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return max_connections;
    };
    let mut available = soft;
    if soft < wanted {
        let raised = wanted.min(hard);
        if raised > soft && setrlimit(Resource::RLIMIT_NOFILE, raised, hard).is_ok() {
            available = raised;
        }
    }
    if available >= wanted {
        return max_connections;
    }
    let fitted = usize::try_from(available.saturating_sub(RESERVED_FILES))
        .unwrap_or(usize::MAX)
        .max(1);
    tracing::warn!(
        requested = max_connections,
        open_file_limit = available,
        max_connections = fitted,
        "the open-file limit is too low for --max-connections; using fewer (raise `ulimit -n`)"
    );
    fitted
}

/// Logs a limit being hit at most once a second, with how many times it was hit, and counts
/// every hit in `tether_server_limit_refusals_total`.
#[derive(Debug)]
pub(crate) struct LimitLog {
    what: &'static str,
    counted: prometheus_client::metrics::counter::Counter,
    started: Instant,
    /// Milliseconds since `started` of the last line written.
    last_ms: AtomicU64,
    /// Hits since the last line.
    hits: AtomicU64,
}

impl LimitLog {
    pub(crate) fn new(what: &'static str, metrics: &ServerMetrics, limit: &'static str) -> Self {
        Self {
            what,
            counted: metrics
                .limit_refusals
                .get_or_create(&[("limit", limit)])
                .clone(),
            started: Instant::now(),
            last_ms: AtomicU64::new(0),
            hits: AtomicU64::new(0),
        }
    }

    /// Counts one hit; writes a WARN line if none was written in the last second.
    pub(crate) fn hit(&self) {
        self.counted.inc();
        self.hits.fetch_add(1, Ordering::Relaxed);
        // Offset by a second so that the very first hit is logged.
        let now_ms = u64::try_from(self.started.elapsed().as_millis())
            .unwrap_or(u64::MAX)
            .saturating_add(1000);
        let last = self.last_ms.load(Ordering::Relaxed);
        if now_ms.saturating_sub(last) < 1000
            || self
                .last_ms
                .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let hits = self.hits.swap(0, Ordering::Relaxed);
        tracing::warn!(limit = self.what, hits, "limit hit");
    }
}

/// The counters of every limit, shared by the accept loop and the handlers.
#[derive(Debug)]
pub(crate) struct LimitLogs {
    pub(crate) connections: LimitLog,
    pub(crate) header_timeout: LimitLog,
    pub(crate) body_timeout: LimitLog,
    pub(crate) body_too_large: LimitLog,
    pub(crate) body_bytes_in_flight: LimitLog,
    pub(crate) upstream_timeout: LimitLog,
    pub(crate) rate_limit: LimitLog,
}

impl LimitLogs {
    /// The logs, each counting into `metrics`.
    pub(crate) fn new(metrics: &ServerMetrics) -> Self {
        let log = |what, limit| LimitLog::new(what, metrics, limit);
        Self {
            connections: log(
                "max-connections: connection closed on accept",
                "max_connections",
            ),
            header_timeout: log("header-timeout: connection closed", "header_timeout"),
            body_timeout: log("body-timeout: request refused (408)", "body_timeout"),
            body_too_large: log(
                "request body too large: request refused (413)",
                "body_too_large",
            ),
            body_bytes_in_flight: log(
                "max-body-bytes-in-flight: request refused (503)",
                "body_bytes_in_flight",
            ),
            rate_limit: log("rate-limit: request refused (429)", "rate_limit"),
            upstream_timeout: log(
                "upstream-timeout: proxied request ended",
                "upstream_timeout",
            ),
        }
    }
}

/// The request-body side of the limits: a byte budget shared by all requests and a deadline.
#[derive(Debug)]
pub(crate) struct BodyLimits {
    budget: Arc<Semaphore>,
    timeout: Duration,
}

/// A buffered request body; its bytes count against the shared budget until it is dropped.
#[derive(Debug)]
pub(crate) struct BufferedBody {
    pub(crate) bytes: Bytes,
    _permit: Option<OwnedSemaphorePermit>,
}

/// Why a body was not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyError {
    TooLarge,
    TimedOut,
    Busy,
    Unreadable,
}

impl BodyError {
    /// The status and text the client gets.
    pub(crate) fn status_and_message(self) -> (StatusCode, &'static str) {
        match self {
            BodyError::TooLarge => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "the request body is too large",
            ),
            BodyError::TimedOut => (
                StatusCode::REQUEST_TIMEOUT,
                "the request body was not received in time",
            ),
            BodyError::Busy => (
                StatusCode::SERVICE_UNAVAILABLE,
                "the server is busy receiving other requests; retry shortly",
            ),
            BodyError::Unreadable => (
                StatusCode::BAD_REQUEST,
                "the request body could not be read",
            ),
        }
    }
}

impl BodyLimits {
    pub(crate) fn new(limits: &Limits) -> Self {
        Self {
            budget: Arc::new(Semaphore::new(
                limits.max_body_bytes_in_flight.min(Semaphore::MAX_PERMITS),
            )),
            timeout: limits.body_timeout,
        }
    }

    /// Reads `body` whole: at most `max` bytes, within the body timeout, each chunk taken from
    /// the shared budget (or refused at once when the budget is spent). Call it only after
    /// the request is authenticated.
    pub(crate) async fn read(
        &self,
        headers: &HeaderMap,
        body: Body,
        max: usize,
        logs: &LimitLogs,
    ) -> Result<BufferedBody, BodyError> {
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|len| len > u64::try_from(max).unwrap_or(u64::MAX)) {
            logs.body_too_large.hit();
            return Err(BodyError::TooLarge);
        }
        let outcome = tokio::time::timeout(self.timeout, self.collect(body, max)).await;
        let error = match outcome {
            Ok(Ok(body)) => return Ok(body),
            Ok(Err(error)) => error,
            Err(_) => BodyError::TimedOut,
        };
        match error {
            BodyError::TooLarge => logs.body_too_large.hit(),
            BodyError::TimedOut => logs.body_timeout.hit(),
            BodyError::Busy => logs.body_bytes_in_flight.hit(),
            BodyError::Unreadable => {}
        }
        Err(error)
    }

    async fn collect(&self, mut body: Body, max: usize) -> Result<BufferedBody, BodyError> {
        let mut permit: Option<OwnedSemaphorePermit> = None;
        let mut chunks: Vec<Bytes> = Vec::new();
        let mut total = 0_usize;
        while let Some(frame) =
            std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await
        {
            let frame = frame.map_err(|_| BodyError::Unreadable)?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            total = total.saturating_add(data.len());
            if total > max {
                return Err(BodyError::TooLarge);
            }
            let size = u32::try_from(data.len()).map_err(|_| BodyError::TooLarge)?;
            if size > 0 {
                let more = Arc::clone(&self.budget)
                    .try_acquire_many_owned(size)
                    .map_err(|_| BodyError::Busy)?;
                match permit.as_mut() {
                    Some(held) => held.merge(more),
                    None => permit = Some(more),
                }
            }
            chunks.push(data);
        }
        let bytes = if chunks.len() == 1 {
            chunks.pop().unwrap_or_default()
        } else {
            let mut joined = Vec::with_capacity(total);
            for chunk in &chunks {
                joined.extend_from_slice(chunk);
            }
            Bytes::from(joined)
        };
        Ok(BufferedBody {
            bytes,
            _permit: permit,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(budget: usize) -> BodyLimits {
        BodyLimits::new(&Limits {
            max_body_bytes_in_flight: budget,
            ..Limits::default()
        })
    }

    #[tokio::test]
    async fn bodies_count_against_the_shared_budget_until_dropped() {
        let limits = limits(10);
        let logs = LimitLogs::new(&ServerMetrics::new());
        let none = HeaderMap::new();
        let first = limits
            .read(&none, Body::from("123456"), 100, &logs)
            .await
            .unwrap();
        assert_eq!(first.bytes, "123456");
        let busy = limits.read(&none, Body::from("12345"), 100, &logs).await;
        assert_eq!(busy.unwrap_err(), BodyError::Busy);
        drop(first);
        let second = limits
            .read(&none, Body::from("12345"), 100, &logs)
            .await
            .unwrap();
        assert_eq!(second.bytes, "12345");
    }

    #[tokio::test]
    async fn too_large_bodies_are_refused_declared_or_not() {
        let limits = limits(1000);
        let logs = LimitLogs::new(&ServerMetrics::new());
        let mut declared = HeaderMap::new();
        declared.insert(header::CONTENT_LENGTH, "999".parse().unwrap());
        // Refused from the header alone: the (short) body is never read.
        let refused = limits.read(&declared, Body::from("x"), 10, &logs).await;
        assert_eq!(refused.unwrap_err(), BodyError::TooLarge);
        let refused = limits
            .read(&HeaderMap::new(), Body::from("x".repeat(11)), 10, &logs)
            .await;
        assert_eq!(refused.unwrap_err(), BodyError::TooLarge);
    }
}
