//! tether's MCP client as each server sees it ([`TetherClient`]): its name and capabilities,
//! the progress it routes back to forwarded requests, the notices and requests it passes to
//! the runtime's holder.

use std::sync::Arc;

use rmcp::model::ClientConfig;
use rmcp::service::RoleClient;
use serde_json::{Map, Value};

use super::progress::ProgressRoutes;
use super::{
    ClientRequests, NoticeSink, RequestRefused, ServerNotice, StartOptions,
    answerable_capabilities, client_config, passed_on_capabilities,
};

/// tether's MCP client: its name and capabilities, the progress notifications it passes
/// on to whoever forwarded the request they belong to, the other notifications it passes to
/// the runtime's holder, and the server's own requests it has the holder answer.
#[derive(Clone)]
pub(super) struct TetherClient {
    pub(super) info: ClientConfig,
    pub(super) progress: ProgressRoutes,
    /// The server's name, as notices and requests carry it.
    pub(super) server: Arc<str>,
    pub(super) notices: Option<NoticeSink>,
    pub(super) requests: Option<ClientRequests>,
}

impl TetherClient {
    pub(super) fn for_server(name: &str, start: &StartOptions) -> Self {
        Self {
            info: client_config(start.client_requests.as_ref().map(|_| {
                start
                    .declared
                    .as_ref()
                    .map_or_else(answerable_capabilities, passed_on_capabilities)
            })),
            progress: ProgressRoutes::default(),
            server: Arc::from(name),
            notices: start.notices.clone(),
            requests: start.client_requests.clone(),
        }
    }

    pub(super) fn notice(&self, notice: ServerNotice) {
        if let Some(sink) = &self.notices {
            // Nobody listening any more: the notice is dropped.
            let _ = sink.send((self.server.to_string(), notice));
        }
    }

    /// Has the holder answer the server's `method` request.
    pub(super) async fn ask<P: serde::Serialize, R: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<R, rmcp::ErrorData> {
        let Some(answer) = &self.requests else {
            return Err(rmcp::ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                format!("tether does not answer {method} here"),
                None,
            ));
        };
        let params = serde_json::to_value(params)
            .map_err(|e| rmcp::ErrorData::invalid_params(e.to_string(), None))?;
        match answer(self.server.to_string(), method.to_owned(), params).await {
            Ok(result) => serde_json::from_value(result).map_err(|e| {
                rmcp::ErrorData::internal_error(
                    format!("the client's answer to {method} is not MCP: {e}"),
                    None,
                )
            }),
            Err(RequestRefused { code, message }) => Err(rmcp::ErrorData::new(
                rmcp::model::ErrorCode(code),
                message,
                None,
            )),
        }
    }
}

impl rmcp::ClientHandler for TetherClient {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    #[expect(
        deprecated,
        reason = "notifications/message is still part of the protocol versions tether speaks"
    )]
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        if let Ok(value) = serde_json::to_value(&params) {
            self.notice(ServerNotice::Log(value));
        }
    }

    async fn on_tool_list_changed(&self, _context: rmcp::service::NotificationContext<RoleClient>) {
        self.notice(ServerNotice::ToolsChanged);
    }

    async fn on_prompt_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.notice(ServerNotice::PromptsChanged);
    }

    async fn on_resource_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.notice(ServerNotice::ResourcesChanged);
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        if let Ok(value) = serde_json::to_value(&params) {
            self.notice(ServerNotice::ResourceUpdated(value));
        }
    }

    #[expect(
        deprecated,
        reason = "sampling is still part of the protocol versions tether speaks"
    )]
    async fn create_message(
        &self,
        params: rmcp::model::CreateMessageRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, rmcp::ErrorData> {
        self.ask("sampling/createMessage", &params).await
    }

    async fn create_elicitation(
        &self,
        params: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        self.ask("elicitation/create", &params).await
    }

    #[expect(
        deprecated,
        reason = "roots are still part of the protocol versions tether speaks"
    )]
    async fn list_roots(
        &self,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ListRootsResult, rmcp::ErrorData> {
        self.ask("roots/list", &serde_json::json!({})).await
    }

    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.progress.pass(&params);
    }
}

impl TetherClient {
    /// Answers what a 2026-07-28 server's `InputRequiredResult` asks for, each through the
    /// holder (as that server's own request would be answered in 2025-11-25): the
    /// `inputResponses` by key, and the `requestState` to send back untouched.
    pub(super) async fn fulfil(
        &self,
        asked: rmcp::model::InputRequiredResult,
    ) -> Result<(Map<String, Value>, Option<String>), rmcp::ErrorData> {
        let requests = asked.input_requests.unwrap_or_default();
        if requests.is_empty() && asked.request_state.is_none() {
            return Err(rmcp::ErrorData::internal_error(
                "the server asked for input without saying what (no inputRequests, no requestState)",
                None,
            ));
        }
        let mut responses = Map::new();
        for (key, request) in requests {
            let request = serde_json::to_value(request)
                .map_err(|e| rmcp::ErrorData::internal_error(e.to_string(), None))?;
            let method = request
                .get("method")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let params = request
                .get("params")
                .cloned()
                .unwrap_or_else(|| serde_json::json!({}));
            let answer: Value = self.ask(&method, &params).await?;
            responses.insert(key, answer);
        }
        Ok((responses, asked.request_state))
    }
}
