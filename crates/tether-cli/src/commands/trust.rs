//! `tether trust SERVER [TOOL]`: pin a server's tool definitions as they are now, showing what
//! changed since they were pinned.

use serde_json::Value;
use tether_driver::ServerStatus;
use tether_gateway::PinStore;
use tether_gateway::pins::{canonical_json, diff};

use crate::cli::TrustArgs;
use crate::exit::{OK, UsageError};
use crate::output::{Progress, print};

pub async fn trust(args: &TrustArgs) -> anyhow::Result<u8> {
    let progress = Progress::new();
    let session = super::session(&args.specs, &args.secrets, &progress).await?;
    super::require_servers(&session)?;
    let options = super::start_options(args.timeout, false, &Default::default())?;
    progress.step(&format!("starting {}…", args.server));
    let started = super::until_signal(session.start_server(&args.server, &options)).await??;
    let runtime = started.inspect_err(|_| progress.finish())?;
    progress.finish();
    let offered: Vec<(String, Value)> = runtime
        .reports()
        .iter()
        .filter_map(|report| match &report.status {
            ServerStatus::Ready { tools } => Some(tools),
            ServerStatus::Failed { .. } | ServerStatus::Disabled => None,
        })
        .flatten()
        .filter(|tool| args.tool.as_ref().is_none_or(|wanted| *wanted == tool.name))
        .map(|tool| (tool.name.clone(), tool.definition.clone()))
        .collect();
    runtime.shutdown().await;
    if offered.is_empty() {
        return Err(UsageError::new(match &args.tool {
            Some(tool) => format!("server '{}' offers no tool named '{tool}'", args.server),
            None => format!("server '{}' offers no tools", args.server),
        })
        .into());
    }
    let store = PinStore::new(super::gateway::pins_path()?);
    let policies = super::policy::policies(&session, Some(tether_gateway::ScanPolicy::Off), "")?;
    let key = super::policy::pin_key(&store, &policies, &args.server)?;
    let trusted = store.trust(&key, &offered)?;
    let mut text = String::new();
    let mut changed = 0;
    for ((name, previous), (_, definition)) in trusted.iter().zip(&offered) {
        if let Some(previous) = previous {
            changed += 1;
            text.push_str(&format!(
                "--- {}/{name} (pinned)\n+++ {}/{name} (now)\n",
                args.server, args.server
            ));
            text.push_str(&diff(&previous.canonical, &canonical_json(definition)));
        }
    }
    print(&text);
    eprintln!(
        "trusted {} tool(s) of {} ({changed} changed since pinned); pins in {}",
        offered.len(),
        args.server,
        store.path().display()
    );
    Ok(OK)
}
