//! The loopback listener the authorization server redirects the browser to
//! (`http://127.0.0.1:PORT/callback`).
//!
//! An axum router behind [`tether_http::admit`] (the `Host` must be this listener, port
//! included, else 421; an `Origin`, if sent, must be this listener, else 403), served by hyper
//! one task per connection, so a connection that sends nothing (a browser's speculative
//! preconnect, a port scanner) never delays the redirect. At most [`MAX_CONNECTIONS`] are
//! served at once (one more closes the oldest), and each lives at most
//! [`CONNECTION_TIMEOUT`]: idle local connections can neither hold the login up nor pile up. `GET /callback?…` with this login's
//! `state` ends the wait with its code (200) or the error it carries (400); a wrong `state` is
//! answered 400 and the wait goes on; anything else is 404. Every answer closes its
//! connection, and when the wait ends every other connection is dropped with the listener.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Extension, State};
use axum::http::{Method, Request, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use reqwest::Url;
use tether_config::SecretValue;
use tower_service::Service as _;

use crate::authorization::{IssCheck, code_from_response};
use crate::error::OAuthError;

/// How long a connection may take to send its request's headers. A browser sends the
/// redirect at once; only an idle or trickling connection takes longer.
const HEADER_TIMEOUT: Duration = Duration::from_secs(3);

/// How long one connection is served at most, answer included (the answer is a short page).
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);

/// How many connections are served at once; one more closes the oldest.
pub const MAX_CONNECTIONS: usize = 16;

/// The page a browser shows after the redirect was taken.
pub const ACCEPTED_PAGE: &str = "tether: login complete. You can close this page.";

/// The page a browser shows after a redirect that was not this login's, or carried an error.
pub const REFUSED_PAGE: &str = "tether: this redirect was not accepted.";

/// What a connection's callback decided: the code, or the error that ends the wait.
type Outcome = Result<SecretValue, OAuthError>;

/// Where a connection's handler leaves its outcome for the wait.
#[derive(Clone, Default)]
struct Slot(Arc<Mutex<Option<Outcome>>>);

impl Slot {
    fn put(&self, outcome: Outcome) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(outcome);
    }

    fn take(&self) -> Option<Outcome> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

/// The loopback listener the authorization server redirects to, bound and not yet serving.
#[derive(Debug)]
pub struct RedirectListener {
    listener: tokio::net::TcpListener,
    address: SocketAddr,
    redirect_uri: String,
}

impl RedirectListener {
    /// Binds 127.0.0.1 on a random port.
    pub async fn bind() -> Result<Self, OAuthError> {
        Self::bind_on(0).await
    }

    /// Binds 127.0.0.1 on the port of `redirect_uri` (a registered client's), else a random
    /// one.
    pub async fn bind_like(redirect_uri: Option<&str>) -> Result<Self, OAuthError> {
        let port = redirect_uri
            .and_then(|uri| Url::parse(uri).ok())
            .and_then(|url| url.port());
        if let Some(port) = port
            && let Ok(listener) = Self::bind_on(port).await
        {
            return Ok(listener);
        }
        Self::bind().await
    }

