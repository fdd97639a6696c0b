//! The URL-server bridge of a hand-off (issue 10 item 3): a loopback HTTP server inside the
//! `tether run` process that stands in for every remote server whose URL or headers hold a
//! secret (or any header at all). The harness's config gets `http://127.0.0.1:PORT/<key>`,
//! where `<key>` is random per server, plus `Authorization: Bearer <token>`, random per run;
//! the bridge checks both, forwards to the real URL with the real headers added, and streams
//! the answer back. So no secret of a URL server reaches the harness (config, environment or
//! command line), no harness expansion (`$` in Gemini CLI, `{env:…}` in opencode) can alter
//! one, and every header value arrives upstream byte for byte as tether rendered it.
//!
//! Forwarded: POST (JSON or SSE answers), GET (event streams), DELETE; the client headers
//! `Accept`, `Content-Type`, `Mcp-Session-Id`, `Mcp-Protocol-Version`, `Last-Event-Id` go up,
//! the server headers `Content-Type`, `Cache-Control`, `Mcp-Session-Id`,
//! `Mcp-Protocol-Version` come back; nothing else does (the harness's `Authorization` never
//! goes upstream, no upstream header or URL reaches the harness). Legacy SSE servers: the
//! `endpoint` event of their GET stream names where to POST; the bridge keeps that URL and
//! sends the harness `/<key>/m/<id>` instead.
//!
//! Limits: request bodies up to [`MAX_REQUEST_BYTES`], read within [`BODY_TIMEOUT`], only after
//! the key and the token were checked; the upstream must answer within
//! [`DEFAULT_UPSTREAM_TIMEOUT`] (or the server's own `timeout`, when longer), and a POST/DELETE answer may not fall silent longer than
//! that (GET event streams may). Redirects are not followed (they would carry the headers to
//! another host). Upstream 401/403 become 502 with a message: the harness cannot fix the
//! credentials tether adds, and a 401 would send it into an OAuth flow against the bridge.
//! Errors are logged without URLs (a URL may hold a secret).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt as _};
use tether_config::{
    RemoteTransport, RenderedServer, RenderedText, RenderedTransport, SecretValue,
};
use tether_driver::{BearerAuth, BearerSlot, Refusal, send_renewing};

/// The largest request body forwarded (JSON-RPC messages are small).
pub const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;
/// Time a harness has to send a whole request body.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Time an upstream has to answer (and the longest silence inside a POST/DELETE answer) when
/// the server sets no `timeout` of its own.
pub const DEFAULT_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(120);
/// Time to open a connection to an upstream.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes of a legacy SSE stream searched for its `endpoint` event before passing it through.
const ENDPOINT_SEARCH_BYTES: usize = 64 * 1024;
/// Message endpoints kept per server (one per open legacy SSE stream).
const MAX_ENDPOINTS: usize = 1024;

/// Client headers forwarded upstream; nothing else is.
const FORWARDED_REQUEST_HEADERS: [HeaderName; 5] = [
    header::ACCEPT,
    header::CONTENT_TYPE,
    HeaderName::from_static("mcp-session-id"),
    HeaderName::from_static("mcp-protocol-version"),
    HeaderName::from_static("last-event-id"),
];

/// Upstream headers returned to the harness; nothing else is.
const RETURNED_RESPONSE_HEADERS: [HeaderName; 4] = [
    header::CONTENT_TYPE,
    header::CACHE_CONTROL,
    HeaderName::from_static("mcp-session-id"),
    HeaderName::from_static("mcp-protocol-version"),
];

/// Whether a hand-off routes `server` through the bridge: a remote server with any header or
/// a URL holding a secret. Others (a plain URL, no headers: public servers, or servers whose
/// OAuth the harness does itself) go to the harness unchanged.
pub fn needs_bridge(server: &RenderedServer) -> bool {
    match &server.transport {
        RenderedTransport::Remote { url, headers, .. } => !headers.is_empty() || url.is_sensitive(),
        RenderedTransport::Stdio { .. } => false,
    }
}

