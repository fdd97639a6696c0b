//! `tools/call`: the search tools, the status tool, or a call routed to its server — the
//! arguments scanned for secrets, the answer scanned, masked, audited and cut to the output
//! budget — with the server's progress passed on.

use crate::catalogue::CATALOGUE_MARKER;
use crate::rounds::modern;
use rmcp::model::{CacheScope, ListToolsResult};
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde::Deserialize as _;
use serde_json::{Value, json};
use tether_driver::DriverError;

use super::GatewayHandler;
use super::pipeline::{mark_received, received_at};
use crate::audit::{Outcome, Record};
use crate::catalogue::{Catalogue, STATUS_TOOL};
use crate::redact::mask_value;
use crate::secret_scan::SecretScan;
use crate::tool_search::{CALL_TOOL, FIND_TOOLS, RUN_CODE};

/// The method this file serves.
const METHOD: &str = "tools/call";

/// A call admitted: the route to its server, its arguments as recorded (masked), and the
/// secret scan's findings in them.
struct Admitted {
    route: crate::names::Route,
    arguments: Option<Value>,
    found: Vec<&'static str>,
}

/// What the forward came to: the client's answer already (a task, or a refusal), or the
/// server's answer to shape.
enum Forwarded {
    Answered(Result<CallToolResponse, ErrorData>),
    Answer(Admitted, Result<Value, DriverError>, Duration),
}

/// The longest a `tools/call` answer waits for the server's progress notifications before it
/// to be passed on.
const PROGRESS_DRAIN: Duration = Duration::from_secs(1);

impl GatewayHandler {
    /// `tools/list`: the catalogue's tools (or, over the line transport, the marker it replaces).
    pub(super) async fn list_tools_now(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        if let Some(grace) = self.shared.first_list_grace
            && !self.listed.swap(true, std::sync::atomic::Ordering::SeqCst)
            && self.shared.supervisor.any_pending()
        {
            // A client that lists once: its first list waits for the servers to join, within
            // the grace, so it does not start with a silently partial toolset.
            tokio::select! {
                joined = self.shared.supervisor.all_joined(grace) => {
                    if !joined {
                        tracing::warn!(
                            "the client's first tools/list was answered after {} s with the servers not ready yet left out: {}",
                            grace.as_secs_f64(),
                            self.shared.supervisor.not_ready_yet().join(", ")
                        );
                    }
                }
                () = context.ct.cancelled() => {}
            }
        }
        if modern(context) {
            // The line transport's pre-serialized list has no room for the cache hints.
            let mut list =
                ListToolsResult::with_all_items(self.shared.catalogue().listed.as_ref().clone());
            list.ttl_ms = Some(self.shared.list_ttl_ms("tools"));
            list.cache_scope = Some(CacheScope::Private);
            return Ok(list);
        }
        if self.catalogue_marker {
            let mut marker = ListToolsResult::with_all_items(Vec::new());
            let mut meta = rmcp::model::MetaObject::new();
            meta.insert(CATALOGUE_MARKER.to_owned(), Value::Bool(true));
            marker.meta = Some(meta);
            return Ok(marker);
        }
        Ok(ListToolsResult::with_all_items(
            self.shared.catalogue().listed.as_ref().clone(),
        ))
    }

