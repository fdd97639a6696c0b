//! The HTTP server: routes, API key authentication, health and metrics, graceful shutdown.
//!
//! | route | what |
//! |---|---|
//! | `POST /graphql` | the managed MCP schema; `Authorization: Bearer <api key>` or 401 |
//! | `GET, POST, DELETE /mcp-proxy/{uid}` | the Streamable HTTP proxy ([`crate::proxy`]) |
//! | `GET /healthz` | `ok` when the store answers and can be written to, else 503 and why |
//! | `GET /metrics` | Prometheus text ([`crate::metrics`]), to loopback peers only (404 otherwise) with an API key (401 without one), or with none under `metrics_public` |
//!
//! With `metrics_listen`, a second listener serves `GET /metrics` alone, to any peer that
//! reaches it: Prometheus scrapes it without an API key, and the operator decides who reaches
//! the address (an internal interface, a firewall). Its connections go through the same
//! accept loop (connection bound, header timeout, graceful shutdown).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{any, get, post};
use hyper_util::rt::{TokioIo, TokioTimer};
use tether_clock::Clock;
use tower_service::Service as _;

use crate::crypto::MasterKey;
use crate::error::{ServeError, ServerError};
use crate::graphql::build_schema;
use crate::limits::{BodyLimits, LimitLogs, Limits, MAX_GRAPHQL_REQUEST_BYTES};
use crate::rate::{RateLimiter, RateSettings, retry_after_secs};
use crate::service::{Service, ServiceSettings};
use crate::state::{AppState, bearer_token};
use crate::store::{self, DatabaseUrl};

/// How long open connections (event streams above all) may run on after a shutdown signal.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// How often expired proxy tokens are purged, and how long an expired one is kept (so that a
/// request with it is told "expired" rather than "invalid").
const PURGE_INTERVAL: Duration = Duration::from_secs(600);
const KEEP_EXPIRED: Duration = Duration::from_secs(24 * 3600);

/// How long the accept loop pauses after a failed accept (out of descriptors, say).
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// Limit on establishing a connection to an upstream server.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What `serve` needs.
#[derive(Debug)]
pub struct ServeOptions {
    /// Where to listen (port 0 picks a free port).
    pub listen: SocketAddr,
    /// The database (SQLite in a data directory, or PostgreSQL).
    pub database: DatabaseUrl,
    /// The base URL clients reach this server at; default `http://<bound address>`.
    pub public_url: Option<String>,
    /// Lifetime of minted proxy tokens.
    pub proxy_token_ttl: Duration,
    /// The master key.
    pub key: MasterKey,
    /// Timeouts and bounds against hostile or broken clients and upstreams.
    pub limits: Limits,
    /// GraphQL requests allowed per API key.
    pub rate: RateSettings,
    /// Where to serve `GET /metrics` to any peer (port 0 picks a free port); `None`: only
    /// the main listener's loopback-only `/metrics`.
    pub metrics_listen: Option<SocketAddr>,
    /// Serve the main listener's `/metrics` to loopback peers without an API key (as it once
    /// did: a reverse proxy on the same host then makes it public). Default: a loopback
    /// peer needs an API key too.
    pub metrics_public: bool,
}

/// A server bound to its address, not yet serving.
pub struct BoundServer {
    listener: tokio::net::TcpListener,
    local_addr: SocketAddr,
    metrics_listener: Option<(tokio::net::TcpListener, SocketAddr)>,
    public_base: String,
    state: Arc<AppState>,
}

impl std::fmt::Debug for BoundServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundServer")
            .field("local_addr", &self.local_addr)
            .field("public_base", &self.public_base)
            .finish_non_exhaustive()
    }
}

impl BoundServer {
    /// Opens the store (verifying the key against it) and binds the listen address.
    pub async fn bind(options: ServeOptions) -> Result<Self, ServerError> {
        Self::bind_with_clock(options, tether_clock::system()).await
    }