    async fn bind_on(port: u16) -> Result<Self, OAuthError> {
        let failed = |e: std::io::Error| OAuthError::Listen {
            reason: e.to_string(),
        };
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port))
            .await
            .map_err(failed)?;
        let address = listener.local_addr().map_err(failed)?;
        Ok(Self {
            listener,
            address,
            redirect_uri: format!("http://{address}/callback"),
        })
    }

    /// `http://127.0.0.1:PORT/callback`.
    pub fn redirect_uri(&self) -> &str {
        &self.redirect_uri
    }

    /// Serves until the redirect carrying `state` comes back, or `timeout` passes
    /// ([`OAuthError::TimedOut`]); then the listener closes.
    pub async fn code(self, state: &str, timeout: Duration) -> Result<SecretValue, OAuthError> {
        self.code_checked(state, IssCheck::default(), timeout).await
    }

    /// [`RedirectListener::code`], the redirect's `iss` held to `iss` (RFC 9207): a redirect
    /// with this login's `state` and the wrong `iss` ends the wait with
    /// [`OAuthError::IssMismatch`].
    pub async fn code_checked(
        self,
        state: &str,
        iss: IssCheck,
        timeout: Duration,
    ) -> Result<SecretValue, OAuthError> {
        let admission = tether_http::Admission::for_address(self.address)
            .with_origin_rule(tether_http::OriginRule::IfPresent);
        let router = Router::new()
            .fallback(callback)
            .layer(axum::middleware::from_fn_with_state(
                Arc::new(admission),
                tether_http::admit,
            ))
            .with_state(Arc::new((state.to_owned(), iss)));
        let mut http1 = hyper::server::conn::http1::Builder::new();
        http1
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_TIMEOUT);
        let wait = async {
            let mut connections = tokio::task::JoinSet::new();
            // Oldest first: each connection's abort handle and its outcome slot.
            let mut open: std::collections::VecDeque<(tokio::task::AbortHandle, Slot)> =
                std::collections::VecDeque::new();
            loop {
                tokio::select! {
                    accepted = self.listener.accept() => {
                        let stream = match accepted {
                            Ok((stream, _)) => stream,
                            Err(error) => {
                                tracing::debug!(%error, "accepting a connection failed");
                                continue;
                            }
                        };
                        open.retain(|(handle, _)| !handle.is_finished());
                        if open.len() >= MAX_CONNECTIONS
                            && let Some((oldest, slot)) = open.pop_front()
                        {
                            oldest.abort();
                            // It may have been answered already: its outcome counts.
                            if let Some(outcome) = slot.take() {
                                return outcome;
                            }
                        }
                        let slot = Slot::default();
                        let router = router.clone();
                        let handed = slot.clone();
                        let service = hyper::service::service_fn(
                            move |mut request: Request<hyper::body::Incoming>| {
                                request.extensions_mut().insert(handed.clone());
                                // The router is always ready: no poll_ready needed.
                                router.clone().call(request.map(Body::new))
                            },
                        );
                        let connection = http1.serve_connection(TokioIo::new(stream), service);
                        // The outcome counts once its answer is written and the connection
                        // closed, so the browser shows the page before the listener goes.
                        let outcome = slot.clone();
                        let handle = connections.spawn(async move {
                            match tokio::time::timeout(CONNECTION_TIMEOUT, connection).await {
                                Ok(Ok(())) => {}
                                Ok(Err(error)) => {
                                    tracing::debug!(%error, "a redirect connection ended with an error");
                                }
                                Err(_) => tracing::debug!("a redirect connection timed out"),
                            }
                            outcome.take()
                        });
                        open.push_back((handle, slot));
                    }
                    Some(done) = connections.join_next(), if !connections.is_empty() => {
                        if let Ok(Some(outcome)) = done {
                            return outcome;
                        }
                    }
                }
            }
        };
        tokio::time::timeout(timeout, wait)
            .await
            .map_err(|_| OAuthError::TimedOut(timeout.as_secs()))?
    }
}

/// Every request the listener admitted: the redirect is `GET /callback?…`.
async fn callback(
    State(expected): State<Arc<(String, IssCheck)>>,
    Extension(slot): Extension<Slot>,
    method: Method,
    uri: Uri,
) -> Response {
    let query = uri
        .query()
        .filter(|_| method == Method::GET && uri.path() == "/callback");
    let Some(query) = query else {
        return page(StatusCode::NOT_FOUND, "not found");
    };
    let (state, iss) = expected.as_ref();
    match code_from_response(&format!("/callback?{query}"), state, iss) {
        Ok(code) => {
            slot.put(Ok(code));
            page(StatusCode::OK, ACCEPTED_PAGE)
        }
        // Not this login's redirect: keep waiting for the right one.
        Err(OAuthError::StateMismatch) => page(StatusCode::BAD_REQUEST, REFUSED_PAGE),
        Err(error) => {
            slot.put(Err(error));
            page(StatusCode::BAD_REQUEST, REFUSED_PAGE)
        }
    }
}

