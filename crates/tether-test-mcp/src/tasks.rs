//! The conformance suite's Tasks fixtures (SEP-2663, `io.modelcontextprotocol/tasks`), served
//! by `--conformance` beside the requirement sets' tools, through rmcp's [`TaskManager`].
//!
//! The suite's scenario text names them; each decides for itself whether a call becomes a
//! task, from the capabilities the request declares (per request in `_meta`, else at
//! `initialize`):
//!
//! - `greet` — never a task: `Hello, {name}!`.
//! - `slow_compute` — a task when the client declared Tasks, else answered in place: sleeps
//!   `seconds` (0 for the immediate path) and answers `computed LABEL`. A `tasks/cancel` while
//!   it sleeps settles it as `cancelled`.
//! - `failing_job` — Tasks required (-32021 without them): a tool error after a second.
//! - `protocol_error_job` — a task ending in a protocol error (`failed`).
//! - `confirm_delete` — a task that asks one `elicitation/create` (in the task: `tasks/get`
//!   shows it under `inputRequests`) and completes with the answer.
//! - `multi_input` — a task that asks two at once.
//! - `test_tool_with_task` — Tasks required: asks the user's name through the client first
//!   (a 2025-11-25 server's own `elicitation/create`, which a gateway turns into an
//!   `InputRequiredResult` round), then answers with a task whose result holds the name.
//!
//! The sleeps here are the fixtures' behaviour (a slow tool), not synchronisation.

use std::time::Duration;

use rmcp::model::{
    CallToolResponse, CallToolResult, ClientCapabilities, ContentBlock, CreateTaskResult,
    InputRequest,
};
use rmcp::service::RequestContext;
use rmcp::task_manager::{TaskContext, TaskExit, TaskFuture, TaskManager, TaskOptions};
use rmcp::{ErrorData, RoleServer};
use serde_json::{Value, json};

/// The fixtures' `tools/list` entries.
pub fn tools() -> Vec<Value> {
    let object = |properties: Value, required: &[&str]| json!({"type": "object", "properties": properties, "required": required});
    vec![
        json!({"name": "greet", "description": "Greets someone (never a task)",
            "inputSchema": object(json!({"name": {"type": "string"}}), &["name"])}),
        json!({"name": "slow_compute", "description": "Sleeps `seconds`, then answers; a task for clients with Tasks",
            "inputSchema": object(json!({"seconds": {"type": "number"}, "label": {"type": "string"}}), &[])}),
        json!({"name": "failing_job", "description": "A task (required) that ends in a tool error",
            "inputSchema": object(json!({}), &[])}),
        json!({"name": "protocol_error_job", "description": "A task that ends in a protocol error",
            "inputSchema": object(json!({}), &[])}),
        json!({"name": "confirm_delete", "description": "A task that asks for a confirmation first",
            "inputSchema": object(json!({"filename": {"type": "string"}}), &[])}),
        json!({"name": "multi_input", "description": "A task that asks two questions at once",
            "inputSchema": object(json!({}), &[])}),
        json!({"name": "test_tool_with_task", "description": "Asks your name, then answers with a task (required)",
            "inputSchema": object(json!({}), &[])}),
    ]
}

/// Whether `name` is one of the fixtures here.
pub fn serves(name: &str) -> bool {
    tools().iter().any(|tool| tool["name"] == name)
}

fn said(text: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text.into())])
}

fn tasks_required() -> ErrorData {
    ErrorData::missing_required_client_capability(
        ClientCapabilities::builder().enable_tasks().build(),
    )
}

fn declared_tasks(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .is_some_and(|capabilities| capabilities.supports_tasks())
}

fn elicitation(message: &str, properties: Value) -> Result<InputRequest, ErrorData> {
    serde_json::from_value(json!({
        "method": "elicitation/create",
        "params": {"message": message, "requestedSchema": {"type": "object", "properties": properties}},
    }))
    .map_err(|e| ErrorData::internal_error(e.to_string(), None))
}

/// Asks in the task; `cancelled` when a `tasks/cancel` dropped the question.
async fn ask(task: &TaskContext, key: &str, request: InputRequest) -> Result<Value, TaskExit> {
    task.request_input(key, request).await
}

/// Sleeps `seconds`, or stops at a `tasks/cancel`.
async fn slept(task: &TaskContext, seconds: f64) -> Result<(), TaskExit> {
    tokio::select! {
        () = tokio::time::sleep(Duration::from_secs_f64(seconds.clamp(0.0, 600.0))) => Ok(()),
        () = task.cancelled() => Err(TaskExit::Cancelled),
    }
}

