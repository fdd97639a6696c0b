//! Tasks (SEP-2663, `io.modelcontextprotocol/tasks`): the pipeline's task layer, between the
//! forward and the shaping of a `tools/call` answer (`tools.rs`), and the `tasks/*` methods.
//!
//! - The gateway declares the extension to its clients, always: it can hold a task whatever
//!   its servers speak. rmcp gates `tasks/get`, `tasks/update` and `tasks/cancel` on the
//!   request's declaration (-32021 without it); `tasks/result` and `tasks/list` (removed in
//!   SEP-2663) are unknown methods (-32601).
//! - A call of a client that declared Tasks (at `initialize`, or per request in `_meta`) is
//!   forwarded declaring Tasks to the server for that request ([`tether_driver::declare_tasks`]).
//!   When the server answers with a task, the gateway **holds** it ([`GatewayHandler::hold`]):
//!   the client gets a task of the gateway's own — a fresh random id in rmcp's
//!   [`TaskManager`], mapped to the server and the server's id, which the client never sees
//!   — so no client can poll or cancel another server's task by its id, and a task is found
//!   only by the connection that created it (every 2026-07-28 client shares one owner, as
//!   they share cut results: they have no session; the id, 122 random bits, is the secret).
//!   Its follower polls the server's `tasks/get` at the server's `pollIntervalMs`: a question
//!   the server's task asks (`inputRequests`) becomes the gateway task's, under the server's
//!   key; the client's answers (`tasks/update`) go back as the server's `tasks/update`; a
//!   `tasks/cancel` is passed on and the task settles as the server says; the result is
//!   shaped as a direct call's (masked, scanned, cut to the budget) and audited.
//! - A server that cannot be asked any more (stopped, restarted: its task id unknown to it)
//!   fails the task with an error saying so; the task never hangs past its TTL.
//! - A client without Tasks gets what SEP-2663 says it gets: a 2026-07-28 client the server's
//!   own answer (a sync result, or -32021 for a tool that needs Tasks, which it can retry
//!   declaring them per request). A client of a session revision (2025-11-25 and before)
//!   cannot declare Tasks at all, so for a tool whose server answers -32021 the gateway
//!   **bridges** ([`GatewayHandler::follow`]): it calls again declaring Tasks, follows the
//!   server's task itself within the call timeout, puts the task's questions to the client as
//!   the server's own requests, cancels it when the client cancels, and answers with the
//!   final result.

use std::collections::HashSet;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use rmcp::model::{CallToolResult, CreateTaskResult, InputRequest, ServerRequest};
use rmcp::service::RequestContext;
use rmcp::task_manager::{TaskContext, TaskExit, TaskOptions};
use rmcp::{ErrorData, RoleServer};
use serde::Deserialize as _;
use serde_json::{Value, json};
use tether_driver::{DriverError, ServerTask, TaskSeen};

use super::GatewayHandler;
use crate::audit::Outcome;
use crate::rounds::modern;

/// A task's time to live when its server gives none.
const DEFAULT_TTL_MS: u64 = rmcp::task_manager::DEFAULT_TASK_TTL_MS;

/// A server's task being held: the server, and the task there.
struct Held {
    server: String,
    task: ServerTask,
}

impl GatewayHandler {
    /// Whose tasks a request of `context` sees: its connection's, or every 2026-07-28
    /// client's.
    fn task_owner(&self, context: &RequestContext<RoleServer>) -> Arc<str> {
        if modern(context) {
            super::pipeline::stateless_owner(context)
        } else {
            Arc::clone(&self.session)
        }
    }

    /// Asks the server of `held` `method` about its task, the answer masked.
    async fn ask_server(
        &self,
        held: &Held,
        method: &str,
        params: Value,
    ) -> Result<Value, DriverError> {
        let runtime = self.shared.supervisor.runtime(&held.server, method)?;
        let timeout = self.shared.call_timeout;
        let mut answer = runtime
            .ask_about_task(&held.server, method, params, timeout)
            .await?;
        crate::redact::mask_value(&self.shared.masker(), &mut answer);
        Ok(answer)
    }