    /// [`BoundServer::bind`], telling proxy-token expiry and rate-limit refills by `clock`
    /// instead of the system clock (tests pass one they move).
    pub async fn bind_with_clock(
        options: ServeOptions,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, ServerError> {
        let ServeOptions {
            listen,
            database,
            public_url,
            proxy_token_ttl,
            key,
            mut limits,
            rate,
            metrics_listen,
            metrics_public,
        } = options;
        limits.max_connections =
            crate::limits::fit_connections_to_file_limit(limits.max_connections);
        let public_url = public_url.map(|url| public_base(&url)).transpose()?;
        let store = store::open(&database).await?;
        store::verify_key(&*store, &key).await?;
        if key.has_previous() {
            tracing::warn!(
                "a previous key is set: values sealed under it still open; run `tether-server \
                 admin rotate-key` to re-seal them, then restart without it"
            );
        }
        let (listener, local_addr) = bind(listen).await?;
        let metrics_listener = match metrics_listen {
            Some(address) => Some(bind(address).await?),
            None => None,
        };
        let public_base = public_url.unwrap_or_else(|| format!("http://{local_addr}"));
        if public_base.contains("://0.0.0.0") || public_base.contains("://[::]") {
            tracing::warn!(
                %public_base,
                "proxy URLs will name an unspecified address; set --public-url to what clients reach"
            );
        }
        let service = Arc::new(Service::new(
            store,
            Arc::new(key),
            ServiceSettings {
                public_base: public_base.clone(),
                proxy_token_ttl,
            },
            Arc::clone(&clock),
        ));
        let http = reqwest::Client::builder()
            .connect_timeout(UPSTREAM_CONNECT_TIMEOUT)
            // A redirect would carry the upstream credentials elsewhere.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ServeError::HttpClient {
                reason: e.to_string(),
            })?;
        let state = Arc::new(AppState {
            schema: build_schema(Arc::clone(&service)),
            http,
            body_limits: BodyLimits::new(&limits),
            logs: LimitLogs::new(&service.metrics),
            rate: RateLimiter::new(rate, clock),
            limits,
            service,
            metrics_public,
        });
        Ok(Self {
            listener,
            local_addr,
            metrics_listener,
            public_base,
            state,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The bound address of the metrics listener, if there is one.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_listener.as_ref().map(|(_, address)| *address)
    }

    /// The base of proxy URLs.
    pub fn public_base(&self) -> &str {
        &self.public_base
    }

    /// The limits in force (`max_connections` as fitted to the open-file limit).
    pub fn limits(&self) -> &Limits {
        &self.state.limits
    }

    /// Serves until `shutdown` completes, then stops accepting, lets open requests finish for
    /// up to [`SHUTDOWN_GRACE`], and returns.
    ///
    /// Each connection takes a permit of `max_connections` (none left: it is closed at once,
    /// so descriptors never run out) and is served by hyper with the header timeout, which
    /// also bounds the idle time between two requests of a kept-alive connection.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        let purge = tokio::spawn(purge_loop(Arc::clone(&self.state.service)));
        let router = router(Arc::clone(&self.state));
        // The metrics listener's connections are accepted here too: the same connection
        // bound, header timeout and graceful shutdown as the main listener's.
        let metrics_router = Router::new()
            .route("/metrics", get(scrape))
            .with_state(Arc::clone(&self.state.service.metrics));
        let metrics_listener = self.metrics_listener.map(|(listener, _)| listener);
        let connections = Arc::new(tokio::sync::Semaphore::new(
            self.state.limits.max_connections,
        ));
        let mut http1 = hyper::server::conn::http1::Builder::new();
        http1
            .timer(TokioTimer::new())
            .header_read_timeout(self.state.limits.header_timeout);
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let (accepted, routes) = tokio::select! {
                accepted = self.listener.accept() => (accepted, &router),
                accepted = accept_on(metrics_listener.as_ref()) => (accepted, &metrics_router),
                () = &mut shutdown => break,
            };
            let (stream, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors or memory: wait instead of spinning.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            };
            let Ok(permit) = Arc::clone(&connections).try_acquire_owned() else {
                self.state.logs.connections.hit();
                drop(stream);
                continue;
            };
            // Without TCP_NODELAY a streamed response's small writes wait for delayed ACKs
            // (~40 ms each on Linux).
            if let Err(error) = stream.set_nodelay(true) {
                tracing::debug!(%error, "cannot set TCP_NODELAY");
            }
            let router = routes.clone();
            let service = hyper::service::service_fn(
                move |mut request: axum::http::Request<hyper::body::Incoming>| {
                    request.extensions_mut().insert(ConnectInfo(peer));
                    // The router is always ready: no poll_ready needed.
                    router.clone().call(request.map(Body::new))
                },
            );
            let connection = graceful.watch(http1.serve_connection(TokioIo::new(stream), service));
            let state = Arc::clone(&self.state);
            tokio::spawn(async move {
                if let Err(error) = connection.await {
                    if error.is_timeout() {
                        state.logs.header_timeout.hit();
                    } else {
                        tracing::debug!(%error, "connection ended with an error");
                    }
                }
                drop(permit);
            });
        }
        drop(self.listener);
        drop(metrics_listener);
        tracing::info!(
            "shutting down: no new connections; open requests get {} s",
            SHUTDOWN_GRACE.as_secs()
        );
        tokio::select! {
            () = graceful.shutdown() => {}
            () = tokio::time::sleep(SHUTDOWN_GRACE) => {
                tracing::warn!("connections still open after the grace period; closing them");
            }
        }
        purge.abort();
        tracing::info!("stopped");
        Ok(())
    }
}

