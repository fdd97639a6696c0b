//! The URL-server bridge of a hand-off: a loopback HTTP server inside the `tether run` process
//! that stands in for every remote server whose URL or headers hold a secret (or any header at
//! all). The harness's config gets `http://127.0.0.1:PORT/<key>`, where `<key>` is random per
//! server, plus `Authorization: Bearer <token>`, random per run. The bridge admits a request
//! through [`tether_http::Admission`] (the `Host` header must name the bridge's own address and
//! port, a browser's `Origin` must be the bridge, the bearer token is compared in constant
//! time: 421, 403 and 401 otherwise), then checks the key (404), forwards to the real URL with
//! the real headers added, and streams the answer back. So no secret of a URL server reaches
//! the harness (config, environment or command line), no harness expansion (`$` in Gemini CLI,
//! `{env:…}` in opencode) can alter one, and every header value arrives upstream byte for byte
//! as tether rendered it.
//!
//! Forwarded: POST (JSON or SSE answers), GET (event streams), DELETE; the client headers of
//! [`tether_http::proxy::FORWARDED_REQUEST_HEADERS`] go up, the server headers of
//! [`tether_http::proxy::RETURNED_RESPONSE_HEADERS`] come back; nothing else does (the
//! harness's `Authorization` never goes upstream, no upstream header or URL reaches the
//! harness). Legacy SSE servers: the `endpoint` event of their GET stream names where to POST;
//! the bridge keeps that URL and sends the harness `/<key>/m/<id>` instead. An endpoint on
//! another origin (scheme, host, port) than the server's URL cuts the stream: the messages,
//! with the server's headers, would go there (`tether_driver::sse_endpoint`). A server's own
//! `Authorization` that the upstream refuses is renewed through the caller's `BearerAuth`
//! (`tether_driver::send_renewing`) and the request sent again.
//!
//! Limits: request bodies up to [`MAX_REQUEST_BYTES`], read within [`BODY_TIMEOUT`], only
//! after the request was admitted and its key checked; the upstream must answer within
//! [`DEFAULT_UPSTREAM_TIMEOUT`] (or the server's own `timeout`, when longer), and a POST/DELETE
//! answer may not fall silent longer than that (GET event streams may). Redirects are not
//! followed (they would carry the headers to another host). Upstream 401/403 (after any
//! renewal) become 502 with a message: the harness cannot fix the credentials tether adds, and
//! a 401 would send it into an OAuth flow against the bridge. Errors are logged without URLs
//! (a URL may hold a secret).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt as _};
use tether_config::{
    RemoteTransport, RenderedServer, RenderedText, RenderedTransport, SecretValue,
};
use tether_driver::{
    BearerAuth, BearerSlot, HeadersHelper, HelperError, send_renewing, send_with_helper,
};
use tether_http::{Admission, OriginRule, proxy, token};

use crate::error::HandoffError;

/// The largest request body forwarded (JSON-RPC messages are small).
pub(crate) const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;
/// Time a harness has to send a whole request body.
pub(crate) const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Time an upstream has to answer (and the longest silence inside a POST/DELETE answer) when
/// the server sets no `timeout` of its own.
pub(crate) const DEFAULT_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(120);
/// Time to open a connection to an upstream.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes of a legacy SSE stream searched for its `endpoint` event before passing it through.
const ENDPOINT_SEARCH_BYTES: usize = 64 * 1024;
/// Message endpoints kept per server (one per open legacy SSE stream).
const MAX_ENDPOINTS: usize = 1024;
/// Random bytes of a route key or an endpoint id (40 hex digits in the path).
const KEY_BYTES: usize = 20;

