//! `--mcp NAME:` (`claude:`, `codex:`, `gemini:`, `opencode:`, `vscode:`, `cursor:`): the MCP
//! config files a harness keeps in their standard places, read as specs, never written. The
//! places come from the harness table (`Harness::own_configs`); nothing here names a harness.

use std::path::PathBuf;

use serde_json::{Value, json};
use tether_env::EnvVars;
use tether_harness::{Format, OwnConfig};

use super::error::SpecError;
use crate::spec::{McpSpec, SpecSource};

/// The specs `value` stands for when it is a harness's name followed by `:`: each of its own
/// config files that exists and configures servers, the user's first; `None` when `value` is
/// no such shorthand.
pub(super) fn specs(value: &str) -> Result<Option<Vec<McpSpec>>, SpecError> {
    let Some(format) = value.trim().strip_suffix(':').and_then(Format::from_name) else {
        return Ok(None);
    };
    let harness = format.harness();
    if harness.own_configs.is_empty() {
        return Err(SpecError::Refused(format!(
            "--mcp {} — {} has no config file in a standard place; pass the file",
            value.trim(),
            harness.title
        )));
    }
    let home = std::env::var_os(EnvVars::HOME)
        .map(PathBuf::from)
        .ok_or_else(|| {
            SpecError::Refused("HOME is not set, so the harness's files cannot be found".into())
        })?;
    let cwd = std::env::current_dir()
        .map_err(|e| SpecError::Refused(format!("cannot read the current directory: {e}")))?;
    let places = harness.own_config_paths(&home, &cwd, |name| std::env::var_os(name));
    // A harness that keeps per-project state beside the user's file (Claude Code's
    // ~/.claude.json) also keeps which of a project's own servers the user approved.
    // No such file: nothing approved.
    let approvals = places.iter().find_map(|place| {
        let key = place.per_project?;
        let text = std::fs::read_to_string(&place.path).unwrap_or_default();
        Some(Approvals::read(&text, key, &cwd))
    });
    // A harness that gates a project's own config on folder trust (Gemini CLI) reads none of
    // it in a folder it does not trust: neither does `--mcp NAME:`.
    let untrusted = match crate::folder_trust::folder_trust(harness, &cwd) {
        Some(tether_harness::TrustVerdict::NotTrusted(why)) => Some(why),
        _ => None,
    };
    let mut specs = Vec::new();
    for place in &places {
        let Ok(text) = std::fs::read_to_string(&place.path) else {
            continue;
        };
        if let Some(why) = untrusted.as_ref().filter(|_| place.in_project) {
            eprintln!(
                "tether: not starting the servers of {}: {} does not trust this folder ({why}); trust it in {} first",
                place.path.display(),
                harness.title,
                harness.title
            );
            continue;
        }
        let text = match &approvals {
            Some(approvals) if place.in_project => {
                match approvals.keep(&text, harness.servers_key, &place.path) {
                    Some(kept) => kept,
                    None => continue,
                }
            }
            _ => text,
        };
        match place.per_project {
            None if tether_config::declares_servers(&text) => {
                specs.push(McpSpec::json(text, SpecSource::File(place.path.clone()))?);
            }
            None => {}
            Some(projects_key) => {
                if let Some(servers) =
                    project_servers(&text, projects_key, &cwd, harness.servers_key)
                {
                    specs.push(McpSpec::json(
                        servers,
                        SpecSource::File(place.path.clone()),
                    )?);
                }
            }
        }
    }
    if specs.is_empty() {
        let looked: Vec<String> = places.iter().map(describe).collect();
        return Err(SpecError::Refused(format!(
            "--mcp {} — no MCP servers configured for {} (looked in {})",
            value.trim(),
            harness.title,
            looked.join(", ")
        )));
    }
    Ok(Some(specs))
}

/// The servers kept for the current directory in a per-project file, as a config text of
/// their own; `None` when there are none.
fn project_servers(
    text: &str,
    projects_key: &str,
    cwd: &std::path::Path,
    servers_key: &str,
) -> Option<String> {
    let root: Value = serde_json::from_str(text).ok()?;
    let servers = root
        .get(projects_key)?
        .get(cwd.to_str()?)?
        .get(servers_key)?
        .as_object()?;
    (!servers.is_empty()).then(|| json!({ servers_key: servers }).to_string())
}

/// Which of a project file's servers the user approved in the harness (Claude Code's
/// `enableAllProjectMcpServers`, `enabledMcpjsonServers`, `disabledMcpjsonServers` for this
/// directory): the harness itself starts no other, so neither does `--mcp NAME:` — a cloned
/// repository's `.mcp.json` would otherwise run its commands and `headersHelper`s.
#[derive(Debug, Default)]
struct Approvals {
    all: bool,
    enabled: Vec<String>,
    disabled: Vec<String>,
}

impl Approvals {
    fn read(text: &str, projects_key: &str, cwd: &std::path::Path) -> Self {
        let root: Value = serde_json::from_str(text).unwrap_or_default();
        let project = cwd
            .to_str()
            .and_then(|dir| root.get(projects_key)?.get(dir))
            .cloned()
            .unwrap_or_default();
        let names = |key: &str| -> Vec<String> {
            project[key]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|name| name.as_str().map(str::to_owned))
                .collect()
        };
        Self {
            all: project["enableAllProjectMcpServers"].as_bool() == Some(true),
            enabled: names("enabledMcpjsonServers"),
            disabled: names("disabledMcpjsonServers"),
        }
    }

    fn approved(&self, name: &str) -> bool {
        !self.disabled.iter().any(|n| n == name)
            && (self.all || self.enabled.iter().any(|n| n == name))
    }

    /// `text` (a project file) with its unapproved servers left out, saying which on stderr;
    /// `None` when none is left.
    fn keep(&self, text: &str, servers_key: &str, path: &std::path::Path) -> Option<String> {
        let mut root: Value = serde_json::from_str(text).ok()?;
        let servers = root.get_mut(servers_key)?.as_object_mut()?;
        let left_out: Vec<String> = servers
            .keys()
            .filter(|name| !self.approved(name))
            .cloned()
            .collect();
        for name in &left_out {
            servers.remove(name);
        }
        if !left_out.is_empty() {
            let names: Vec<String> = left_out
                .iter()
                .map(|n| tether_config::escape_controls(n).into_owned())
                .collect();
            eprintln!(
                "tether: not starting {} of {}: not approved for this project in the harness (enable them there first)",
                names.join(", "),
                path.display()
            );
        }
        let empty = servers.is_empty();
        (!empty).then(|| root.to_string())
    }
}

fn describe(place: &OwnConfig) -> String {
    match place.per_project {
        None => place.path.display().to_string(),
        Some(key) => format!("{} ({key} of this directory)", place.path.display()),
    }
}