/// One bridged server: where it really is and what to add.
struct Route {
    name: String,
    url: SecretValue,
    headers: Vec<(HeaderName, SecretValue)>,
    transport: RemoteTransport,
    timeout: Duration,
    /// Legacy SSE message endpoints the upstream announced, by the id the harness was given.
    endpoints: Mutex<HashMap<String, SecretValue>>,
    /// Its `Authorization` header (then not in `headers`), renewed when the server refuses it
    /// (an OAuth token of `tether auth login`: refreshed on 401, stepped up on 403).
    authorization: Option<BearerSlot>,
}

struct Shared {
    routes: HashMap<String, Arc<Route>>,
    bearer: SecretValue,
    client: reqwest::Client,
}

/// The bridge of one hand-off, bound on loopback and not yet serving.
pub struct Bridge {
    listener: std::net::TcpListener,
    base: String,
    bearer: SecretValue,
    routes: HashMap<String, Arc<Route>>,
    /// Where renewed upstream tokens come from.
    bearer_auth: Arc<dyn BearerAuth>,
}

impl Bridge {
    /// Binds `127.0.0.1` on a free port.
    pub fn bind() -> anyhow::Result<Self> {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
            .context("cannot listen on loopback for the URL-server bridge")?;
        listener.set_nonblocking(true)?;
        let base = format!("http://{}", listener.local_addr()?);
        Ok(Self {
            listener,
            base,
            bearer: tether_http::token::generate()?,
            routes: HashMap::new(),
            bearer_auth: crate::oauth_tokens::bearer_auth(),
        })
    }

    /// `server` as the harness must see it: the bridge's URL for it and the run's bearer token
    /// as its only header. Its real URL and headers stay here. A header whose name or value is
    /// not valid HTTP is an error naming the server and the header (never the value).
    pub fn route(&mut self, server: &RenderedServer) -> anyhow::Result<RenderedServer> {
        let RenderedTransport::Remote {
            url,
            headers,
            transport,
        } = &server.transport
        else {
            return Ok(server.clone());
        };
        let mut real = Vec::with_capacity(headers.len());
        let mut authorization = None;
        for (name, value) in headers {
            let header = HeaderName::from_bytes(name.as_bytes()).with_context(|| {
                format!(
                    "MCP server '{}': '{name}' is not a valid header name",
                    server.name
                )
            })?;
            let value = SecretValue::new(value.expose());
            if HeaderValue::from_bytes(value.expose().as_bytes()).is_err() {
                anyhow::bail!(
                    "MCP server '{}': the value of header '{name}' holds a character HTTP does not allow (a line break or control character)",
                    server.name
                );
            }
            if header == header::AUTHORIZATION {
                let mut value = HeaderValue::from_bytes(value.expose().as_bytes())?;
                value.set_sensitive(true);
                authorization = Some(value);
                continue;
            }
            real.push((header, value));
        }
        let url = SecretValue::new(url.expose());
        let authorization = authorization
            .map(|value| BearerSlot::new(url.expose(), Arc::clone(&self.bearer_auth), value));
        if reqwest::Url::parse(url.expose()).is_err() {
            anyhow::bail!("MCP server '{}': its URL is not a valid URL", server.name);
        }
        let key = random_token();
        // Never stricter than the harness, which applies the server's own timeout itself.
        let timeout = server
            .options
            .timeout_ms
            .map_or(DEFAULT_UPSTREAM_TIMEOUT, |ms| {
                Duration::from_millis(ms).max(DEFAULT_UPSTREAM_TIMEOUT)
            });
        self.routes.insert(
            key.clone(),
            Arc::new(Route {
                name: server.name.clone(),
                url,
                headers: real,
                transport: *transport,
                timeout,
                endpoints: Mutex::new(HashMap::new()),
                authorization,
            }),
        );
        let mut bridged_headers = indexmap::IndexMap::new();
        bridged_headers.insert(
            "Authorization".to_owned(),
            RenderedText::plain(&format!("Bearer {}", self.bearer.expose())),
        );
        let mut routed = server.clone();
        routed.transport = RenderedTransport::Remote {
            url: RenderedText::plain(&format!("{}/{key}", self.base)),
            headers: bridged_headers,
            transport: *transport,
        };
        Ok(routed)
    }