/// Whether a hand-off routes `server` through the bridge: a remote server with any header or
/// a URL holding a secret. Others (a plain URL, no headers: public servers, or servers whose
/// OAuth the harness does itself) go to the harness unchanged.
pub(crate) fn needs_bridge(server: &RenderedServer) -> bool {
    match &server.transport {
        RenderedTransport::Remote { url, headers, .. } => {
            !headers.is_empty() || url.is_sensitive() || server.options.headers_helper.is_some()
        }
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
    /// Its `headersHelper`: the headers it gives go with every request (renewed on 401).
    helper: Option<Arc<HeadersHelper>>,
}

struct Shared {
    routes: HashMap<String, Arc<Route>>,
    /// The bridge's address and the run's bearer token.
    admission: Admission,
    client: reqwest::Client,
}

/// The bridge of one hand-off, bound on loopback and not yet serving.
pub(crate) struct Bridge {
    listener: std::net::TcpListener,
    base: String,
    bearer: SecretValue,
    admission: Admission,
    routes: HashMap<String, Arc<Route>>,
    /// Where renewed upstream tokens come from; `None`: a refused `Authorization` is not
    /// renewed (it travels as a plain header).
    bearer_auth: Option<Arc<dyn BearerAuth>>,
}

impl Bridge {
    /// Binds `127.0.0.1` on a free port and makes the run's bearer token (registered for log
    /// masking).
    pub(crate) fn bind(bearer_auth: Option<Arc<dyn BearerAuth>>) -> Result<Self, HandoffError> {
        let cannot_listen =
            || HandoffError::io("cannot listen on loopback for the URL-server bridge");
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).map_err(cannot_listen())?;
        listener.set_nonblocking(true).map_err(cannot_listen())?;
        let bound = listener.local_addr().map_err(cannot_listen())?;
        let bearer = token::generate()?;
        tether_log::register([&bearer]);
        Ok(Self {
            listener,
            base: format!("http://{bound}"),
            admission: Admission::for_address(bound)
                .with_bearer(bearer.clone())
                .with_origin_rule(OriginRule::IfPresent),
            bearer,
            routes: HashMap::new(),
            bearer_auth,
        })
    }

    /// `server` as the harness must see it: the bridge's URL for it and the run's bearer token
    /// as its only header. Its real URL and headers stay here. A header whose name or value is
    /// not valid HTTP is an error naming the server and the header (never the value).
    pub(crate) fn route(
        &mut self,
        server: &RenderedServer,
    ) -> Result<RenderedServer, HandoffError> {
        let RenderedTransport::Remote {
            url,
            headers,
            transport,
        } = &server.transport
        else {
            return Ok(server.clone());
        };
        let invalid = |problem: String| HandoffError::InvalidServer {
            server: server.name.clone(),
            problem,
        };
        let helper = HeadersHelper::of(server);
        let url = SecretValue::new(url.expose());
        let mut real = Vec::with_capacity(headers.len());
        let mut authorization = None;
        for (name, value) in headers {
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| invalid(format!("'{name}' is not a valid header name")))?;
            let value = SecretValue::new(value.expose());
            let Ok(mut checked) = HeaderValue::from_bytes(value.expose().as_bytes()) else {
                return Err(invalid(format!(
                    "the value of header '{name}' holds a character HTTP does not allow (a line break or control character)"
                )));
            };
            if header == header::AUTHORIZATION
                && helper.is_none()
                && let Some(auth) = &self.bearer_auth
            {
                checked.set_sensitive(true);
                authorization = Some(BearerSlot::new(url.expose(), Arc::clone(auth), checked));
                continue;
            }
            real.push((header, value));
        }
        if reqwest::Url::parse(url.expose()).is_err() {
            return Err(invalid("its URL is not a valid URL".to_owned()));
        }
        let key = token::random_hex(KEY_BYTES)?;
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
                helper,
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
    pub(crate) fn serve(self) -> Result<tokio::task::JoinHandle<()>, HandoffError> {
        let listener = tokio::net::TcpListener::from_std(self.listener).map_err(
            HandoffError::io("cannot listen on loopback for the URL-server bridge"),
        )?;
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(HandoffError::HttpClient)?;
        let shared = Arc::new(Shared {
            routes: self.routes,
            admission: self.admission,
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

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let path = uri.path().trim_start_matches('/');
    let (key, rest) = path.split_once('/').unwrap_or((path, ""));
    let route = shared.routes.get(key);
    if let Err(refusal) = shared.admission.check(&headers, OriginRule::IfPresent) {
        if let Some(route) = route {
            tracing::warn!(
                server = %route.name,
                status = refusal.status().as_u16(),
                "bridge: refused a request: {}",
                refusal.message().trim_end()
            );
        }
        return refusal.into_response();
    }
    let Some(route) = route else {
        return refuse(StatusCode::NOT_FOUND, "no such bridged MCP server");
    };
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

/// Why a forwarded request got no answer from upstream.
enum Upstream {
    Http(reqwest::Error),
    Helper(HelperError),
}

/// One request of the harness's, as it goes to its server.
#[derive(Clone, Copy)]
struct Upstreamed<'a> {
    shared: &'a Shared,
    route: &'a Route,
    method: &'a Method,
    body: &'a Bytes,
    target: &'a SecretValue,
}

impl Upstreamed<'_> {
    /// Sends it with `headers`; a refused bearer token of the route is renewed and the request
    /// sent again, within the request's budget (`send_renewing`).
    async fn send(
        self,
        headers: HeaderMap,
    ) -> Result<Result<reqwest::Response, Upstream>, tokio::time::error::Elapsed> {
        let Self {
            shared,
            route,
            method,
            body,
            target,
        } = self;
        send_renewing(
            route.authorization.as_ref(),
            |authorization| {
                let mut request_headers = headers.clone();
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
                Ok(Ok(response)) => {
                    tether_driver::Refusal::of(response.status(), response.headers())
                }
                _ => None,
            },
        )
        .await
        .map(|answer| answer.map_err(Upstream::Http))
    }
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
    for (name, value) in proxy::forwarded_request(headers) {
        outgoing.append(name.clone(), value.clone());
    }
    for (name, value) in &route.headers {
        // Checked when the route was made.
        if let Ok(mut value) = HeaderValue::from_bytes(value.expose().as_bytes()) {
            value.set_sensitive(true);
            outgoing.insert(name.clone(), value);
        }
    }
    // Refused headers of a helper: the helper run again and the request sent once more.
    let sent = send_with_helper(
        route.helper.as_deref(),
        |helped| {
            let mut outgoing = outgoing.clone();
            outgoing.extend(helped);
            let request = Upstreamed {
                shared,
                route,
                method: &method,
                body: &body,
                target,
            };
            async move { request.send(outgoing).await }
        },
        |sent| matches!(sent, Ok(Ok(response)) if response.status() == StatusCode::UNAUTHORIZED),
        |error| Ok(Err(Upstream::Helper(error))),
    )
    .await;
    let response = match sent {
        Ok(Err(Upstream::Helper(error))) => {
            tracing::warn!(server = %route.name, %method, "bridge: {error}");
            return refuse(
                StatusCode::BAD_GATEWAY,
                "the headersHelper of this MCP server gave no headers (see tether's stderr)",
            );
        }
        Ok(Ok(response)) => response,
        Ok(Err(Upstream::Http(error))) => {
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
    for (name, value) in proxy::allowed(response.headers(), &proxy::RETURNED_RESPONSE_HEADERS) {
        returned = returned.header(name.clone(), value.clone());
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
    /// The bytes to send for `chunk`; an error when no id can be made for the endpoint (the
    /// stream is cut rather than pass the upstream's own URL on).
    fn feed(&mut self, chunk: &[u8]) -> Result<Vec<u8>, Cut> {
        if self.done {
            return Ok(chunk.to_vec());
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
                out.extend_from_slice(self.endpoint(data)?.as_bytes());
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
        Ok(out)
    }

    /// The path the harness gets for the upstream's message endpoint `data`.
    /// An endpoint on another origin than the server's URL, or none at all, cuts the stream:
    /// the bridge would send the server's headers there.
    fn endpoint(&self, data: &[u8]) -> Result<String, Cut> {
        let data = String::from_utf8_lossy(data.strip_prefix(b" ").unwrap_or(data)).into_owned();
        let resolved = reqwest::Url::parse(self.route.url.expose())
            .map_err(|_| tether_driver::SseError::BadEndpoint)
            .and_then(|base| tether_driver::sse_endpoint(&base, &data))
            .map(String::from)
            .map_err(|error| {
                // Neither URL is logged: the server's may hold a secret.
                let why = match error {
                    tether_driver::SseError::ForeignEndpoint { .. } => {
                        "names another origin than the server's URL"
                    }
                    _ => "holds no valid URL",
                };
                tracing::warn!(
                    server = %self.route.name,
                    "bridge: the legacy SSE stream's endpoint event {why}; the stream is cut, \
                     since every message would carry the server's headers there"
                );
                Cut("the SSE endpoint is not on the server's origin")
            })?;
        let id = token::random_hex(KEY_BYTES)
            .map_err(|_| Cut("no random id for the message endpoint"))?;
        let mut endpoints = lock(&self.route.endpoints);
        if endpoints.len() >= MAX_ENDPOINTS
            && let Some(old) = endpoints.keys().next().cloned()
        {
            endpoints.remove(&old);
        }
        endpoints.insert(id.clone(), SecretValue::new(resolved));
        Ok(format!("{}{id}", self.prefix))
    }
}

fn rewrite_endpoints(
    stream: impl Stream<Item = Result<Bytes, Cut>> + Send + 'static,
    mut rewriter: EndpointRewriter,
) -> impl Stream<Item = Result<Bytes, Cut>> + Send + 'static {
    stream.map(move |item| item.and_then(|bytes| rewriter.feed(&bytes).map(Bytes::from)))
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
    use tether_config::{EmptyEnv, Origin, Secrets, parse_config};

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
                helper: None,
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
        let mut out = r.feed(b": hi\n\nevent: endp").expect("feeding");
        out.extend(
            r.feed(b"oint\r\ndata: /message?sessionId=1")
                .expect("feeding"),
        );
        out.extend(
            r.feed(b"2\r\n\r\nevent: message\ndata: {}\n\n")
                .expect("feeding"),
        );
        let text = String::from_utf8(out).expect("utf-8");
        let endpoints = lock(&r.route.endpoints);
        let (id, target) = endpoints.iter().next().expect("one endpoint");
        assert_eq!(target.expose(), "http://up.example:8/message?sessionId=12");
        assert_eq!(id.len(), 2 * KEY_BYTES);
        assert_eq!(
            text,
            format!(
                ": hi\n\nevent: endpoint\r\ndata: /k/m/{id}\n\r\nevent: message\ndata: {{}}\n\n"
            )
        );
    }

    #[test]
    fn a_stream_without_an_early_endpoint_event_passes_through_unchanged() {
        let mut r = rewriter("http://up.example:8/sse");
        let filler = format!("data: {}\n", "x".repeat(ENDPOINT_SEARCH_BYTES + 1));
        let mut out = r.feed(filler.as_bytes()).expect("feeding");
        // The filler's line is whole: passed on; then a long unfinished line gives up the search.
        let unfinished = "y".repeat(ENDPOINT_SEARCH_BYTES + 1);
        out.extend(r.feed(unfinished.as_bytes()).expect("feeding"));
        let late = b"\nevent: endpoint\ndata: /late\n\n";
        out.extend(r.feed(late).expect("feeding"));
        let mut expected = filler.into_bytes();
        expected.extend(unfinished.as_bytes());
        expected.extend(late);
        assert_eq!(out, expected);
        assert!(lock(&r.route.endpoints).is_empty());
    }

    /// Rendered servers from a JSON config whose `{{T}}` is `secret`.
    fn servers(config: &str, secret: &str) -> Vec<RenderedServer> {
        let secrets: Secrets = [("T", secret)].into_iter().collect();
        parse_config(config, Origin::User)
            .expect("parsing the test config")
            .servers
            .into_iter()
            .map(|s| s.into_installation().render(&secrets, &EmptyEnv))
            .collect()
    }

    /// The URL and headers a routed server hands the harness.
    fn handed(server: &RenderedServer) -> (String, Vec<(String, String)>) {
        let RenderedTransport::Remote { url, headers, .. } = &server.transport else {
            panic!("a routed server is remote");
        };
        let headers = headers
            .iter()
            .map(|(k, v)| (k.clone(), v.expose()))
            .collect();
        (url.expose(), headers)
    }

    #[test]
    fn route_keys_are_40_hex_digits_fresh_per_server_and_hide_the_real_server() {
        let servers = servers(
            r#"{"a": {"url": "http://127.0.0.1:9/a?key={{T}}"},
                "b": {"url": "http://127.0.0.1:9/b", "headers": {"X-Key": "{{T}}"}}}"#,
            "s3cret",
        );
        let mut bridge = Bridge::bind(None).expect("binding");
        let routed: Vec<RenderedServer> = servers
            .iter()
            .map(|s| bridge.route(s).expect("routing"))
            .collect();
        let bearer = format!("Bearer {}", bridge.bearer.expose());
        let mut keys = Vec::new();
        for server in &routed {
            let (url, headers) = handed(server);
            let key = url
                .strip_prefix(&format!("{}/", bridge.base))
                .expect("the bridge's URL")
                .to_owned();
            assert_eq!(key.len(), 40, "{key}");
            assert!(key.bytes().all(|c| c.is_ascii_hexdigit()), "{key}");
            assert!(bridge.routes.contains_key(&key));
            assert_eq!(headers, [("Authorization".to_owned(), bearer.clone())]);
            assert!(server.sensitive_values().is_empty());
            assert!(!format!("{url}{headers:?}").contains("s3cret"));
            keys.push(key);
        }
        assert_ne!(keys[0], keys[1]);
        assert!(bridge.base.starts_with("http://127.0.0.1:"));
    }

    #[test]
    fn a_header_http_does_not_allow_is_refused_naming_the_header_not_the_value() {
        let servers = servers(
            r#"{"s": {"url": "http://127.0.0.1:9/", "headers": {"X-Key": "{{T}}"}}}"#,
            "line\nbreak-SENTINEL",
        );
        let mut bridge = Bridge::bind(None).expect("binding");
        let error = bridge
            .route(&servers[0])
            .expect_err("a line break in a header");
        let message = error.to_string();
        assert!(
            message.starts_with("MCP server 's': the value of header 'X-Key'"),
            "{message}"
        );
        assert!(!message.contains("SENTINEL"), "{message}");
    }

    /// What the test upstream was sent.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Seen {
        authorization: Option<String>,
        key: Option<String>,
        cookie: bool,
    }

    /// A loopback MCP stand-in: records what each request carried, answers 401 unless
    /// `Authorization` is `required` (when given), else 200 with a session id and a cookie.
    async fn upstream(required: Option<&'static str>) -> (String, Arc<Mutex<Vec<Seen>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&seen);
        let app = axum::Router::new().fallback(move |headers: HeaderMap| {
            let record = Arc::clone(&record);
            async move {
                let text = |name: HeaderName| {
                    headers
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned)
                };
                let authorization = text(header::AUTHORIZATION);
                lock(&record).push(Seen {
                    authorization: authorization.clone(),
                    key: text(HeaderName::from_static("x-key")),
                    cookie: headers.contains_key(header::COOKIE),
                });
                if required.is_some_and(|r| authorization.as_deref() != Some(r)) {
                    return StatusCode::UNAUTHORIZED.into_response();
                }
                (
                    [
                        ("content-type", "application/json"),
                        ("mcp-session-id", "s1"),
                        ("set-cookie", "up=1"),
                    ],
                    "{}",
                )
                    .into_response()
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the upstream");
        let url = format!("http://{}/mcp", listener.local_addr().expect("its address"));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        (url, seen)
    }

    /// `servers` routed through a bridge that serves until the returned guard drops; the
    /// harness's view of the first one.
    fn serve(
        servers: &[RenderedServer],
        bearer_auth: Option<Arc<dyn BearerAuth>>,
    ) -> (
        String,
        Vec<(String, String)>,
        String,
        tokio::task::JoinHandle<()>,
    ) {
        let mut bridge = Bridge::bind(bearer_auth).expect("binding");
        let routed = bridge.route(&servers[0]).expect("routing");
        let (url, headers) = handed(&routed);
        let base = bridge.base.clone();
        (url, headers, base, bridge.serve().expect("serving"))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_bridge_admits_only_its_own_host_and_token_and_forwards_only_allowed_headers() {
        let (up, seen) = upstream(None).await;
        let servers = servers(
            &format!(
                r#"{{"s": {{"url": "{up}", "headers": {{"X-Key": "{{{{T}}}}", "Authorization": "Bearer up-{{{{T}}}}"}}}}}}"#
            ),
            "s3cret $HOME",
        );
        let (url, headers, base, serving) = serve(&servers, None);
        let bearer = headers[0].1.clone();
        let port = base.rsplit(':').next().expect("a port").to_owned();
        let client = reqwest::Client::new();
        let post = |url: &str| {
            client
                .post(url)
                .header("content-type", "application/json")
                .body("{}")
        };

        // Admitted: the real headers go up, the harness's own Authorization and Cookie do not;
        // only allowed headers come back.
        let answer = post(&url)
            .header(header::AUTHORIZATION, &bearer)
            .header(header::COOKIE, "harness=1")
            .send()
            .await
            .expect("asking the bridge");
        assert_eq!(answer.status(), StatusCode::OK);
        assert_eq!(answer.headers()["mcp-session-id"], "s1");
        assert!(!answer.headers().contains_key(header::SET_COOKIE));
        assert_eq!(
            lock(&seen).clone(),
            [Seen {
                authorization: Some("Bearer up-s3cret $HOME".to_owned()),
                key: Some("s3cret $HOME".to_owned()),
                cookie: false,
            }]
        );

        // The listener's name with another port (DNS rebinding or another service): 421.
        let other_port = if port == "1" { "2" } else { "1" };
        let answer = post(&url)
            .header(header::HOST, format!("127.0.0.1:{other_port}"))
            .header(header::AUTHORIZATION, &bearer)
            .send()
            .await
            .expect("asking the bridge");
        assert_eq!(answer.status(), StatusCode::MISDIRECTED_REQUEST);
        let answer = post(&url)
            .header(header::HOST, format!("evil.example:{port}"))
            .header(header::AUTHORIZATION, &bearer)
            .send()
            .await
            .expect("asking the bridge");
        assert_eq!(answer.status(), StatusCode::MISDIRECTED_REQUEST);
        // `localhost` with the right port names the listener too.
        let answer = post(&url)
            .header(header::HOST, format!("localhost:{port}"))
            .header(header::AUTHORIZATION, &bearer)
            .send()
            .await
            .expect("asking the bridge");
        assert_eq!(answer.status(), StatusCode::OK);

        // Without the run's token, or with another: 401 with a challenge.
        for given in [None, Some("Bearer wrong"), Some("Bearer up-s3cret $HOME")] {
            let mut request = post(&url);
            if let Some(given) = given {
                request = request.header(header::AUTHORIZATION, given);
            }
            let answer = request.send().await.expect("asking the bridge");
            assert_eq!(answer.status(), StatusCode::UNAUTHORIZED, "{given:?}");
            assert!(answer.headers().contains_key(header::WWW_AUTHENTICATE));
        }

        // A browser page of another origin: 403, even with the token.
        let answer = post(&url)
            .header(header::ORIGIN, "http://evil.example")
            .header(header::AUTHORIZATION, &bearer)
            .send()
            .await
            .expect("asking the bridge");
        assert_eq!(answer.status(), StatusCode::FORBIDDEN);

        // Admitted, but a key or message endpoint the bridge did not hand out: 404; a method
        // it does not forward: 405.
        for path in [
            format!("{base}/0123"),
            format!("{url}/m/0123"),
            format!("{url}x"),
        ] {
            let answer = post(&path)
                .header(header::AUTHORIZATION, &bearer)
                .send()
                .await
                .expect("asking the bridge");
            assert_eq!(answer.status(), StatusCode::NOT_FOUND, "{path}");
        }
        let answer = client
            .put(&url)
            .header(header::AUTHORIZATION, &bearer)
            .send()
            .await
            .expect("asking the bridge");
        assert_eq!(answer.status(), StatusCode::METHOD_NOT_ALLOWED);

        // Only the two admitted requests reached the upstream.
        assert_eq!(lock(&seen).len(), 2);
        serving.abort();
    }

    /// A legacy SSE server whose `endpoint` event names `endpoint`; the stream then stays open.
    async fn hostile_sse(endpoint: String) -> String {
        let app = axum::Router::new().fallback(move || {
            let event = format!("event: endpoint\ndata: {endpoint}\n\n");
            async move {
                let events = futures_util::stream::once(async move {
                    Ok::<_, std::convert::Infallible>(Bytes::from(event))
                })
                .chain(futures_util::stream::pending());
                (
                    [("content-type", "text/event-stream")],
                    Body::from_stream(events),
                )
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the SSE server");
        let url = format!("http://{}/sse", listener.local_addr().expect("its address"));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        url
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_sse_endpoint_on_another_origin_gets_nothing_through_the_bridge() {
        // What the hostile endpoint receives: the recorder on another loopback port.
        let (elsewhere, seen) = upstream(None).await;
        let secret = "k-$HOME-$$-${X}-%41-\"q\"-\\-{{x}}-é";
        for endpoint in [
            elsewhere.clone(),
            elsewhere.replace("127.0.0.1", "localhost"),
        ] {
            let sse = hostile_sse(endpoint).await;
            let servers = servers(
                &format!(
                    r#"{{"s": {{"type": "sse", "url": "{sse}", "headers": {{"X-Key": "{{{{T}}}}"}}}}}}"#
                ),
                secret,
            );
            let (url, headers, base, serving) = serve(&servers, None);
            let client = reqwest::Client::new();
            // Read as a harness would until the endpoint event, or the end of the stream (cut
            // before its first byte, the answer may not even have begun).
            let mut text = String::new();
            let read = tokio::time::timeout(Duration::from_secs(20), async {
                let opened = client
                    .get(&url)
                    .header(header::AUTHORIZATION, &headers[0].1)
                    .header(header::ACCEPT, "text/event-stream")
                    .send()
                    .await;
                let Ok(opened) = opened else { return };
                let mut stream = opened.bytes_stream();
                while let Some(Ok(chunk)) = stream.next().await {
                    text.push_str(&String::from_utf8_lossy(&chunk));
                    if text.contains("\n\n") {
                        break;
                    }
                }
            })
            .await;
            assert!(read.is_ok(), "the stream neither ended nor gave an event");
            // A harness posts to the endpoint it was handed.
            if let Some(path) = text
                .lines()
                .find_map(|line| line.strip_prefix("data: "))
                .map(str::trim)
            {
                let _ = client
                    .post(format!("{base}{path}"))
                    .header(header::AUTHORIZATION, &headers[0].1)
                    .header("content-type", "application/json")
                    .body("{}")
                    .send()
                    .await;
            }
            assert_eq!(lock(&seen).clone(), Vec::<Seen>::new());
            assert!(
                !text.contains("data:"),
                "an endpoint was handed out: {text}"
            );
            serving.abort();
        }
    }

    /// Hands out `fresh` when asked to refresh; counts the refreshes.
    struct Renewal {
        refreshed: Arc<Mutex<usize>>,
    }

    impl BearerAuth for Renewal {
        fn refresh(
            &self,
            _url: String,
        ) -> futures_util::future::BoxFuture<'static, Option<SecretValue>> {
            *lock(&self.refreshed) += 1;
            Box::pin(async { Some(SecretValue::new("fresh".to_owned())) })
        }

        fn step_up(
            &self,
            _url: String,
            _challenge: String,
        ) -> futures_util::future::BoxFuture<'static, Option<SecretValue>> {
            Box::pin(async { None })
        }
    }

    /// The status of one POST of `{}` to the bridge at `url` with the run's `bearer`.
    async fn post_once(url: &str, bearer: &str) -> StatusCode {
        reqwest::Client::new()
            .post(url)
            .header(header::AUTHORIZATION, bearer)
            .body("{}")
            .send()
            .await
            .expect("asking the bridge")
            .status()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_refused_authorization_is_renewed_through_the_callers_bearer_auth() {
        let (up, seen) = upstream(Some("Bearer fresh")).await;
        let servers = servers(
            &format!(
                r#"{{"s": {{"url": "{up}", "headers": {{"Authorization": "Bearer {{{{T}}}}"}}}}}}"#
            ),
            "stale",
        );
        let refreshed = Arc::new(Mutex::new(0));
        let auth: Arc<dyn BearerAuth> = Arc::new(Renewal {
            refreshed: Arc::clone(&refreshed),
        });
        let (url, headers, _, serving) = serve(&servers, Some(auth));
        assert_eq!(post_once(&url, &headers[0].1).await, StatusCode::OK);
        assert_eq!(*lock(&refreshed), 1);
        let sent: Vec<Option<String>> = lock(&seen)
            .iter()
            .map(|s| s.authorization.clone())
            .collect();
        assert_eq!(
            sent,
            [
                Some("Bearer stale".to_owned()),
                Some("Bearer fresh".to_owned())
            ]
        );
        serving.abort();
    }

    /// A server with a `headersHelper` goes through the bridge even without headers of its
    /// own; the helper's headers go up, and a 401 runs it again and sends the request once
    /// more (the helper here gives a stale token first, then the fresh one).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_headers_helper_gives_the_bridged_headers_and_runs_again_on_401() {
        let (up, seen) = upstream(Some("Bearer fresh $HOME")).await;
        let dir = tempfile::tempdir().expect("a temp dir");
        let script = dir.path().join("helper.sh");
        std::fs::write(
            &script,
            r#"cd "$(dirname "$0")"; echo >> runs
if [ "$(wc -l < runs)" -ge 2 ]; then t='fresh $HOME'; else t=stale; fi
printf '{"Authorization": "Bearer %s", "X-Key": "k"}' "$t""#,
        )
        .expect("helper.sh");
        let config = serde_json::json!({"s": {"url": up, "headersHelper": ["sh", script]}});
        let servers = servers(&config.to_string(), "unused");
        assert!(needs_bridge(&servers[0]));
        let (url, headers, _, serving) = serve(&servers, None);
        assert_eq!(post_once(&url, &headers[0].1).await, StatusCode::OK);
        let sent: Vec<(Option<String>, Option<String>)> = lock(&seen)
            .iter()
            .map(|s| (s.authorization.clone(), s.key.clone()))
            .collect();
        let key = Some("k".to_owned());
        assert_eq!(
            sent,
            [
                (Some("Bearer stale".to_owned()), key.clone()),
                (Some("Bearer fresh $HOME".to_owned()), key)
            ]
        );
        serving.abort();
    }
}
