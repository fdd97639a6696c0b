//! `/mcp-proxy/{uid}`: forwards Streamable HTTP MCP traffic to a URL installation's upstream,
//! adding the upstream credentials the client never sees.
//!
//! A request needs `Authorization: Bearer <proxy token>` minted for this uid, unexpired, for an
//! active installation. Then POST, GET (event streams) and DELETE go upstream with an allowlist
//! of the client's headers plus the installation's own headers; the response streams back
//! chunk by chunk (never buffered whole) with an allowlist of upstream headers. Both lists are
//! `tether_http::proxy`'s, the ones the hand-off bridge uses too.
//!
//! Limits ([`crate::limits`]): the token is checked from the headers before any byte of the
//! body is read; the body is read within the body timeout and the shared byte budget; the
//! upstream must answer within the upstream timeout, and a POST or DELETE response body may
//! not fall silent longer than that. Every proxied response body (GET event streams above
//! all) ends when its token expires, and within [`STREAM_RECHECK`] of the token becoming
//! unacceptable otherwise (installation deactivated, token purged).
//!
//! Untrusted values (the `uid` path segment above all) are logged with `?` (escaped).
//!
//! **Invariant:** the client's `Authorization` header never goes upstream, and neither the
//! upstream URL nor an upstream header value reaches the client (errors and logs included:
//! reqwest errors are logged `without_url`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tether_http::proxy;

use crate::crypto;
use crate::installation::Upstream;
use crate::service::ProxyDecision;
use crate::state::{AppState, bearer_token};

/// The largest request body forwarded (JSON-RPC messages are small).
pub const MAX_PROXY_REQUEST_BYTES: usize = 16 * 1024 * 1024;

/// How often an open proxied response checks that its token is still accepted: the bound on
/// how long a revocation or deactivation (through any replica) takes to end an open stream.
pub const STREAM_RECHECK: Duration = Duration::from_secs(1);

/// Handles one request to `/mcp-proxy/{uid}`, counting it by outcome
/// ([`crate::metrics::ServerMetrics`]).
pub(crate) async fn handle(
    State(app): State<Arc<AppState>>,
    Path(uid): Path<String>,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let span = crate::metrics::request_span("mcp-proxy", &headers);
    let (outcome, response) =
        tracing::Instrument::instrument(route(&app, &uid, method, &headers, body), span.clone())
            .await;
    crate::metrics::request_done(&span, response.status().as_u16(), Some(outcome));
    app.service
        .metrics
        .proxy_request(outcome, started.elapsed());
    response
}