    /// Serves until the returned task is aborted (when the harness has exited).
    pub fn serve(self) -> anyhow::Result<tokio::task::JoinHandle<()>> {
        let listener = tokio::net::TcpListener::from_std(self.listener)?;
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .context("cannot build the bridge's HTTP client")?;
        let shared = Arc::new(Shared {
            routes: self.routes,
            bearer: self.bearer,
            client,
        });
        let app = axum::Router::new().fallback(handle).with_state(shared);
        Ok(tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, app).await {
                tracing::warn!("the URL-server bridge stopped: {error}");
            }
        }))
    }
}

/// 40 hex digits, 150 of their bits random (two v4 UUIDs' worth, cut): a route key or an
/// endpoint id in the bridge's paths (the bearer token is the gateway's `generate_token`).
fn random_token() -> String {
    uuid::Uuid::new_v4().simple().to_string() + &uuid::Uuid::new_v4().simple().to_string()[..8]
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let path = uri.path().trim_start_matches('/');
    let (key, rest) = path.split_once('/').unwrap_or((path, ""));
    let Some(route) = shared.routes.get(key) else {
        return refuse(StatusCode::NOT_FOUND, "no such bridged MCP server");
    };
    let expected = format!("Bearer {}", shared.bearer.expose());
    let presented = headers
        .get(header::AUTHORIZATION)
        .map(HeaderValue::as_bytes)
        .unwrap_or_default();
    if !tether_http::constant_time_eq(presented, expected.as_bytes()) {
        tracing::warn!(server = %route.name, "bridge: a request without the run's token");
        return refuse(StatusCode::UNAUTHORIZED, "missing or wrong bridge token");
    }
    if !matches!(method, Method::POST | Method::GET | Method::DELETE) {
        return refuse(
            StatusCode::METHOD_NOT_ALLOWED,
            "the bridge forwards GET, POST and DELETE",
        );
    }
    let target = if rest.is_empty() {
        route.url.clone()
    } else if let Some(found) = rest
        .strip_prefix("m/")
        .and_then(|id| lock(&route.endpoints).get(id).cloned())
    {
        found
    } else {
        return refuse(StatusCode::NOT_FOUND, "no such message endpoint");
    };
    let body =
        match tokio::time::timeout(BODY_TIMEOUT, axum::body::to_bytes(body, MAX_REQUEST_BYTES))
            .await
        {
            Ok(Ok(body)) => body,
            Ok(Err(_)) => {
                return refuse(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "request body too large or cut off",
                );
            }
            Err(_) => return refuse(StatusCode::REQUEST_TIMEOUT, "request body too slow"),
        };
    forward(&shared, route, method, &headers, body, &target, key).await
}

