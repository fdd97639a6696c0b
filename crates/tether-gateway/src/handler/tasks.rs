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

use rmcp::model::{CallToolResult, CreateTaskResult, ErrorCode, InputRequest, ServerRequest, Task};
use rmcp::service::RequestContext;
use rmcp::task_manager::{TaskContext, TaskExit, TaskOptions};
use rmcp::{ErrorData, RoleServer};
use serde::Deserialize as _;
use serde_json::{Value, json};
use tether_driver::DriverError;

use super::GatewayHandler;
use crate::audit::Outcome;
use crate::rounds::modern;
use crate::tasks::Seen;

/// How often a server's task is asked about when it suggests nothing.
const DEFAULT_POLL: Duration = Duration::from_millis(500);
/// The bounds on a server's suggested poll interval.
const POLL_BOUNDS: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(5));
/// A task's time to live when its server gives none.
const DEFAULT_TTL_MS: u64 = rmcp::task_manager::DEFAULT_TASK_TTL_MS;
/// Errors in a row after which a server's task counts as lost (a server that answers, but
/// not about this task — an unknown id, after a restart — loses it at once).
const LOST_AFTER: u32 = 3;

/// A server's task: where it runs, its id there, how often to ask.
struct ServerTask {
    server: String,
    id: String,
    poll: Duration,
    ttl_ms: Option<u64>,
}

impl ServerTask {
    fn read(server: &str, created: &Value) -> Result<Self, ErrorData> {
        let task = Task::deserialize(created).map_err(|error| {
            ErrorData::internal_error(
                format!("server '{server}' answered with a task that is not SEP-2663: {error}"),
                None,
            )
        })?;
        let poll = task
            .poll_interval_ms
            .map_or(DEFAULT_POLL, Duration::from_millis)
            .clamp(POLL_BOUNDS.0, POLL_BOUNDS.1);
        Ok(Self {
            server: server.to_owned(),
            id: task.task_id,
            poll,
            ttl_ms: task.ttl_ms,
        })
    }
}

impl GatewayHandler {
    /// Whose tasks a request of `context` sees: its connection's, or every 2026-07-28
    /// client's.
    fn task_owner(&self, context: &RequestContext<RoleServer>) -> Arc<str> {
        if modern(context) {
            Arc::from(super::pipeline::STATELESS_OWNER)
        } else {
            Arc::clone(&self.session)
        }
    }

    /// Asks `server` `method` about one of its tasks (Tasks declared), the answer masked.
    async fn ask_server(
        &self,
        server: &str,
        method: &str,
        mut params: Value,
    ) -> Result<Value, DriverError> {
        tether_driver::declare_tasks(&mut params);
        let runtime = self.shared.supervisor.runtime(server, method)?;
        let mut answer = runtime
            .forward(
                server,
                method,
                params,
                self.shared.call_timeout,
                std::future::pending(),
                None,
            )
            .await?;
        crate::redact::mask_value(&self.shared.masker(), &mut answer);
        Ok(answer)
    }

    /// The error a task gets when its server can no longer say how it went.
    fn lost(&self, task: &ServerTask, error: &DriverError) -> ErrorData {
        ErrorData::internal_error(
            format!(
                "server '{}' can no longer say how its task went (it stopped or restarted while the task ran): {}",
                task.server,
                self.shared.mask(&error.to_string())
            ),
            None,
        )
    }

    /// One look at a server's task: what it says, or an error once it is lost.
    async fn look(&self, task: &ServerTask, failures: &mut u32) -> Result<Option<Seen>, ErrorData> {
        match self
            .ask_server(&task.server, "tasks/get", json!({ "taskId": task.id }))
            .await
        {
            Ok(answer) => {
                *failures = 0;
                crate::tasks::seen(&answer).map(Some).map_err(|message| {
                    ErrorData::internal_error(
                        format!("server '{}' answered tasks/get with {message}", task.server),
                        None,
                    )
                })
            }
            Err(error) => {
                *failures += 1;
                let unknown = matches!(&error, DriverError::RequestFailed { code: Some(code), .. }
                    if *code == ErrorCode::INVALID_PARAMS.0);
                if unknown || *failures >= LOST_AFTER {
                    Err(self.lost(task, &error))
                } else {
                    tracing::debug!(server = %task.server, "tasks/get failed; asking again: {}", self.shared.mask(&error.to_string()));
                    Ok(None)
                }
            }
        }
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
        let task = ServerTask::read(server, created)?;
        let owner = self.task_owner(context);
        let options = TaskOptions::new()
            .with_ttl_ms(task.ttl_ms.or(Some(DEFAULT_TTL_MS)))
            .with_poll_interval_ms(u64::try_from(task.poll.as_millis()).unwrap_or(u64::MAX));
        let handler = self.clone();
        let tool = tool.to_owned();
        let started = Instant::now();
        let held = self
            .shared
            .tasks
            .manager
            .spawn(options, move |gateway_task| {
                Box::pin(async move {
                    let ended = handler.follow_held(&task, &gateway_task).await;
                    handler.settled(&task, &tool, started, &ended);
                    ended
                })
            });
        self.shared.tasks.prune();
        self.shared
            .tasks
            .owners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(held.task_id.clone(), owner);
        Ok(CreateTaskResult::new(held))
    }

