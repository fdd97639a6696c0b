//! What `tether serve` and `tether run --gateway` share (not a command of its own): the gateway
//! built over a session with its policy, the pins file, the result budget, the client
//! capabilities declared to the servers, and the one server name a hand-off gives the harness.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rmcp::model::ClientCapabilities;
use tether_driver::{ServerStatus, Session, StartOptions};
use tether_gateway::names::ToolFilter;
use tether_gateway::tool_search::ToolSearch;
use tether_gateway::{
    AuditLog, Gateway, GatewayOptions, PinStore, ResultBudget, ScanPolicy, Upstream,
};
use time::OffsetDateTime;

use crate::cli::CapabilityArg;
use crate::exit::UsageError;
use crate::output::Progress;
use crate::settings;

/// What a gateway applies to calls and definitions.
pub(super) struct Policy {
    pub call_timeout: Duration,
    pub pins: bool,
    /// `--scan`: every server's policy; `None`: per installation (`policy.rs`).
    pub scan: Option<ScanPolicy>,
    pub filter: ToolFilter,
    /// The `--mcp` options a `tether trust` hint repeats ([`super::policy::trust_with`]).
    pub trust_with: String,
    /// Where tool results are cut (`--max-result-tokens`, `max_result_tokens`).
    pub budget: ResultBudget,
    /// `--tool-mode`, `--tool-search-budget`, `--always-load` (and config.toml's keys).
    pub tool_search: ToolSearch,
    /// `--secret-scan` (and `secret_scan`).
    pub secret_scan: tether_gateway::secret_scan::SecretScanPolicy,
    /// How long a client's first `tools/list` may wait for the servers (`run --gateway` with
    /// a harness that lists tools once).
    pub first_list_grace: Option<Duration>,
    /// `--task-after` (and `task_after`): when a Tasks client's call to a server without
    /// Tasks becomes a task the gateway holds.
    pub task_after: Option<Duration>,
}

/// `$TETHER_HOME/pins.json`.
pub(super) fn pins_path() -> anyhow::Result<PathBuf> {
    Ok(settings::data_dir()?.join("pins.json"))
}

/// The default audit log: `$TETHER_HOME/audit/serve-TIME-PID.jsonl`.
fn default_audit_path() -> anyhow::Result<PathBuf> {
    let now = OffsetDateTime::now_utc();
    let name = format!(
        "serve-{:04}{:02}{:02}T{:02}{:02}{:02}Z-{}.jsonl",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second(),
        std::process::id()
    );
    Ok(settings::data_dir()?.join("audit").join(name))
}

