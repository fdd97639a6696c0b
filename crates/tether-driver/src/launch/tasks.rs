//! Following a server's task (SEP-2663, `io.modelcontextprotocol/tasks`) to its end, for a
//! caller that wants the final result rather than a task: `tether call` on a tool its server
//! runs only as a task, and the gateway's bridge for clients that cannot declare Tasks.
//!
//! The task is asked about with `tasks/get` at the server's `pollIntervalMs` (SEP-2663's
//! notifications are optional and need `subscriptions/listen`); a question it asks
//! (`inputRequests`) is put to the caller's `ask` once per key and the answer sent back with
//! `tasks/update`; a cancellation, or the limit, cancels the server's task. A server that
//! answers -32602 (the id unknown to it: it restarted), or fails three times in a row, has
//! lost the task: an error says so.

use std::collections::HashSet;
use std::future::Future;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{McpRuntime, declare_tasks};
use crate::DriverError;

/// How often a server's task is asked about when it suggests nothing.
pub const DEFAULT_TASK_POLL: Duration = Duration::from_millis(500);
/// The bounds on a server's suggested poll interval.
const POLL_BOUNDS: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(5));
/// Errors in a row after which a server's task counts as lost.
pub const TASK_LOST_AFTER: u32 = 3;

/// A server's task as its `CreateTaskResult` (or `tasks/get`) gave it.
#[derive(Clone, Debug)]
pub struct ServerTask {
    /// The server's id for it.
    pub id: String,
    /// How often to ask about it (the server's suggestion, bounded).
    pub poll: Duration,
    /// Its time to live, when the server gave one.
    pub ttl_ms: Option<u64>,
}

impl ServerTask {
    /// Reads a `CreateTaskResult`; `None` when `created` is no task.
    pub fn read(created: &Value) -> Option<Self> {
        if created.get("resultType").and_then(Value::as_str) != Some("task") {
            return None;
        }
        let id = created.get("taskId")?.as_str()?.to_owned();
        let poll = created
            .get("pollIntervalMs")
            .and_then(Value::as_u64)
            .map_or(DEFAULT_TASK_POLL, Duration::from_millis)
            .clamp(POLL_BOUNDS.0, POLL_BOUNDS.1);
        let ttl_ms = created.get("ttlMs").and_then(Value::as_u64);
        Some(Self { id, poll, ttl_ms })
    }
}

/// What a server's `tasks/get` said.
#[derive(Debug)]
pub enum TaskSeen {
    /// Still working.
    Working,
    /// Asking: each question (`{"method", "params"}`) under its key.
    Asking(Vec<(String, Value)>),
    /// Ended with this result (a tool error too: `isError`).
    Completed(Value),
    /// Ended with this JSON-RPC error (`code`, `message`, `data`).
    Failed(Value),
    /// Ended, cancelled.
    Cancelled,
}

impl TaskSeen {
    /// Reads a `tasks/get` answer.
    pub fn read(answer: &Value) -> Result<Self, String> {
        Ok(match answer.get("status").and_then(Value::as_str) {
            Some("working") => Self::Working,
            Some("input_required") => Self::Asking(
                answer["inputRequests"]
                    .as_object()
                    .map(|asked| asked.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                    .unwrap_or_default(),
            ),
            Some("completed") => {
                let mut result = answer["result"].clone();
                if let Some(fields) = result.as_object_mut() {
                    // A tasks/get answer's inlined result is a tool result, not an answer.
                    fields.remove("resultType");
                }
                Self::Completed(result)
            }
            Some("failed") => Self::Failed(answer["error"].clone()),
            Some("cancelled") => Self::Cancelled,
            other => return Err(format!("a task status that is not SEP-2663: {other:?}")),
        })
    }
}

impl McpRuntime {
    /// `tools/call` of `params` on `server` declaring Tasks, within `timeout`: the result in
    /// place, or the task the server made followed to its end, its questions answered by the
    /// runtime's holder (as the server's own requests would be).
    pub(super) async fn call_tool_as_task(
        &self,
        server: &str,
        params: &rmcp::model::CallToolRequestParams,
        timeout: Duration,
    ) -> Result<Value, DriverError> {
        let started = Instant::now();
        let mut request = serde_json::to_value(params).unwrap_or_else(|_| json!({}));
        declare_tasks(&mut request);
        let answer = self
            .forward(
                server,
                "tools/call",
                request,
                timeout,
                std::future::pending(),
                None,
            )
            .await?;
        if ServerTask::read(&answer).is_none() {
            return Ok(answer);
        }
        let client = self.server(server)?.client.service().clone();
        let left = timeout.saturating_sub(started.elapsed());
        tracing::info!(
            server,
            "the server runs {} as a task; following it",
            params.name
        );
        self.follow_task(server, &answer, left, std::future::pending(), |question| {
            let client = client.clone();
            async move {
                let method = question["method"].as_str().unwrap_or_default().to_owned();
                let params = question.get("params").cloned().unwrap_or(Value::Null);
                client
                    .ask::<Value, Value>(&method, &params)
                    .await
                    .map_err(|error| error.message.to_string())
            }
        })
        .await
    }

