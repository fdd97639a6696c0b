//! `tether serve`: the run's servers behind one MCP endpoint (the gateway), over stdio or
//! loopback Streamable HTTP.

use std::net::{SocketAddr, ToSocketAddrs as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use rmcp::model::ClientCapabilities;
use tether_config::RenderedServer;
use tether_driver::{ServerStatus, Session, StartOptions};
use tether_gateway::names::ToolFilter;
use tether_gateway::tool_search::ToolSearch;
use tether_gateway::{
    AuditLog, Gateway, GatewayOptions, MCP_PATH, PinStore, ResultBudget, ScanPolicy, Upstream,
    is_loopback,
};
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use crate::cli::{CapabilityArg, HarnessArg, RunArgs, ServeArgs};
use crate::exit::{OK, UsageError};
use crate::output::Progress;
use crate::{secrets, settings};

/// The flags, checked before anything is resolved or started.
struct Transport {
    /// `None`: stdio.
    listen: Option<SocketAddr>,
}

fn transport(args: &ServeArgs) -> anyhow::Result<Transport> {
    let Some(text) = &args.listen else {
        return Ok(Transport { listen: None });
    };
    let address = text
        .to_socket_addrs()
        .ok()
        .and_then(|mut addresses| addresses.find(is_loopback))
        .ok_or_else(|| tether_gateway::GatewayError::NotLoopback {
            address: text.clone(),
        })?;
    Ok(Transport {
        listen: Some(address),
    })
}

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
    };
    Ok(match runtime {
        Some(runtime) => Gateway::new(session, runtime, options).await,
        None => Gateway::start(session, options),
    })
}

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

pub async fn serve(args: &ServeArgs) -> anyhow::Result<u8> {
    let transport = transport(args)?;
    let token = match (&transport.listen, &args.token, args.no_auth) {
        (None, _, _) | (Some(_), _, true) => None,
        (Some(_), Some(source), false) => Some(secrets::read_one("--token", source)?),
        (Some(_), None, false) => Some(tether_http::token::generate()?),
    };
    let budget = budget(args.max_result_tokens)?;
    let wait = settings::wait_for_servers(args.wait_for_servers || args.strict_mcp)?;
    let tool_search = settings::tool_search(&args.tool_search)?;
    let mut options = super::start_options(args.timeout, args.strict_mcp, &args.sandbox)?;
    options.declared = args
        .client_capabilities
        .as_deref()
        .map(declared)
        .transpose()?;
    let progress = Progress::new();
    let session = super::session(&args.specs, &args.secrets, &progress).await?;
    super::require_servers(&session)?;
    super::announce_sandbox("serve", &session, &options);
    // Over stdio, the servers are told what this one client can answer: its initialize is
    // read first (a client sends it at once; it is served again from the buffer).
    let mut stdin = None;
    if transport.listen.is_none()
        && options.declared.is_none()
        && !std::io::IsTerminal::is_terminal(&std::io::stdin())
    {
        let first = tether_gateway::read_first_line(tokio::io::stdin())
            .await
            .context("reading the client's initialize from stdin")?;
        if first.closed {
            eprintln!(
                "tether serve: the client closed stdin before sending anything; no server was started"
            );
            return Ok(OK);
        }
        tracing::debug!(
            capabilities = ?first.capabilities,
            "declaring to the servers what the client declared"
        );
        options.declared = Some(first.capabilities.clone().unwrap_or_default());
        stdin = Some(first.reader);
    }
    let gateway = start_gateway(
        session,
        args.audit.as_deref(),
        &options,
        Policy {
            call_timeout: Duration::from_secs(args.call_timeout.max(1)),
            pins: !args.no_pins,
            scan: args.scan,
            filter: ToolFilter {
                include: args.include_tools.clone(),
                exclude: args.exclude_tools.clone(),
                bare: args.bare_names,
            },
            trust_with: super::policy::trust_with(&args.specs),
            budget,
            tool_search,
            secret_scan: settings::secret_scan(args.tool_search.secret_scan)?,
        },
        wait,
        &progress,
    )
    .await?;

    let n = gateway.tool_names().len();
    let offered = format!("{n} tool{}", if n == 1 { "" } else { "s" });
    match transport.listen {
        None => {
            eprintln!("tether serve: serving {offered} on stdio");
            // Ends when the client closes stdin, or on SIGINT/SIGTERM: both are a normal end.
            let serving = async {
                match stdin {
                    Some(reader) => gateway.serve_io(reader, tokio::io::stdout()).await,
                    None => gateway.serve_stdio().await,
                }
            };
            let served = super::until_signal(serving).await?;
            if let Ok(result) = served {
                result?;
            }
        }
        Some(address) => {
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .with_context(|| format!("binding {address}"))?;
            let bound = listener.local_addr().context("reading the bound address")?;
            if let Some(token) = &token {
                if args.token.is_none() {
                    // Printed this once; masked in everything printed later.
                    eprintln!("tether serve: bearer token {}", token.expose());
                }
                tether_log::register([token]);
            }
            crate::output::print(&format!("listening on http://{bound}{MCP_PATH}\n"));
            eprintln!("tether serve: serving {offered} on http://{bound}{MCP_PATH}");
            let shutdown = CancellationToken::new();
            let options = tether_gateway::HttpOptions {
                session_idle: Duration::from_secs(args.session_idle),
                max_sessions: args.max_sessions,
            };
            let served =
                super::until_signal(gateway.serve_http(listener, token, options, shutdown.clone()))
                    .await?;
            shutdown.cancel();
            if let Ok(result) = served {
                result?;
            }
        }
    }
    gateway.shutdown().await;
    Ok(OK)
}

