//! `prompts/get`: routed by the namespaced name, forwarded, masked and audited.

use crate::rounds::modern;
use rmcp::model::{CacheScope, ListPromptsResult};
use rmcp::model::{GetPromptRequestParams, GetPromptResponse, GetPromptResult};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::{Value, json};

use super::GatewayHandler;
use super::pipeline::mark_received;
use crate::redact::mask_value;

impl GatewayHandler {
    /// `prompts/list`: the catalogue's prompts.
    pub(super) async fn list_prompts_now(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let mut list =
            ListPromptsResult::with_all_items(self.shared.catalogue().prompts.as_ref().clone());
        if modern(context) {
            list.ttl_ms = Some(self.shared.list_ttl_ms("prompts"));
            list.cache_scope = Some(CacheScope::Private);
        }
        Ok(list)
    }

    pub(super) async fn get_prompt_now(
        &self,
        request: GetPromptRequestParams,
        mut context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        mark_received(&mut context);
        const METHOD: &str = "prompts/get";
        let (catalogue, still_pending) = self.catalogue_for(&request.name, &context).await;
        if let Some(reason) = catalogue.withheld.get(&request.name) {
            return Err(self.refuse(METHOD, &request.name, reason.clone()));
        }
        let Some(route) = catalogue.prompt_names.route(&request.name).cloned() else {
            let message = match still_pending {
                Some(server) => self.still_pending(&server),
                None => format!("no prompt named '{}' behind this gateway", request.name),
            };
            return Err(self.refuse(METHOD, &request.name, message));
        };
        let mut params = serde_json::to_value(&request).unwrap_or_else(|_| json!({}));
        params["name"] = Value::String(route.name.clone());
        let arguments = params.get("arguments").cloned().map(|mut a| {
            mask_value(&self.shared.masker(), &mut a);
            a
        });
        let (mut answer, duration) = self.forward(&route.server, METHOD, params, &context).await;
        if let Ok(value) = &mut answer {
            self.scan_answer(METHOD, &route.name, &route.server, value)?;
        }
        self.record_forwarded(
            METHOD,
            (&route.server, &route.name),
            duration,
            arguments.as_ref(),
            &answer,
        );
        let value = answer.map_err(|e| self.shared.error_for(&e))?;
        serde_json::from_value::<GetPromptResult>(value)
            .map(Into::into)
            .map_err(|e| ErrorData::internal_error(format!("not an MCP prompt: {e}"), None))
    }
}