/// The fixture `name`'s answer.
pub async fn call(
    manager: &TaskManager,
    name: &str,
    arguments: &Value,
    context: &RequestContext<RoleServer>,
) -> Result<CallToolResponse, ErrorData> {
    let tasks = declared_tasks(context);
    let seconds = arguments["seconds"].as_f64().unwrap_or(1.0);
    let label = arguments["label"].as_str().unwrap_or("job").to_owned();
    let spawn = |make: Box<dyn FnOnce(TaskContext) -> TaskFuture + Send>| {
        let task = manager.spawn(TaskOptions::new(), make);
        Ok(CallToolResponse::Task(CreateTaskResult::new(task)))
    };
    match name {
        "greet" => {
            let who = arguments["name"].as_str().unwrap_or("stranger");
            Ok(said(format!("Hello, {who}!")).into())
        }
        "slow_compute" if tasks => spawn(Box::new(move |task| {
            Box::pin(async move {
                slept(&task, seconds).await?;
                Ok(said(format!("computed {label}")))
            })
        })),
        "slow_compute" => {
            tokio::time::sleep(Duration::from_secs_f64(seconds.clamp(0.0, 600.0))).await;
            Ok(said(format!("computed {label}")).into())
        }
        "failing_job" | "test_tool_with_task" if !tasks => Err(tasks_required()),
        "failing_job" => spawn(Box::new(|task| {
            Box::pin(async move {
                slept(&task, 1.0).await?;
                Ok(CallToolResult::error(vec![ContentBlock::text(
                    "the job failed (as failing_job always does)",
                )]))
            })
        })),
        "protocol_error_job" if tasks => spawn(Box::new(|_task| {
            Box::pin(async move {
                Err(TaskExit::Error(ErrorData::internal_error(
                    "protocol_error_job broke down (as it always does)",
                    None,
                )))
            })
        })),
        "protocol_error_job" => Err(ErrorData::internal_error(
            "protocol_error_job broke down (as it always does)",
            None,
        )),
        "confirm_delete" => {
            let file = arguments["filename"]
                .as_str()
                .unwrap_or("a file")
                .to_owned();
            let question = elicitation(
                &format!("Delete {file}?"),
                json!({"confirm": {"type": "boolean"}}),
            )?;
            if !tasks {
                return Err(tasks_required());
            }
            spawn(Box::new(move |task| {
                Box::pin(async move {
                    let answer = ask(&task, "confirm", question).await?;
                    let confirmed =
                        answer["action"] == "accept" && answer["content"]["confirm"] == true;
                    Ok(said(if confirmed {
                        format!("deleted {file}")
                    } else {
                        format!("kept {file}")
                    }))
                })
            }))
        }
        "multi_input" => {
            let first = elicitation("What is your name?", json!({"name": {"type": "string"}}))?;
            let second = elicitation("Go ahead?", json!({"confirm": {"type": "boolean"}}))?;
            if !tasks {
                return Err(tasks_required());
            }
            spawn(Box::new(move |task| {
                Box::pin(async move {
                    let (named, confirmed) =
                        tokio::join!(ask(&task, "name", first), ask(&task, "confirm", second));
                    let (named, confirmed) = (named?, confirmed?);
                    Ok(said(format!(
                        "name {}, confirmed {}",
                        named["content"]["name"], confirmed["content"]["confirm"]
                    )))
                })
            }))
        }
        "test_tool_with_task" => {
            let asked = json!({"method": "elicitation/create", "params": {"message": "What is your name?",
                "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}}});
            let asked = serde_json::from_value::<rmcp::model::ServerRequest>(asked)
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
            let answer = match context.peer.send_request(asked).await {
                Ok(answer) => serde_json::to_value(answer).unwrap_or(Value::Null),
                Err(rmcp::ServiceError::McpError(error)) => return Err(error),
                Err(error) => return Err(ErrorData::internal_error(error.to_string(), None)),
            };
            let who = answer["content"]["name"]
                .as_str()
                .unwrap_or("stranger")
                .to_owned();
            spawn(Box::new(move |task| {
                Box::pin(async move {
                    slept(&task, 0.2).await?;
                    Ok(said(format!("Hello, {who}! (from a task)")))
                })
            }))
        }
        other => Err(ErrorData::invalid_params(
            format!("no tool named {other}"),
            None,
        )),
    }
}

/// `tasks/get`, `tasks/update` and `tasks/cancel` on the manager.
pub fn get(manager: &TaskManager, task_id: &str) -> Result<rmcp::model::GetTaskResult, ErrorData> {
    manager
        .get_task(task_id)
        .map(rmcp::model::GetTaskResult::new)
}
