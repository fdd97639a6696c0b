//! The MCP server side: one [`GatewayHandler`] per client connection, all sharing the run's
//! servers ([`Shared`]).
//!
//! Every request takes one path (`pipeline.rs`, and ARCHITECTURE.md "The gateway's request
//! path"): received and traced → run in rounds for a 2026-07-28 client when the server may ask
//! it something → the method's handler, which admits, routes, forwards and shapes the answer
//! → recorded. The handlers are split by what they serve:
//!
//! - `tools.rs`: `tools/call` (and the search tools). `tools/list` answers from the
//!   catalogue, rebuilt when a server joins (`Shared::admit`) or its list changes: every joined
//!   server's tools (after its config's include/exclude filters) under namespaced names
//!   (`names.rs`), with the server's whole definition otherwise unchanged.
//! - `prompts.rs`: `prompts/get`; `prompts/list` likewise from the catalogue.
//! - `resources.rs`: `resources/read`, subscriptions, and `resources/list` and
//!   `resources/templates/list`, which ask every server that declared resources, each time,
//!   and merge (URIs stay as the servers give them; a URI goes back to the server that listed
//!   it).
//!
//! `tools/call`, `prompts/get`, `resources/read` and `completion/complete` are forwarded to the
//! server the name leads to; a client's cancellation is passed on. What comes back — results
//! and error messages — is masked (`redact.rs`) and audited (`audit.rs`).

mod code;
#[macro_use]
mod pipeline;
mod prompts;
mod resources;
mod tasks;
mod tools;

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult,
    GetPromptRequestParams, GetPromptResponse, Implementation, InitializeResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ResultType,
    SetLevelRequestMethod, SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tether_driver::{DriverError, McpRuntime};
use tracing::Instrument as _;

use crate::audit::{Outcome, Record};
use crate::budget::ResultStore;
use crate::catalogue::Catalogue;
use crate::redact::mask_value;
use crate::rounds::{Asker, modern};
use crate::shared::Shared;
use pipeline::received_at;

/// The results kept for one client connection: forgotten when it closes (its handler, and
/// every clone, dropped).
struct ConnectionResults {
    store: Arc<ResultStore>,
    owner: Arc<str>,
}

impl Drop for ConnectionResults {
    fn drop(&mut self) {
        self.store.forget(&self.owner);
    }
}

/// One client connection's handler. Cheap to clone; Streamable HTTP makes one per session.
#[derive(Clone)]
pub struct GatewayHandler {
    shared: Arc<Shared>,
    /// A random id for this connection, used in audit records and as the owner of the
    /// results kept for it.
    session: Arc<str>,
    /// Forgets the connection's kept results when its last handler is dropped.
    _results: Arc<ConnectionResults>,
    /// Answer `tools/list` with the marker the line transport replaces by the catalogue's
    /// pre-serialized list (`lines.rs`), instead of a copy of the list.
    catalogue_marker: bool,
    /// Set by the connection's first `tools/list` (which may wait for the servers to join,
    /// `Shared::first_list_grace`).
    listed: Arc<std::sync::atomic::AtomicBool>,
}