/// The next connection on `listener`; never, without one.
async fn accept_on(
    listener: Option<&tokio::net::TcpListener>,
) -> std::io::Result<(tokio::net::TcpStream, SocketAddr)> {
    match listener {
        Some(listener) => listener.accept().await,
        None => std::future::pending().await,
    }
}

/// A listener on `address` and the address it bound.
async fn bind(address: SocketAddr) -> Result<(tokio::net::TcpListener, SocketAddr), ServeError> {
    let failed = |source| ServeError::Bind { address, source };
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(failed)?;
    let bound = listener.local_addr().map_err(failed)?;
    Ok((listener, bound))
}

/// `--public-url` without a trailing slash, checked.
fn public_base(url: &str) -> Result<String, ServeError> {
    let invalid = |reason: &str| ServeError::InvalidPublicUrl {
        reason: reason.to_owned(),
    };
    let parsed = reqwest::Url::parse(url).map_err(|e| invalid(&e.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(invalid("the scheme must be http or https"));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(invalid("it must not have a query or fragment"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(invalid("it must not carry credentials"));
    }
    Ok(parsed.as_str().trim_end_matches('/').to_owned())
}

fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/graphql", post(graphql))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/mcp-proxy/{uid}", any(crate::proxy::handle))
        .with_state(state)
}

async fn purge_loop(service: Arc<Service>) {
    let mut interval = tokio::time::interval(PURGE_INTERVAL);
    loop {
        interval.tick().await;
        match service.purge_expired_tokens(KEEP_EXPIRED).await {
            Ok(0) => {}
            Ok(purged) => tracing::info!(purged, "purged expired proxy tokens"),
            Err(error) => tracing::warn!("purging expired proxy tokens failed: {error}"),
        }
    }
}

fn unauthorized(message: &'static str) -> Response {
    let mut response = (StatusCode::UNAUTHORIZED, format!("{message}\n")).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"tether-server\""),
    );
    response
}

/// The caller of a request by its API key, or the answer that refuses it: 401 with `missing`
/// without a key, 401 for an unknown one (logged at info with `what` was asked), 500 when the
/// store fails.
async fn caller_of(
    app: &AppState,
    headers: &HeaderMap,
    missing: &'static str,
    what: &str,
) -> Result<crate::service::Caller, Response> {
    let Some(api_key) = bearer_token(headers) else {
        return Err(unauthorized(missing));
    };
    match app.service.authenticate(api_key).await {
        Ok(Some(caller)) => Ok(caller),
        Ok(None) => {
            tracing::info!("{what} request with an unknown API key");
            Err(unauthorized("unknown API key"))
        }
        Err(error) => {
            tracing::error!("authenticating an API key failed: {error}");
            Err((StatusCode::INTERNAL_SERVER_ERROR, "internal server error\n").into_response())
        }
    }
}

/// Authenticates from the headers first: the body of a request without a valid API key is
/// never read. Authenticated requests are counted and timed by status class.
async fn graphql(State(app): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let caller = match caller_of(
        &app,
        &headers,
        "missing API key: send Authorization: Bearer <api key>",
        "GraphQL",
    )
    .await
    {
        Ok(caller) => caller,
        Err(refused) => return refused,
    };
    let started = std::time::Instant::now();
    let span = crate::metrics::request_span("graphql", &headers);
    let response = tracing::Instrument::instrument(
        authenticated_graphql(&app, caller, &headers, body),
        span.clone(),
    )
    .await;
    let status = response.status().as_u16();
    crate::metrics::request_done(&span, status, None);
    app.service
        .metrics
        .graphql_request(status, started.elapsed());
    response
}

