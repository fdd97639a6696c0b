//! `tether test`: start, initialize, list tools, report, shut down.

use std::collections::HashSet;

use serde_json::{Value, json};
use tether_driver::{ServerReport, ServerStatus, Session};
use tether_gateway::ScanPolicy;

use crate::cli::TestArgs;
use crate::exit::{FAILED, OK, Reported};
use crate::log_mask;
use crate::output::{Progress, print, print_json, reports_json, reports_table};

pub async fn test(args: &TestArgs) -> anyhow::Result<u8> {
    let progress = Progress::new();
    let session = super::session(&args.specs, &args.secrets, &progress).await?;
    let options = super::start_options(args.timeout, false);
    let runtime = super::start(&session, &options, &progress).await?;
    progress.step("shutting down…");
    let mut reports = runtime.reports().to_vec();
    runtime.shutdown().await;
    super::auth::explain_unauthorized(&session, &mut reports).await;
    progress.finish();
    let scans = scans(&session, &reports)?;
    for (server, scan) in &scans {
        for finding in scan["findings"].as_array().into_iter().flatten() {
            log_mask::eprintln_masked!(
                "tether test: {server}: tool '{}' looks like a prompt injection ({}: {}); a gateway {} it",
                finding["tool"].as_str().unwrap_or_default(),
                finding["rule"].as_str().unwrap_or_default(),
                finding["excerpt"].as_str().unwrap_or_default(),
                match scan["policy"].as_str() {
                    Some("block") => "withholds",
                    Some("warn") => "reports and offers",
                    _ => "does not scan",
                }
            );
        }
    }
    if args.json {
        let mut json = reports_json(&reports);
        for server in json["servers"].as_array_mut().into_iter().flatten() {
            let name = server["name"].as_str().unwrap_or_default().to_owned();
            if let Some(scan) = scans.iter().find(|(n, _)| *n == name).map(|(_, s)| s) {
                server["scan"] = scan.clone();
            }
        }
        print_json(&json);
    } else {
        print(&reports_table(&reports));
    }
    if reports.iter().all(|r| {
        matches!(
            r.status,
            ServerStatus::Ready { .. } | ServerStatus::Disabled
        )
    }) {
        Ok(OK)
    } else {
        Err(Reported(FAILED).into())
    }
}

/// Each ready server's prompt-injection scan, as a gateway would run it on its tools: the
/// policy it gets (`--scan` aside: config.toml, else per installation) and the findings,
/// masked. `(server, {"policy", "findings": [{"tool", "rule", "excerpt"}]})` in report order.
fn scans(session: &Session, reports: &[ServerReport]) -> anyhow::Result<Vec<(String, Value)>> {
    let admissions = super::admission::admissions(session, None)?;
    let masker = tether_config::Masker::new(session.sensitive_values());
    let tools_of = |report: &ServerReport| match &report.status {
        ServerStatus::Ready { tools } => tools.clone(),
        ServerStatus::Failed { .. } | ServerStatus::Disabled => Vec::new(),
    };
    let mut scans = Vec::new();
    for report in reports {
        let ServerStatus::Ready { tools } = &report.status else {
            continue;
        };
        let policy = admissions
            .get(&report.name)
            .map_or(ScanPolicy::Warn, |admission| admission.scan);
        let others: HashSet<String> = reports
            .iter()
            .filter(|other| other.name != report.name)
            .flat_map(|other| tools_of(other).into_iter().map(|tool| tool.name))
            .collect();
        let findings: Vec<Value> = if policy == ScanPolicy::Off {
            Vec::new()
        } else {
            tools
                .iter()
                .flat_map(|tool| {
                    tether_gateway::scan::scan(&tool.definition, &others)
                        .into_iter()
                        .map(|finding| {
                            json!({
                                "tool": tool.name,
                                "rule": finding.rule,
                                "excerpt": masker.mask(&finding.excerpt),
                            })
                        })
                })
                .collect()
        };
        scans.push((
            report.name.clone(),
            json!({"policy": super::admission::policy_name(policy), "findings": findings}),
        ));
    }
    Ok(scans)
}
