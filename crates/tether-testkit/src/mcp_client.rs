//! An MCP client's view of tether's gateway, for tests that watch servers join it: a client
//! handler that reports `notifications/tools/list_changed`, `tether_status` entries, the tool
//! names listed, and calls left running in a task of their own.

use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{NotificationContext, RoleClient, RunningService};
use serde_json::Value;

/// A client handler that sends `()` to a channel at each `notifications/tools/list_changed`.
#[derive(Clone, Debug)]
pub struct ListWatcher(tokio::sync::mpsc::UnboundedSender<()>);

/// Where a [`ListWatcher`]'s notifications arrive.
pub type ListChanges = tokio::sync::mpsc::UnboundedReceiver<()>;

/// A client of [`ListWatcher`].
pub type WatchingClient = RunningService<RoleClient, ListWatcher>;

impl ListWatcher {
    /// A watcher and the receiver of its notifications.
    pub fn new() -> (Self, ListChanges) {
        let (sender, changes) = tokio::sync::mpsc::unbounded_channel();
        (Self(sender), changes)
    }
}

impl rmcp::ClientHandler for ListWatcher {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.0.send(());
    }
}

/// Waits at most `limit` for the next `tools/list_changed`; panics without one.
pub async fn next_list_change(changes: &mut ListChanges, limit: Duration) {
    let next = tokio::time::timeout(limit, changes.recv()).await;
    assert!(
        matches!(next, Ok(Some(()))),
        "no tools/list_changed within {limit:?}"
    );
}

/// `tether_status`'s entry for `server`, as `client` gets it through a gateway; panics when
/// the call fails or names no such server.
pub async fn gateway_status<H: rmcp::ClientHandler>(
    client: &RunningService<RoleClient, H>,
    server: &str,
) -> Value {
    let result = client
        .call_tool(CallToolRequestParams::new("tether_status"))
        .await;
    let report = match result {
        Ok(result) => result.structured_content.unwrap_or_default(),
        Err(error) => panic!("calling tether_status: {error}"),
    };
    report["servers"]
        .as_array()
        .and_then(|servers| servers.iter().find(|entry| entry["name"] == server))
        .cloned()
        .unwrap_or_else(|| panic!("no {server} in {report}"))
}

/// Asks `tether_status` every 20 ms until `server`'s entry satisfies `done`, at most `limit`
/// (then panics); returns the entry.
pub async fn until_status<H: rmcp::ClientHandler>(
    client: &RunningService<RoleClient, H>,
    server: &str,
    limit: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let entry = gateway_status(client, server).await;
        if done(&entry) {
            return entry;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{server} never got there: {entry}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every tool name `client` is offered (all pages); panics when listing fails.
pub async fn tool_names<H: rmcp::ClientHandler>(
    client: &RunningService<RoleClient, H>,
) -> Vec<String> {
    match client.list_all_tools().await {
        Ok(tools) => tools
            .into_iter()
            .map(|tool| tool.name.to_string())
            .collect(),
        Err(error) => panic!("listing tools: {error}"),
    }
}

/// A call left running: its answer, once its task ends.
pub type RunningCall = tokio::task::JoinHandle<Result<CallToolResult, rmcp::ServiceError>>;

/// Calls `tool` with `arguments` (a JSON object) in a task of its own.
pub fn spawn_call<H: rmcp::ClientHandler>(
    client: &RunningService<RoleClient, H>,
    tool: &'static str,
    arguments: Value,
) -> RunningCall {
    let peer = client.peer().clone();
    let arguments = arguments.as_object().cloned().unwrap_or_default();
    tokio::spawn(async move {
        peer.call_tool(CallToolRequestParams::new(tool).with_arguments(arguments))
            .await
    })
}

/// The answer of `call`, once it ends (at most `limit`); panics on a failure or a tool error.
pub async fn answer_of(call: RunningCall, limit: Duration) -> CallToolResult {
    let result = match tokio::time::timeout(limit, call).await {
        Ok(Ok(Ok(result))) => result,
        other => panic!("the call did not answer within {limit:?}: {other:?}"),
    };
    assert_ne!(result.is_error, Some(true), "{result:?}");
    result
}
