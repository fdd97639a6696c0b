//! The bearer token of a remote server, renewed at the HTTP transport level: every request
//! of a Streamable HTTP connection (the handshake, each tool call of a long run, a gateway's
//! forwarded calls) goes out with the token in use now; a 401 gets one renewal from the
//! caller's [`BearerAuth`] and one retry, a 403 with a challenge (`insufficient_scope`) at most
//! [`MAX_STEP_UPS`] step-ups and retries. Requests that fail at the same time share one
//! renewal: whoever comes second finds the token already changed and retries with it.
//!
//! **Invariant:** this module knows nothing about OAuth: what a challenge means and how a
//! token is had is the [`BearerAuth`]'s business; here only "refused, ask once, retry".

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use reqwest::header::{AUTHORIZATION, HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use tether_config::SecretValue;

/// How many step-ups one request may ask for before its 403 stands.
pub const MAX_STEP_UPS: usize = 2;

/// Where a remote server's fresh bearer tokens come from (the CLI's OAuth client). Asked only
/// for a server that was sent an `Authorization` header; `None` leaves the refusal standing.
pub trait BearerAuth: Send + Sync {
    /// The server at `url` refused the token (401): a new one (an OAuth refresh), or `None`.
    fn refresh(&self, url: String) -> BoxFuture<'static, Option<SecretValue>>;

    /// The server at `url` refused the token with 403 and `challenge` (its
    /// `WWW-Authenticate` value, e.g. `Bearer error="insufficient_scope", scope="…"`): a token
    /// with more access (an OAuth step-up), or `None` when the challenge asks for nothing
    /// that can be had.
    fn step_up(&self, url: String, challenge: String) -> BoxFuture<'static, Option<SecretValue>>;
}

/// The `Authorization` value for `token`, marked sensitive; `None` when HTTP forbids it.
fn bearer_header(token: &SecretValue) -> Option<HeaderValue> {
    let mut value = HeaderValue::from_str(&format!("Bearer {}", token.expose())).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// Why a server refused a request's bearer token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// 401: the token is not (or no longer) good; a refresh may help.
    Unauthorized,
    /// 403 with a `WWW-Authenticate` challenge (e.g. `insufficient_scope`); a step-up may help.
    Forbidden {
        /// The `WWW-Authenticate` value.
        challenge: String,
    },
}

impl Refusal {
    /// The refusal an HTTP answer with `status` and `headers` is: 401, or 403 with a
    /// `WWW-Authenticate` challenge.
    pub fn of(status: reqwest::StatusCode, headers: &reqwest::header::HeaderMap) -> Option<Self> {
        match status {
            reqwest::StatusCode::UNAUTHORIZED => Some(Self::Unauthorized),
            reqwest::StatusCode::FORBIDDEN => headers
                .get(reqwest::header::WWW_AUTHENTICATE)
                .and_then(|value| value.to_str().ok())
                .map(|challenge| Self::Forbidden {
                    challenge: challenge.to_owned(),
                }),
            _ => None,
        }
    }
}

/// Runs `send` with the `Authorization` value of `slot` of this moment (`None` without a
/// slot) and, while `refused` finds the outcome a [`Refusal`] and the request may still be
/// retried (one refresh, [`MAX_STEP_UPS`] step-ups), renews the value and runs `send` again.
/// Returns the last outcome. The one renewal loop of the driver's HTTP transports and the
/// CLI's hand-off bridge.
pub async fn send_renewing<R, Send, Sending, Refused>(
    slot: Option<&BearerSlot>,
    send: Send,
    refused: Refused,
) -> R
where
    Send: Fn(Option<HeaderValue>) -> Sending,
    Sending: Future<Output = R>,
    Refused: Fn(&R) -> Option<Refusal>,
{
    let Some(slot) = slot else {
        return send(None).await;
    };
    let mut budget = RetryBudget::default();
    loop {
        let sent = slot.current().await;
        let outcome = send(Some(sent.clone())).await;
        let Some(refusal) = refused(&outcome) else {
            return outcome;
        };
        if !budget.take(&refusal) || !slot.renew(&sent, refusal).await {
            return outcome;
        }
    }
}

/// The renewals one request may still ask for: one refresh, [`MAX_STEP_UPS`] step-ups.
#[derive(Debug, Default)]
struct RetryBudget {
    refreshed: bool,
    step_ups: usize,
}

impl RetryBudget {
    /// Whether `refusal` may be answered with a renewal and a retry (and counts it).
    fn take(&mut self, refusal: &Refusal) -> bool {
        match refusal {
            Refusal::Unauthorized if !self.refreshed => {
                self.refreshed = true;
                true
            }
            Refusal::Forbidden { .. } if self.step_ups < MAX_STEP_UPS => {
                self.step_ups += 1;
                true
            }
            _ => false,
        }
    }
}

/// One server's `Authorization` header in use, renewed through a [`BearerAuth`]: what the
/// driver's Streamable HTTP client and the CLI's hand-off bridge share. Locked while it is
/// renewed, so requests refused at the same time share one renewal.
pub struct BearerSlot {
    url: String,
    auth: Arc<dyn BearerAuth>,
    current: tokio::sync::Mutex<HeaderValue>,
}

impl BearerSlot {
    /// The slot of the server at `url`, starting with `authorization` (the header's value).
    pub fn new(url: &str, auth: Arc<dyn BearerAuth>, authorization: HeaderValue) -> Self {
        Self {
            url: url.to_owned(),
            auth,
            current: tokio::sync::Mutex::new(authorization),
        }
    }

    /// The `Authorization` value to send now.
    pub async fn current(&self) -> HeaderValue {
        self.current.lock().await.clone()
    }

    /// After `refusal` of a request sent with `sent`: a new value unless another request
    /// already replaced `sent`. Whether there is one to retry with.
    pub async fn renew(&self, sent: &HeaderValue, refusal: Refusal) -> bool {
        let mut current = self.current.lock().await;
        if *current != *sent {
            return true;
        }
        let token = match refusal {
            Refusal::Unauthorized => {
                tracing::debug!(url = %self.url, "bearer token refused (401); asking for a fresh one");
                self.auth.refresh(self.url.clone()).await
            }
            Refusal::Forbidden { challenge } => {
                tracing::debug!(url = %self.url, "bearer token refused (403); asking for more access");
                self.auth.step_up(self.url.clone(), challenge).await
            }
        };
        match token.as_ref().and_then(bearer_header) {
            Some(value) => {
                *current = value;
                true
            }
            None => false,
        }
    }
}

/// The slot of a server at `url` sent `headers`: `None` without `auth` or without an
/// `Authorization` header (then nothing is renewed).
pub(super) fn slot_for(
    url: &str,
    headers: &reqwest::header::HeaderMap,
    auth: Option<Arc<dyn BearerAuth>>,
) -> Option<Arc<BearerSlot>> {
    auth.zip(headers.get(AUTHORIZATION).cloned())
        .map(|(auth, current)| Arc::new(BearerSlot::new(url, auth, current)))
}

/// A `reqwest::Client` that renews the bearer token of one server as the module docs say.
#[derive(Clone)]
pub(super) struct BearerHttp {
    http: reqwest::Client,
    slot: Option<Arc<BearerSlot>>,
}

impl BearerHttp {
    /// `http` renewing the `Authorization` header of `slot` (as is without one).
    pub(super) fn new(http: reqwest::Client, slot: Option<Arc<BearerSlot>>) -> Self {
        Self { http, slot }
    }

    /// Runs `call` with the headers of this moment (the current token), renewing and
    /// retrying as the module docs say.
    async fn renewing<T, F, Fut>(
        &self,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        call: F,
    ) -> Result<T, StreamableHttpError<reqwest::Error>>
    where
        F: Fn(HashMap<HeaderName, HeaderValue>) -> Fut,
        Fut: Future<Output = Result<T, StreamableHttpError<reqwest::Error>>>,
    {
        send_renewing(
            self.slot.as_deref(),
            |authorization| {
                let mut headers = custom_headers.clone();
                if let Some(value) = authorization {
                    headers.insert(AUTHORIZATION, value);
                }
                call(headers)
            },
            |outcome| match outcome {
                Err(StreamableHttpError::AuthRequired(_)) => Some(Refusal::Unauthorized),
                Err(StreamableHttpError::InsufficientScope(refusal)) => Some(Refusal::Forbidden {
                    challenge: refusal.www_authenticate_header.clone(),
                }),
                _ => None,
            },
        )
        .await
    }
}

// Every request goes through the most general method of each kind (the one with limits), so
// the renewal is written once per kind.
impl StreamableHttpClient for BearerHttp {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = max_sse_event_size;
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.renewing(custom_headers, |headers| {
            self.http.post_message_with_response_limits(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                auth_header.clone(),
                headers,
                limits,
            )
        })
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.renewing(custom_headers, |headers| {
            self.http.delete_session(
                uri.clone(),
                session_id.clone(),
                auth_header.clone(),
                headers,
            )
        })
        .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<
        futures_util::stream::BoxStream<'static, Result<sse_stream::Sse, sse_stream::Error>>,
        StreamableHttpError<Self::Error>,
    > {
        self.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default().max_sse_event_size,
        )
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<
        futures_util::stream::BoxStream<'static, Result<sse_stream::Sse, sse_stream::Error>>,
        StreamableHttpError<Self::Error>,
    > {
        self.renewing(custom_headers, |headers| {
            self.http.get_stream_with_max_sse_event_size(
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                auth_header.clone(),
                headers,
                max_sse_event_size,
            )
        })
        .await
    }
}