    /// The follower of a held task: the server's task asked about until it ends, its
    /// questions and the client's answers and cancellation passed between them.
    async fn follow_held(
        &self,
        task: &ServerTask,
        held: &TaskContext,
    ) -> Result<CallToolResult, TaskExit> {
        let (answers, mut answered) = tokio::sync::mpsc::unbounded_channel::<(String, Value)>();
        let mut asked = HashSet::new();
        let mut cancel_sent = false;
        let mut failures = 0;
        loop {
            tokio::select! {
                () = held.cancelled(), if !cancel_sent => {
                    cancel_sent = true;
                    if let Err(error) = self.ask_server(&task.server, "tasks/cancel", json!({"taskId": task.id})).await {
                        tracing::debug!(server = %task.server, "tasks/cancel: {}", self.shared.mask(&error.to_string()));
                    }
                }
                Some((key, answer)) = answered.recv() => {
                    let responses = json!({"taskId": task.id, "inputResponses": {key: answer}});
                    if let Err(error) = self.ask_server(&task.server, "tasks/update", responses).await {
                        return Err(TaskExit::Error(self.lost(task, &error)));
                    }
                }
                () = tokio::time::sleep(task.poll) => {}
            }
            match self.look(task, &mut failures).await? {
                None | Some(Seen::Running) => {}
                Some(Seen::Asking(questions)) => {
                    for (key, question) in questions {
                        if !asked.insert(key.clone()) {
                            continue;
                        }
                        let Ok(question) = InputRequest::deserialize(&question) else {
                            tracing::debug!(server = %task.server, "a task's question that is not MCP was left unasked");
                            continue;
                        };
                        let held = held.clone();
                        let answers = answers.clone();
                        tokio::spawn(async move {
                            // A cancelled task's question is never answered.
                            if let Ok(answer) = held.request_input(key.clone(), question).await {
                                let _ = answers.send((key, answer));
                            }
                        });
                    }
                }
                Some(Seen::Done(result)) => {
                    let result = self.shape_task_result(&task.server, result);
                    return Ok(result);
                }
                Some(Seen::Failed(error)) => return Err(TaskExit::Error(error)),
                Some(Seen::Cancelled) => return Err(TaskExit::Cancelled),
            }
        }
    }

    /// A finished task's result as a direct call's: scanned for credential shapes (masked
    /// already) and cut to the output budget.
    fn shape_task_result(&self, server: &str, mut result: Value) -> CallToolResult {
        if let Some(fields) = result.as_object_mut() {
            // Not part of a tool result the client reads back from `tasks/get`.
            fields.remove("resultType");
        }
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
        task: &ServerTask,
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
        let call = (task.server.as_str(), tool, started.elapsed());
        self.audit_call(call, outcome, None, result.as_ref(), &[]);
    }

    /// A client without Tasks (a session revision's): the server's task `created` followed
    /// to its end within the call timeout, its questions put to the client as the server's
    /// own requests, cancelled when the client cancels. The final result, as a direct call's
    /// answer.
    pub(super) async fn follow(
        &self,
        server: &str,
        created: &Value,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, DriverError> {
        let failed = |message: String| DriverError::RequestFailed {
            server: server.to_owned(),
            method: "tools/call".to_owned(),
            code: None,
            message,
        };
        let task = ServerTask::read(server, created).map_err(|e| failed(e.message.to_string()))?;
        let deadline = super::pipeline::received_at(context) + self.shared.call_timeout;
        let cancel = async |handler: &Self| {
            let cancel = json!({"taskId": task.id});
            let _ = handler.ask_server(server, "tasks/cancel", cancel).await;
        };
        let mut asked = HashSet::new();
        let mut failures = 0;
        loop {
            tokio::select! {
                () = tokio::time::sleep(task.poll) => {}
                () = context.ct.cancelled() => {
                    cancel(self).await;
                    return Err(DriverError::Cancelled { server: server.to_owned(), method: "tools/call".to_owned() });
                }
                () = tokio::time::sleep_until(deadline.into()) => {
                    cancel(self).await;
                    return Err(failed(format!(
                        "the server's task did not end within the call timeout ({} s); it was cancelled",
                        self.shared.call_timeout.as_secs()
                    )));
                }
            }
            let seen = self
                .look(&task, &mut failures)
                .await
                .map_err(|e| failed(e.message.to_string()))?;
            match seen {
                None | Some(Seen::Running) => {}
                Some(Seen::Asking(questions)) => {
                    let mut responses = serde_json::Map::new();
                    for (key, question) in questions {
                        if !asked.insert(key.clone()) {
                            continue;
                        }
                        let answer = match ServerRequest::deserialize(&question) {
                            Ok(request) => context
                                .peer
                                .send_request(request)
                                .await
                                .map_err(|e| e.to_string()),
                            Err(error) => Err(error.to_string()),
                        };
                        match answer {
                            Ok(answer) => {
                                responses.insert(
                                    key,
                                    serde_json::to_value(answer).unwrap_or(Value::Null),
                                );
                            }
                            Err(error) => {
                                cancel(self).await;
                                return Err(failed(format!(
                                    "the server's task asked the client something it could not answer: {}",
                                    self.shared.mask(&error)
                                )));
                            }
                        }
                    }
                    if !responses.is_empty() {
                        let update = json!({"taskId": task.id, "inputResponses": responses});
                        self.ask_server(server, "tasks/update", update).await?;
                    }
                }
                Some(Seen::Done(mut result)) => {
                    if let Some(fields) = result.as_object_mut() {
                        fields.remove("resultType");
                    }
                    return Ok(result);
                }
                Some(Seen::Failed(error)) => {
                    return Err(DriverError::RequestFailed {
                        server: server.to_owned(),
                        method: "tools/call".to_owned(),
                        code: Some(error.code.0),
                        message: error.message.to_string(),
                    });
                }
                Some(Seen::Cancelled) => {
                    return Err(failed("the server cancelled its task".to_owned()));
                }
            }
        }
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
