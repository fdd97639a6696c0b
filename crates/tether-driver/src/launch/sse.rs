//! The legacy MCP HTTP+SSE client transport, which rmcp 3.11 does not have.
//!
//! The protocol (MCP 2024-11-05): the client opens `GET <url>` with `Accept:
//! text/event-stream`; the server's first event is `endpoint`, whose data is the URL (absolute or
//! relative to the SSE URL) to which the client POSTs each JSON-RPC message; the server sends
//! its messages as `message` events on the open stream. Written here because no maintained crate
//! offers it for rmcp; the SSE framing itself comes from `sse-stream` (which rmcp also uses).
//!
//! The endpoint must be on the SSE URL's own origin (scheme, host and port): each message
//! carries the server's headers (its API key, its bearer token), which a server, or whoever
//! can inject an event into its stream, must not be able to send elsewhere ([`sse_endpoint`],
//! which the hand-off bridge applies too). Redirects are refused for the same reason.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use sse_stream::SseStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::bearer::{BearerSlot, Refusal, send_renewing};

/// Why the SSE transport failed. Messages hold no header value.
#[derive(Debug, thiserror::Error)]
pub enum SseError {
    /// The HTTP request failed.
    #[error("HTTP request failed")]
    Http(#[source] reqwest::Error),
    /// The server answered with a non-success status.
    #[error("the server answered HTTP {0}")]
    Status(u16),
    /// The event stream ended or broke before the `endpoint` event.
    #[error("the SSE stream gave no endpoint event")]
    NoEndpoint,
    /// The endpoint is not a valid URL.
    #[error("the SSE endpoint event holds an invalid URL")]
    BadEndpoint,
    /// The endpoint is on another origin than the SSE URL: refused, since every message sent
    /// there would carry the server's headers. The server (or its stream) is at fault.
    #[error(
        "the SSE endpoint event names another origin ({endpoint}) than the SSE URL's ({sse}); \
         refused, since every message would carry the server's headers there"
    )]
    ForeignEndpoint {
        /// The endpoint's origin (scheme, host, port).
        endpoint: String,
        /// The SSE URL's origin.
        sse: String,
    },
    /// A message could not be serialized.
    #[error("cannot serialize a message: {0}")]
    Serialize(String),
}

/// A connected SSE session.
pub struct SseClientTransport {
    http: reqwest::Client,
    headers: HeaderMap,
    /// The `Authorization` header, renewed when refused (`None`: as in `headers`).
    slot: Option<Arc<BearerSlot>>,
    post_url: reqwest::Url,
    incoming: mpsc::Receiver<RxJsonRpcMessage<RoleClient>>,
    reader: JoinHandle<()>,
}

impl SseClientTransport {
    /// Opens the event stream at `url` and waits (at most `timeout`) for the `endpoint` event.
    /// The `Authorization` header of `slot` replaces the one in `headers` and is renewed when
    /// refused, here and at each message sent.
    pub async fn connect(
        http: reqwest::Client,
        url: &str,
        headers: HeaderMap,
        slot: Option<Arc<BearerSlot>>,
        timeout: Duration,
    ) -> Result<Self, SseError> {
        let base = reqwest::Url::parse(url).map_err(|_| SseError::BadEndpoint)?;
        let response = send(slot.as_deref(), |authorization| {
            with_authorization(http.get(base.clone()), &headers, authorization)
                .header(ACCEPT, HeaderValue::from_static("text/event-stream"))
        })
        .await?;
        if !response.status().is_success() {
            return Err(SseError::Status(response.status().as_u16()));
        }
        let mut events = SseStream::from_bytes_stream(response.bytes_stream());
        let endpoint = tokio::time::timeout(timeout, async {
            while let Some(event) = events.next().await {
                match event {
                    Ok(event) if event.event.as_deref() == Some("endpoint") => {
                        return event.data;
                    }
                    Ok(_) => continue,
                    Err(_) => return None,
                }
            }
            None
        })
        .await
        .ok()
        .flatten()
        .ok_or(SseError::NoEndpoint)?;
        let post_url = sse_endpoint(&base, &endpoint)?;
        let (sender, incoming) = mpsc::channel(64);
        let reader = tokio::spawn(async move {
            while let Some(event) = events.next().await {
                let Ok(event) = event else { break };
                let is_message = event.event.as_deref().is_none_or(|e| e == "message");
                let Some(data) = event.data.filter(|_| is_message) else {
                    continue;
                };
                match serde_json::from_str::<RxJsonRpcMessage<RoleClient>>(&data) {
                    Ok(message) => {
                        if sender.send(message).await.is_err() {
                            break;
                        }
                    }
                    Err(_) => tracing::debug!("ignoring an SSE message that is not JSON-RPC"),
                }
            }
        });
        Ok(Self {
            http,
            headers,
            slot,
            post_url,
            incoming,
            reader,
        })
    }
}

impl Transport<RoleClient> for SseClientTransport {
    type Error = SseError;

    fn name() -> Cow<'static, str> {
        Cow::Borrowed("sse")
    }

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let http = self.http.clone();
        let headers = self.headers.clone();
        let slot = self.slot.clone();
        let url = self.post_url.clone();
        let body = serde_json::to_vec(&item).map_err(|e| SseError::Serialize(e.to_string()));
        async move {
            let body = body?;
            let response = send(slot.as_deref(), |authorization| {
                with_authorization(http.post(url.clone()), &headers, authorization)
                    .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
                    .body(body.clone())
            })
            .await?;
            if response.status().is_success() {
                Ok(())
            } else {
                Err(SseError::Status(response.status().as_u16()))
            }
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.incoming.recv()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.reader.abort();
        Ok(())
    }
}

/// Where messages go: the `endpoint` event's `data` resolved against the SSE URL `base`,
/// refused unless it is on `base`'s origin (scheme, host and port).
pub fn sse_endpoint(base: &reqwest::Url, data: &str) -> Result<reqwest::Url, SseError> {
    let endpoint = base.join(data.trim()).map_err(|_| SseError::BadEndpoint)?;
    if endpoint.origin() != base.origin() {
        return Err(SseError::ForeignEndpoint {
            endpoint: endpoint.origin().ascii_serialization(),
            sse: base.origin().ascii_serialization(),
        });
    }
    Ok(endpoint)
}

/// `request` with `headers`, the `Authorization` of `authorization` in place of theirs.
fn with_authorization(
    request: reqwest::RequestBuilder,
    headers: &HeaderMap,
    authorization: Option<HeaderValue>,
) -> reqwest::RequestBuilder {
    let mut headers = headers.clone();
    if let Some(value) = authorization {
        headers.insert(AUTHORIZATION, value);
    }
    request.headers(headers)
}

/// Sends the request `build` makes, renewing a refused token through `slot`.
async fn send(
    slot: Option<&BearerSlot>,
    build: impl Fn(Option<HeaderValue>) -> reqwest::RequestBuilder,
) -> Result<reqwest::Response, SseError> {
    send_renewing(
        slot,
        |authorization| build(authorization).send(),
        |sent| {
            sent.as_ref()
                .ok()
                .and_then(|response| Refusal::of(response.status(), response.headers()))
        },
    )
    .await
    .map_err(|e| SseError::Http(e.without_url()))
}

impl Drop for SseClientTransport {
    fn drop(&mut self) {
        self.reader.abort();
    }
}
