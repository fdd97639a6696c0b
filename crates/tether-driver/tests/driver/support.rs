//! Shared helpers: the `hold` example, and the testkit's helpers (its fake managed client).

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

pub use tether_testkit::{
    json_str, processes_in_group, server_everything, test_server_bin, wait_group_gone,
    workspace_artifact,
};

use serde_json::Value;
use tether_config::{EmptyEnv, Secrets};
use tether_driver::{DriverError, McpRuntime, McpSpec, NoLocalInstallations, Resolver, Session};
use tether_graphql::ManagedMcpClient;

/// A session over `specs` with no local installations, `managed` as the managed client (if
/// any), `secrets`, and an empty environment.
pub async fn session(
    specs: Vec<McpSpec>,
    secrets: Secrets,
    managed: Option<Arc<FakeManaged>>,
) -> Result<Session, DriverError> {
    let managed = managed.map(|fake| fake as Arc<dyn ManagedMcpClient>);
    let resolver = Resolver::new(Arc::new(NoLocalInstallations), managed);
    Session::resolve(resolver, specs, secrets, EmptyEnv).await
}

/// How long a test waits for one tool call.
pub const CALL_LIMIT: Duration = Duration::from_secs(60);

/// `tool` on `server` through `runtime` with JSON `arguments` (an object, or `null` for
/// none): the `CallToolResult` as JSON; panics when the call fails.
pub async fn call(runtime: &McpRuntime, server: &str, tool: &str, arguments: Value) -> Value {
    runtime
        .call_tool(server, tool, arguments.as_object().cloned(), CALL_LIMIT)
        .await
        .unwrap_or_else(|err| panic!("calling {tool} on {server}: {err}"))
}

/// [`call`] through `session` (which checks the name is one it holds).
pub async fn session_call(
    session: &Session,
    runtime: &McpRuntime,
    server: &str,
    tool: &str,
    arguments: Value,
) -> Value {
    session
        .call(
            runtime,
            server,
            tool,
            arguments.as_object().cloned(),
            CALL_LIMIT,
        )
        .await
        .unwrap_or_else(|err| panic!("calling {tool} on {server} in the session: {err}"))
}

/// A session over one inline or file spec, with `secrets`; panics on a bad spec.
pub async fn inline_session(config: &str, secrets: &Secrets) -> Session {
    let spec = McpSpec::parse(config).expect("parsing the test spec");
    session(vec![spec], secrets.clone(), None)
        .await
        .expect("resolving the test spec")
}

/// The driver's `hold` example (`examples/hold.rs`).
pub fn hold_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        workspace_artifact(
            &["-p", "tether-driver", "--example", "hold"],
            Path::new("examples/hold"),
        )
    })
    .clone()
}

pub use tether_testkit::managed::{Answer, FakeManaged};
