//! `--mcp NAME:` (`claude:`, `codex:`, `gemini:`, `opencode:`, `vscode:`, `cursor:`): the MCP
//! config files a harness keeps in their standard places, read as specs, never written. The
//! places come from the harness table (`Harness::own_configs`); nothing here names a harness.

use std::path::PathBuf;

use tether_env::EnvVars;
use tether_harness::Format;

use crate::exit::UsageError;

/// The files `value` stands for when it is a harness's name followed by `:`, that exist and
/// configure servers, the user's first; `None` when `value` is no such shorthand.
pub fn files(value: &str) -> anyhow::Result<Option<Vec<PathBuf>>> {
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
    let found: Vec<PathBuf> = places
        .iter()
        .filter(|path| {
            std::fs::read_to_string(path).is_ok_and(|text| tether_config::declares_servers(&text))
        })
        .cloned()
        .collect();
    if found.is_empty() {
        let looked: Vec<String> = places.iter().map(|p| p.display().to_string()).collect();
        return Err(UsageError::new(format!(
            "--mcp {} — no MCP servers configured for {} (looked in {})",
            value.trim(),
            harness.title,
            looked.join(", ")
        ))
        .into());
    }
    Ok(Some(found))
}
