//! The store of the tasks the gateway holds (SEP-2663; the layer itself is
//! `handler/tasks.rs`), and how a request or answer says it is about Tasks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::service::RequestContext;
use rmcp::task_manager::TaskManager;
use rmcp::{ErrorData, RoleServer};
use serde_json::Value;
use tether_driver::DriverError;

/// The tasks the gateway holds, and which connection each belongs to.
#[derive(Default)]
pub(crate) struct Tasks {
    pub(crate) manager: TaskManager,
    owners: Mutex<Owners>,
}

/// Task id → owner, and the size at which the owners of expired tasks are next forgotten.
#[derive(Default)]
struct Owners {
    by_task: HashMap<String, Arc<str>>,
    prune_at: usize,
}

/// The fewest owners kept before any is forgotten.
const PRUNE_FROM: usize = 64;

impl Tasks {
    pub(crate) fn owned(&self, task_id: &str, owner: &str) -> Result<(), ErrorData> {
        let owners = self.owners.lock().unwrap_or_else(PoisonError::into_inner);
        match owners.by_task.get(task_id) {
            Some(holder) if holder.as_ref() == owner => Ok(()),
            // Another connection's task is as unknown here as one that never was.
            _ => Err(ErrorData::invalid_params(
                format!("unknown task: {task_id}"),
                None,
            )),
        }
    }

    /// Records `owner` as the owner of the task `id`. When the map has doubled since the last
    /// look, the owners of tasks the manager no longer has (expired past their TTL) are
    /// forgotten: each look asks about every task, so it is made rarely, amortised.
    pub(crate) fn own(&self, id: String, owner: Arc<str>) {
        let mut owners = self.owners.lock().unwrap_or_else(PoisonError::into_inner);
        if owners.by_task.len() >= owners.prune_at.max(PRUNE_FROM) {
            owners
                .by_task
                .retain(|id, _| self.manager.get_task(id).is_ok());
            owners.prune_at = owners.by_task.len() * 2;
        }
        owners.by_task.insert(id, owner);
    }
}

/// Put in a request's context: the limit of its forward instead of the call timeout (a call
/// the gateway holds as a task may run as long as the task lives).
#[derive(Clone, Copy)]
pub(crate) struct CallLimit(pub(crate) std::time::Duration);

/// Put in a request's context: its forward declares Tasks to the server (`handler/mod.rs`).
#[derive(Clone, Copy)]
pub(crate) struct DeclareTasks;

/// Whether the request of `context` declared the Tasks extension (per request, else at
/// `initialize`).
pub(crate) fn declared(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .is_some_and(|capabilities| capabilities.supports_tasks())
}

/// Whether `answer` (a `tools/call` answer's JSON) is a server's `CreateTaskResult`.
pub(crate) fn is_task(answer: &Value) -> bool {
    answer.get("resultType").and_then(Value::as_str) == Some("task")
}

/// Whether `error` is a server's -32021 (missing required client capability).
pub(crate) fn needs_capability(error: &DriverError) -> bool {
    matches!(error, DriverError::NeedsCapability { .. })
}
