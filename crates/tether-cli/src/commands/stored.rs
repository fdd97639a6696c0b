//! `tether secrets list|set|rm|move`: the values stored for local installations (names and
//! locations only are ever printed); `tether secrets submit`: a value for a page of a running
//! `tether setup-mcp`, typed on a terminal.

use std::io::IsTerminal;
use std::net::SocketAddr;

use anyhow::Context as _;

use serde_json::json;
use tether_store::{Location, Registry, RegistryKey, Store};

use super::installations::find_installation;
use crate::cli::{SecretsArgs, SecretsCommand};
use crate::exit::{FAILED, OK, UsageError};
use crate::output::{print, print_json};
use crate::{secrets, settings};

/// A row of `secrets list`: installation, uid, variable, where its value is.
type Row = (String, String, String, Option<Location>);

/// Where a location is, for people.
fn describe(store: &Store, location: Location) -> String {
    match location {
        Location::Keyring => "keyring (OS credential store)".to_owned(),
        Location::File => format!("file {}", store.secret_store().file_path().display()),
    }
}

/// `tether secrets`.
pub fn secrets(args: &SecretsArgs) -> anyhow::Result<u8> {
    match &args.command {
        SecretsCommand::List {
            installation,
            name,
            json,
        } => list(installation.as_deref(), name.as_deref(), *json),
        SecretsCommand::Set {
            installation,
            name,
            from,
            registry,
        } => match (registry, installation, name) {
            (Some(registry), _, _) => set_registry_key(registry_key(registry)?, from.as_deref()),
            (None, Some(installation), Some(name)) => set(installation, name, from.as_deref()),
            _ => Err(missing_operands()),
        },
        SecretsCommand::Rm {
            installation,
            name,
            registry,
        } => match (registry, installation, name) {
            (Some(registry), _, _) => rm_registry_key(registry_key(registry)?),
            (None, Some(installation), Some(name)) => rm(installation, name),
            _ => Err(missing_operands()),
        },
        SecretsCommand::Move { to } => move_to(to),
        SecretsCommand::Submit { nonce, from } => submit(nonce, from.as_deref()),
    }
}

fn list(installation: Option<&str>, name: Option<&str>, as_json: bool) -> anyhow::Result<u8> {
    let store = settings::open_store()?;
    let installations = match installation {
        Some(text) => vec![find_installation(&store, text)?],
        None => store.list()?,
    };
    // One row per variable: stored ones with their location, the others as not stored.
    let mut rows: Vec<Row> = Vec::new();
    for entry in &installations {
        for variable in &entry.variable_names {
            if name.is_some_and(|n| n != variable) {
                continue;
            }
            let location = entry
                .stored
                .iter()
                .find(|s| &s.name == variable)
                .map(|s| s.location);
            rows.push((
                entry.name.clone(),
                entry.uid.to_string(),
                variable.clone(),
                location,
            ));
        }
    }
    // Credentials of no installation — OAuth tokens (`tether auth login`), registry keys
    // (`--registry`): listed by their server's or registry's URL when no installation is named.
    let credential_rows = if installation.is_none() {
        store.credentials()?
    } else {
        Vec::new()
    };
    for entry in credential_rows {
        if name.is_some_and(|n| n != entry.name) {
            continue;
        }
        rows.push((
            entry.server,
            entry.key.to_string(),
            entry.name,
            Some(entry.location),
        ));
    }
    if as_json {
        let items: Vec<_> = rows
            .iter()
            .map(|(installation, uid, variable, location)| {
                json!({
                    "installation": installation,
                    "uid": uid,
                    "name": variable,
                    "location": location.map(Location::as_str),
                    "path": (*location == Some(Location::File))
                        .then(|| store.secret_store().file_path()),
                })
            })
            .collect();
        print_json(&json!({ "secrets": items }));
        return Ok(OK);
    }
    if rows.is_empty() {
        eprintln!("no variables (install one with `tether install` or `tether add`)");
        return Ok(OK);
    }
    let width = |column: fn(&Row) -> &String, title: &str| {
        rows.iter()
            .map(|row| column(row).chars().count())
            .max()
            .unwrap_or(0)
            .max(title.len())
    };
    let (w_inst, w_name) = (width(|r| &r.0, "INSTALLATION"), width(|r| &r.2, "NAME"));
    let mut out = format!(
        "{:w_inst$}  {:36}  {:w_name$}  WHERE\n",
        "INSTALLATION", "UUID", "NAME"
    );
    for (installation, uid, variable, location) in &rows {
        let place = match location {
            Some(location) => describe(&store, *location),
            None => "not stored: pass --secret at run time".to_owned(),
        };
        out.push_str(&format!(
            "{installation:w_inst$}  {uid:36}  {variable:w_name$}  {place}\n"
        ));
    }
    print(&out);
    Ok(OK)
}

