//! `/mcp-proxy/{uid}`: forwards Streamable HTTP MCP traffic to a URL installation's upstream,
//! adding the upstream credentials the client never sees.
//!
//! A request needs `Authorization: Bearer <proxy token>` minted for this uid, unexpired, for an
//! active installation. Then POST, GET (event streams) and DELETE go upstream with an allowlist
//! of the client's headers plus the installation's own headers; the response streams back
//! chunk by chunk (never buffered whole) with an allowlist of upstream headers.
//!
//! **Invariant:** the client's `Authorization` header never goes upstream, and neither the
//! upstream URL nor an upstream header value reaches the client (errors and logs included:
//! reqwest errors are logged `without_url`).

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::installation::Upstream;
use crate::service::ProxyDecision;
use crate::state::{AppState, bearer_token};

/// The largest request body forwarded (JSON-RPC messages are small).
pub const MAX_PROXY_REQUEST_BYTES: usize = 16 * 1024 * 1024;

/// Client headers forwarded upstream; nothing else is (above all not `Authorization`).
const FORWARDED_REQUEST_HEADERS: [HeaderName; 5] = [
    header::ACCEPT,
    header::CONTENT_TYPE,
    HeaderName::from_static("mcp-session-id"),
    HeaderName::from_static("mcp-protocol-version"),
    HeaderName::from_static("last-event-id"),
];

/// Upstream headers returned to the client; nothing else is.
const RETURNED_RESPONSE_HEADERS: [HeaderName; 4] = [
    header::CONTENT_TYPE,
    header::CACHE_CONTROL,
    HeaderName::from_static("mcp-session-id"),
    HeaderName::from_static("mcp-protocol-version"),
];

/// Handles one request to `/mcp-proxy/{uid}`.
pub(crate) async fn handle(
    State(app): State<Arc<AppState>>,
    Path(uid): Path<String>,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if !matches!(method, Method::POST | Method::GET | Method::DELETE) {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, "GET, POST, DELETE")],
            "the MCP proxy accepts GET, POST and DELETE\n",
        )
            .into_response();
    }
    let Some(token) = bearer_token(&headers) else {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "missing proxy token: send Authorization: Bearer <proxyToken>",
        );
    };
    let decision = match app.service.authorize_proxy(&uid, token).await {
        Ok(decision) => decision,
        Err(error) => {
            tracing::error!(%uid, "proxy authorization failed: {error}");
            return refuse(StatusCode::INTERNAL_SERVER_ERROR, "internal server error");
        }
    };
    match decision {
        ProxyDecision::InvalidToken => {
            tracing::info!(%uid, "proxy: invalid token");
            refuse(StatusCode::UNAUTHORIZED, "invalid proxy token")
        }
        ProxyDecision::Expired => {
            tracing::info!(%uid, "proxy: expired token");
            refuse(
                StatusCode::UNAUTHORIZED,
                "proxy token expired: request a new config with createManagedMcpClientConfig",
            )
        }
        ProxyDecision::Inactive => {
            tracing::info!(%uid, "proxy: installation deactivated");
            refuse(
                StatusCode::FORBIDDEN,
                "this managed MCP server is deactivated",
            )
        }
        ProxyDecision::Forward(upstream) => {
            forward(&app.http, &uid, method, &headers, body, upstream).await
        }
    }
}

async fn forward(
    http: &reqwest::Client,
    uid: &str,
    method: Method,
    headers: &HeaderMap,
    body: Body,
    upstream: Upstream,
) -> Response {
    let started = Instant::now();
    let body = match axum::body::to_bytes(body, MAX_PROXY_REQUEST_BYTES).await {
        Ok(body) => body,
        Err(_) => {
            return refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                "the request body is too large or could not be read",
            );
        }
    };
    let mut outgoing = HeaderMap::new();
    for name in &FORWARDED_REQUEST_HEADERS {
        for value in headers.get_all(name) {
            outgoing.append(name.clone(), value.clone());
        }
    }
    let Upstream {
        url,
        headers: upstream_headers,
    } = upstream;
    for (name, value) in &upstream_headers {
        outgoing.insert(name.clone(), value.clone());
    }
    let sent = http
        .request(method.clone(), url)
        .headers(outgoing)
        .body(body)
        .send()
        .await;
    let response = match sent {
        Ok(response) => response,
        Err(error) => {
            tracing::warn!(%uid, %method, error = %error.without_url(), "proxy: upstream unreachable");
            return refuse(
                StatusCode::BAD_GATEWAY,
                "the upstream MCP server could not be reached",
            );
        }
    };
    let status = response.status();
    tracing::debug!(
        %uid,
        %method,
        status = status.as_u16(),
        elapsed_ms = started.elapsed().as_millis(),
        "proxy: upstream answered"
    );
    if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
        tracing::warn!(%uid, status = status.as_u16(), "proxy: upstream refused the installation's credentials");
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
        return response;
    }
    let mut returned = Response::builder().status(status);
    for name in &RETURNED_RESPONSE_HEADERS {
        for value in response.headers().get_all(name) {
            returned = returned.header(name.clone(), value.clone());
        }
    }
    returned
        .body(Body::from_stream(response.bytes_stream()))
        .unwrap_or_else(|_| refuse(StatusCode::BAD_GATEWAY, "invalid upstream response"))
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