impl GatewayHandler {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        let session: Arc<str> = uuid::Uuid::new_v4().simple().to_string().into();
        let results = Arc::new(ConnectionResults {
            store: Arc::clone(&shared.results),
            owner: Arc::clone(&session),
        });
        Self {
            shared,
            session,
            _results: results,
            catalogue_marker: false,
            listed: Arc::default(),
        }
    }

    /// For a connection over the line transport (`lines.rs`).
    pub(crate) fn with_catalogue_marker(mut self) -> Self {
        self.catalogue_marker = true;
        self
    }

    /// Forwards one request and masks the answer; audits it when `audit` names the target.
    async fn forward(
        &self,
        server: &str,
        method: &str,
        params: Value,
        context: &RequestContext<RoleServer>,
    ) -> (Result<Value, DriverError>, Duration) {
        self.forward_with_progress(server, method, params, context, None)
            .await
    }

    /// [`GatewayHandler::forward`], passing the server's progress notifications for this
    /// request to `progress`.
    async fn forward_with_progress(
        &self,
        server: &str,
        method: &str,
        params: Value,
        context: &RequestContext<RoleServer>,
        progress: Option<tokio::sync::mpsc::UnboundedSender<Value>>,
    ) -> (Result<Value, DriverError>, Duration) {
        // From the request's arrival: a wait for a pending server before this (to learn which
        // server offers a name) used up part of the call timeout already.
        let started = received_at(context);
        let limit = context
            .extensions
            .get::<crate::tasks::CallLimit>()
            .map_or(self.shared.call_timeout, |limit| limit.0);
        let mut params = params;
        crate::rounds::strip_request_meta(&mut params);
        if context
            .extensions
            .get::<crate::tasks::DeclareTasks>()
            .is_some()
        {
            tether_driver::declare_tasks(&mut params);
        }
        let call = self.shared.clients.begin(
            server,
            &context.peer,
            http_session(context),
            context.extensions.get::<Asker>().cloned(),
        );
        let Ok(_call) = call else {
            // DELETE is draining this session: it finishes what runs, starts nothing new.
            let refused = DriverError::RequestFailed {
                server: server.to_owned(),
                method: method.to_owned(),
                code: None,
                message: "the session is being closed".to_owned(),
            };
            return (Err(refused), Duration::ZERO);
        };
        // Cancelled by the client's `notifications/cancelled`, or by its going away over HTTP.
        let gone = client_gone(context);
        let cancelled = async {
            match gone {
                Some(gone) => tokio::select! {
                    () = context.ct.cancelled() => {}
                    () = gone.cancelled() => {}
                },
                None => context.ct.cancelled().await,
            }
        };
        // A server still pending is waited for (within the call timeout, which the wait uses
        // up in part).
        let runtime = self
            .shared
            .supervisor
            .runtime_waiting(server, method, limit)
            .await;
        let left = limit
            .saturating_sub(started.elapsed())
            .max(Duration::from_millis(1));
        let answer = match runtime {
            Ok(runtime) => {
                let upstream = crate::telemetry::upstream(server, method);
                crate::telemetry::propagate(&upstream.span, &mut params);
                let answer = runtime
                    .forward(server, method, params, left, cancelled, progress)
                    .instrument(upstream.span.clone())
                    .await;
                crate::telemetry::upstream_done(&upstream, &answer);
                match answer {
                    // The connection broke under this call: say so plainly, and restart now
                    // rather than at the watcher's next look.
                    Err(error @ DriverError::RequestFailed { code: None, .. })
                        if connection_closed(&runtime, server).await =>
                    {
                        self.shared.supervisor.went_down(server);
                        Err(self
                            .shared
                            .supervisor
                            .runtime(server, method)
                            .err()
                            .unwrap_or(error))
                    }
                    answer => answer,
                }
            }
            Err(unavailable) => Err(unavailable),
        };
        let elapsed = started.elapsed();
        let answer = answer.map(|mut value| {
            mask_value(&self.shared.masker(), &mut value);
            value
        });
        (answer, elapsed)
    }

    /// The catalogue to route `name` by: the one offered now, or — when `name` is a lazy
    /// server's pinned tool, or no server offers it yet but its `SERVER__` prefix names a
    /// server still pending — the one offered once that server joined, waiting for it (and
    /// starting a lazy one) within the call timeout. With the server's name when it was
    /// still pending at the end of the wait.
    async fn catalogue_for(
        &self,
        name: &str,
        context: &RequestContext<RoleServer>,
    ) -> (Arc<Catalogue>, Option<String>) {
        let catalogue = self.shared.catalogue();
        let server = match catalogue.server_of(name) {
            // A lazy server's pinned tool: it starts now, and the call is routed by what it
            // offers once it joined (its definition may have changed since it was pinned).
            Some(server) if self.shared.supervisor.pending(server) => server.to_owned(),
            Some(_) => return (catalogue, None),
            None if catalogue.withheld.contains_key(name) => return (catalogue, None),
            None => match self.shared.supervisor.pending_named(name) {
                Some(server) => server,
                None => return (catalogue, None),
            },
        };
        tracing::debug!(server = %server, "a request names a server still starting: waiting for it");
        // The client's cancellation ends the wait too.
        let left = self
            .shared
            .call_timeout
            .saturating_sub(received_at(context).elapsed());
        let joined = tokio::select! {
            joined = self.shared.supervisor.joined(&server, left) => joined,
            () = context.ct.cancelled() => false,
        };
        (self.shared.catalogue(), (!joined).then_some(server))
    }

    /// Why a request for a server still pending failed.
    fn still_pending(&self, server: &str) -> String {
        format!(
            "server '{server}' is still starting: it was not ready within the call timeout ({} s); tether_status shows its state",
            self.shared.call_timeout.as_secs()
        )
    }

    fn refuse(&self, method: &str, target: &str, message: String) -> ErrorData {
        self.refuse_with(method, target, message, &[])
    }

    /// [`GatewayHandler::refuse`], for the secret-scan `findings` (rule names) that caused it.
    /// The record stage of a request whose answer is the server's as it is (a prompt, a read):
    /// its outcome, from the answer, in the audit log.
    fn record_forwarded(
        &self,
        method: &str,
        (server, target): (&str, &str),
        duration: Duration,
        arguments: Option<&serde_json::Value>,
        answer: &Result<serde_json::Value, DriverError>,
    ) {
        let outcome = match answer {
            Ok(_) => Outcome::Ok,
            Err(DriverError::Cancelled { .. }) => Outcome::Cancelled,
            Err(_) => Outcome::Error,
        };
        self.shared.audit(&Record {
            session: &self.session,
            method,
            server: Some(server),
            target,
            duration,
            outcome,
            arguments,
            result: answer.as_ref().ok(),
            findings: &[],
        });
    }

    /// The secret scan of results on what `server` answered a `method` for `target` (a prompt,
    /// a resource's contents), before the client sees it: logged, masked in place, or — under
    /// `block` — the answer refused. A tool call's result has its own path (`tools.rs`).
    fn scan_answer(
        &self,
        method: &str,
        target: &str,
        server: &str,
        value: &mut serde_json::Value,
    ) -> Result<(), ErrorData> {
        let mode = self.shared.secret_scan.results;
        let found = crate::secret_scan::scan(value, mode);
        crate::telemetry::secret_findings("results", &found);
        if found.is_empty() {
            return Ok(());
        }
        let rules = found.join(", ");
        tracing::warn!(
            server,
            target,
            "the answer to {method} holds what looks like a secret ({rules})"
        );
        if mode == crate::secret_scan::SecretScan::Block {
            let message = format!(
                "the answer held what looks like a secret ({rules}); this gateway does not pass it on (--secret-scan)"
            );
            return Err(self.refuse_with(method, target, message, &found));
        }
        Ok(())
    }

    fn refuse_with(
        &self,
        method: &str,
        target: &str,
        message: String,
        findings: &[&'static str],
    ) -> ErrorData {
        self.shared.audit(&Record {
            session: &self.session,
            method,
            server: None,
            target,
            duration: Duration::ZERO,
            outcome: Outcome::Refused,
            arguments: None,
            result: None,
            findings,
        });
        ErrorData::invalid_params(message, None)
    }
}