/// The stored-key entry of the registry `--registry` names (clap has checked it is one).
fn registry_key(text: &str) -> anyhow::Result<RegistryKey> {
    let registry = Registry::parse(text).ok_or_else(|| {
        UsageError::new(format!(
            "no registry takes a stored key: {text:?} (try smithery)"
        ))
    })?;
    settings::registry_key(registry)
}

fn missing_operands() -> anyhow::Error {
    UsageError::new("name an installation and a variable, or a registry with --registry").into()
}

/// Reads a value for `name` from `from`, a hidden prompt on a terminal, or all of stdin.
fn read_value(name: &str, from: Option<&str>) -> anyhow::Result<tether_config::SecretValue> {
    match from {
        Some(source) => secrets::read_one(name, source),
        None if std::io::stdin().is_terminal() => secrets::read_one(name, "prompt"),
        None => secrets::read_stdin_all(name),
    }
}

fn set_registry_key(key: RegistryKey, from: Option<&str>) -> anyhow::Result<u8> {
    let value = read_value(key.variable(), from)?;
    if value.is_empty() {
        return Err(UsageError::new(format!("{} is empty; nothing stored", key.variable())).into());
    }
    let store = settings::open_store()?;
    let location = store.set_registry_key(&key, &value)?;
    settings::announce(&store);
    eprintln!(
        "stored {} for {} in the {}; search, show and add use it when {} is not set",
        key.variable(),
        key.url,
        describe(&store, location),
        key.variable()
    );
    Ok(OK)
}

fn rm_registry_key(key: RegistryKey) -> anyhow::Result<u8> {
    let removed = match settings::open_existing_store()? {
        Some(store) => store.remove_registry_key(&key)?,
        None => false,
    };
    if removed {
        eprintln!(
            "removed the stored {} for {}; search skips {} unless {} is set",
            key.variable(),
            key.url,
            key.registry.id(),
            key.variable()
        );
        Ok(OK)
    } else {
        Err(UsageError::new(format!(
            "no {} is stored for {} (see `tether secrets list`)",
            key.variable(),
            key.url
        ))
        .into())
    }
}

fn set(installation: &str, name: &str, from: Option<&str>) -> anyhow::Result<u8> {
    let mut store = settings::open_store()?;
    let entry = find_installation(&store, installation)?;
    if !entry.variable_names.iter().any(|v| v == name) {
        return Err(UsageError::new(format!(
            "{} has no variable {name} (its variables: {})",
            entry.name,
            if entry.variable_names.is_empty() {
                "none".to_owned()
            } else {
                entry.variable_names.join(", ")
            }
        ))
        .into());
    }
    let value = read_value(name, from)?;
    let location = store.set_secret(entry.uid, name, &value)?;
    settings::announce(&store);
    eprintln!(
        "stored {name} of {} ({}) in the {}",
        entry.name,
        entry.uid,
        describe(&store, location)
    );
    Ok(OK)
}

fn rm(installation: &str, name: &str) -> anyhow::Result<u8> {
    let mut store = settings::open_store()?;
    let entry = find_installation(&store, installation)?;
    if store.remove_secret(entry.uid, name)? {
        eprintln!(
            "removed the stored {name} of {} ({}); runs now need --secret {name}=SOURCE",
            entry.name, entry.uid
        );
        Ok(OK)
    } else {
        Err(UsageError::new(format!(
            "{} ({}) has no stored {name} (see `tether secrets list {}`)",
            entry.name, entry.uid, entry.name
        ))
        .into())
    }
}

