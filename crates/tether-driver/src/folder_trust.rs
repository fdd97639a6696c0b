//! Folder trust as a harness reads it (Gemini CLI): from the harness's own variables and files
//! (its row's `folder_trust`), the verdict on a folder. A run through the harness checks it
//! before starting (`tether-handoff`); `--mcp NAME:` reads a project's own config file only
//! when the harness would (the harness itself starts no server of an untrusted folder's file).

use std::path::{Path, PathBuf};

use tether_harness::{Delivery, Harness, TrustInputs, TrustVerdict};

/// The harness's own config directory for the user (`$GEMINI_CLI_HOME/.gemini`, else
/// `~/.gemini`), for a harness handed a private home; `None` for another delivery or no home.
pub fn user_config_dir(harness: &Harness) -> Option<PathBuf> {
    let Delivery::PrivateHome {
        env,
        default_home,
        config_dir,
    } = harness.run?.delivery
    else {
        return None;
    };
    let home = std::env::var_os(env)
        .filter(|home| !home.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os(tether_env::EnvVars::HOME).map(|h| PathBuf::from(h).join(default_home))
        })?;
    Some(if config_dir.is_empty() {
        home
    } else {
        home.join(config_dir)
    })
}

/// A JSON file (comments allowed, as the harness reads it), if it exists and parses.
fn read_json(path: &Path) -> Option<serde_json::Value> {
    let mut text = std::fs::read_to_string(path).ok()?;
    json_strip_comments::strip_comments_in_place(&mut text).ok()?;
    serde_json::from_str(&text).ok()
}

/// The harness's verdict on `folder`: `None` when the harness does not gate on folder trust,
/// or when its rules file does not parse (the harness refuses to start on it, with its own
/// message).
pub fn folder_trust(harness: &'static Harness, folder: &Path) -> Option<TrustVerdict> {
    let trust = harness.run.and_then(|run| run.folder_trust)?;
    let user_dir = user_config_dir(harness);
    let env = |name: &str| std::env::var(name).ok();
    let system = env(trust.system_settings_env)
        .filter(|path| !path.is_empty())
        .unwrap_or_else(|| trust.system_settings.to_owned());
    let settings: Vec<serde_json::Value> = [
        Some(PathBuf::from(system)),
        user_dir.as_ref().map(|dir| dir.join(harness.config_file)),
    ]
    .into_iter()
    .flatten()
    .filter_map(|path| read_json(&path))
    .collect();
    let rules_path = env(trust.rules_env)
        .filter(|path| !path.is_empty())
        .map(PathBuf::from)
        .or_else(|| user_dir.as_ref().map(|dir| dir.join(trust.rules_file)));
    let rules = match rules_path {
        Some(path) if path.exists() => Some(read_json(&path)?),
        _ => None,
    };
    let real_path = |path: &Path| std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    let folder = real_path(folder);
    Some(trust.verdict(&TrustInputs {
        env: &env,
        settings: &settings,
        rules: rules.as_ref(),
        folder: &folder,
        real_path: &real_path,
    }))
}
