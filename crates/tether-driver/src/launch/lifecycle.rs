//! Which MCP revision tether speaks to a server: 2026-07-28 when the server does, the
//! `initialize` handshake of 2025-11-25 (and older) otherwise.
//!
//! rmcp's `ClientLifecycleMode::Auto` sends `server/discover` first and falls back to
//! `initialize` on the same connection when the answer says the server is legacy (a JSON-RPC
//! error such as "method not found"). Two cases it leaves slow or failing are handled by
//! [`Probing`], a transport wrapper around the real one:
//!
//! - a legacy server that never answers `server/discover` would cost rmcp's fixed 10 s. Here
//!   the probe is given [`PROBE_BOUND`] from the moment the server is known to be alive: an
//!   HTTP server is alive when it takes the request; a stdio child is sent a `ping` (allowed
//!   before `initialize` in every revision) with the probe, and is alive once it answers
//!   that (with a result or an error). A server that answers neither gets the startup timeout
//!   as before. A late answer to a given-up probe is dropped.
//! - a server that answers `server/discover` listing only revisions with `initialize` (an
//!   rmcp ≥ 3.11 server narrowed to 2025-11-25) would end in "no compatible version": it is
//!   taken for a legacy server instead, and `initialize` follows.
//!
//! The legacy SSE transport (2024-11-05) is not probed.

use std::time::Duration;

use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, ErrorCode, ErrorData, ProtocolVersion, RequestId,
    ServerJsonRpcMessage, ServerNotification, ServerResult,
};
use rmcp::service::{ClientLifecycleMode, RoleClient};
use rmcp::transport::Transport;
use tokio::time::Instant;

use super::progress::ProgressRoutes;

/// How long a live server has to answer `server/discover` before tether takes it for a legacy
/// server and sends `initialize`.
pub const PROBE_BOUND: Duration = Duration::from_millis(1500);

/// The revisions tether offers in `server/discover`, preferred first.
fn modern_versions() -> Vec<ProtocolVersion> {
    vec![ProtocolVersion::V_2026_07_28]
}

/// Discover first, then `initialize` at rmcp's default (2025-11-25) for a legacy server.
pub fn auto() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: modern_versions(),
        legacy_version: None,
    }
}

/// The id of the liveness `ping` [`Probing`] sends a stdio server with the probe.
const PING_ID: &str = "tether-liveness";

/// Where the probe stands.
enum Probe {
    /// No `server/discover` sent yet, or its answer passed on.
    Idle,
    /// `server/discover` sent; waiting for the server to be alive (its ping answered).
    Unproven(RequestId),
    /// The server is alive; the probe's answer is due by the deadline.
    Due(RequestId, Instant),
}

/// The real transport, with the probe bounded and a legacy-only discover answer turned into
/// the fallback signal (see the module's doc).
pub struct Probing<T> {
    inner: T,
    probe: Probe,
    /// Whether a liveness `ping` is owed an answer (stdio); its answer is swallowed.
    ping_pending: bool,
    /// Whether that `ping` went out (once per connection).
    ping_sent: bool,
    /// Whether to send it at all.
    ping: bool,
    /// A probe given up on: its late answer is dropped.
    given_up: Option<RequestId>,
    bound: Duration,
    /// Take a server that offers both lifecycles for a legacy one (see [`Probing::new`]).
    prefer_legacy: bool,
    /// The connection's progress routes, told of each progress notification passed on
    /// ([`Probing::counting`]).
    progress: Option<ProgressRoutes>,
}

impl<T> Probing<T> {
    /// `inner` probed with a liveness `ping` (for a child on stdio, which may take a while to
    /// start) or without (HTTP: taking the request is proof enough).
    ///
    /// With `prefer_legacy`, a server whose discover answer also offers a revision with
    /// `initialize` gets `initialize`: a holder that follows the server's notifications (a
    /// gateway) keeps them, since tether does not open 2026-07-28's `subscriptions/listen`.
    pub fn new(inner: T, ping: bool, prefer_legacy: bool) -> Self {
        Self {
            prefer_legacy,
            inner,
            probe: Probe::Idle,
            ping_pending: false,
            ping_sent: false,
            ping,
            given_up: None,
            bound: PROBE_BOUND,
            progress: None,
        }
    }