/// Builds the gateway over the servers of `session`, the audit log's path on stderr. With
/// `wait`, every server is started first (per-server status on stderr; `options.strict` fails
/// when any server does not start); without, the gateway is returned at once and each server
/// joins it when ready (the gateway logs each server's state).
pub(super) async fn start_gateway(
    session: Session,
    audit: Option<&Path>,
    options: &StartOptions,
    policy: Policy,
    wait: bool,
    progress: &Progress,
) -> anyhow::Result<Gateway> {
    if wait && policy.tool_search.lazy {
        let both = "--lazy (or `lazy` in config.toml) starts each server when it is asked for, --wait-for-servers (implied by --strict-mcp) all at once: drop one";
        return Err(UsageError::new(both).into());
    }
    let audit_path = match audit {
        Some(path) => path.to_path_buf(),
        None => default_audit_path()?,
    };
    let audit = AuditLog::create(&audit_path)?;
    // The servers' notifications and requests go to the gateway (restarted servers' too).
    let mut options = options.clone();
    let upstream = Upstream::wire(&mut options);
    let runtime = if wait {
        let runtime = super::start(&session, &options, progress).await?;
        progress.finish();
        report(&runtime);
        Some(runtime)
    } else {
        progress.finish();
        let n = session.servers().len();
        eprintln!(
            "tether serve: starting {n} MCP server{} in the background; each joins when ready (tether_status shows which are pending; --wait-for-servers waits for them)",
            if n == 1 { "" } else { "s" }
        );
        None
    };
    eprintln!("tether serve: audit log {}", audit.path().display());
    let policies = super::policy::policies(&session, policy.scan, &policy.trust_with)?;
    let pins = if policy.pins {
        let pins = PinStore::new(pins_path()?);
        for server in session.names() {
            super::policy::pin_key(&pins, &policies, &server)?;
        }
        Some(pins)
    } else {
        None
    };
    let options = GatewayOptions {
        call_timeout: policy.call_timeout,
        audit: Some(audit),
        start: options.clone(),
        pins,
        scan: policy.scan.unwrap_or_default(),
        policies,
        filter: policy.filter,
        upstream: Some(upstream),
        // A re-mint's new values (a fresh proxy token) are masked in tether's own lines.
        masking_hook: Some(tether_gateway::MaskingHook(std::sync::Arc::new(|values| {
            tether_log::register(values);
        }))),
        budget: policy.budget,
        tool_search: policy.tool_search,
        secret_scan: policy.secret_scan,
        first_list_grace: policy.first_list_grace,
        task_after: policy.task_after,
    };
    Ok(match runtime {
        Some(runtime) => Gateway::new(session, runtime, options).await,
        None => Gateway::start(session, options),
    })
}

/// The gateway's budget: `--max-result-tokens`, else config.toml, else the default.
pub(super) fn budget(flag: Option<usize>) -> anyhow::Result<ResultBudget> {
    Ok(ResultBudget {
        max_tokens: settings::max_result_tokens(flag)?,
        ..ResultBudget::default()
    })
}

/// The capabilities `--client-capabilities LIST` declares: `all` and `none` stand alone.
pub(super) fn declared(list: &[CapabilityArg]) -> Result<ClientCapabilities, UsageError> {
    let alone = |word: &str| {
        UsageError::new(format!(
            "--client-capabilities: `{word}` cannot be combined with other capabilities"
        ))
    };
    let all = tether_driver::answerable_capabilities();
    let mut chosen = ClientCapabilities::default();
    for item in list {
        match item {
            CapabilityArg::All if list.len() > 1 => return Err(alone("all")),
            CapabilityArg::None if list.len() > 1 => return Err(alone("none")),
            CapabilityArg::All => return Ok(all),
            CapabilityArg::None => return Ok(chosen),
            CapabilityArg::Sampling => chosen.sampling.clone_from(&all.sampling),
            CapabilityArg::Elicitation => chosen.elicitation.clone_from(&all.elicitation),
            CapabilityArg::Roots => chosen.roots.clone_from(&all.roots),
            CapabilityArg::Apps => chosen.extensions.clone_from(&all.extensions),
        }
    }
    Ok(chosen)
}

/// The name of the one server a hand-off through the gateway gives the harness.
pub const GATEWAY_NAME: &str = "tether";

/// The gateway's socket in the run directory (short: a socket path has at most 107 bytes).
pub(super) const GATEWAY_SOCKET: &str = "gw.sock";

/// How long a call through a hand-off's gateway may take (as `tether serve`'s default).
pub(super) const GATEWAY_CALL_TIMEOUT: Duration = Duration::from_secs(300);

/// Each server's startup, one line each on stderr.
fn report(runtime: &tether_driver::McpRuntime) {
    for report in runtime.reports() {
        let name = &report.name;
        match &report.status {
            ServerStatus::Ready { tools } => {
                eprintln!("tether serve: {name}: ready, {} tools", tools.len());
            }
            ServerStatus::Failed { reason } => tether_log::eprintln_masked!(
                "tether serve: {name}: failed to start, its tools are not offered: {reason}"
            ),
            ServerStatus::Disabled => eprintln!("tether serve: {name}: disabled in its config"),
        }
    }
}