async fn authenticated_graphql(
    app: &AppState,
    caller: crate::service::Caller,
    headers: &HeaderMap,
    body: Body,
) -> Response {
    if let Err(wait) = app.rate.check(&caller.key_id) {
        app.logs.rate_limit.hit();
        return rate_limited(wait);
    }
    let body = match app
        .body_limits
        .read(headers, body, MAX_GRAPHQL_REQUEST_BYTES, &app.logs)
        .await
    {
        Ok(body) => body,
        Err(error) => {
            let (status, message) = error.status_and_message();
            return (status, format!("{message}\n")).into_response();
        }
    };
    let mut request: async_graphql::Request = match serde_json::from_slice(&body.bytes) {
        Ok(request) => request,
        Err(_) => {
            return (
                StatusCode::BAD_REQUEST,
                "the body is not a GraphQL request (JSON with \"query\")\n",
            )
                .into_response();
        }
    };
    // Every top-level field is a resolution (an aliased createManagedMcpClientConfig mints a
    // config and a token each): the request is charged one token per field, the one taken
    // above included, and refused whole — nothing resolved — when it selects more than one
    // request may or than the key has left.
    let fields = crate::graphql::root_fields(&mut request).unwrap_or(1);
    let most = app
        .rate
        .largest_cost()
        .map_or(crate::graphql::MAX_ROOT_FIELDS, |burst| {
            crate::graphql::MAX_ROOT_FIELDS.min(usize::try_from(burst).unwrap_or(usize::MAX))
        });
    if fields > most {
        app.logs.rate_limit.hit();
        return Json(crate::graphql::request_error(
            format!(
                "this request selects {fields} top-level fields (aliases included); this server resolves at most {most} per request: send them in smaller requests"
            ),
            "TOO_MANY_FIELDS",
        ))
        .into_response();
    }
    let more = u32::try_from(fields.saturating_sub(1)).unwrap_or(u32::MAX);
    if let Err(wait) = app.rate.charge(&caller.key_id, more) {
        app.logs.rate_limit.hit();
        return rate_limited(wait);
    }
    let response = app.schema.execute(request.data(caller)).await;
    Json(response).into_response()
}

/// 429 with `Retry-After`: the key's bucket is empty for now.
fn rate_limited(wait: std::time::Duration) -> Response {
    let mut response = (
        StatusCode::TOO_MANY_REQUESTS,
        "rate limit of this API key reached; retry after the time in Retry-After\n",
    )
        .into_response();
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(retry_after_secs(wait)),
    );
    response
}

async fn healthz(State(app): State<Arc<AppState>>) -> Response {
    match app.service.health().await {
        Ok(()) => (StatusCode::OK, "ok\n").into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response(),
    }
}

/// The main listener's `/metrics`: loopback peers only, with an API key unless
/// `metrics_public`. A reverse proxy on this host makes every request a loopback one, so the
/// peer's address alone let anyone behind the recommended proxy read the page.
async fn metrics(
    State(app): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    if !peer.ip().is_loopback() {
        return StatusCode::NOT_FOUND.into_response();
    }
    if !app.metrics_public
        && let Err(refused) = caller_of(&app, &headers, METRICS_NEED_A_KEY, "/metrics").await
    {
        return refused;
    }
    scrape(State(Arc::clone(&app.service.metrics))).await
}

/// What a scrape of the main listener's `/metrics` without an API key is told.
const METRICS_NEED_A_KEY: &str = "GET /metrics on the main listener needs an API key (Authorization: Bearer <api key>): behind a reverse proxy on this host every peer is a loopback one; scrape --metrics-listen ADDRESS instead, or start with --metrics-public to serve it to loopback peers without a key as before";

/// The metrics in the Prometheus text format.
async fn scrape(State(metrics): State<Arc<crate::metrics::ServerMetrics>>) -> Response {
    (
        [(header::CONTENT_TYPE, crate::metrics::METRICS_CONTENT_TYPE)],
        metrics.encode(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_urls() {
        assert_eq!(
            public_base("https://mcp.example.com/").unwrap(),
            "https://mcp.example.com"
        );
        assert_eq!(
            public_base("http://h:8080/base/").unwrap(),
            "http://h:8080/base"
        );
        for bad in ["ftp://h", "h:80", "https://h/?q=1", "https://u:p@h"] {
            assert!(public_base(bad).is_err(), "{bad}");
        }
    }
}