    /// One look at a held task's server task: what it says, `None` after a failure that may
    /// pass, or the error once it is lost.
    async fn look(&self, held: &Held, failures: &mut u32) -> Result<Option<TaskSeen>, ErrorData> {
        let lost = |error: DriverError| {
            ErrorData::internal_error(
                format!(
                    "server '{}' can no longer say how its task went (it stopped or restarted while the task ran): {}",
                    held.server,
                    self.shared.mask(&error.to_string())
                ),
                None,
            )
        };
        let runtime = match self.shared.supervisor.runtime(&held.server, "tasks/get") {
            Ok(runtime) => runtime,
            Err(error) => {
                *failures += 1;
                if *failures >= tether_driver::TASK_LOST_AFTER {
                    return Err(lost(error));
                }
                return Ok(None);
            }
        };
        let timeout = self.shared.call_timeout;
        let mut seen = runtime
            .look_at_task(&held.server, &held.task, timeout, failures)
            .await
            .map_err(lost)?;
        let masker = self.shared.masker();
        match &mut seen {
            Some(TaskSeen::Asking(questions)) => {
                for (_, question) in questions.iter_mut() {
                    crate::redact::mask_value(&masker, question);
                }
            }
            Some(TaskSeen::Completed(value) | TaskSeen::Failed(value)) => {
                crate::redact::mask_value(&masker, value);
            }
            _ => {}
        }
        Ok(seen)
    }

    /// A client with Tasks: the server's task `created` (its `CreateTaskResult`) held as one
    /// of the gateway's, whose handle the client gets.
    pub(super) fn hold(
        &self,
        server: &str,
        tool: &str,
        created: &Value,
        context: &RequestContext<RoleServer>,
    ) -> Result<CreateTaskResult, ErrorData> {
        let task = ServerTask::read(created).ok_or_else(|| {
            ErrorData::internal_error(
                format!("server '{server}' answered with a task that is not SEP-2663"),
                None,
            )
        })?;
        let held = Held {
            server: server.to_owned(),
            task,
        };
        let owner = self.task_owner(context);
        let options = TaskOptions::new()
            .with_ttl_ms(held.task.ttl_ms.or(Some(DEFAULT_TTL_MS)))
            .with_poll_interval_ms(u64::try_from(held.task.poll.as_millis()).unwrap_or(u64::MAX));
        let handler = self.clone();
        let tool = tool.to_owned();
        let started = Instant::now();
        let gateway_task = self
            .shared
            .tasks
            .manager
            .spawn(options, move |gateway_task| {
                Box::pin(async move {
                    let ended = handler.follow_held(&held, &gateway_task).await;
                    handler.settled(&held, &tool, started, &ended);
                    ended
                })
            });
        self.shared.tasks.own(gateway_task.task_id.clone(), owner);
        Ok(CreateTaskResult::new(gateway_task))
    }

    /// The follower of a held task: the server's task asked about until it ends, its
    /// questions and the client's answers and cancellation passed between them.
    async fn follow_held(
        &self,
        held: &Held,
        gateway_task: &TaskContext,
    ) -> Result<CallToolResult, TaskExit> {
        let (answers, mut answered) = tokio::sync::mpsc::unbounded_channel::<(String, Value)>();
        let task_id = held.task.id.clone();
        let mut asked = HashSet::new();
        let mut cancel_sent = false;
        let mut failures = 0;
        loop {
            tokio::select! {
                () = gateway_task.cancelled(), if !cancel_sent => {
                    cancel_sent = true;
                    if let Err(error) = self.ask_server(held, "tasks/cancel", json!({"taskId": task_id})).await {
                        tracing::debug!(server = %held.server, "tasks/cancel: {}", self.shared.mask(&error.to_string()));
                    }
                }
                Some((key, answer)) = answered.recv() => {
                    let responses = json!({"taskId": task_id, "inputResponses": {key: answer}});
                    if let Err(error) = self.ask_server(held, "tasks/update", responses).await {
                        tracing::debug!(server = %held.server, "tasks/update: {}", self.shared.mask(&error.to_string()));
                    }
                }
                () = tokio::time::sleep(held.task.poll) => {}
            }
            match self.look(held, &mut failures).await? {
                None | Some(TaskSeen::Working) => {}
                Some(TaskSeen::Asking(questions)) => {
                    for (key, question) in questions {
                        if !asked.insert(key.clone()) {
                            continue;
                        }
                        let Ok(question) = InputRequest::deserialize(&question) else {
                            tracing::debug!(server = %held.server, "a task's question that is not MCP was left unasked");
                            continue;
                        };
                        let gateway_task = gateway_task.clone();
                        let answers = answers.clone();
                        tokio::spawn(async move {
                            // A cancelled task's question is never answered.
                            if let Ok(answer) =
                                gateway_task.request_input(key.clone(), question).await
                            {
                                let _ = answers.send((key, answer));
                            }
                        });
                    }
                }
                Some(TaskSeen::Completed(result)) => {
                    return Ok(self.shape_task_result(&held.server, result));
                }
                Some(TaskSeen::Failed(error)) => {
                    let error = ErrorData::deserialize(&error).unwrap_or_else(|_| {
                        ErrorData::internal_error("the server's task failed and said no more", None)
                    });
                    return Err(TaskExit::Error(error));
                }
                Some(TaskSeen::Cancelled) => return Err(TaskExit::Cancelled),
            }
        }
    }

