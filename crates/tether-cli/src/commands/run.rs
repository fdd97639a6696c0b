//! `tether run`: the built-in harness (start and report, optionally hold), or a third-party
//! harness command run with the servers handed over.

use std::time::Duration;

use anyhow::Context as _;
use tether_config::RenderedServer;
use tether_driver::{RefreshOutcome, ServerStatus, Session};
use tether_gateway::names::ToolFilter;

use super::gateway::{
    GATEWAY_CALL_TIMEOUT, GATEWAY_NAME, GATEWAY_SOCKET, Policy, budget, declared, start_gateway,
};
use crate::cli::{HarnessArg, RunArgs};
use crate::exit::{OK, UsageError};
use crate::handoff::hand_off;
use crate::output::{Progress, print, print_json, reports_json, reports_table};
use crate::settings;

/// Which harness a command is, from `--harness` or the command's file name.
fn pick_harness(args: &RunArgs) -> anyhow::Result<HarnessArg> {
    if let Some(harness) = args.harness {
        if harness == HarnessArg::Builtin && !args.command.is_empty() {
            return Err(UsageError::new("--harness builtin takes no command after `--`").into());
        }
        if harness != HarnessArg::Builtin && args.command.is_empty() {
            return Err(UsageError::new(format!(
                "--harness {} needs the command to run after `--`, e.g. `tether run --mcp SPEC -- claude`",
                harness.name()
            ))
            .into());
        }
        return Ok(harness);
    }
    let Some(program) = args.command.first() else {
        return Ok(HarnessArg::Builtin);
    };
    if let Some(harness) = tether_harness::detect(program) {
        return Ok(HarnessArg::Handoff(harness));
    }
    let stem = std::path::Path::new(program)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let names: Vec<&str> = tether_harness::HARNESSES
        .iter()
        .filter(|h| h.run.is_some())
        .map(|h| h.name)
        .collect();
    Err(UsageError::new(format!(
        "cannot tell which harness `{stem}` is; pass --harness {}",
        names.join("|")
    ))
    .into())
}

/// Whether this run hands the harness the gateway: `--gateway`, or the harness's default (its
/// row's `gateway_by_default`) unless `--no-gateway`. The gateway's own flags need it.
fn through_gateway(args: &RunArgs, harness: HarnessArg) -> anyhow::Result<bool> {
    let by_default = matches!(harness, HarnessArg::Handoff(h) if gateway_by_default(h));
    let gateway = args.gateway || (by_default && !args.no_gateway);
    let search = &args.tool_search;
    // The flags that set the gateway up.
    let gateway_only = [
        ("--audit", args.audit.is_some()),
        ("--client-capabilities", args.client_capabilities.is_some()),
        ("--max-result-tokens", args.max_result_tokens.is_some()),
        ("--tool-mode", search.tool_mode.is_some()),
        ("--tool-search-budget", search.tool_search_budget.is_some()),
        ("--always-load", !search.always_load.is_empty()),
        ("--lazy", search.lazy),
        ("--code-timeout", search.code_timeout.is_some()),
        ("--code-memory", search.code_memory.is_some()),
        ("--code-max-calls", search.code_max_calls.is_some()),
        ("--secret-scan", search.secret_scan.is_some()),
    ];
    if let Some((flag, _)) = gateway_only.iter().find(|(_, set)| *set && !gateway) {
        // The harnesses it is the default for, by title ("Gemini CLI").
        let defaults = tether_harness::HARNESSES
            .iter()
            .filter(|h| gateway_by_default(h));
        let defaults = defaults.map(|h| h.title).collect::<Vec<_>>().join(" and ");
        let message =
            format!("{flag} sets up the gateway: add --gateway (the default only for {defaults})");
        return Err(UsageError::new(message).into());
    }
    if let Some(list) = &args.client_capabilities {
        super::gateway::declared(list)?;
    }
    Ok(gateway)
}

/// How long the gateway holds `harness`'s first `tools/list` for the servers to join: only for
/// a harness that lists tools once (its row's `relists_tools`), and not when it is 0.
fn first_list_grace(
    args: &RunArgs,
    harness: HarnessArg,
) -> anyhow::Result<Option<std::time::Duration>> {
    let lists_once =
        matches!(harness, HarnessArg::Handoff(h) if h.run.is_some_and(|run| !run.relists_tools));
    if !lists_once {
        return Ok(None);
    }
    let grace = settings::first_list_grace(args.first_list_grace)?;
    Ok((!grace.is_zero()).then_some(grace))
}

/// Whether `tether run` hands `harness` the gateway unless `--no-gateway`.
fn gateway_by_default(harness: &tether_harness::Harness) -> bool {
    harness.run.is_some_and(|run| run.gateway_by_default)
}