async fn forward(
    shared: &Shared,
    route: &Arc<Route>,
    method: Method,
    headers: &HeaderMap,
    body: Bytes,
    target: &SecretValue,
    key: &str,
) -> Response {
    let mut outgoing = HeaderMap::new();
    for name in &FORWARDED_REQUEST_HEADERS {
        for value in headers.get_all(name) {
            outgoing.append(name.clone(), value.clone());
        }
    }
    for (name, value) in &route.headers {
        // Checked when the route was made.
        if let Ok(mut value) = HeaderValue::from_bytes(value.expose().as_bytes()) {
            value.set_sensitive(true);
            outgoing.insert(name.clone(), value);
        }
    }
    // A refused bearer token: renewed and the request sent again, within the request's budget.
    let sent = send_renewing(
        route.authorization.as_ref(),
        |authorization| {
            let mut request_headers = outgoing.clone();
            if let Some(value) = authorization {
                request_headers.insert(header::AUTHORIZATION, value);
            }
            let mut request = shared.client.request(method.clone(), target.expose());
            if !body.is_empty() {
                request = request.body(body.clone());
            }
            tokio::time::timeout(route.timeout, request.headers(request_headers).send())
        },
        |sent| match sent {
            Ok(Ok(response)) => Refusal::of(response.status(), response.headers()),
            _ => None,
        },
    )
    .await;
    let response = match sent {
        Ok(Ok(response)) => response,
        Ok(Err(error)) => {
            tracing::warn!(server = %route.name, %method, "bridge: upstream unreachable: {}", error.without_url());
            return refuse(
                StatusCode::BAD_GATEWAY,
                "the MCP server could not be reached through tether's bridge",
            );
        }
        Err(_) => {
            tracing::warn!(server = %route.name, %method, "bridge: upstream did not answer within {:?}", route.timeout);
            return refuse(
                StatusCode::GATEWAY_TIMEOUT,
                "the MCP server did not answer in time",
            );
        }
    };
    let status = response.status();
    if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
        tracing::warn!(server = %route.name, status = status.as_u16(), "bridge: the MCP server refused the credentials tether added");
        return refuse(
            StatusCode::BAD_GATEWAY,
            "the MCP server refused the credentials tether added; check the secrets given to tether",
        );
    }
    let mut returned = Response::builder().status(status);
    for name in &RETURNED_RESPONSE_HEADERS {
        for value in response.headers().get_all(name) {
            returned = returned.header(name.clone(), value.clone());
        }
    }
    let is_event_stream = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    // An event stream (GET) may be silent for long; any other answer may not.
    let idle = (method != Method::GET).then_some(route.timeout);
    let stream = guarded(response.bytes_stream(), idle);
    let body =
        if route.transport == RemoteTransport::Sse && method == Method::GET && is_event_stream {
            let rewriter = EndpointRewriter {
                route: Arc::clone(route),
                prefix: format!("/{key}/m/"),
                pending: Vec::new(),
                event: Vec::new(),
                done: false,
            };
            Body::from_stream(rewrite_endpoints(stream, rewriter))
        } else {
            Body::from_stream(stream)
        };
    returned.body(body).unwrap_or_else(|_| {
        refuse(
            StatusCode::BAD_GATEWAY,
            "invalid answer from the MCP server",
        )
    })
}

/// Why a forwarded answer was cut.
#[derive(Debug)]
struct Cut(&'static str);

impl std::fmt::Display for Cut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Cut {}

/// `upstream` passed through; with `idle`, cut when it is silent that long.
fn guarded(
    upstream: impl Stream<Item = reqwest::Result<Bytes>> + Send + 'static,
    idle: Option<Duration>,
) -> impl Stream<Item = Result<Bytes, Cut>> + Send + 'static {
    futures_util::stream::unfold(Some(Box::pin(upstream)), move |state| async move {
        let mut upstream = state?;
        let next = match idle {
            Some(idle) => match tokio::time::timeout(idle, upstream.next()).await {
                Ok(next) => next,
                Err(_) => return Some((Err(Cut("the MCP server fell silent")), None)),
            },
            None => upstream.next().await,
        };
        match next {
            None => None,
            Some(Ok(bytes)) => Some((Ok(bytes), Some(upstream))),
            Some(Err(_)) => Some((Err(Cut("the MCP server's answer failed")), None)),
        }
    })
}

/// Rewrites the `endpoint` event at the start of a legacy SSE stream.
struct EndpointRewriter {
    route: Arc<Route>,
    prefix: String,
    /// Bytes of an unfinished line.
    pending: Vec<u8>,
    /// The current event's type.
    event: Vec<u8>,
    /// The endpoint was rewritten (or not found early enough): the rest passes through.
    done: bool,
}