    /// A finished task's result as a direct call's: scanned for credential shapes (masked
    /// already) and cut to the output budget.
    fn shape_task_result(&self, server: &str, result: Value) -> CallToolResult {
        let result = self.scan_call_result(server, "a task", result, &mut Vec::new());
        match CallToolResult::deserialize(&result) {
            Ok(parsed) => self.within_budget(parsed, result),
            Err(error) => CallToolResult::error(vec![rmcp::model::ContentBlock::text(format!(
                "server '{server}' ended its task with a result that is not MCP: {error}"
            ))]),
        }
    }

    /// The audit record of a held task that ended.
    fn settled(
        &self,
        held: &Held,
        tool: &str,
        started: Instant,
        ended: &Result<CallToolResult, TaskExit>,
    ) {
        let (outcome, result) = match ended {
            Ok(result) if result.is_error == Some(true) => {
                (Outcome::ToolError, serde_json::to_value(result).ok())
            }
            Ok(result) => (Outcome::Ok, serde_json::to_value(result).ok()),
            Err(TaskExit::Cancelled) => (Outcome::Cancelled, None),
            Err(TaskExit::Error(_)) => (Outcome::Error, None),
        };
        let call = (held.server.as_str(), tool, started.elapsed());
        self.audit_call(call, outcome, None, result.as_ref(), &[]);
    }

