//! `tether test`: start, initialize, list tools, report, shut down.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde_json::{Value, json};
use tether_driver::{McpRuntime, ServerReport, ServerStatus, Session};
use tether_gateway::ScanPolicy;

use crate::cli::TestArgs;
use crate::exit::{FAILED, OK, Reported};
use crate::output::{Progress, print, print_json, reports_json, reports_table};

pub async fn test(args: &TestArgs) -> anyhow::Result<u8> {
    let progress = Progress::new();
    let session = super::session(&args.specs, &args.secrets, &progress).await?;
    super::require_servers(&session)?;
    let options = super::start_options(args.timeout, false, &args.sandbox)?;
    let runtime = super::start(&session, &options, &progress).await?;
    super::announce_sandbox("test", &session, &options);
    let mut reports = runtime.reports().to_vec();
    let listed = listed_entries(&runtime, &reports).await;
    progress.step("shutting down…");
    runtime.shutdown().await;
    super::tokens::explain_unauthorized(&session, &mut reports).await;
    progress.finish();
    let scans = scans(&session, &reports, &listed)?;
    for (server, scan) in &scans {
        for finding in scan["findings"].as_array().into_iter().flatten() {
            tether_log::eprintln_masked!(
                "tether test: {server}: {} '{}' looks like a prompt injection ({}: {}); a gateway {} it",
                finding["kind"].as_str().unwrap_or_default(),
                tether_config::escape_controls(finding["name"].as_str().unwrap_or_default()),
                finding["rule"].as_str().unwrap_or_default(),
                tether_config::escape_controls(finding["excerpt"].as_str().unwrap_or_default()),
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

/// How long each list request of the scan may take.
const LIST_TIMEOUT: Duration = Duration::from_secs(10);

/// A scanned entry that is not a tool: its kind, its name (a prompt's name, a resource's URI,
/// a template's URI template) and its list item.
type Entry = (&'static str, String, Value);

/// The prompts, resources and resource templates of each ready server that declares them, by
/// server: what a gateway offers besides tools, listed (every page) for the scan. A list that
/// fails is left out (said at `-v`): the test is about starting, and the tools are scanned.
async fn listed_entries(
    runtime: &McpRuntime,
    reports: &[ServerReport],
) -> HashMap<String, Vec<Entry>> {
    const LISTS: [(&str, &str, &str, &str, &str); 3] = [
        ("prompts", "prompt", "prompts/list", "prompts", "name"),
        (
            "resources",
            "resource",
            "resources/list",
            "resources",
            "uri",
        ),
        (
            "resources",
            "resource template",
            "resources/templates/list",
            "resourceTemplates",
            "uriTemplate",
        ),
    ];
    let mut listed = HashMap::new();
    for report in reports {
        if !matches!(report.status, ServerStatus::Ready { .. }) {
            continue;
        }
        let capabilities = runtime.capabilities(&report.name).unwrap_or_default();
        let mut entries = Vec::new();
        for (capability, kind, method, key, name_field) in LISTS {
            if capabilities.get(capability).is_none() {
                continue;
            }
            match tether_gateway::list_all(runtime, &report.name, method, key, LIST_TIMEOUT).await {
                Ok(items) => entries.extend(items.into_iter().map(|item| {
                    let name = item[name_field].as_str().unwrap_or_default().to_owned();
                    (kind, name, item)
                })),
                Err(error) => tracing::info!(server = %report.name, %method, %error, "not scanned"),
            }
        }
        listed.insert(report.name.clone(), entries);
    }
    listed
}

/// Each ready server's prompt-injection scan, as a gateway would run it on what it offers
/// (tools, prompts, resources, resource templates): the policy it gets (`--scan` aside:
/// config.toml, else per installation) and the findings, masked. `(server, {"policy",
/// "findings": [{"kind", "name", "rule", "excerpt"}]})` in report order.
fn scans(
    session: &Session,
    reports: &[ServerReport],
    listed: &HashMap<String, Vec<Entry>>,
) -> anyhow::Result<Vec<(String, Value)>> {
    let policies = super::policy::policies(session, None, "")?;
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
        let policy = policies
            .get(&report.name)
            .map_or(ScanPolicy::Warn, |policy| policy.scan);
        let others: HashSet<String> = reports
            .iter()
            .filter(|other| other.name != report.name)
            .flat_map(|other| tools_of(other).into_iter().map(|tool| tool.name))
            .collect();
        let findings: Vec<Value> = if policy == ScanPolicy::Off {
            Vec::new()
        } else {
            // Other servers' tool names matter for tools (shadowing) only, as in the gateway.
            let none = HashSet::new();
            let tools = tools
                .iter()
                .map(|tool| ("tool", tool.name.as_str(), &tool.definition, &others));
            let rest = listed
                .get(&report.name)
                .into_iter()
                .flatten()
                .map(|(kind, name, item)| (*kind, name.as_str(), item, &none));
            tools
                .chain(rest)
                .flat_map(|(kind, name, definition, others)| {
                    let masker = &masker;
                    tether_gateway::scan::scan(definition, others)
                        .into_iter()
                        .map(move |finding| {
                            json!({
                                "kind": kind,
                                "name": name,
                                "rule": finding.rule,
                                "excerpt": masker.mask(&finding.excerpt),
                            })
                        })
                })
                .collect()
        };
        scans.push((
            report.name.clone(),
            json!({"policy": policy.name(), "findings": findings}),
        ));
    }
    Ok(scans)
}