    /// Counts each progress notification passed to rmcp in `routes`, in stream order, so a
    /// forwarder knows when the progress read before its answer has all been handled
    /// (`progress.rs`).
    pub(super) fn counting(mut self, routes: ProgressRoutes) -> Self {
        routes.counted_by_transport();
        self.progress = Some(routes);
        self
    }
}

/// The JSON-RPC error rmcp's `Auto` lifecycle reads as "a legacy server": fall back to
/// `initialize` on this connection.
fn legacy_signal(id: RequestId, why: &str) -> ServerJsonRpcMessage {
    ServerJsonRpcMessage::error(
        ErrorData::new(ErrorCode::METHOD_NOT_FOUND, why.to_owned(), None),
        Some(id),
    )
}

/// Whether `message`, the answer to `server/discover`, offers none of the revisions tether
/// would pick there: a result listing only others (or a result that is no discover result),
/// or the unsupported-version error with its `supported` list.
fn offers_no_modern_version(message: &ServerJsonRpcMessage) -> bool {
    let supported = match message {
        ServerJsonRpcMessage::Response(response) => match &response.result {
            ServerResult::DiscoverResult(result) => result.supported_versions.clone(),
            // An answer that is no discover result (a legacy server answering any method
            // with `{}`) names no 2026-07-28 version either.
            _ => Vec::new(),
        },
        ServerJsonRpcMessage::Error(error)
            if error.error.code == ErrorCode::UNSUPPORTED_PROTOCOL_VERSION =>
        {
            error
                .error
                .data
                .as_ref()
                .and_then(|data| data.get("supported"))
                .and_then(|list| serde_json::from_value(list.clone()).ok())
                .unwrap_or_default()
        }
        _ => return false,
    };
    !modern_versions()
        .iter()
        .any(|version| supported.contains(version))
}

/// Whether `message`, a discover result, also lists a revision with `initialize`.
fn offers_initialize(message: &ServerJsonRpcMessage) -> bool {
    matches!(message, ServerJsonRpcMessage::Response(response)
        if matches!(&response.result, ServerResult::DiscoverResult(result)
            if result.supported_versions.iter().any(ProtocolVersion::has_initialize)))
}