    /// Asks `server` `method` (`tasks/get`, `tasks/update`, `tasks/cancel`) about one of its
    /// tasks, declaring Tasks; the answer masked.
    pub async fn ask_about_task(
        &self,
        server: &str,
        method: &str,
        mut params: Value,
        timeout: Duration,
    ) -> Result<Value, DriverError> {
        declare_tasks(&mut params);
        self.forward(
            server,
            method,
            params,
            timeout,
            std::future::pending(),
            None,
        )
        .await
    }

    /// One `tasks/get` of `task`: what it says; `Ok(None)` after a failure that may pass,
    /// an error once the task is lost (`failures` counts the failures in a row).
    pub async fn look_at_task(
        &self,
        server: &str,
        task: &ServerTask,
        timeout: Duration,
        failures: &mut u32,
    ) -> Result<Option<TaskSeen>, DriverError> {
        let lost = |message: String| DriverError::RequestFailed {
            server: server.to_owned(),
            method: "tasks/get".to_owned(),
            code: None,
            message: format!(
                "the server can no longer say how its task went (it stopped or restarted while the task ran): {message}"
            ),
        };
        match self
            .ask_about_task(server, "tasks/get", json!({ "taskId": task.id }), timeout)
            .await
        {
            Ok(answer) => {
                *failures = 0;
                TaskSeen::read(&answer).map(Some).map_err(lost)
            }
            Err(error) => {
                *failures += 1;
                let unknown = matches!(&error, DriverError::RequestFailed { code: Some(code), .. }
                    if *code == rmcp::model::ErrorCode::INVALID_PARAMS.0);
                if unknown || *failures >= TASK_LOST_AFTER {
                    return Err(lost(error.to_string()));
                }
                tracing::debug!(server, "tasks/get failed; asking again: {error}");
                Ok(None)
            }
        }
    }

    /// Follows `server`'s task `created` (its `CreateTaskResult`) to its end within `limit`,
    /// putting each question it asks to `ask` (the question as `{"method", "params"}`; the
    /// answer, or why there is none) and cancelling it when `cancelled` resolves or `limit`
    /// passes. The final result (a tool error too), or the task's error.
    pub async fn follow_task<Ask, Answer>(
        &self,
        server: &str,
        created: &Value,
        limit: Duration,
        cancelled: impl Future<Output = ()>,
        mut ask: Ask,
    ) -> Result<Value, DriverError>
    where
        Ask: FnMut(Value) -> Answer,
        Answer: Future<Output = Result<Value, String>>,
    {
        let failed = |code: Option<i32>, message: String| DriverError::RequestFailed {
            server: server.to_owned(),
            method: "tools/call".to_owned(),
            code,
            message,
        };
        let Some(task) = ServerTask::read(created) else {
            return Err(failed(None, "the server's task is not SEP-2663".to_owned()));
        };
        let deadline = Instant::now() + limit;
        let timeout = limit.max(Duration::from_secs(1));
        let cancel = async || {
            let cancel = json!({ "taskId": task.id });
            if let Err(error) = self
                .ask_about_task(server, "tasks/cancel", cancel, timeout)
                .await
            {
                tracing::debug!(server, "tasks/cancel: {error}");
            }
        };
        tokio::pin!(cancelled);
        let mut asked = HashSet::new();
        let mut failures = 0;
        loop {
            tokio::select! {
                () = tokio::time::sleep(task.poll) => {}
                () = cancelled.as_mut() => {
                    cancel().await;
                    return Err(DriverError::Cancelled {
                        server: server.to_owned(),
                        method: "tools/call".to_owned(),
                    });
                }
                () = tokio::time::sleep_until(deadline.into()) => {
                    cancel().await;
                    return Err(failed(None, format!(
                        "its task did not end within {} s; it was cancelled",
                        limit.as_secs()
                    )));
                }
            }
            match self
                .look_at_task(server, &task, timeout, &mut failures)
                .await?
            {
                None | Some(TaskSeen::Working) => {}
                Some(TaskSeen::Asking(questions)) => {
                    let mut responses = serde_json::Map::new();
                    for (key, question) in questions {
                        if !asked.insert(key.clone()) {
                            continue;
                        }
                        match ask(question).await {
                            Ok(answer) => {
                                responses.insert(key, answer);
                            }
                            Err(why) => {
                                cancel().await;
                                return Err(failed(
                                    None,
                                    format!(
                                        "its task asked something that could not be answered: {why}"
                                    ),
                                ));
                            }
                        }
                    }
                    if !responses.is_empty() {
                        let update = json!({"taskId": task.id, "inputResponses": responses});
                        self.ask_about_task(server, "tasks/update", update, timeout)
                            .await?;
                    }
                }
                Some(TaskSeen::Completed(result)) => return Ok(result),
                Some(TaskSeen::Failed(error)) => {
                    let code = error["code"].as_i64().and_then(|c| i32::try_from(c).ok());
                    let message = error["message"]
                        .as_str()
                        .unwrap_or("its task failed and said no more");
                    return Err(failed(code, message.to_owned()));
                }
                Some(TaskSeen::Cancelled) => {
                    return Err(failed(None, "the server cancelled its task".to_owned()));
                }
            }
        }
    }
}
