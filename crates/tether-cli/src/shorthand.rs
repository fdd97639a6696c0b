//! `--mcp NAME:` (`claude:`, `codex:`, `gemini:`, `opencode:`, `vscode:`, `cursor:`): the MCP
//! config files a harness keeps in their standard places, read as specs, never written. The
//! places come from the harness table (`Harness::own_configs`); nothing here names a harness.

use std::path::PathBuf;

use serde_json::{Value, json};
use tether_driver::{McpSpec, SpecSource};
use tether_env::EnvVars;
use tether_harness::{Format, OwnConfig};

use crate::exit::UsageError;

/// The specs `value` stands for when it is a harness's name followed by `:`: each of its own
/// config files that exists and configures servers, the user's first; `None` when `value` is
/// no such shorthand.
pub fn specs(value: &str) -> anyhow::Result<Option<Vec<McpSpec>>> {
    let Some(format) = value.trim().strip_suffix(':').and_then(Format::from_name) else {
        return Ok(None);
    };
    let harness = format.harness();
    if harness.own_configs.is_empty() {
        return Err(UsageError::new(format!(
            "--mcp {} — {} has no config file in a standard place; pass the file",
            value.trim(),
            harness.title
        ))
        .into());
    }
    let home = std::env::var_os(EnvVars::HOME)
        .map(PathBuf::from)
        .ok_or_else(|| {
            UsageError::new("HOME is not set, so the harness's files cannot be found")
        })?;
    let cwd = std::env::current_dir()?;
    let places = harness.own_config_paths(&home, &cwd, |name| std::env::var_os(name));
    let mut specs = Vec::new();
    for place in &places {
        let Ok(text) = std::fs::read_to_string(&place.path) else {
            continue;
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
        return Err(UsageError::new(format!(
            "--mcp {} — no MCP servers configured for {} (looked in {})",
            value.trim(),
            harness.title,
            looked.join(", ")
        ))
        .into());
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

fn describe(place: &OwnConfig) -> String {
    match place.per_project {
        None => place.path.display().to_string(),
        Some(key) => format!("{} ({key} of this directory)", place.path.display()),
    }
}
