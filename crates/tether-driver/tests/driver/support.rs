//! Shared helpers: a fake managed client, the `hold` example, and the testkit's helpers.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

pub use tether_testkit::{
    json_str, processes_in_group, server_everything, test_server_bin, wait_group_gone,
    workspace_artifact,
};

use serde_json::Value;
use tether_config::{EmptyEnv, Secrets};
use tether_driver::{DriverError, McpRuntime, McpSpec, NoLocalInstallations, Resolver, Session};
use tether_graphql::{
    ManagedMcpClient, ManagedMcpClientConfig, ManagedMcpError, SecretValue, TransportKind,
};
use uuid::Uuid;

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

/// What the fake managed client answers for one uid.
#[derive(Clone)]
pub enum Answer {
    Config {
        json: String,
        expires_at: Option<time::OffsetDateTime>,
    },
    UserFacing(String),
    Unknown(String),
}

/// A managed client that answers from a table, counts calls and can delay every answer.
pub struct FakeManaged {
    answers: Mutex<Vec<(Uuid, Answer)>>,
    pub calls: AtomicUsize,
    pub delay: Duration,
}

impl FakeManaged {
    pub fn new(answers: Vec<(Uuid, Answer)>) -> Self {
        Self {
            answers: Mutex::new(answers),
            calls: AtomicUsize::new(0),
            delay: Duration::ZERO,
        }
    }

    /// Replaces what the fake answers for `uid` (e.g. a re-minted config).
    pub fn set_answer(&self, uid: Uuid, answer: Answer) {
        let mut answers = self
            .answers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        answers.retain(|(u, _)| *u != uid);
        answers.push((uid, answer));
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait::async_trait]
impl ManagedMcpClient for FakeManaged {
    async fn create_managed_mcp_client_config(
        &self,
        uid: Uuid,
    ) -> Result<ManagedMcpClientConfig, ManagedMcpError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let answer = self
            .answers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .find(|(u, _)| *u == uid)
            .map(|(_, a)| a.clone());
        match answer {
            Some(Answer::Config { json, expires_at }) => Ok(ManagedMcpClientConfig {
                uid,
                transport_kind: TransportKind::Command,
                mcp_config_json: SecretValue::from(json),
                proxy_url: None,
                proxy_token: None,
                authorization_header: None,
                expires_at,
            }),
            Some(Answer::UserFacing(message)) => Err(ManagedMcpError::UserFacing {
                uid,
                kind: tether_graphql::UserFacingErrorKind::NotFound,
                message,
                attempts: 1,
            }),
            Some(Answer::Unknown(typename)) => Err(ManagedMcpError::UnknownResult {
                uid,
                typename,
                attempts: 1,
            }),
            None => Err(ManagedMcpError::UserFacing {
                uid,
                kind: tether_graphql::UserFacingErrorKind::NotFound,
                message: "MCP server not found".to_owned(),
                attempts: 1,
            }),
        }
    }
}
