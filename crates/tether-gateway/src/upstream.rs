//! What servers send their client — tether — and the gateway passes on to its own clients:
//! notifications (log messages, list changes, resource updates) and requests (sampling,
//! elicitation, roots).
//!
//! - A server's `tools/list_changed` or `prompts/list_changed` makes the gateway list that
//!   server again, admit the entries (pins, scan, filters) and rebuild the union; when what is
//!   offered changed, every connected client gets the same notification.
//! - `resources/list_changed` goes to every client; `resources/updated` to the clients that
//!   subscribed to the URI through the gateway.
//! - `sampling/createMessage`, `elicitation/create` and `roots/list` go to the client whose
//!   call the server is serving (the latest running call on that server by a client that
//!   declared the capability), else to the latest connected client that declared it; with
//!   none, the server gets a JSON-RPC error saying so. What the server sends is masked.

use std::sync::{Arc, OnceLock, Weak};

use rmcp::model::{ErrorCode, ServerNotification, ServerRequest};
use serde_json::Value;
use tether_driver::{RequestRefused, ServerNotice, StartOptions};

use crate::clients::Answerer;
use crate::redact::mask_value;
use crate::rounds::request_message;
use crate::shared::Shared;

/// The servers' side of a gateway, wired into their [`StartOptions`] before they start (the
/// gateway itself exists only after they did).
pub struct Upstream {
    notices: tokio::sync::mpsc::UnboundedReceiver<(String, ServerNotice)>,
    gateway: Arc<OnceLock<Weak<Shared>>>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream").finish_non_exhaustive()
    }
}

impl Upstream {
    /// Sets `options.notices` and `options.client_requests` so that the servers started with
    /// them reach the gateway built with the returned value ([`crate::GatewayOptions::upstream`]).
    pub fn wire(options: &mut StartOptions) -> Self {
        let (sink, notices) = tokio::sync::mpsc::unbounded_channel();
        let gateway: Arc<OnceLock<Weak<Shared>>> = Arc::default();
        let target = Arc::clone(&gateway);
        options.notices = Some(sink);
        options.client_requests = Some(Arc::new(move |server, method, params| {
            let shared = target.get().and_then(Weak::upgrade);
            Box::pin(async move {
                match shared {
                    Some(shared) => answer(&shared, &server, &method, params).await,
                    None => Err(RequestRefused {
                        code: ErrorCode::METHOD_NOT_FOUND.0,
                        message: format!(
                            "{method}: no client is connected to tether's gateway yet"
                        ),
                    }),
                }
            })
        }));
        Self { notices, gateway }
    }

    /// Connects the servers to `shared` and passes their notifications on until the gateway
    /// or the servers are gone.
    pub(crate) fn attach(self, shared: &Arc<Shared>) {
        let _ = self.gateway.set(Arc::downgrade(shared));
        tokio::spawn(pass_notices(Arc::downgrade(shared), self.notices));
    }
}

/// Handles each server notice in order.
async fn pass_notices(
    shared: Weak<Shared>,
    mut notices: tokio::sync::mpsc::UnboundedReceiver<(String, ServerNotice)>,
) {
    while let Some((server, notice)) = notices.recv().await {
        let Some(shared) = shared.upgrade() else {
            return;
        };
        match notice {
            ServerNotice::Log(params) => pass_log_message(&shared, server, params).await,
            ServerNotice::ToolsChanged => {
                if shared.relist_tools(&server).await {
                    for peer in shared.clients.peers() {
                        let _ = peer.notify_tool_list_changed().await;
                    }
                    let _ = shared
                        .changes
                        .send(ServerNotification::ToolListChangedNotification(
                            Default::default(),
                        ));
                }
            }
            ServerNotice::PromptsChanged => {
                if shared.relist_prompts(&server).await {
                    for peer in shared.clients.peers() {
                        let _ = peer.notify_prompt_list_changed().await;
                    }
                    let _ = shared
                        .changes
                        .send(ServerNotification::PromptListChangedNotification(
                            Default::default(),
                        ));
                }
            }
            ServerNotice::ResourcesChanged => {
                for peer in shared.clients.peers() {
                    let _ = peer.notify_resource_list_changed().await;
                }
                let _ = shared
                    .changes
                    .send(ServerNotification::ResourceListChangedNotification(
                        Default::default(),
                    ));
            }
            ServerNotice::ResourceUpdated(mut params) => {
                mask_value(&shared.masker(), &mut params);
                // An app's resource: under the name its subscribers know (`apps.rs`).
                if let Some(params) = params.as_object_mut() {
                    crate::apps::offer_field(params, "uri", &server);
                }
                let Ok(params) =
                    serde_json::from_value::<rmcp::model::ResourceUpdatedNotificationParam>(params)
                else {
                    continue;
                };
                for peer in shared.clients.subscribers(&params.uri) {
                    let _ = peer.notify_resource_updated(params.clone()).await;
                }
                let _ = shared
                    .changes
                    .send(ServerNotification::ResourceUpdatedNotification(
                        rmcp::model::ResourceUpdatedNotification::new(params),
                    ));
            }
        }
    }
}

