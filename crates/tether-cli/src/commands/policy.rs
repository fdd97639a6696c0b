//! What a gateway applies to each server of a session (`tether_gateway::ToolPolicy`): the key
//! its tool pins are kept under, and its prompt-injection scan policy.
//!
//! - Pin key: a local installation's uid; a managed server's `MANAGED_UID/NAME` (one managed
//!   installation may hold several servers); else (inline or file JSON, whose ids are made
//!   per run) the server's name. Pins an older tether kept under the name are carried over
//!   the first time (`PinStore::adopt`).
//! - Scan policy: `--scan`, else `scan` in config.toml, else `block` for an installation added
//!   from a registry (`tether add`) or returned by a managed server, `warn` for a hand-written
//!   one (`tether install`, inline or file JSON).

use std::collections::HashMap;

use tether_config::Origin;
use tether_driver::Session;
use tether_gateway::{PinStore, ScanPolicy, ToolPolicy};

use crate::settings;

/// Why a server gets the scan policy it gets (`tether test --json` shows it).
fn default_policy(from_registry: bool, origin: Origin) -> ScanPolicy {
    if from_registry || origin == Origin::Managed {
        ScanPolicy::Block
    } else {
        ScanPolicy::Warn
    }
}

/// Every server of `session`, by name: its pin key and scan policy. `flag` is `--scan`.
/// `trust_with` is what `tether trust` needs before a server name to find the servers given
/// by `--mcp` (see [`trust_with`]).
pub(super) fn policies(
    session: &Session,
    flag: Option<ScanPolicy>,
    trust_with: &str,
) -> anyhow::Result<HashMap<String, ToolPolicy>> {
    let chosen = match flag {
        Some(policy) => Some(policy),
        None => settings::scan_policy()?,
    };
    let resolved = session.resolved();
    // Which local installations came from a registry: asked of the store only when there are
    // local installations (and only without a chosen policy).
    let from_registry: Vec<uuid::Uuid> = if resolved.local.is_empty() || chosen.is_some() {
        Vec::new()
    } else {
        settings::open_store()?
            .list()?
            .into_iter()
            .filter(|summary| summary.source.is_some())
            .map(|summary| summary.uid)
            .collect()
    };
    let mut policies = HashMap::new();
    for local in &resolved.local {
        let registry = from_registry.contains(&local.uid);
        policies.insert(
            local.installation.name().to_owned(),
            ToolPolicy {
                pin_key: local.uid.to_string(),
                scan: chosen.unwrap_or_else(|| default_policy(registry, local.installation.origin)),
                trust_with: String::new(),
            },
        );
    }
    for ephemeral in &resolved.ephemeral {
        let name = ephemeral.installation.name();
        let pin_key = match ephemeral.lease {
            Some(lease) => format!("{}/{name}", lease.uid),
            None => name.to_owned(),
        };
        policies.insert(
            name.to_owned(),
            ToolPolicy {
                pin_key,
                scan: chosen
                    .unwrap_or_else(|| default_policy(false, ephemeral.installation.origin)),
                trust_with: trust_with.to_owned(),
            },
        );
    }
    Ok(policies)
}

/// The `--mcp` options a `tether trust` hint repeats (each followed by a space), shell-quoted:
/// a value shown as typed when [`crate::typed::shown`] allows (a name, a path), else a
/// placeholder, since inline JSON or a credential-like value may hold a secret.
pub(super) fn trust_with(specs: &crate::cli::SpecArgs) -> String {
    let option = |flag: &str, value: &str| match crate::typed::shown(value) {
        Some(shown) => format!("{flag} {} ", crate::typed::shell_quote(shown)),
        None => format!("{flag} SPEC "),
    };
    let mut with: String = specs.mcp.iter().map(|spec| option("--mcp", spec)).collect();
    if let Some(task) = &specs.task {
        with.push_str(&option("--task", &task.to_string_lossy()));
    }
    with
}

/// The pin key of `server` (its name when `policies` does not know it), with the pins an
/// older tether kept under its name carried over.
pub(super) fn pin_key(
    pins: &PinStore,
    policies: &HashMap<String, ToolPolicy>,
    server: &str,
) -> anyhow::Result<String> {
    let key = policies
        .get(server)
        .map_or_else(|| server.to_owned(), |p| p.pin_key.clone());
    pins.adopt(&key, server)?;
    Ok(key)
}
