//! The scratch test-connect: the built server started as it would run, asked for its tools,
//! and stopped; nothing is stored.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::json;
use tether_config::{ProcessEnv, Secrets};
use tether_driver::{
    BearerAuth, McpSpec, NoLocalInstallations, Resolver, ServerStatus, Session, SpecSource,
    StartOptions, ToolInfo,
};
use tether_registry::add::BuiltConfig;

use crate::{InstallError, Progress};

/// The program's stored OAuth tokens, for a remote server's test-connect (the CLI keeps them
/// in its secret store; this crate knows nothing of OAuth).
pub trait StoredTokens: Send + Sync {
    /// `session` with the stored bearer token of each of its remote servers applied.
    fn apply(&self, session: Session) -> BoxFuture<'static, Session>;

    /// Where a token a server refuses during the trial is renewed.
    fn renewal(&self) -> Arc<dyn BearerAuth>;
}

/// How a test-connect runs.
#[derive(Clone)]
pub struct TrialOptions {
    /// How long the server may take to initialize and list its tools.
    pub startup_timeout: Duration,
    /// The program's stored OAuth tokens, if it keeps any.
    pub tokens: Option<Arc<dyn StoredTokens>>,
}

/// How a test-connect went.
#[derive(Debug)]
pub enum Trial {
    /// Initialised and listed these tools.
    Ready(Vec<ToolInfo>),
    /// Did not get there, for this reason (secrets masked).
    Failed(String),
}

/// Starts `built` as `local` in a scratch directory with `given`, runs initialize and
/// tools/list within the options' timeout, and shuts it down: nothing is stored. Writes
/// nothing on stdout (`tether setup-mcp` speaks MCP there). Every value of the session is
/// registered with the log masking before the server starts.
pub async fn test_connect(
    local: &str,
    built: &BuiltConfig,
    given: &Secrets,
    options: &TrialOptions,
    progress: &dyn Progress,
) -> Result<Trial, InstallError> {
    let scratch = tempfile::tempdir().map_err(InstallError::io("creating a scratch directory"))?;
    let mut trial = built.server.clone();
    if trial.get("command").is_some() {
        trial["cwd"] = json!(scratch.path());
    }
    // Parsed as what it is, a config built from a registry entry: its values are literal.
    let spec = McpSpec::json(json!({ local: trial }).to_string(), SpecSource::Registry)?;
    // A built config names no installation: nothing to look up locally or on a server.
    let resolver = Resolver::new(Arc::new(NoLocalInstallations), None);
    progress.step("resolving 1 MCP spec…");
    let mut session = Session::resolve(resolver, vec![spec], given.clone(), ProcessEnv).await?;
    tether_log::register(session.sensitive_values());
    if let Some(tokens) = &options.tokens {
        session = tokens.apply(session).await;
        tether_log::register(session.sensitive_values());
    }
    let start = StartOptions {
        startup_timeout: options.startup_timeout.max(Duration::from_secs(1)),
        // The test-connect's timeout already allows for a first download.
        package_runner_factor: 1,
        strict: false,
        bearer_auth: options.tokens.as_ref().map(|tokens| tokens.renewal()),
        ..StartOptions::default()
    };
    progress.step(&match session.servers().len() {
        1 => "starting 1 MCP server…".to_owned(),
        n => format!("starting {n} MCP servers…"),
    });
    let runtime = session.start(&start).await?;
    let reports = runtime.reports().to_vec();
    runtime.shutdown().await;
    Ok(match reports.into_iter().next().map(|r| r.status) {
        Some(ServerStatus::Ready { tools }) => Trial::Ready(tools),
        Some(ServerStatus::Failed { reason }) => Trial::Failed(reason),
        // A registry entry has no `disabled` field; an empty report means nothing started.
        Some(ServerStatus::Disabled) | None => Trial::Failed("the server did not start".to_owned()),
    })
}