impl EndpointRewriter {
    /// The bytes to send for `chunk`.
    fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        if self.done {
            return chunk.to_vec();
        }
        self.pending.extend_from_slice(chunk);
        let mut out = Vec::with_capacity(self.pending.len());
        let mut start = 0;
        while let Some(offset) = self.pending[start..].iter().position(|&b| b == b'\n') {
            let end = start + offset + 1;
            let line = &self.pending[start..end];
            let content = line
                .strip_suffix(b"\n")
                .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
                .unwrap_or(line);
            if content.is_empty() {
                self.event.clear();
                out.extend_from_slice(line);
            } else if let Some(kind) = content.strip_prefix(b"event:") {
                self.event = kind.trim_ascii().to_vec();
                out.extend_from_slice(line);
            } else if let (Some(data), b"endpoint") =
                (content.strip_prefix(b"data:"), self.event.as_slice())
            {
                out.extend_from_slice(b"data: ");
                out.extend_from_slice(self.endpoint(data).as_bytes());
                out.extend_from_slice(b"\n");
                self.done = true;
                start = end;
                break;
            } else {
                out.extend_from_slice(line);
            }
            start = end;
        }
        let rest = self.pending.split_off(start);
        self.pending.clear();
        if self.done || rest.len() > ENDPOINT_SEARCH_BYTES {
            self.done = true;
            out.extend_from_slice(&rest);
        } else {
            self.pending = rest;
        }
        out
    }

    /// The path the harness gets for the upstream's message endpoint `data`.
    fn endpoint(&self, data: &[u8]) -> String {
        let data = String::from_utf8_lossy(data.strip_prefix(b" ").unwrap_or(data)).into_owned();
        let resolved = reqwest::Url::parse(self.route.url.expose())
            .and_then(|base| base.join(&data))
            .map(String::from)
            .unwrap_or(data);
        let id = random_token();
        let mut endpoints = lock(&self.route.endpoints);
        if endpoints.len() >= MAX_ENDPOINTS
            && let Some(old) = endpoints.keys().next().cloned()
        {
            endpoints.remove(&old);
        }
        endpoints.insert(id.clone(), SecretValue::new(resolved));
        format!("{}{id}", self.prefix)
    }
}

fn rewrite_endpoints(
    stream: impl Stream<Item = Result<Bytes, Cut>> + Send + 'static,
    mut rewriter: EndpointRewriter,
) -> impl Stream<Item = Result<Bytes, Cut>> + Send + 'static {
    stream.map(move |item| item.map(|bytes| Bytes::from(rewriter.feed(&bytes))))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A plain-text refusal.
fn refuse(status: StatusCode, message: &'static str) -> Response {
    (status, format!("{message}\n")).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewriter(url: &str) -> EndpointRewriter {
        EndpointRewriter {
            route: Arc::new(Route {
                name: "s".into(),
                url: SecretValue::new(url.to_owned()),
                headers: Vec::new(),
                transport: RemoteTransport::Sse,
                timeout: DEFAULT_UPSTREAM_TIMEOUT,
                endpoints: Mutex::new(HashMap::new()),
                authorization: None,
            }),
            prefix: "/k/m/".into(),
            pending: Vec::new(),
            event: Vec::new(),
            done: false,
        }
    }

    #[test]
    fn the_endpoint_event_is_rewritten_even_when_split_across_chunks() {
        let mut r = rewriter("http://up.example:8/sse?key=S");
        let mut out = r.feed(b": hi\n\nevent: endp");
        out.extend(r.feed(b"oint\r\ndata: /message?sessionId=1"));
        out.extend(r.feed(b"2\r\n\r\nevent: message\ndata: {}\n\n"));
        let text = String::from_utf8(out).expect("utf-8");
        let endpoints = lock(&r.route.endpoints);
        let (id, target) = endpoints.iter().next().expect("one endpoint");
        assert_eq!(target.expose(), "http://up.example:8/message?sessionId=12");
        assert_eq!(
            text,
            format!(
                ": hi\n\nevent: endpoint\r\ndata: /k/m/{id}\n\r\nevent: message\ndata: {{}}\n\n"
            )
        );
    }

    #[test]
    fn route_keys_are_40_hex_digits_and_fresh() {
        let (a, b) = (random_token(), random_token());
        assert_eq!(a.len(), 40);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()), "{a}");
        assert_ne!(a, b);
    }
}