/// Says on stderr when the user's command is a subcommand of the harness that reads only its
/// own config files (its row's `config_only_subcommands`: `claude mcp list`), so that an empty
/// or different list is not taken for a failed hand-off.
fn note_config_only_subcommand(args: &RunArgs, harness: HarnessArg) {
    let HarnessArg::Handoff(row) = harness else {
        return;
    };
    let Some(run) = row.run else {
        return;
    };
    let Some(first) = args.command.get(1) else {
        return;
    };
    if run.config_only_subcommands.contains(&first.as_str()) {
        eprintln!(
            "note: `{} {first} …` reads only {}'s own config files, not the servers tether hands over, so it will not show them; check them with `tether test` and the same --mcp/--task, or start a session with `tether run … -- {}`",
            row.name, row.title, row.name
        );
    }
}

pub async fn run(args: &RunArgs) -> anyhow::Result<u8> {
    let harness = pick_harness(args)?;
    note_config_only_subcommand(args, harness);
    if let HarnessArg::Handoff(row) = harness {
        // A harness that would give the run no servers (an untrusted folder) is refused
        // before anything is resolved or started.
        let folder = std::env::current_dir()
            .map_err(|e| anyhow::anyhow!("cannot read the working directory: {e}"))?;
        tether_handoff::check_folder_trust(row, &folder)?;
    }
    // Usage errors come before anything is resolved, fetched or asked for.
    let gateway = through_gateway(args, harness)?;
    if gateway && harness == HarnessArg::Builtin {
        return Err(UsageError::new(
            "--gateway hands the servers to a harness: give its command after `--` (or use `tether serve`)",
        )
        .into());
    }
    let progress = Progress::new();
    let mut session = super::session(&args.specs, &args.secrets, &progress).await?;
    super::require_servers(&session)?;
    if args.strict_mcp {
        // Strict: a placeholder no secret filled stops the run before anything starts.
        tether_driver::require_resolved(session.servers())?;
    }
    if gateway {
        return run_through_gateway(args, harness, session, &progress).await;
    }
    if harness != HarnessArg::Builtin {
        progress.finish();
        // The exec shim applies each stdio server's sandbox before it starts the server.
        let options = super::start_options(args.timeout, args.strict_mcp, &args.sandbox)?;
        super::announce_sandbox("run", &session, &options);
        return hand_off(args, harness, session.servers(), Some(&options)).await;
    }

    let options = super::start_options(args.timeout, args.strict_mcp, &args.sandbox)?;
    super::announce_sandbox("run", &session, &options);
    let mut runtime = super::start(&session, &options, &progress).await?;
    progress.finish();
    let reports = runtime.reports().to_vec();
    if args.json {
        print_json(&reports_json(&reports));
    } else {
        print(&reports_table(&reports));
    }
    if !args.hold {
        runtime.shutdown().await;
        return Ok(OK);
    }

    // Hold: keep the servers up, re-mint managed configs before they expire, stop on a signal.
    eprintln!(
        "holding {} MCP server(s); press Ctrl-C to stop",
        runtime.running().len()
    );
    let hold = async {
        loop {
            let wait = session
                .next_check(time::OffsetDateTime::now_utc())
                .unwrap_or(Duration::from_secs(3600));
            tokio::time::sleep(wait).await;
            let outcomes = session.refresh_due(&mut runtime).await;
            // A re-mint may bring values (a new proxy token) the log layer has not seen.
            tether_log::register(session.sensitive_values());
            for outcome in outcomes {
                report_refresh(outcome);
            }
        }
    };
    // The hold ends only by a signal, which is a normal end here: exit 0 after shutdown.
    let _signal: Result<(), _> = super::until_signal(hold).await?;
    eprintln!("stopping the MCP servers…");
    runtime.shutdown().await;
    Ok(OK)
}

/// One line on stderr about what a re-mint did.
fn report_refresh(outcome: RefreshOutcome) {
    match outcome {
        RefreshOutcome::Unchanged { uid } => eprintln!("re-minted managed config {uid}: unchanged"),
        RefreshOutcome::Restarted { uid, reports } => {
            for report in reports {
                let state = match report.status {
                    ServerStatus::Ready { .. } => "ready".to_owned(),
                    ServerStatus::Failed { reason } => format!("failed: {reason}"),
                    ServerStatus::Disabled => "disabled".to_owned(),
                };
                eprintln!(
                    "re-minted managed config {uid}: restarted {} ({state})",
                    report.name
                );
            }
        }
        RefreshOutcome::Failed { uid, message } => {
            eprintln!("re-minting managed config {uid} failed: {message}");
        }
    }
}

/// `tether run --gateway -- HARNESS …`: the servers start here, behind the gateway, which
/// listens on a Unix socket in a private run directory; the harness gets one stdio server,
/// `tether __gateway SOCKET` (itself started through the exec shim), and no value of any
/// server. Returns the harness's exit code.
async fn run_through_gateway(
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
            task_after: settings::task_after(args.tool_search.task_after)?,
            first_list_grace: first_list_grace(args, harness)?,
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