/// `tether run --gateway -- HARNESS …`: the servers start here, behind the gateway, which
/// listens on a Unix socket in a private run directory; the harness gets one stdio server,
/// `tether __gateway SOCKET` (itself started through the exec shim), and no value of any
/// server. Returns the harness's exit code.
pub async fn run_through_gateway(
    args: &RunArgs,
    harness: HarnessArg,
    session: Session,
    progress: &Progress,
) -> anyhow::Result<u8> {
    let budget = budget(args.max_result_tokens)?;
    let wait = settings::wait_for_servers(args.wait_for_servers || args.strict_mcp)?;
    let mut options = super::start_options(args.timeout, args.strict_mcp, &args.sandbox)?;
    super::announce_sandbox("run", &session, &options);
    options.declared = args
        .client_capabilities
        .as_deref()
        .map(declared)
        .transpose()?;
    let gateway = start_gateway(
        session,
        args.audit.as_deref(),
        &options,
        Policy {
            call_timeout: GATEWAY_CALL_TIMEOUT,
            pins: true,
            scan: None,
            filter: ToolFilter::default(),
            trust_with: super::policy::trust_with(&args.specs),
            budget,
            tool_search: settings::tool_search(&args.tool_search)?,
            secret_scan: settings::secret_scan(args.tool_search.secret_scan)?,
        },
        wait,
        progress,
    )
    .await?;
    let dir = tether_handoff::RunDir::create(&settings::data_dir()?)?;
    let socket = dir.path().join(GATEWAY_SOCKET);
    let listener = tokio::net::UnixListener::bind(&socket)
        .with_context(|| format!("cannot listen on {}", socket.display()))?;
    let serving = gateway.serve_unix(listener);
    if wait {
        eprintln!(
            "tether: the harness gets one MCP server, `{GATEWAY_NAME}`, with {} tools",
            gateway.tool_names().len()
        );
    } else {
        eprintln!(
            "tether: the harness gets one MCP server, `{GATEWAY_NAME}`; each server's tools join it as the server becomes ready"
        );
    }
    let program = std::env::current_exe().context("cannot locate tether's executable")?;
    let entry = RenderedServer::plain_stdio(
        GATEWAY_NAME,
        &program.to_string_lossy(),
        &[
            tether_handoff::gateway_relay::SUBCOMMAND,
            &socket.to_string_lossy(),
        ],
    );
    let code = crate::handoff::hand_off(args, harness, std::slice::from_ref(&entry), None).await;
    serving.abort();
    let _ = serving.await;
    gateway.shutdown().await;
    drop(dir);
    code
}

/// The gateway's budget: `--max-result-tokens`, else config.toml, else the default.
fn budget(flag: Option<usize>) -> anyhow::Result<ResultBudget> {
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
        }
    }
    Ok(chosen)
}

/// The name of the one server a hand-off through the gateway gives the harness.
pub const GATEWAY_NAME: &str = "tether";

/// The gateway's socket in the run directory (short: a socket path has at most 107 bytes).
const GATEWAY_SOCKET: &str = "gw.sock";

/// How long a call through a hand-off's gateway may take (as `tether serve`'s default).
const GATEWAY_CALL_TIMEOUT: Duration = Duration::from_secs(300);
