//! Resources: `resources/read` (a kept result of the output budget, or routed to the server
//! that listed the URI or whose template matches it), the merged lists, and subscriptions.

use rmcp::model::{ListResourceTemplatesResult, ListResourcesResult, Resource, ResourceTemplate};
use std::collections::HashMap;
use std::collections::HashSet;
use std::time::Duration;

use rmcp::model::{ErrorCode, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

use super::GatewayHandler;
use super::pipeline::{mark_received, received_at};
use crate::audit::{Outcome, Record, uri_target};
use crate::budget::{GATEWAY_URI_SCHEME, RESULTS_URI_PREFIX, ReadFailure};
use crate::catalogue::scanned;
use crate::redact::mask_value;
use crate::shared::list_all;

impl GatewayHandler {
    /// `resources/list`: every resource-declaring server's, merged; the URIs routed to them.
    pub(super) async fn list_resources_now(&self) -> Result<ListResourcesResult, ErrorData> {
        let merged = self
            .list_resources_everywhere("resources/list", "resources")
            .await;
        let mut routes = HashMap::new();
        let mut resources = Vec::new();
        for (server, mut item) in merged {
            if let Some(item) = item.as_object_mut() {
                crate::apps::offer_field(item, "uri", &server);
            }
            let Some(uri) = item.get("uri").and_then(Value::as_str).map(str::to_owned) else {
                continue;
            };
            if routes.contains_key(&uri) {
                tracing::debug!(server = %server, "a resource URI another server listed first is left out");
                continue;
            }
            if let Ok(resource) = serde_json::from_value::<Resource>(item) {
                routes.insert(uri, server);
                resources.push(resource);
            }
        }
        *self
            .shared
            .resource_routes
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = routes;
        Ok(ListResourcesResult::with_all_items(resources))
    }

    /// `resources/templates/list`: every resource-declaring server's, merged and routed.
    pub(super) async fn list_templates_now(
        &self,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let merged = self
            .list_resources_everywhere("resources/templates/list", "resourceTemplates")
            .await;
        let mut routes = Vec::new();
        let mut templates = Vec::new();
        for (server, mut item) in merged {
            if let Some(item) = item.as_object_mut() {
                crate::apps::offer_field(item, "uriTemplate", &server);
            }
            let Some(template) = item.get("uriTemplate").and_then(Value::as_str) else {
                continue;
            };
            routes.push((template.to_owned(), server));
            if let Ok(template) = serde_json::from_value::<ResourceTemplate>(item) {
                templates.push(template);
            }
        }
        *self
            .shared
            .template_routes
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = routes;
        Ok(ListResourceTemplatesResult::with_all_items(templates))
    }

    /// The server a resource URI goes to: the one that listed it, else the first (spec order)
    /// with a template that can expand to it (`uri_template.rs`), else the only server with
    /// resources. A later server's template, however specific, never takes a URI an earlier
    /// server's template makes: which template the client expanded is unknown, and the spec
    /// order settles every such tie (as for names and listed URIs).
    pub(super) fn resource_server(&self, uri: &str) -> Option<String> {
        if let Some((server, _)) = self.app_resource(uri) {
            return Some(server);
        }
        if let Some(server) = self.listed_server(uri) {
            return Some(server);
        }
        if uri.starts_with(GATEWAY_URI_SCHEME) {
            return None;
        }
        match self.shared.declaring("resources").as_slice() {
            [only] => Some(only.clone()),
            _ => None,
        }
    }

    /// The server that listed `uri`, else the first (spec order) with a template that can
    /// expand to it.
    pub(super) fn listed_server(&self, uri: &str) -> Option<String> {
        if uri.starts_with(GATEWAY_URI_SCHEME) {
            // The gateway's own (`budget.rs`): never a server's, whatever it lists.
            return None;
        }
        let routes = self
            .shared
            .resource_routes
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(server) = routes.get(uri) {
            return Some(server.clone());
        }
        drop(routes);
        let templates = self
            .shared
            .template_routes
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        templates
            .iter()
            .find(|(template, _)| crate::uri_template::fits(template, uri))
            .map(|(_, server)| server.clone())
    }

    /// An app's resource as the gateway offers it (`ui://SERVER__…`, `apps.rs`): the server
    /// it names and the server's own URI — listed or not.
    pub(super) fn app_resource(&self, uri: &str) -> Option<(String, String)> {
        crate::apps::own_uri(self.shared.supervisor.order(), uri)
            .map(|(server, own)| (server.to_owned(), own))
    }

    /// Lists `method` on every server with resources, merges, and records the routes.
    pub(super) async fn list_resources_everywhere(
        &self,
        method: &str,
        key: &str,
    ) -> Vec<(String, Value)> {
        let shared = &self.shared;
        let resource_servers = shared.declaring("resources");
        let listed =
            futures_util::future::join_all(resource_servers.iter().map(|server| async move {
                let runtime = shared.supervisor.runtime(server, method)?;
                list_all(&runtime, server, method, key, shared.call_timeout).await
            }))
            .await;
        let mut merged = Vec::new();
        for (server, listed) in resource_servers.iter().zip(listed) {
            match listed {
                Ok(items) => merged.extend(items.into_iter().map(|item| (server.clone(), item))),
                Err(error) => tracing::warn!(
                    server = %server,
                    "{method} failed: {}",
                    shared.mask(&error.to_string())
                ),
            }
        }
        merged.retain(|(server, item)| {
            let uri = item
                .get("uri")
                .or_else(|| item.get("uriTemplate"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            if uri.starts_with(GATEWAY_URI_SCHEME) {
                tracing::warn!(server = %server, "a resource under {GATEWAY_URI_SCHEME}, the gateway's own scheme, is left out");
                return false;
            }
            let name = item
                .get("name")
                .or_else(|| item.get("uri"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            let policy = shared.policy(server).scan;
            scanned(policy, server, "resource", name, item, &HashSet::new()).is_none()
        });
        for (_, item) in &mut merged {
            mask_value(&shared.masker(), item);
        }
        merged
    }

    /// `resources/read` of the gateway's own URI: a kept result of this connection.
    pub(super) fn read_kept(
        &self,
        uri: &str,
        target: &str,
    ) -> Result<ReadResourceResponse, ErrorData> {
        const METHOD: &str = "resources/read";
        let read = match uri.strip_prefix(RESULTS_URI_PREFIX) {
            Some(id) => self.shared.results.read(&self.session, id),
            None => Err(ReadFailure::Unknown),
        };
        let outcome = if read.is_ok() {
            Outcome::Ok
        } else {
            Outcome::Refused
        };
        self.shared.audit(&Record {
            session: &self.session,
            method: METHOD,
            server: None,
            target,
            duration: Duration::ZERO,
            outcome,
            arguments: None,
            result: None,
            findings: &[],
        });
        let whole = read.map_err(|failure| {
            let message = match failure {
                ReadFailure::Unknown => format!(
                    "no result {uri} in this session: a tether://results link is read in the session whose tool call made it, while the session lasts"
                ),
                ReadFailure::Dropped => format!(
                    "the result {uri} was dropped to keep the gateway's kept results under {} MiB (the oldest go first); call the tool again",
                    self.shared.budget.stored_bytes / (1024 * 1024)
                ),
            };
            ErrorData::resource_not_found(message, None)
        })?;
        let contents = crate::budget::contents_of(uri, &whole);
        serde_json::from_value::<ReadResourceResult>(json!({ "contents": contents }))
            .map(Into::into)
            .map_err(|e| ErrorData::internal_error(format!("a kept result: {e}"), None))
    }

    /// Forwards `resources/subscribe` or `resources/unsubscribe` to the URI's server.
    pub(super) async fn pass_subscription(
        &self,
        method: &str,
        uri: &str,
        params: Value,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let Some(server) = self.resource_server(uri) else {
            return Err(ErrorData::invalid_params(
                "no server behind this gateway listed this resource URI",
                None,
            ));
        };
        let mut params = params;
        if let Some((_, own)) = self.app_resource(uri) {
            params["uri"] = Value::String(own);
        }
        let (answer, _) = self.forward(&server, method, params, context).await;
        answer.map_err(|e| self.shared.error_for(&e))?;
        if method == "resources/subscribe" {
            self.shared
                .clients
                .subscribe(uri, &self.session, &context.peer);
        } else {
            self.shared.clients.unsubscribe(uri, &self.session);
        }
        Ok(())
    }

    pub(super) async fn read_resource_now(
        &self,
        request: ReadResourceRequestParams,
        mut context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        mark_received(&mut context);
        const METHOD: &str = "resources/read";
        let target = uri_target(&request.uri);
        if request.uri.starts_with(GATEWAY_URI_SCHEME) {
            return self.read_kept(&request.uri, &target);
        }
        let app = self.app_resource(&request.uri);
        if app.is_none()
            && self.listed_server(&request.uri).is_none()
            && self.shared.supervisor.any_pending()
        {
            // A server still starting may be the one: wait for them all (within the call
            // timeout), then list again to learn who offers what.
            tracing::debug!(
                "resources/read of a URI no ready server listed: waiting for the pending servers"
            );
            let left = self
                .shared
                .call_timeout
                .saturating_sub(received_at(&context).elapsed());
            self.shared.supervisor.all_joined(left).await;
            let _ = self.list_resources(None, context.clone()).await;
            let _ = self.list_resource_templates(None, context.clone()).await;
        }
        let Some(server) = self.resource_server(&request.uri) else {
            let mut refused = self.refuse(
                METHOD,
                &target,
                "no server behind this gateway listed this resource URI (list resources or templates first)".to_owned(),
            );
            // The URI the client sent: nothing a server said.
            refused.data = Some(json!({ "uri": request.uri }));
            return Err(refused);
        };
        let mut params = serde_json::to_value(&request).unwrap_or_else(|_| json!({}));
        if let Some((_, own)) = &app {
            // The server's own URI; a pending or lazy server is waited for, as for a call.
            params["uri"] = Value::String(own.clone());
        }
        let (mut answer, duration) = self.forward(&server, METHOD, params, &context).await;
        if let Ok(value) = &mut answer {
            self.scan_answer(METHOD, &target, &server, value)?;
            crate::apps::offer_contents(value, &server);
        }
        self.record_forwarded(METHOD, (&server, &target), duration, None, &answer);
        let value = answer.map_err(|e| {
            let mut error = self.shared.error_for(&e);
            // A server's error data does not come through; a URI it did not find is named
            // with the one the client sent.
            if matches!(
                error.code,
                ErrorCode::INVALID_PARAMS | ErrorCode::RESOURCE_NOT_FOUND
            ) {
                error.data = Some(json!({ "uri": request.uri }));
            }
            error
        })?;
        serde_json::from_value::<ReadResourceResult>(value)
            .map(Into::into)
            .map_err(|e| ErrorData::internal_error(format!("not an MCP resource: {e}"), None))
    }
}