fn move_to(to: &str) -> anyhow::Result<u8> {
    let location: Location = to.parse()?;
    let mut store = settings::open_store()?;
    if location == Location::Keyring {
        // Fails here, with what to do, when no credential store answers. The store error's
        // own advice (set TETHER_SECRET_STORE=file) is for writing values, not for moving
        // them into the keyring: this one says what a move needs.
        let probe = tether_store::SecretStore::new(
            &settings::data_dir()?,
            tether_store::Preference::Keyring,
        );
        if let Err(error) = probe.location() {
            return Err(match error {
                tether_store::SecretStoreError::KeyringUnavailable { reason } => {
                    anyhow::anyhow!(
                        "cannot move the values into the OS credential store: it is not reachable ({reason}); nothing was moved. Start one (on Linux a Secret Service such as gnome-keyring, unlocked, on the D-Bus session bus) and run `tether secrets move keyring` again"
                    )
                }
                other => other.into(),
            });
        }
    }
    let moved = store.move_secrets(location)?;
    settings::announce(&store);
    eprintln!(
        "moved {moved} value{} into the {}",
        if moved == 1 { "" } else { "s" },
        describe(&store, location)
    );
    if location == Location::Keyring {
        let file = store.secret_store().file_path();
        if file.exists() {
            eprintln!(
                "{} still holds values of writes in progress or of installations not in this store",
                file.display()
            );
        }
    }
    Ok(OK)
}

/// `tether secrets submit NONCE|URL`: the value goes only to a page a running `tether
/// setup-mcp` of this user announces under this TETHER_HOME, and only once that page proved
/// it holds its announcement's key (`tether_setup::submit`). A URL only picks one of those
/// pages; any other address is refused before the value is read.
fn submit(target: &str, from: Option<&str>) -> anyhow::Result<u8> {
    let target = target.trim();
    let pages = tether_setup::submit::announced(&settings::data_dir()?);
    let (pages, nonce) = match target.split_once("://") {
        Some((scheme, rest)) => {
            let (address, path) = rest.split_once('/').unwrap_or((rest, ""));
            let nonce = path.strip_prefix("secret/").unwrap_or_default();
            let chosen: Vec<_> = pages
                .into_iter()
                .filter(|page| scheme == "http" && page_named(&page.address, address))
                .collect();
            if chosen.is_empty() {
                return Err(UsageError::new(format!(
                    "{scheme}://{address} is not the page of a tether setup-mcp running for this user and TETHER_HOME; tether secrets submit sends a value to such a page only (give the nonce, the last part of the URL the agent passed on)"
                ))
                .into());
            }
            (chosen, nonce.to_owned())
        }
        None => (pages, target.to_owned()),
    };
    if nonce.is_empty() || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(UsageError::new(format!(
            "{target:?} is neither a page nonce (hex digits) nor a page URL http://127.0.0.1:PORT/secret/NONCE"
        ))
        .into());
    }
    if pages.is_empty() {
        eprintln!(
            "no tether setup-mcp is running for this user and TETHER_HOME; nothing was submitted"
        );
        return Ok(FAILED);
    }
    let name = "the value";
    let value = match from {
        Some(source) => secrets::read_one("value", source)?,
        None if std::io::stdin().is_terminal() => secrets::ask("value", Some(name), true)?,
        None => secrets::read_stdin_all("value")?,
    };
    if value.is_empty() {
        return Err(UsageError::new("the value is empty; nothing was submitted").into());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the HTTP client")?;
    for page in &pages {
        match runtime.block_on(tether_setup::submit::post(page, &nonce, &value)) {
            Ok(200) => {
                eprintln!("submitted; the agent can go on");
                return Ok(OK);
            }
            Ok(status) => tracing::debug!("{} answered {status} for the nonce", page.address),
            Err(error @ tether_setup::SetupError::Unproven { .. }) => {
                tracing::warn!("{error}; nothing was sent to it");
            }
            Err(error) => tracing::debug!("{}: {:#}", page.address, anyhow::Error::from(error)),
        }
    }
    eprintln!(
        "no running tether setup-mcp has a page for that nonce (already used, expired, or never issued); ask the agent to request the value again"
    );
    Ok(FAILED)
}

/// Whether the URL's `host:port` names the page at `address` (`localhost` names loopback).
fn page_named(address: &SocketAddr, authority: &str) -> bool {
    let Some((host, port)) = authority.rsplit_once(':') else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    port.parse::<u16>().ok() == Some(address.port())
        && (host == "localhost" || host.parse::<std::net::IpAddr>().ok() == Some(address.ip()))
}
