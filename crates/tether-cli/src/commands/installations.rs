//! Local installations by name (not a command of its own): what `add` and `install` check a new
//! name against, and how `install`'s `remove` and `secrets` find the one a user names.

use tether_store::{InstalledSummary, Store};
use uuid::Uuid;

use crate::exit::UsageError;
use crate::settings;

/// Why `name` cannot name an installation, or `None` when it can: a name is 1 to 64 ASCII
/// letters, digits, `-`, `_` and `.`, starting with a letter or digit, and not what `--mcp`
/// would read as something else (a UUID, a `*.json` file); so `--mcp NAME` always means it.
fn bad_name(name: &str) -> Option<&'static str> {
    let first_ok = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric());
    if name.is_empty() {
        Some("it is empty")
    } else if name.contains(['/', '\\']) || name.starts_with(['.', '~']) {
        Some("it reads as a path")
    } else if name.starts_with(['{', '"', '[']) {
        Some("it reads as inline JSON")
    } else if name.ends_with(':') {
        Some("it reads as a harness shorthand (`claude:`)")
    } else if Uuid::parse_str(name).is_ok() {
        Some("it reads as a UUID")
    } else if [".json", ".jsonc", ".toml"]
        .iter()
        .any(|ext| name.to_ascii_lowercase().ends_with(ext))
    {
        Some("it reads as a file name")
    } else if name.chars().count() > MAX_NAME {
        Some("it is longer than 64 characters")
    } else if !first_ok
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        Some("a name is ASCII letters, digits, '-', '_' and '.', starting with a letter or digit")
    } else {
        None
    }
}

/// Refuses `name` for a new installation when it is no valid name ([`bad_name`]) or another
/// installation has it already (`--mcp NAME` would then be ambiguous). `other` is how to pick
/// another name (`--name OTHER` for `add`).
pub(crate) fn check_new_name(
    name: &str,
    installed: &[tether_store::InstalledSummary],
    other: &str,
) -> anyhow::Result<()> {
    if let Some(why) = bad_name(name) {
        let shown = crate::typed::shown(name)
            .map(|shown| format!("'{shown}'"))
            .unwrap_or_else(|| "the name given".to_owned());
        return Err(UsageError::new(format!(
            "{shown} cannot name an installation: {why}\nhint: the server's config goes after --from (`tether install NAME --from ./mcp.json`); a name is like github or my-server"
        ))
        .into());
    }
    if let Some(existing) = installed.iter().find(|entry| entry.name == name) {
        return Err(UsageError::new(format!(
            "an installation called '{name}' exists already ({}); remove it first (`tether remove {name}`) or {other}",
            existing.uid
        ))
        .into());
    }
    Ok(())
}

/// The local installations, or none when there is no store yet (a check does not create one).
pub(crate) fn installed() -> anyhow::Result<Vec<tether_store::InstalledSummary>> {
    if settings::data_dir()?
        .join(tether_store::DATABASE_FILE)
        .is_file()
    {
        Ok(settings::open_store()?.list()?)
    } else {
        Ok(Vec::new())
    }
}

/// The installation called `text` (a UUID or a name that exactly one installation has).
pub(crate) fn find_installation(store: &Store, text: &str) -> anyhow::Result<InstalledSummary> {
    let text = text.trim();
    let all = store.list()?;
    if let Ok(uid) = uuid::Uuid::parse_str(text) {
        return all.into_iter().find(|i| i.uid == uid).ok_or_else(|| {
            UsageError::new(format!("no local installation {uid} (see `tether list`)")).into()
        });
    }
    let mut matching: Vec<InstalledSummary> = all.into_iter().filter(|i| i.name == text).collect();
    match matching.len() {
        0 => Err(UsageError::new(format!(
            "no local installation is called {text:?} (see `tether list`)"
        ))
        .into()),
        1 => Ok(matching.remove(0)),
        n => Err(UsageError::new(format!(
            "{n} installations are called {text:?} ({}); pass the UUID of the one you mean",
            matching
                .iter()
                .map(|i| i.uid.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .into()),
    }
}

/// The longest installation name.
const MAX_NAME: usize = 64;