/// Whether `message` is the answer (a result or an error) to request `id`.
fn answers(message: &ServerJsonRpcMessage, id: &RequestId) -> bool {
    match message {
        ServerJsonRpcMessage::Response(response) => &response.id == id,
        ServerJsonRpcMessage::Error(error) => error.id.as_ref() == Some(id),
        _ => false,
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Probing<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let discover = match &item {
            ClientJsonRpcMessage::Request(request)
                if matches!(request.request, ClientRequest::DiscoverRequest(_)) =>
            {
                Some(request.id.clone())
            }
            _ => None,
        };
        match discover {
            Some(id) if self.ping && !self.ping_sent => {
                self.probe = Probe::Unproven(id);
                // Sent from `receive`, which rmcp calls next: one send here.
                self.ping_pending = true;
            }
            Some(id) => self.probe = Probe::Due(id, Instant::now() + self.bound),
            // Anything else (`initialize`, a modern request): the probe is over. When its
            // answer has not come (rmcp's own 10 s gave up on it first), a late one is dropped.
            None => {
                if let Probe::Unproven(id) | Probe::Due(id, _) =
                    std::mem::replace(&mut self.probe, Probe::Idle)
                {
                    self.given_up = Some(id);
                }
            }
        }
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        if self.ping_pending && !self.ping_sent {
            self.ping_sent = true;
            let ping = ClientJsonRpcMessage::request(
                ClientRequest::PingRequest(rmcp::model::PingRequest::default()),
                RequestId::String(PING_ID.into()),
            );
            if self.inner.send(ping).await.is_err() {
                // The probe's own answer (or the closed connection) tells the rest.
                self.ping_pending = false;
            }
        }
        loop {
            let message = match &self.probe {
                Probe::Due(id, deadline) => {
                    let (id, deadline) = (id.clone(), *deadline);
                    if let Ok(message) =
                        tokio::time::timeout_at(deadline, self.inner.receive()).await
                    {
                        message?
                    } else {
                        tracing::debug!(
                            bound = ?self.bound,
                            "no answer to server/discover: taking the server for a legacy one"
                        );
                        self.probe = Probe::Idle;
                        self.given_up = Some(id.clone());
                        return Some(legacy_signal(
                            id,
                            "no answer to server/discover in time: a legacy server",
                        ));
                    }
                }
                _ => self.inner.receive().await?,
            };
            let ping_id = RequestId::String(PING_ID.into());
            if self.ping_pending && answers(&message, &ping_id) {
                self.ping_pending = false;
                if let Probe::Unproven(id) = &self.probe {
                    tracing::trace!(
                        "the server answered the liveness ping; server/discover is due"
                    );
                    self.probe = Probe::Due(id.clone(), Instant::now() + self.bound);
                }
                continue;
            }
            if let Some(late) = &self.given_up
                && answers(&message, late)
            {
                self.given_up = None;
                continue;
            }
            let probe = match &self.probe {
                Probe::Unproven(id) | Probe::Due(id, _) if answers(&message, id) => id.clone(),
                _ => {
                    if let (Some(routes), ServerJsonRpcMessage::Notification(notification)) =
                        (&self.progress, &message)
                        && let ServerNotification::ProgressNotification(progress) =
                            &notification.notification
                    {
                        routes.read(&progress.params.progress_token);
                    }
                    return Some(message);
                }
            };
            self.probe = Probe::Idle;
            if offers_no_modern_version(&message)
                || (self.prefer_legacy && offers_initialize(&message))
            {
                return Some(legacy_signal(
                    probe,
                    "server/discover offers only revisions with initialize: a legacy server",
                ));
            }
            return Some(message);
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(json: serde_json::Value) -> ServerJsonRpcMessage {
        serde_json::from_value(json).expect("a JSON-RPC message")
    }

    #[test]
    fn only_an_answer_offering_2026_07_28_keeps_the_modern_lifecycle() {
        let result = |versions: serde_json::Value| {
            answer(serde_json::json!({"jsonrpc": "2.0", "id": 0, "result": {
                "resultType": "complete", "supportedVersions": versions,
                "capabilities": {}, "ttlMs": 0, "cacheScope": "private",
                "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "s", "version": "1"}}}}))
        };
        assert!(!offers_no_modern_version(&result(serde_json::json!([
            "2026-07-28"
        ]))));
        assert!(offers_no_modern_version(&result(serde_json::json!([
            "2025-11-25"
        ]))));
        // A legacy server answering any method with an empty result.
        assert!(offers_no_modern_version(&answer(
            serde_json::json!({"jsonrpc": "2.0", "id": 0, "result": {}})
        )));
        let unsupported = |supported: serde_json::Value| {
            answer(serde_json::json!({"jsonrpc": "2.0", "id": 0, "error": {
                "code": ErrorCode::UNSUPPORTED_PROTOCOL_VERSION.0, "message": "no",
                "data": {"supported": supported}}}))
        };
        assert!(offers_no_modern_version(&unsupported(serde_json::json!([
            "2025-06-18"
        ]))));
        assert!(!offers_no_modern_version(&unsupported(serde_json::json!(
            ["2026-07-28"]
        ))));
        // Any other error is rmcp's to classify (method not found: legacy).
        assert!(!offers_no_modern_version(&answer(serde_json::json!(
            {"jsonrpc": "2.0", "id": 0, "error": {"code": -32601, "message": "no such method"}}
        ))));
    }
}
