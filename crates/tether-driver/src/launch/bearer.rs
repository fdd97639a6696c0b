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

use reqwest::header::{AUTHORIZATION, HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use tether_config::SecretValue;

use super::headers_helper::{HeadersHelper, send_with_helper};

/// The header of a DPoP proof (RFC 9449 §4.1).
const DPOP: HeaderName = HeaderName::from_static("dpop");
/// The header of a server's DPoP nonce (RFC 9449 §9).
const DPOP_NONCE: &str = "dpop-nonce";

/// Whether a `WWW-Authenticate` value asks for a DPoP nonce (RFC 9449 §9).
fn asks_for_nonce(challenge: &str) -> bool {
    challenge.contains("use_dpop_nonce")
}

/// How many step-ups one request may ask for before its 403 stands.
pub const MAX_STEP_UPS: usize = 2;

// The trait lives in tether-bearer, where tether-oauth reaches it without this crate.
pub use tether_bearer::BearerAuth;

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
        let sent = slot.current();
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
/// driver's Streamable HTTP client and the CLI's hand-off bridge share. One renewal runs at a
/// time (requests refused together share it); the value in use is never held while it runs,
/// so the server's other requests go on with it meanwhile — a step-up waits for a person in a
/// browser, for minutes at worst.
pub struct BearerSlot {
    url: String,
    auth: Arc<dyn BearerAuth>,
    /// The value to send now; locked only to read or replace it.
    current: std::sync::Mutex<HeaderValue>,
    /// Held while a renewal runs.
    renewing: tokio::sync::Mutex<()>,
    /// Set while a step-up waits for its login (a person in a browser).
    stepping_up: std::sync::atomic::AtomicBool,
    /// The server's latest DPoP nonce (RFC 9449 §9), for the proofs of a bound token.
    nonce: std::sync::Mutex<Option<String>>,
}

/// Clears [`BearerSlot::stepping_up`] however the step-up ends.
struct SteppingUp<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for SteppingUp<'_> {
    fn drop(&mut self) {
        self.0.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

impl BearerSlot {
    /// The slot of the server at `url`, starting with `authorization` (the header's value).
    pub fn new(url: &str, auth: Arc<dyn BearerAuth>, authorization: HeaderValue) -> Self {
        Self {
            url: url.to_owned(),
            auth,
            current: std::sync::Mutex::new(authorization),
            renewing: tokio::sync::Mutex::new(()),
            stepping_up: std::sync::atomic::AtomicBool::new(false),
            nonce: std::sync::Mutex::new(None),
        }
    }

    /// The headers that carry `sent` (an `Authorization` value of this slot's) on a `method`
    /// request: `sent` alone for a bearer token; for a token bound to a key (the
    /// [`BearerAuth`] gives a proof), `Authorization: DPoP TOKEN` and a fresh `DPoP` proof
    /// with the server's latest nonce. Both are marked sensitive.
    pub fn authorization(
        &self,
        sent: &HeaderValue,
        method: &str,
    ) -> Vec<(HeaderName, HeaderValue)> {
        let bearer = vec![(AUTHORIZATION, sent.clone())];
        let Some(token) = sent
            .to_str()
            .ok()
            .and_then(|value| value.strip_prefix("Bearer "))
        else {
            return bearer;
        };
        let token = SecretValue::from(token);
        let nonce = self
            .nonce
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let Some(proof) = self.auth.proof(&self.url, method, &token, nonce.as_deref()) else {
            return bearer;
        };
        let (Ok(mut authorization), Ok(mut proof)) = (
            HeaderValue::from_str(&format!("DPoP {}", token.expose())),
            HeaderValue::from_str(proof.expose()),
        ) else {
            return bearer;
        };
        authorization.set_sensitive(true);
        proof.set_sensitive(true);
        vec![(AUTHORIZATION, authorization), (DPOP, proof)]
    }

    /// Keeps the DPoP nonce of an answer's `headers`, when it has one; whether it had.
    pub fn note_nonce(&self, headers: &reqwest::header::HeaderMap) -> bool {
        let Some(nonce) = headers
            .get(DPOP_NONCE)
            .and_then(|value| value.to_str().ok())
            .filter(|nonce| !nonce.is_empty())
        else {
            return false;
        };
        *self
            .nonce
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(nonce.to_owned());
        true
    }

    /// Whether a step-up is waiting for its login now: a request that times out meanwhile
    /// waited for a person, not for the server.
    pub fn stepping_up(&self) -> bool {
        self.stepping_up.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The server's URL (what `tether auth login` takes).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The `Authorization` value to send now (a renewal in progress does not hold it up).
    pub fn current(&self) -> HeaderValue {
        self.current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// After `refusal` of a request sent with `sent`: a new value unless another request
    /// already replaced `sent` (waiting for a renewal that is running). Whether there is one to
    /// retry with.
    pub async fn renew(&self, sent: &HeaderValue, refusal: Refusal) -> bool {
        let _renewing = self.renewing.lock().await;
        if self.current() != *sent {
            return true;
        }
        let token = match refusal {
            Refusal::Unauthorized => {
                tracing::debug!(url = %self.url, "bearer token refused (401); asking for a fresh one");
                self.auth.refresh(self.url.clone()).await
            }
            Refusal::Forbidden { challenge } => {
                tracing::debug!(url = %self.url, "bearer token refused (403); asking for more access");
                self.stepping_up
                    .store(true, std::sync::atomic::Ordering::SeqCst);
                let _stepping_up = SteppingUp(&self.stepping_up);
                self.auth.step_up(self.url.clone(), challenge).await
            }
        };
        match token.as_ref().and_then(bearer_header) {
            Some(value) => {
                *self
                    .current
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = value;
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
    /// The server's `headersHelper`: its headers go with every request.
    helper: Option<Arc<HeadersHelper>>,
}

impl BearerHttp {
    /// `http` renewing the `Authorization` header of `slot` (as is without one), adding the
    /// headers of `helper` (renewed on 401) to every request.
    pub(super) fn new(
        http: reqwest::Client,
        slot: Option<Arc<BearerSlot>>,
        helper: Option<Arc<HeadersHelper>>,
    ) -> Self {
        Self { http, slot, helper }
    }

    /// Runs `call` with the headers of this moment (the current token), renewing and
    /// retrying as the module docs say.
    async fn renewing<T, F, Fut>(
        &self,
        method: &'static str,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        call: F,
    ) -> Result<T, StreamableHttpError<reqwest::Error>>
    where
        F: Fn(HashMap<HeaderName, HeaderValue>) -> Fut,
        Fut: Future<Output = Result<T, StreamableHttpError<reqwest::Error>>>,
    {
        let Some(helper) = self.helper.as_deref() else {
            return self.with_bearer(method, &custom_headers, &call).await;
        };
        send_with_helper(
            Some(helper),
            |helped| {
                let mut headers = custom_headers.clone();
                headers.extend(helped);
                let call = &call;
                async move { self.with_bearer(method, &headers, call).await }
            },
            |outcome| matches!(outcome, Err(StreamableHttpError::AuthRequired(_))),
            |error| Err(StreamableHttpError::Io(std::io::Error::other(error))),
        )
        .await
    }

    /// Runs `call` with `custom_headers` and the slot's `Authorization` of this moment,
    /// renewing it and retrying as the module docs say.
    async fn with_bearer<T, F, Fut>(
        &self,
        method: &'static str,
        custom_headers: &HashMap<HeaderName, HeaderValue>,
        call: &F,
    ) -> Result<T, StreamableHttpError<reqwest::Error>>
    where
        F: Fn(HashMap<HeaderName, HeaderValue>) -> Fut,
        Fut: Future<Output = Result<T, StreamableHttpError<reqwest::Error>>>,
    {
        let headers = |authorization: Option<&HeaderValue>| {
            let mut headers = custom_headers.clone();
            if let (Some(slot), Some(sent)) = (self.slot.as_deref(), authorization) {
                headers.extend(slot.authorization(sent, method));
            }
            headers
        };
        send_renewing(
            self.slot.as_deref(),
            |authorization| async move {
                let outcome = call(headers(authorization.as_ref())).await;
                // A bound token's proof without the nonce the server wants (RFC 9449 §9): its
                // nonce learned, the request is sent again once.
                if let (Some(slot), Some(sent), Err(StreamableHttpError::AuthRequired(refused))) =
                    (self.slot.as_deref(), authorization.as_ref(), &outcome)
                    && asks_for_nonce(&refused.www_authenticate_header)
                    && self.learn_nonce(slot, sent).await
                {
                    return call(headers(Some(sent))).await;
                }
                outcome
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

impl BearerHttp {
    /// The DPoP nonce of the server of `slot`, learned with one bodiless POST that carries
    /// `sent` and a proof, and kept in the slot: rmcp's client hands back a 401's
    /// `WWW-Authenticate` but not its `DPoP-Nonce`, so the nonce is asked for once more
    /// here. A server that checks proofs refuses the request before reading a body; one that
    /// did not would answer an empty body 400. Whether a nonce came.
    async fn learn_nonce(&self, slot: &BearerSlot, sent: &HeaderValue) -> bool {
        let mut request = self.http.post(slot.url()).header(
            reqwest::header::ACCEPT,
            "application/json, text/event-stream",
        );
        for (name, value) in slot.authorization(sent, "POST") {
            request = request.header(name, value);
        }
        match request.send().await {
            Ok(answer) => {
                let learned = slot.note_nonce(answer.headers());
                tracing::debug!(url = %slot.url(), learned, "asked the server for its DPoP nonce");
                learned
            }
            Err(e) => {
                tracing::debug!(url = %slot.url(), error = %e.without_url(), "could not ask for a DPoP nonce");
                false
            }
        }
    }
}

/// A request's W3C trace context (`_meta.traceparent`, which the gateway sets when it exports
/// traces), for the `traceparent` HTTP header: a server or proxy that reads only the header
/// joins the trace too. `None` for other messages or a value HTTP cannot carry.
fn traceparent(message: &ClientJsonRpcMessage) -> Option<HeaderValue> {
    use rmcp::model::GetMeta as _;
    let rmcp::model::JsonRpcMessage::Request(request) = message else {
        return None;
    };
    HeaderValue::from_str(request.request.get_meta().get_traceparent()?).ok()
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
        let mut custom_headers = custom_headers;
        if let Some(traceparent) = traceparent(&message) {
            custom_headers.insert(HeaderName::from_static("traceparent"), traceparent);
        }
        self.renewing("POST", custom_headers, |headers| {
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
        self.renewing("DELETE", custom_headers, |headers| {
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
        self.renewing("GET", custom_headers, |headers| {
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

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::future::BoxFuture;

    #[test]
    fn a_requests_traceparent_becomes_its_header() {
        let message = |meta: serde_json::Value| -> ClientJsonRpcMessage {
            serde_json::from_value(serde_json::json!({
                "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "t", "arguments": {}, "_meta": meta}
            }))
            .expect("a request")
        };
        let value = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            traceparent(&message(serde_json::json!({"traceparent": value}))),
            Some(HeaderValue::from_static(value))
        );
        assert_eq!(traceparent(&message(serde_json::json!({}))), None);
        assert_eq!(
            traceparent(&message(serde_json::json!({"traceparent": "a\nb"}))),
            None
        );
    }
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    /// A step-up that waits until the test lets it finish (a person in a browser), and a
    /// refresh that counts its calls.
    struct SlowStepUp {
        release: tokio::sync::Notify,
        refreshes: AtomicUsize,
    }

    /// The shared [`SlowStepUp`] as the slot's [`BearerAuth`] (the trait is another crate's).
    struct SlowAuth(Arc<SlowStepUp>);

    impl BearerAuth for SlowAuth {
        fn refresh(&self, _url: String) -> BoxFuture<'static, Option<SecretValue>> {
            self.0.refreshes.fetch_add(1, SeqCst);
            Box::pin(async { Some(SecretValue::from("refreshed")) })
        }

        fn step_up(
            &self,
            _url: String,
            _challenge: String,
        ) -> BoxFuture<'static, Option<SecretValue>> {
            let this = Arc::clone(&self.0);
            Box::pin(async move {
                this.release.notified().await;
                Some(SecretValue::from("more $HOME \"scope\""))
            })
        }
    }

    fn header(text: &str) -> HeaderValue {
        bearer_header(&SecretValue::from(text)).expect("a valid header")
    }

    #[tokio::test]
    async fn a_step_up_in_progress_holds_up_no_other_request() {
        let auth = Arc::new(SlowStepUp {
            release: tokio::sync::Notify::new(),
            refreshes: AtomicUsize::new(0),
        });
        let slot = Arc::new(BearerSlot::new(
            "http://127.0.0.1:9/mcp",
            Arc::new(SlowAuth(Arc::clone(&auth))),
            header("first"),
        ));
        let first = header("first");
        let stepping = {
            let slot = Arc::clone(&slot);
            let sent = first.clone();
            tokio::spawn(async move {
                let challenge = r#"Bearer error="insufficient_scope""#.to_owned();
                slot.renew(&sent, Refusal::Forbidden { challenge }).await
            })
        };
        tokio::task::yield_now().await;
        // Another request goes on with the value in use while the step-up waits.
        let answered = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            send_renewing(Some(&slot), |value| async move { value }, |_| None),
        )
        .await
        .expect("a request was held up by the step-up");
        assert_eq!(answered, Some(first.clone()));
        // One refused with the old value meanwhile waits for the step-up and shares its token.
        let refused = {
            let slot = Arc::clone(&slot);
            let sent = first.clone();
            tokio::spawn(async move { slot.renew(&sent, Refusal::Unauthorized).await })
        };
        tokio::task::yield_now().await;
        auth.release.notify_one();
        assert!(stepping.await.expect("the step-up task"));
        assert!(refused.await.expect("the refused request's task"));
        assert_eq!(slot.current(), header("more $HOME \"scope\""));
        assert_eq!(
            auth.refreshes.load(SeqCst),
            0,
            "the step-up's token served both"
        );
    }
}