/// Whether `server`'s connection in `runtime` is closed, allowing its service loop a moment to
/// notice a write that failed.
async fn connection_closed(runtime: &McpRuntime, server: &str) -> bool {
    for _ in 0..10 {
        if runtime.closed().iter().any(|name| name == server) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    false
}

/// The Streamable HTTP session a request came in on (its `Mcp-Session-Id`), if it came over
/// HTTP. The id is a credential: it is only compared, never shown.
fn http_session(context: &RequestContext<RoleServer>) -> Option<String> {
    context
        .extensions
        .get::<axum::http::request::Parts>()?
        .headers
        .get("mcp-session-id")?
        .to_str()
        .ok()
        .map(str::to_owned)
}

/// Cancelled when the request came over HTTP and its client went away before the answer was
/// written (`http.rs`).
fn client_gone(
    context: &RequestContext<RoleServer>,
) -> Option<tokio_util::sync::CancellationToken> {
    context
        .extensions
        .get::<axum::http::request::Parts>()?
        .extensions
        .get::<crate::clients::ClientGone>()
        .map(|gone| gone.0.clone())
}

impl ServerHandler for GatewayHandler {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(self.shared.capabilities())
            .with_server_info(Implementation::new("tether", env!("CARGO_PKG_VERSION")))
            // Masked again: a re-mint may have added values since they were taken.
            .with_instructions(self.shared.mask(&if self.shared.catalogue().searching {
                crate::instructions::searching(&self.shared.instructions())
            } else {
                self.shared.instructions()
            }))
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        // Sessions (and DELETE) up to 2025-11-25, stateless requests from 2026-07-28 on.
        std::borrow::Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2026_07_28))
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        // rmcp narrows it to what the gateway declares.
        Some(requested.clone())
    }

    async fn listen(&self, subscription: SubscriptionContext) -> Result<(), ErrorData> {
        let mut changes = self.shared.changes.subscribe();
        let uris = subscription
            .accepted()
            .resource_subscriptions
            .clone()
            .unwrap_or_default();
        // The servers send `resources/updated` for what they were subscribed to; a URI no
        // server listed is left out (nothing will come for it).
        for uri in &uris {
            if let Some(server) = self.resource_server(uri) {
                let (answer, _) = self
                    .forward(
                        &server,
                        "resources/subscribe",
                        json!({ "uri": uri }),
                        subscription.request_context(),
                    )
                    .await;
                if let Err(error) = answer {
                    tracing::debug!(server = %server, "resources/subscribe for a listener: {}", self.shared.mask(&error.to_string()));
                }
            }
        }
        loop {
            let change = tokio::select! {
                () = subscription.cancelled() => return Ok(()),
                change = changes.recv() => change,
            };
            match change {
                // Sent only when the listener accepted it; the rest is not for this one.
                Ok(change) => {
                    use rmcp::service::SubscriptionSendError::{Service, SubscriptionClosed};
                    if let Err(Service(_) | SubscriptionClosed) =
                        subscription.sink().send(change).await
                    {
                        return Ok(());
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::debug!(missed, "a subscriptions/listen fell behind");
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(()),
            }
        }
    }

    async fn on_initialized(&self, context: rmcp::service::NotificationContext<RoleServer>) {
        self.shared.clients.connected(context.peer);
    }

    async fn on_roots_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<RoleServer>,
    ) {
        // Servers ask for the roots again; their `roots/list` comes back to a client.
        for runtime in self.shared.supervisor.runtimes() {
            runtime.notify_roots_changed().await;
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.receive("tools/list", None, &context)
            .answer(async { self.list_tools_now(&context).await })
            .await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.receive("tools/call", Some(&request.name), &context)
            .answer(async {
                in_rounds!(
                    self,
                    call_tool_now,
                    request,
                    context,
                    format!("tools/call\0{}", request.name)
                )
            })
            .await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        self.receive("prompts/get", Some(&request.name), &context)
            .answer(async {
                in_rounds!(
                    self,
                    get_prompt_now,
                    request,
                    context,
                    format!("prompts/get\0{}", request.name)
                )
            })
            .await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.receive("resources/read", None, &context)
            .answer(async {
                in_rounds!(
                    self,
                    read_resource_now,
                    request,
                    context,
                    format!("resources/read\0{}", request.uri)
                )
            })
            .await
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.receive("prompts/list", None, &context)
            .answer(async { self.list_prompts_now(&context).await })
            .await
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.receive("resources/list", None, &context)
            .answer(self.list_resources_now())
            .await
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.receive("resources/templates/list", None, &context)
            .answer(self.list_templates_now())
            .await
    }

    #[expect(
        deprecated,
        reason = "logging/setLevel is still part of the protocol versions the gateway speaks"
    )]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let logging_servers = self.shared.declaring("logging");
        if logging_servers.is_empty() && !self.shared.supervisor.any_pending() {
            return Err(ErrorData::method_not_found::<SetLevelRequestMethod>());
        }
        let params = serde_json::to_value(&request).unwrap_or_else(|_| json!({}));
        let answers = futures_util::future::join_all(
            logging_servers
                .iter()
                .map(|server| self.forward(server, "logging/setLevel", params.clone(), &context)),
        )
        .await;
        for (server, (answer, _)) in logging_servers.iter().zip(answers) {
            if let Err(error) = answer {
                tracing::debug!(server = %server, "logging/setLevel: {}", self.shared.mask(&error.to_string()));
            }
        }
        Ok(())
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let params = serde_json::to_value(&request).unwrap_or_else(|_| json!({}));
        self.pass_subscription("resources/subscribe", &request.uri, params, &context)
            .await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let params = serde_json::to_value(&request).unwrap_or_else(|_| json!({}));
        self.pass_subscription("resources/unsubscribe", &request.uri, params, &context)
            .await
    }

    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, ErrorData> {
        self.receive("tasks/get", None, &context)
            .answer(async { self.task_state(&request.task_id, &context) })
            .await
    }

    async fn update_task(
        &self,
        request: rmcp::model::UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.receive("tasks/update", None, &context)
            .answer(async {
                self.task_answers(&request.task_id, request.input_responses, &context)
            })
            .await
    }

    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.receive("tasks/cancel", None, &context)
            .answer(async { self.task_cancel(&request.task_id, &context) })
            .await
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let mut params = serde_json::to_value(&request).unwrap_or_else(|_| json!({}));
        // A prompt reference carries the namespaced name; a resource one carries a URI.
        let server = match params["ref"]["type"].as_str() {
            Some("ref/prompt") => {
                let name = params["ref"]["name"].as_str().unwrap_or_default();
                let route = self.shared.catalogue().prompt_names.route(name).cloned();
                route.map(|route| {
                    params["ref"]["name"] = Value::String(route.name);
                    route.server
                })
            }
            _ => params["ref"]["uri"]
                .as_str()
                .and_then(|uri| self.resource_server(uri)),
        };
        let Some(server) = server.filter(|s| self.shared.declares(s, "completions")) else {
            return Ok(CompleteResult::default());
        };
        let (answer, _) = self
            .forward(&server, "completion/complete", params, &context)
            .await;
        let value = answer.map_err(|e| self.shared.error_for(&e))?;
        let mut result = serde_json::from_value::<CompleteResult>(value)
            .map_err(|e| ErrorData::internal_error(format!("not an MCP completion: {e}"), None))?;
        // A server's result read back has no `resultType`; 2026-07-28 requires one (rmcp
        // strips it for older clients).
        result.result_type = Some(ResultType::COMPLETE);
        Ok(result)
    }
}