/// The response to a proxied request and its outcome label.
type Outcome = (&'static str, Response);

async fn route(
    app: &Arc<AppState>,
    uid: &str,
    method: Method,
    headers: &HeaderMap,
    body: Body,
) -> Outcome {
    if !matches!(method, Method::POST | Method::GET | Method::DELETE) {
        return (
            "refused",
            (
                StatusCode::METHOD_NOT_ALLOWED,
                [(header::ALLOW, "GET, POST, DELETE")],
                "the MCP proxy accepts GET, POST and DELETE\n",
            )
                .into_response(),
        );
    }
    let Some(token) = bearer_token(headers) else {
        return (
            "unauthorized",
            refuse(
                StatusCode::UNAUTHORIZED,
                "missing proxy token: send Authorization: Bearer <proxyToken>",
            ),
        );
    };
    let decision = match app.service.authorize_proxy(uid, token).await {
        Ok(decision) => decision,
        Err(error) => {
            tracing::error!(?uid, "proxy authorization failed: {error}");
            return (
                "error",
                refuse(StatusCode::INTERNAL_SERVER_ERROR, "internal server error"),
            );
        }
    };
    match decision {
        ProxyDecision::InvalidToken => {
            tracing::info!(?uid, "proxy: invalid token");
            (
                "unauthorized",
                refuse(StatusCode::UNAUTHORIZED, "invalid proxy token"),
            )
        }
        ProxyDecision::Expired => {
            tracing::info!(?uid, "proxy: expired token");
            app.service.metrics.token_expired();
            (
                "expired",
                refuse(
                    StatusCode::UNAUTHORIZED,
                    "proxy token expired: request a new config with createManagedMcpClientConfig",
                ),
            )
        }
        ProxyDecision::Inactive => {
            tracing::info!(?uid, "proxy: installation deactivated");
            (
                "inactive",
                refuse(
                    StatusCode::FORBIDDEN,
                    "this managed MCP server is deactivated",
                ),
            )
        }
        ProxyDecision::Forward {
            upstream,
            expires_at_ms,
        } => {
            let watch = StreamWatch {
                app: Arc::clone(app),
                token_hash: crypto::token_hash(token),
                expires_at_ms,
            };
            forward(app, uid, method, headers, body, upstream, watch).await
        }
    }
}

async fn forward(
    app: &AppState,
    uid: &str,
    method: Method,
    headers: &HeaderMap,
    body: Body,
    upstream: Upstream,
    watch: StreamWatch,
) -> Outcome {
    let started = Instant::now();
    let body = match app
        .body_limits
        .read(headers, body, MAX_PROXY_REQUEST_BYTES, &app.logs)
        .await
    {
        Ok(body) => body,
        Err(error) => {
            let (status, message) = error.status_and_message();
            return ("refused", refuse(status, message));
        }
    };
    // Only the allow-listed client headers (never its `Authorization`), then the upstream's own.
    let mut outgoing = HeaderMap::new();
    for (name, value) in proxy::forwarded_request(headers) {
        outgoing.append(name.clone(), value.clone());
    }
    let Upstream {
        url,
        headers: upstream_headers,
    } = upstream;
    for (name, value) in &upstream_headers {
        outgoing.insert(name.clone(), value.clone());
    }
    let upstream_timeout = app.limits.upstream_timeout;
    let sent = tokio::time::timeout(
        upstream_timeout,
        app.http
            .request(method.clone(), url)
            .headers(outgoing)
            .body(body.bytes.clone())
            .send(),
    )
    .await;
    // The request body's bytes leave the shared budget once sent.
    drop(body);
    let response = match sent {
        Ok(Ok(response)) => response,
        Ok(Err(error)) => {
            tracing::warn!(?uid, %method, error = %error.without_url(), "proxy: upstream unreachable");
            return (
                "upstream_error",
                refuse(
                    StatusCode::BAD_GATEWAY,
                    "the upstream MCP server could not be reached",
                ),
            );
        }
        Err(_) => {
            app.logs.upstream_timeout.hit();
            tracing::warn!(?uid, %method, timeout_secs = upstream_timeout.as_secs(), "proxy: upstream did not answer in time");
            return (
                "upstream_error",
                refuse(
                    StatusCode::GATEWAY_TIMEOUT,
                    "the upstream MCP server did not answer in time",
                ),
            );
        }
    };
    let status = response.status();
    tracing::debug!(
        ?uid,
        %method,
        status = status.as_u16(),
        elapsed_ms = started.elapsed().as_millis(),
        "proxy: upstream answered"
    );
    if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
        tracing::warn!(
            ?uid,
            status = status.as_u16(),
            "proxy: upstream refused the installation's credentials"
        );
        // Passed through, a 401 would read as a bad proxy token and its challenge could name
        // the upstream's authorization server: the client cannot fix it anyway.
        let mut response = refuse(
            StatusCode::BAD_GATEWAY,
            "the upstream MCP server refused the proxied request; ask your administrator to check the installation's credentials",
        );
        if let Ok(value) = HeaderValue::from_str(status.as_str()) {
            response
                .headers_mut()
                .insert(HeaderName::from_static("x-upstream-status"), value);
        }
        return ("upstream_error", response);
    }
    let mut returned = Response::builder().status(status);
    for (name, value) in proxy::allowed(response.headers(), &proxy::RETURNED_RESPONSE_HEADERS) {
        returned = returned.header(name.clone(), value.clone());
    }
    // An event stream (GET) may be silent for long; any other response may not.
    let idle = (method != Method::GET).then_some(upstream_timeout);
    let stream = watch.guard(uid.to_owned(), response.bytes_stream(), idle);
    match returned.body(Body::from_stream(stream)) {
        Ok(response) => ("forwarded", response),
        Err(_) => (
            "upstream_error",
            refuse(StatusCode::BAD_GATEWAY, "invalid upstream response"),
        ),
    }
}

/// What an open proxied response needs to end itself when its token stops being accepted.
struct StreamWatch {
    app: Arc<AppState>,
    token_hash: [u8; 32],
    expires_at_ms: i64,
}