/// Passes one log message on to every connected client, masked, with `logger` set to
/// `SERVER` (or `SERVER/LOGGER`).
#[expect(
    deprecated,
    reason = "notifications/message is still part of the protocol versions the gateway speaks"
)]
async fn pass_log_message(shared: &Shared, server: String, mut params: Value) {
    let logger = match params.get("logger").and_then(Value::as_str) {
        Some(own) => format!("{server}/{own}"),
        None => server,
    };
    params["logger"] = Value::String(logger);
    mask_value(&shared.masker(), &mut params);
    let Ok(message) =
        serde_json::from_value::<rmcp::model::LoggingMessageNotificationParam>(params)
    else {
        return;
    };
    for peer in shared.clients.peers() {
        let _ = peer.notify_logging_message(message.clone()).await;
    }
}

/// The client capability a server's request needs.
fn capability_for(method: &str) -> Option<&'static str> {
    match method {
        "sampling/createMessage" => Some("sampling"),
        "elicitation/create" => Some("elicitation"),
        "roots/list" => Some("roots"),
        _ => None,
    }
}

/// Has a connected client answer `server`'s `method` request.
async fn answer(
    shared: &Shared,
    server: &str,
    method: &str,
    mut params: Value,
) -> Result<Value, RequestRefused> {
    let refused = |code: ErrorCode, message: String| RequestRefused {
        code: code.0,
        message: shared.mask(&message),
    };
    let Some(capability) = capability_for(method) else {
        return Err(refused(
            ErrorCode::METHOD_NOT_FOUND,
            format!("tether's gateway does not pass {method} on"),
        ));
    };
    mask_value(&shared.masker(), &mut params);
    let peer = match shared.clients.answerer(server, capability) {
        Some(Answerer::Peer(peer)) => peer,
        Some(Answerer::Call(asker)) => {
            tracing::debug!(
                server,
                method,
                "asking a 2026-07-28 client through its call's result"
            );
            return asker
                .ask(capability, method, params, shared.call_timeout)
                .await
                .map_err(|RequestRefused { code, message }| RequestRefused {
                    code,
                    message: shared.mask(&message),
                });
        }
        None => {
            return Err(refused(
                ErrorCode::METHOD_NOT_FOUND,
                format!(
                    "no client connected to tether's gateway declared the '{capability}' capability, so {method} cannot be answered"
                ),
            ));
        }
    };
    let request: ServerRequest = serde_json::from_value(request_message(method, params))
        .map_err(|e| refused(ErrorCode::INVALID_PARAMS, format!("{method}: {e}")))?;
    tracing::debug!(server, method, "passing a server's request on to a client");
    let answered = tokio::time::timeout(shared.call_timeout, peer.send_request(request)).await;
    match answered {
        Ok(Ok(result)) => serde_json::to_value(result)
            .map_err(|e| refused(ErrorCode::INTERNAL_ERROR, format!("{method}: {e}"))),
        Ok(Err(rmcp::ServiceError::McpError(error))) => {
            Err(refused(error.code, error.message.to_string()))
        }
        Ok(Err(error)) => Err(refused(
            ErrorCode::INTERNAL_ERROR,
            format!("the client did not answer {method}: {error}"),
        )),
        Err(_) => Err(refused(
            ErrorCode::INTERNAL_ERROR,
            format!(
                "the client did not answer {method} within {} s",
                shared.call_timeout.as_secs()
            ),
        )),
    }
}