/// A plain-text page that closes the connection.
fn page(status: StatusCode, text: &'static str) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (header::CONNECTION, "close"),
        ],
        text,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// Sends `request` (`\r\n` line ends added) on a new connection to `address`; the answer's
    /// status line and body.
    async fn send(address: &str, request: &str) -> (String, String) {
        let mut stream = tokio::net::TcpStream::connect(address)
            .await
            .expect("connecting to the listener");
        let request = request.replace('\n', "\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .expect("sending the request");
        let mut answer = String::new();
        stream
            .read_to_string(&mut answer)
            .await
            .expect("reading the answer");
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
        let status = head.lines().next().unwrap_or_default().to_owned();
        (status, body.to_owned())
    }

    async fn listener() -> (RedirectListener, String) {
        let listener = RedirectListener::bind().await.expect("binding loopback");
        let address = listener
            .redirect_uri()
            .trim_start_matches("http://")
            .trim_end_matches("/callback")
            .to_owned();
        (listener, address)
    }

    fn get(path: &str, host: &str) -> String {
        format!("GET {path} HTTP/1.1\nHost: {host}\nConnection: close\n\n")
    }

    #[tokio::test]
    async fn the_redirect_with_this_state_ends_the_wait_with_its_code() {
        let (listener, address) = listener().await;
        assert!(listener.redirect_uri().starts_with("http://127.0.0.1:"));
        let wait = tokio::spawn(listener.code("s1", Duration::from_secs(30)));
        let (status, body) = send(&address, &get("/callback?code=c0de&state=s1", &address)).await;
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert_eq!(body, ACCEPTED_PAGE);
        let code = wait.await.expect("the wait").expect("the code");
        assert_eq!(code.expose(), "c0de");
    }

    #[tokio::test]
    async fn wrong_host_path_or_state_is_refused_and_the_wait_goes_on() {
        let (listener, address) = listener().await;
        let port = address.rsplit(':').next().expect("a port").to_owned();
        let wait = tokio::spawn(listener.code("s1", Duration::from_secs(30)));
        let good = "/callback?code=c0de&state=s1";
        // DNS rebinding: a page of another name resolving to 127.0.0.1.
        for host in [format!("evil.example:{port}"), "127.0.0.1".to_owned()] {
            let (status, _) = send(&address, &get(good, &host)).await;
            assert_eq!(status, "HTTP/1.1 421 Misdirected Request", "{host}");
        }
        let foreign_origin = format!(
            "GET {good} HTTP/1.1\nHost: {address}\nOrigin: http://evil.example\nConnection: close\n\n"
        );
        let (status, _) = send(&address, &foreign_origin).await;
        assert_eq!(status, "HTTP/1.1 403 Forbidden");
        let (status, body) = send(&address, &get("/callback?code=x&state=forged", &address)).await;
        assert_eq!(status, "HTTP/1.1 400 Bad Request");
        assert_eq!(body, REFUSED_PAGE);
        for path in ["/", "/callback", "/callbacks?code=x&state=s1"] {
            let (status, body) = send(&address, &get(path, &address)).await;
            assert_eq!(status, "HTTP/1.1 404 Not Found", "{path}");
            assert_eq!(body, "not found");
        }
        let post = format!(
            "POST {good} HTTP/1.1\nHost: {address}\nContent-Length: 0\nConnection: close\n\n"
        );
        assert_eq!(send(&address, &post).await.0, "HTTP/1.1 404 Not Found");
        assert!(!wait.is_finished(), "none of these ends the wait");
        let (status, _) = send(&address, &get(good, &format!("localhost:{port}"))).await;
        assert_eq!(status, "HTTP/1.1 200 OK");
        let code = wait.await.expect("the wait").expect("the code");
        assert_eq!(code.expose(), "c0de");
    }

    #[tokio::test]
    async fn an_idle_connection_does_not_delay_the_redirect() {
        let (listener, address) = listener().await;
        // Shorter than the header timeout: a listener that served one connection at a time
        // would still be waiting for the idle connection's request when this ends.
        let wait = tokio::spawn(listener.code("s1", Duration::from_secs(5)));
        let mut idle = tokio::net::TcpStream::connect(&address)
            .await
            .expect("connecting");
        let mut partial = tokio::net::TcpStream::connect(&address)
            .await
            .expect("connecting");
        partial
            .write_all(b"GET /callback?code=x&state=s1 HTTP/1.1\r\nHost: ")
            .await
            .expect("sending half a request");
        let (status, _) = send(&address, &get("/callback?code=c0de&state=s1", &address)).await;
        assert_eq!(status, "HTTP/1.1 200 OK");
        let code = wait.await.expect("the wait").expect("the code");
        assert_eq!(code.expose(), "c0de");
        // The listener is gone, and the idle connection with it.
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), idle.read_to_end(&mut rest))
            .await
            .expect("the idle connection is closed");
        assert!(read.is_err() || rest.is_empty(), "it got no answer");
    }

    #[tokio::test]
    async fn idle_connections_are_bounded_in_number_and_time() {
        let (listener, address) = listener().await;
        let wait = tokio::spawn(listener.code("s1", Duration::from_secs(60)));
        // Twice as many idle connections as are served: the oldest are closed at once.
        let mut idle = Vec::new();
        for _ in 0..MAX_CONNECTIONS * 2 {
            idle.push(
                tokio::net::TcpStream::connect(&address)
                    .await
                    .expect("connecting"),
            );
        }
        // The oldest were closed when the newer came: each reads end-of-file (or a reset) at
        // once, where an open one would wait for the header timeout.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        for (index, stream) in idle.iter_mut().take(MAX_CONNECTIONS).enumerate() {
            let mut byte = [0u8; 1];
            let read = tokio::time::timeout_at(deadline, stream.read(&mut byte))
                .await
                .unwrap_or_else(|_| panic!("idle connection {index} is still open"));
            assert!(matches!(read, Ok(0) | Err(_)), "{index}: {read:?}");
        }
        // The newest are closed too once they outlive the connection timeout, well before the
        // login's own timeout.
        let mut last = idle.pop().expect("a connection");
        let mut rest = Vec::new();
        let read = tokio::time::timeout(
            CONNECTION_TIMEOUT + Duration::from_secs(2),
            last.read_to_end(&mut rest),
        )
        .await
        .expect("an idle connection is closed after the connection timeout");
        assert!(read.is_err() || rest.is_empty());
        let (status, _) = send(&address, &get("/callback?code=c0de&state=s1", &address)).await;
        assert_eq!(status, "HTTP/1.1 200 OK");
        let code = wait.await.expect("the wait").expect("the code");
        assert_eq!(code.expose(), "c0de");
    }

    #[tokio::test]
    async fn a_redirect_with_an_error_ends_the_wait_with_it() {
        let (listener, address) = listener().await;
        let wait = tokio::spawn(listener.code("s1", Duration::from_secs(30)));
        let (status, body) = send(
            &address,
            &get("/callback?error=access_denied&state=s1", &address),
        )
        .await;
        assert_eq!(status, "HTTP/1.1 400 Bad Request");
        assert_eq!(body, REFUSED_PAGE);
        match wait.await.expect("the wait") {
            Err(OAuthError::AuthorizationRefused { code }) => assert_eq!(code, "access_denied"),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn no_redirect_within_the_timeout_is_timed_out() {
        let (listener, _) = listener().await;
        let waited = listener.code("s1", Duration::from_millis(50)).await;
        assert!(matches!(waited, Err(OAuthError::TimedOut(0))), "{waited:?}");
    }

    #[tokio::test]
    async fn a_registered_redirect_uris_port_is_reused_when_free() {
        let (first, address) = listener().await;
        let uri = first.redirect_uri().to_owned();
        drop(first);
        let again = RedirectListener::bind_like(Some(&uri))
            .await
            .expect("binding the same port");
        assert_eq!(again.redirect_uri(), uri);
        // Taken: another port.
        let other = RedirectListener::bind_like(Some(&uri))
            .await
            .expect("binding another port");
        assert_ne!(other.redirect_uri(), uri);
        assert!(!address.is_empty());
    }
}