/// Why a proxied response body ended early.
#[derive(Debug)]
struct StreamEnded(&'static str);

impl std::fmt::Display for StreamEnded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for StreamEnded {}

impl StreamWatch {
    /// `upstream` passed through until the token expires, [`Service::proxy_token_still_valid`]
    /// says no (checked every [`STREAM_RECHECK`]), or (with `idle`) the upstream is silent
    /// that long. Ending early aborts the response (the client sees the stream cut, not a
    /// clean end it could take for a complete answer).
    ///
    /// [`Service::proxy_token_still_valid`]: crate::service::Service::proxy_token_still_valid
    fn guard(
        self,
        uid: String,
        upstream: impl futures_util::Stream<Item = reqwest::Result<Bytes>> + Send + 'static,
        idle: Option<Duration>,
    ) -> impl futures_util::Stream<Item = Result<Bytes, StreamEnded>> + Send + 'static {
        use futures_util::StreamExt as _;
        let remaining_ms = self.expires_at_ms.saturating_sub(crate::store::now_ms());
        let expiry = tokio::time::Instant::now()
            + Duration::from_millis(u64::try_from(remaining_ms).unwrap_or(0));
        let parsed_uid = uuid::Uuid::parse_str(&uid).ok();
        let mut recheck =
            tokio::time::interval_at(tokio::time::Instant::now() + STREAM_RECHECK, STREAM_RECHECK);
        recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let StreamWatch {
            app, token_hash, ..
        } = self;
        // The silence deadline is kept across loop turns: a recheck must not restart it
        // (with a 1 s recheck and `--upstream-timeout 1` it never fired).
        let silent_until = move || idle.map(|idle| tokio::time::Instant::now() + idle);
        let state = Some((Box::pin(upstream), recheck, silent_until()));
        futures_util::stream::unfold(state, move |state| {
            let app = Arc::clone(&app);
            let uid = uid.clone();
            async move {
                let (mut upstream, mut recheck, deadline) = state?;
                let reason = loop {
                    let silence = async {
                        match deadline {
                            Some(deadline) => tokio::time::sleep_until(deadline).await,
                            None => std::future::pending().await,
                        }
                    };
                    let step = tokio::select! {
                        item = upstream.next() => Step::Item(Some(item)),
                        () = silence => Step::Item(None),
                        () = tokio::time::sleep_until(expiry) => Step::Expired,
                        _ = recheck.tick() => Step::Recheck,
                    };
                    match step {
                        Step::Item(None) => {
                            app.logs.upstream_timeout.hit();
                            break "the upstream fell silent for longer than the upstream timeout";
                        }
                        Step::Item(Some(None)) => return None,
                        Step::Item(Some(Some(Ok(bytes)))) => {
                            return Some((Ok(bytes), Some((upstream, recheck, silent_until()))));
                        }
                        Step::Item(Some(Some(Err(error)))) => {
                            tracing::debug!(?uid, error = %error.without_url(), "proxy: upstream body failed");
                            break "the upstream response failed";
                        }
                        Step::Expired => break "the proxy token expired",
                        Step::Recheck => {
                            let Some(parsed) = parsed_uid else {
                                break "invalid uid";
                            };
                            match app
                                .service
                                .proxy_token_still_valid(parsed, token_hash)
                                .await
                            {
                                Ok(true) => {}
                                Ok(false) => {
                                    break "the proxy token is no longer accepted (installation deactivated or token removed)";
                                }
                                Err(error) => {
                                    tracing::warn!(
                                        ?uid,
                                        "proxy: re-checking a token failed: {error}"
                                    );
                                }
                            }
                        }
                    }
                };
                tracing::info!(?uid, reason, "proxy: closing the proxied response");
                Some((Err(StreamEnded(reason)), None))
            }
        })
    }
}

/// What woke a guarded stream.
enum Step {
    /// The upstream's next item; `None` when it was silent past the idle timeout.
    Item(Option<Option<reqwest::Result<Bytes>>>),
    Expired,
    Recheck,
}

/// A plain-text refusal; 401s carry a `WWW-Authenticate` challenge.
fn refuse(status: StatusCode, message: &'static str) -> Response {
    let mut response = (status, format!("{message}\n")).into_response();
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(
                "Bearer realm=\"tether-server mcp-proxy\", error=\"invalid_token\"",
            ),
        );
    }
    response
}
