//! `tether run`: the built-in harness (start and report, optionally hold), or a third-party
//! harness command run with the servers handed over.

use std::time::Duration;

use tether_config::ProcessEnv;
use tether_driver::{RefreshOutcome, Refresher, ServerStatus};
use tokio::signal::unix::{SignalKind, signal};

use crate::cli::{HarnessArg, RunArgs};
use crate::exit::{OK, UsageError};
use crate::handoff;
use crate::output::{Progress, print, print_json, reports_json, reports_table};

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

pub async fn run(args: &RunArgs, server_url: Option<&str>) -> anyhow::Result<u8> {
    let harness = pick_harness(args)?;
    let progress = Progress::new();
    let mut resolved = super::resolve(&args.specs, &args.secrets, server_url, &progress).await?;
    if harness != HarnessArg::Builtin {
        progress.finish();
        let servers = &resolved.servers;
        return handoff::run_harness(
            harness,
            &args.command,
            servers,
            args.strict_mcp,
            args.no_secrets_on_disk,
        )
        .await;
    }

    let options = super::start_options(args.timeout, args.strict_mcp);
    let mut runtime = super::start(
        resolved.servers.clone(),
        &options,
        &resolved.secrets,
        &progress,
    )
    .await?;
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
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut refresher = Refresher::default();
    loop {
        let wait = refresher
            .next_check(&resolved.resolved, time_now())
            .unwrap_or(Duration::from_secs(3600));
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            () = tokio::time::sleep(wait) => {
                let outcomes = refresher
                    .refresh_due(&resolved.resolver, &mut resolved.resolved, &resolved.secrets, &ProcessEnv, &mut runtime, &options)
                    .await;
                for outcome in outcomes {
                    match outcome {
                        RefreshOutcome::Unchanged { uid } => eprintln!("re-minted managed config {uid}: unchanged"),
                        RefreshOutcome::Restarted { uid, reports } => {
                            for report in reports {
                                let state = match report.status {
                                    ServerStatus::Ready { .. } => "ready".to_owned(),
                                    ServerStatus::Failed { reason } => format!("failed: {reason}"),
                                    ServerStatus::Disabled => "disabled".to_owned(),
                                };
                                eprintln!("re-minted managed config {uid}: restarted {} ({state})", report.name);
                            }
                        }
                        RefreshOutcome::Failed { uid, message } => eprintln!("re-minting managed config {uid} failed: {message}"),
                    }
                }
            }
        }
    }
    eprintln!("stopping the MCP servers…");
    runtime.shutdown().await;
    Ok(OK)
}

fn time_now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}