    /// A client without Tasks (a session revision's, or a script): the server's task
    /// `created` followed to its end within the call timeout (`McpRuntime::follow_task`),
    /// its questions put to the client as the server's own requests, cancelled when the
    /// client cancels. The final result, masked, as a direct call's answer.
    pub(super) async fn follow(
        &self,
        server: &str,
        created: &Value,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, DriverError> {
        let runtime = self.shared.supervisor.runtime(server, "tools/call")?;
        let left = self
            .shared
            .call_timeout
            .saturating_sub(super::pipeline::received_at(context).elapsed())
            .max(Duration::from_millis(1));
        let peer = context.peer.clone();
        let masker = self.shared.masker();
        let ask = |mut question: Value| {
            crate::redact::mask_value(&masker, &mut question);
            let peer = peer.clone();
            async move {
                let request = ServerRequest::deserialize(&question).map_err(|e| e.to_string())?;
                let answer = peer
                    .send_request(request)
                    .await
                    .map_err(|e| e.to_string())?;
                serde_json::to_value(answer).map_err(|e| e.to_string())
            }
        };
        let mut answer = runtime
            .follow_task(server, created, left, context.ct.cancelled(), ask)
            .await?;
        crate::redact::mask_value(&masker, &mut answer);
        Ok(answer)
    }

    /// Whether `server` declared the Tasks extension when it joined.
    pub(super) fn server_has_tasks(&self, server: &str) -> bool {
        self.shared
            .declared
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(server)
            .and_then(|capabilities| capabilities.get("extensions"))
            .is_some_and(|extensions| extensions.get(rmcp::model::TASKS_EXTENSION_ID).is_some())
    }

    /// A client with Tasks calling `tool` of `server`, which has none: the call (`params`, as
    /// forwarded) runs as a task the gateway holds — the server's requests during it become
    /// the task's questions, its limit the task's time to live, its result shaped, scanned,
    /// cut and audited as a direct call's. The client gets the result in place when the call
    /// ends within `after` without asking anything, else the task: at `after`, or at the
    /// first question (which the client can only answer through the task).
    pub(super) async fn call_held(
        &self,
        call: (&str, &str),
        params: Value,
        arguments: Option<Value>,
        found: Vec<&'static str>,
        after: Duration,
        context: &RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, ErrorData> {
        let (server, tool) = (call.0.to_owned(), call.1.to_owned());
        let capabilities = context
            .client_capabilities()
            .and_then(|capabilities| serde_json::to_value(capabilities).ok())
            .unwrap_or(Value::Null);
        let (asker, mut asked) = crate::rounds::Asker::for_task(capabilities);
        let ttl = Duration::from_millis(DEFAULT_TTL_MS);
        let mut running = context.clone();
        running.ct = tokio_util::sync::CancellationToken::new();
        running.extensions.insert(asker);
        running.extensions.insert(crate::tasks::CallLimit(ttl));
        super::pipeline::mark_received_now(&mut running);
        // The call runs on its own, shaped and audited as a direct call's; it becomes a task
        // only when it is promoted (nothing is kept for a call answered in place).
        let cancel = running.ct.clone();
        let handler = self.clone();
        let mut call = tokio::spawn(async move {
            let forward =
                handler.forward_with_progress(&server, "tools/call", params, &running, None);
            let (answer, duration) = forward.await;
            let mut found = found;
            let answer =
                answer.map(|value| handler.scan_call_result(&server, &tool, value, &mut found));
            let (outcome, response) = handler.call_answer(&server, answer);
            let result_value = response.as_ref().ok().map(|(_, value)| value);
            let record = (server.as_str(), tool.as_str(), duration);
            handler.audit_call(record, outcome, arguments.as_ref(), result_value, &found);
            (
                outcome,
                response.map(|(result, value)| handler.within_budget(result, value)),
            )
        });
        let lost = || ErrorData::internal_error("the call ended without an answer", None);
        let first = tokio::select! {
            ended = &mut call => {
                // Ended in time, asking nothing: answered in place.
                return ended.map_err(|_| lost())?.1.map(Into::into);
            }
            question = asked.recv() => match question {
                Some(question) => Some(question),
                // Every asker gone: the call has ended.
                None => return (&mut call).await.map_err(|_| lost())?.1.map(Into::into),
            },
            () = tokio::time::sleep(after) => None,
            () = context.ct.cancelled() => {
                cancel.cancel();
                return Err(ErrorData::internal_error("the call was cancelled", None));
            }
        };
        let options = TaskOptions::new().with_ttl_ms(DEFAULT_TTL_MS);
        let gateway_task = self
            .shared
            .tasks
            .manager
            .spawn(options, move |gateway_task| {
                Box::pin(async move {
                    // The server's requests during the call: the task's questions, keyed in order.
                    let relay = tokio::spawn(relay_questions(gateway_task.clone(), first, asked));
                    let ended = tokio::select! {
                        ended = &mut call => ended,
                        () = gateway_task.cancelled() => {
                            // Passed on as the client's cancellation of the call would be.
                            cancel.cancel();
                            (&mut call).await
                        }
                    };
                    relay.abort();
                    match ended {
                        Ok((_, Ok(result))) => Ok(result),
                        Ok((Outcome::Cancelled, Err(_))) => Err(TaskExit::Cancelled),
                        Ok((_, Err(error))) => Err(TaskExit::Error(error)),
                        Err(_) => Err(TaskExit::Error(lost())),
                    }
                })
            });
        let id = gateway_task.task_id.clone();
        self.shared.tasks.own(id, self.task_owner(context));
        Ok(CreateTaskResult::new(gateway_task).into())
    }

    /// `tasks/get`: a held task's state, for its own connection only.
    pub(super) fn task_state(
        &self,
        task_id: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, ErrorData> {
        self.shared
            .tasks
            .owned(task_id, &self.task_owner(context))?;
        let task = self.shared.tasks.manager.get_task(task_id)?;
        Ok(rmcp::model::GetTaskResult::new(task))
    }

    /// `tasks/update`: the client's answers to a held task's questions.
    pub(super) fn task_answers(
        &self,
        task_id: &str,
        answers: rmcp::model::InputResponses,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.shared
            .tasks
            .owned(task_id, &self.task_owner(context))?;
        self.shared.tasks.manager.update_task(task_id, answers)
    }

    /// `tasks/cancel`: passed on to the server; the task settles as the server says.
    pub(super) fn task_cancel(
        &self,
        task_id: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.shared
            .tasks
            .owned(task_id, &self.task_owner(context))?;
        self.shared.tasks.manager.cancel_task(task_id)
    }
}

/// Puts a held call's questions to its task (`first`, then every one `asked` brings), keyed
/// `input-1`, `input-2`, … in order; each answer (or the task's cancellation) goes back to the
/// server's request.
async fn relay_questions(
    task: TaskContext,
    first: Option<crate::rounds::Asked>,
    mut asked: tokio::sync::mpsc::UnboundedReceiver<crate::rounds::Asked>,
) {
    let mut number = 0;
    let mut next = first;
    loop {
        let question = match next.take() {
            Some(question) => question,
            None => match asked.recv().await {
                Some(question) => question,
                None => return,
            },
        };
        number += 1;
        let task = task.clone();
        tokio::spawn(async move {
            let answer = task
                .request_input(format!("input-{number}"), question.request)
                .await
                .map_err(|_| tether_driver::RequestRefused {
                    code: rmcp::model::ErrorCode::INTERNAL_ERROR.0,
                    message: "the task was cancelled before its question was answered".to_owned(),
                });
            let _ = question.reply.send(answer);
        });
    }
}