    /// When the client asked for progress (a `progressToken` in the request's `_meta`): a
    /// sender whose messages — the server's progress params — go to the client under the
    /// client's own token, in order, until the request ends.
    pub(super) fn pass_progress(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Option<(
        tokio::sync::mpsc::UnboundedSender<Value>,
        tokio::task::JoinHandle<()>,
    )> {
        let token = context.meta.get_progress_token()?;
        let token = serde_json::to_value(token).ok()?;
        let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel::<Value>();
        let peer = context.peer.clone();
        let masker = Arc::clone(&self.shared);
        let passing = tokio::spawn(async move {
            while let Some(mut params) = receiver.recv().await {
                params["progressToken"] = token.clone();
                mask_value(&masker.masker(), &mut params);
                match serde_json::from_value(params) {
                    Ok(params) => {
                        if peer.notify_progress(params).await.is_err() {
                            return;
                        }
                    }
                    Err(error) => {
                        tracing::debug!(%error, "a progress notification that is not MCP")
                    }
                }
            }
        });
        Some((sender, passing))
    }

    /// `result` (its JSON `value`, masked) as the client gets it: cut to the budget when it
    /// is over, the whole kept for this connection (`budget.rs`).
    pub(super) fn within_budget(&self, result: CallToolResult, value: Value) -> CallToolResult {
        let budget = &self.shared.budget;
        if crate::budget::result_bytes(&value) <= budget.max_bytes() {
            return result;
        }
        drop(result);
        let answer = crate::budget::apply(budget, &self.shared.results, &self.session, value);
        tracing::debug!(
            "a tool result over the budget of {} tokens was cut",
            budget.max_tokens
        );
        CallToolResult::deserialize(&answer).unwrap_or_else(|error| {
            CallToolResult::error(vec![ContentBlock::text(format!(
                "tether's gateway could not cut a result over its budget: {error}"
            ))])
        })
    }

    /// `tether__find_tools`'s answer: the offered tools that best match the request.
    pub(super) fn find_tools(
        &self,
        catalogue: &Catalogue,
        request: &CallToolRequestParams,
    ) -> CallToolResult {
        let arguments = request.arguments.clone().unwrap_or_default();
        let found = match &catalogue.index {
            Some(index) => crate::tool_search::find(index, &arguments, catalogue.code),
            None => Err("tool search is not on".to_owned()),
        };
        match found {
            Ok(found) => {
                // A lazy server whose tool was found starts now: it is likely to be called.
                let names = found["tools"].as_array().into_iter().flatten();
                for name in names.filter_map(|tool| tool["name"].as_str()) {
                    if let Some(server) = catalogue.server_of(name) {
                        self.shared
                            .supervisor
                            .wake(server, "one of its tools was found");
                    }
                }
                let mut found = found;
                let starting = self.shared.supervisor.not_ready_yet();
                if !starting.is_empty() {
                    found["starting"] = json!(starting);
                    found["note"] = json!(
                        "these servers are still starting, so their tools were not searched: ask again shortly (tether_status shows their state)"
                    );
                }
                let mut result =
                    CallToolResult::success(vec![ContentBlock::text(found.to_string())]);
                result.structured_content = Some(found);
                result
            }
            Err(message) => CallToolResult::error(vec![ContentBlock::text(message)]),
        }
    }

    /// `tether_status`'s answer: the supervisor's report as JSON text and structured content.
    pub(super) fn status(&self) -> CallToolResult {
        let catalogue = self.shared.catalogue();
        let offered = |server: &str| {
            catalogue
                .tools
                .iter()
                .filter(|tool| catalogue.server_of(&tool.name) == Some(server))
                .count()
        };
        let mut status = self.shared.supervisor.status(offered);
        if let Some(servers) = status["servers"].as_array_mut() {
            for server in servers {
                let name = server["name"].as_str().unwrap_or_default().to_owned();
                let mut withheld: Vec<&String> = catalogue
                    .withheld
                    .keys()
                    .filter(|n| catalogue.server_of(n) == Some(name.as_str()))
                    .collect();
                withheld.sort();
                server["withheld"] = json!(withheld);
            }
        }
        mask_value(&self.shared.masker(), &mut status);
        let mut result = CallToolResult::success(vec![ContentBlock::text(status.to_string())]);
        result.structured_content = Some(status);
        result
    }

    /// The audit record of a `tools/call` of `call` (server, tool on it, how long it took).
    pub(super) fn audit_call(
        &self,
        (server, target, duration): (&str, &str, Duration),
        outcome: Outcome,
        arguments: Option<&Value>,
        result: Option<&Value>,
        findings: &[&'static str],
    ) {
        self.shared.audit(&Record {
            session: &self.session,
            method: "tools/call",
            server: Some(server),
            target,
            duration,
            outcome,
            arguments,
            result,
            findings,
        });
    }

    /// How a forwarded call's answer (masked and scanned) ended, and what the client gets: the
    /// result with its JSON, or a protocol error; a server that broke off or is not running is
    /// a tool error the model can read.
    pub(super) fn call_answer(
        &self,
        server: &str,
        answer: Result<Value, DriverError>,
    ) -> (Outcome, Result<(CallToolResult, Value), ErrorData>) {
        match answer {
            Ok(value) => match CallToolResult::deserialize(&value) {
                Ok(result) => {
                    let outcome = if result.is_error == Some(true) {
                        Outcome::ToolError
                    } else {
                        Outcome::Ok
                    };
                    (outcome, Ok((result, value)))
                }
                Err(error) => (
                    Outcome::Error,
                    Err(ErrorData::internal_error(
                        format!(
                            "server '{server}' sent a tools/call result that is not MCP: {error}"
                        ),
                        None,
                    )),
                ),
            },
            Err(DriverError::Cancelled { .. }) => (
                Outcome::Cancelled,
                Err(ErrorData::internal_error("the call was cancelled", None)),
            ),
            Err(
                error @ (DriverError::RequestFailed { code: Some(_), .. }
                | DriverError::NeedsCapability { .. }),
            ) => (Outcome::Error, Err(self.shared.error_for(&error))),
            Err(error) => {
                // The server broke off or is not running: the model should read why.
                let text = self.shared.mask(&error.to_string());
                let result = CallToolResult::error(vec![ContentBlock::text(text)]);
                let value = serde_json::to_value(&result).unwrap_or(Value::Null);
                (Outcome::Error, Ok((result, value)))
            }
        }
    }

    /// A call's result (masked) scanned for credential shapes before the client sees it: the
    /// rules found added to `found`; withheld whole when the scan blocks.
    pub(super) fn scan_call_result(
        &self,
        server: &str,
        tool: &str,
        mut value: Value,
        found: &mut Vec<&'static str>,
    ) -> Value {
        let scan = self.shared.secret_scan;
        let in_result = crate::secret_scan::scan(&mut value, scan.results);
        crate::telemetry::secret_findings("results", &in_result);
        if in_result.is_empty() {
            return value;
        }
        let rules = in_result.join(", ");
        tracing::warn!(tool = %tool, server = %server, "the result of a call holds what looks like a secret ({rules})");
        for rule in &in_result {
            if !found.contains(rule) {
                found.push(rule);
            }
        }
        if scan.results != SecretScan::Block {
            return value;
        }
        let message = format!(
            "the result of this call held what looks like a secret ({rules}); this gateway does not pass it on (--secret-scan)"
        );
        serde_json::to_value(CallToolResult::error(vec![ContentBlock::text(message)]))
            .unwrap_or(Value::Null)
    }

    /// `tools/call`, stage by stage (`pipeline.rs`): the gateway's own tools answered here;
    /// then [`Self::admit_call`] (route, withheld tools, the secret scan of the arguments),
    /// [`Self::forward_call`] (the forward, with the task layer), [`Self::shape_call`] (scan,
    /// audit, budget).
    pub(super) async fn call_tool_now(
        &self,
        mut request: CallToolRequestParams,
        mut context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        mark_received(&mut context);
        if let Some(answered) = self.gateway_tool(&mut request, &context).await {
            return answered;
        }
        let admitted = match self.admit_call(&mut request, &context).await {
            Ok(admitted) => admitted,
            Err(refused) => return Ok(refused.into()),
        };
        match self.forward_call(&request, admitted, &mut context).await {
            Forwarded::Answered(answered) => answered,
            Forwarded::Answer(admitted, answer, duration) => {
                self.shape_call(&request, admitted, answer, duration, &context)
            }
        }
    }

    /// The gateway's own tools (`tether__find_tools`, `tether__run_code`, `tether_status`),
    /// answered here; `tether__call_tool` becomes the call of the tool it names. `None` for a
    /// call that goes to a server.
    async fn gateway_tool(
        &self,
        request: &mut CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Option<Result<CallToolResponse, ErrorData>> {
        if request.name == FIND_TOOLS {
            // Asked while servers are still starting (an agent's first search comes right
            // after start): wait for their first starts, within the call timeout, so the
            // search sees every tool it would see later; the answer names any still starting.
            let left = self
                .shared
                .call_timeout
                .saturating_sub(received_at(context).elapsed());
            tokio::select! {
                () = self.shared.supervisor.first_starts(left) => {}
                () = context.ct.cancelled() => {}
            }
        }
        if self.shared.catalogue().code && request.name == RUN_CODE {
            // The script's calls each take the path below (a direct call's), unbudgeted; the
            // run's answer is budgeted like any result.
            let (result, value) = self.run_code(request, context).await;
            return Some(Ok(self.within_budget(result, value).into()));
        }
        if self.shared.catalogue().searching {
            if request.name == FIND_TOOLS {
                // Twenty large definitions can be over the output budget like any result.
                let found = self.find_tools(&self.shared.catalogue(), request);
                let value = serde_json::to_value(&found).unwrap_or(Value::Null);
                return Some(Ok(self.within_budget(found, value).into()));
            }
            if request.name == CALL_TOOL {
                // The named tool takes the call's place: the same path as a direct call of it
                // (routing, withholding, masking, audit, budget).
                let arguments = request.arguments.take().unwrap_or_default();
                match crate::tool_search::call_target(&arguments) {
                    Ok((name, arguments)) => {
                        request.name = name.into();
                        request.arguments = arguments;
                    }
                    Err(message) => {
                        let refused = self.refuse(METHOD, CALL_TOOL, message);
                        let refused = vec![ContentBlock::text(refused.message)];
                        return Some(Ok(CallToolResult::error(refused).into()));
                    }
                }
            }
        }
        (request.name == STATUS_TOOL).then(|| Ok(self.status().into()))
    }

    /// **admit** and **route**: the server the name leads to (waiting for one still pending),
    /// unless the tool is withheld or unknown; the arguments scanned for credential shapes
    /// (refused when the scan blocks). A refusal is a tool error the model reads.
    async fn admit_call(
        &self,
        request: &mut CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<Admitted, CallToolResult> {
        let refused = |message: String| CallToolResult::error(vec![ContentBlock::text(message)]);
        let (catalogue, still_pending) = self.catalogue_for(&request.name, context).await;
        if let Some(reason) = catalogue.withheld.get(request.name.as_ref()) {
            return Err(refused(
                self.refuse(METHOD, &request.name, reason.clone())
                    .message
                    .to_string(),
            ));
        }
        let Some(route) = catalogue.tool_names.route(&request.name).cloned() else {
            // A tool error, not a protocol error: clients show it to the model, which can
            // then pick a listed name.
            let message = match still_pending {
                Some(server) => self.still_pending(&server),
                None => format!(
                    "no tool named '{}' behind this gateway; its tools are named SERVER__TOOL ({})",
                    request.name,
                    if catalogue.searching {
                        "find them with tether__find_tools"
                    } else {
                        "see tools/list"
                    }
                ),
            };
            return Err(refused(
                self.refuse(METHOD, &request.name, message)
                    .message
                    .to_string(),
            ));
        };
        // Credential shapes in the arguments, before the server sees them.
        let scan = self.shared.secret_scan;
        let mut found = Vec::new();
        if let Some(given) = request.arguments.take() {
            let mut given = Value::Object(given);
            found = crate::secret_scan::scan(&mut given, scan.arguments);
            crate::telemetry::secret_findings("arguments", &found);
            if let Value::Object(given) = given {
                request.arguments = Some(given);
            }
        }
        let mut arguments = request.arguments.clone().map(Value::Object);
        if let Some(arguments) = &mut arguments {
            mask_value(&self.shared.masker(), arguments);
        }
        if !found.is_empty() {
            let rules = found.join(", ");
            tracing::warn!(tool = %request.name, "the arguments of a call hold what looks like a secret ({rules})");
            if scan.arguments == SecretScan::Block {
                let message = format!(
                    "the arguments of this call hold what looks like a secret ({rules}); this gateway does not send it on (--secret-scan)"
                );
                let refusal = self.refuse_with(METHOD, &request.name, message, &found);
                return Err(refused(refusal.message.to_string()));
            }
        }
        Ok(Admitted {
            route,
            arguments,
            found,
        })
    }

    /// **forward**, with the task layer (`tasks.rs`): a client with Tasks gets the server's
    /// tasks, held by the gateway (or the call held as a task, for a server without Tasks);
    /// for one without (and for a script's call), a task is followed to its end. The server's
    /// progress is passed on before its answer.
    async fn forward_call(
        &self,
        request: &CallToolRequestParams,
        admitted: Admitted,
        context: &mut RequestContext<RoleServer>,
    ) -> Forwarded {
        let route = &admitted.route;
        let mut params = serde_json::to_value(request).unwrap_or_else(|_| json!({}));
        params["name"] = Value::String(route.name.clone());
        let scripted = super::code::scripted(context);
        let client_tasks = crate::tasks::declared(context) && !scripted;
        if client_tasks
            && let Some(after) = self.shared.task_after
            && !self.server_has_tasks(&route.server)
        {
            // A server without Tasks: the gateway holds the call as a task itself.
            let call = (route.server.as_str(), route.name.as_str());
            let Admitted {
                arguments, found, ..
            } = admitted;
            let held = self.call_held(call, params, arguments, found, after, context);
            return Forwarded::Answered(held.await);
        }
        if client_tasks {
            context.extensions.insert(crate::tasks::DeclareTasks);
        }
        let (progress, passing) = self.pass_progress(context).unzip();
        let (mut answer, mut duration) = self
            .forward_with_progress(&route.server, METHOD, params.clone(), context, progress)
            .await;
        if !client_tasks
            && (scripted || !modern(context))
            && answer.as_ref().is_err_and(crate::tasks::needs_capability)
        {
            // A tool its server runs only as a task, for a client that cannot declare Tasks:
            // again, declaring them, and the task followed here.
            context.extensions.insert(crate::tasks::DeclareTasks);
            (answer, duration) = self
                .forward_with_progress(&route.server, METHOD, params, context, None)
                .await;
        }
        match answer {
            Ok(created) if crate::tasks::is_task(&created) && client_tasks => {
                let held = match self.hold(&route.server, &route.name, &created, context) {
                    Ok(held) => held,
                    Err(error) => return Forwarded::Answered(Err(error)),
                };
                let handle = serde_json::to_value(&held).ok();
                let call = (route.server.as_str(), route.name.as_str(), duration);
                let arguments = admitted.arguments.as_ref();
                self.audit_call(
                    call,
                    Outcome::Ok,
                    arguments,
                    handle.as_ref(),
                    &admitted.found,
                );
                return Forwarded::Answered(Ok(CallToolResponse::Task(held)));
            }
            Ok(created) if crate::tasks::is_task(&created) => {
                answer = self.follow(&route.server, &created, context).await;
                duration = received_at(context).elapsed();
            }
            _ => {}
        }
        // The server's progress came before its answer: it reaches the client before it too
        // (a 2026-07-28 client's stream ends with the answer). The driver closes the route once
        // every progress read before the answer was handed over (`launch/progress.rs`), so this
        // waits for those, not for a grace.
        if let Some(passing) = passing {
            let _ = tokio::time::timeout(PROGRESS_DRAIN, passing).await;
        }
        Forwarded::Answer(admitted, answer, duration)
    }

    /// **shape** and **record**: the answer scanned for credential shapes, audited, and cut to
    /// the output budget (a script's call gets the whole; the run's answer is budgeted).
    fn shape_call(
        &self,
        request: &CallToolRequestParams,
        admitted: Admitted,
        answer: Result<Value, DriverError>,
        duration: Duration,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Admitted {
            route,
            arguments,
            mut found,
        } = admitted;
        let answer = answer
            .map(|value| self.scan_call_result(&route.server, &request.name, value, &mut found));
        let (outcome, response) = self.call_answer(&route.server, answer);
        let result_value = response.as_ref().ok().map(|(_, value)| value);
        let call = (route.server.as_str(), route.name.as_str(), duration);
        self.audit_call(call, outcome, arguments.as_ref(), result_value, &found);
        tracing::debug!(tool = %request.name, server = %route.server, ?duration, outcome = outcome.as_str(), "tools/call");
        if super::code::scripted(context) {
            return response.map(|(result, _)| result.into());
        }
        response.map(|(result, value)| self.within_budget(result, value).into())
    }
}
