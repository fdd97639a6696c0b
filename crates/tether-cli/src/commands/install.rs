//! `tether install`, `tether list`, `tether remove`: the local store.

use serde_json::json;
use tether_driver::McpSpec;
use tether_store::Store;
use uuid::Uuid;

use super::installations::{check_new_name, installed};
use crate::cli::{InstallArgs, ListArgs, RemoveArgs};
use crate::exit::{OK, UsageError};
use crate::output::{print, print_json};
use crate::{secrets, settings};

fn open_store() -> anyhow::Result<Store> {
    settings::open_store()
}

/// `tether install [NAME] --from SPEC [--server KEY]`: one server under NAME (the config's only
/// server, or the one `--server` picks), or, without NAME, every server of the config under
/// its own name. Every name is checked before anything is stored.
pub fn install(args: &InstallArgs) -> anyhow::Result<u8> {
    let spec = McpSpec::parse(&args.from)?;
    let Some(parsed) = spec.config() else {
        return Err(UsageError::new("--from takes a JSON file or inline JSON, not a UUID").into());
    };
    if !parsed.references.is_empty() {
        return Err(UsageError::new(
            "--from holds a warp_id reference (the UUID of an installation, which is resolved, not installed); install takes a server config with a command or url",
        )
        .into());
    }
    let keys: Vec<String> = parsed
        .servers
        .iter()
        .map(|s| s.server.name.clone())
        .collect();
    if parsed.servers.is_empty() {
        return Err(
            UsageError::new("--from declares no MCP servers (its server map is empty)").into(),
        );
    }
    let mut servers = parsed.servers.clone();
    if let Some(key) = &args.server {
        servers.retain(|parsed| parsed.server.name == *key);
        if servers.is_empty() {
            return Err(UsageError::new(format!(
                "--from has no server called '{key}' (it has {})",
                keys.join(", ")
            ))
            .into());
        }
    }
    let name = args.name.as_deref().map(str::trim);
    if let (Some(name), [_, _, ..]) = (name, servers.as_slice()) {
        return Err(UsageError::new(format!(
            "--from holds {} servers ({}); pass --server KEY to install one of them as '{name}', or leave NAME out to install each under its own name",
            servers.len(),
            keys.join(", ")
        ))
        .into());
    }
    let named: Vec<(String, tether_config::ParsedServer)> = servers
        .into_iter()
        .map(|parsed| {
            (
                name.map_or_else(|| parsed.server.name.clone(), str::to_owned),
                parsed,
            )
        })
        .collect();
    let existing = installed()?;
    for (name, _) in &named {
        check_new_name(name, &existing, "pick another NAME")?;
    }
    // Secrets given now are stored (in the secret store) for every run; the rest stay
    // placeholders for run secrets.
    let given = secrets::read(&args.secrets)?;
    let mut store = open_store()?;
    for (name, server) in named {
        let mut installation = server.into_installation();
        installation.server.name.clone_from(&name);
        let uid = store.install_with(&installation, &given, None)?;
        settings::announce(&store);
        print(&format!("{uid}\n"));
        // What a run must still supply: the placeholders left after applying what was given now.
        let open: Vec<String> = installation
            .render(&given, &tether_config::EmptyEnv)
            .unresolved_placeholders()
            .iter()
            .cloned()
            .collect();
        if open.is_empty() {
            eprintln!("installed '{name}'; use it with: tether test --mcp {name}");
        } else {
            eprintln!(
                "installed '{name}'; pass these at run time with --secret: {}",
                open.join(", ")
            );
        }
    }
    Ok(OK)
}

/// "registry name version", or "hand-written" for `tether install`.
fn source_text(source: Option<&tether_store::InstallSource>) -> String {
    match source {
        Some(source) => format!("{} {} {}", source.registry, source.name, source.version),
        None => "hand-written".to_owned(),
    }
}

/// Which variables have a stored value: "2/2 stored", "1/2 stored; at run time: OTHER".
fn inputs_text(entry: &tether_store::InstalledSummary) -> String {
    if entry.variable_names.is_empty() {
        return "none".to_owned();
    }
    let missing = entry.missing();
    let stored = entry.variable_names.len() - missing.len();
    let mut text = format!("{stored}/{} stored", entry.variable_names.len());
    if !missing.is_empty() {
        text.push_str(&format!("; at run time: {}", missing.join(", ")));
    }
    text
}

pub fn list(args: &ListArgs) -> anyhow::Result<u8> {
    let entries = open_store()?.list()?;
    if args.json {
        let items: Vec<_> = entries
            .iter()
            .map(|e| {
                json!({
                    "uid": e.uid,
                    "name": e.name,
                    "source": e.source.as_ref().map(|s| json!({
                        "registry": s.registry, "name": s.name, "version": s.version, "package": s.package,
                    })),
                    "transport": e.transport,
                    "variables": e.variable_names,
                    "stored": e.stored.iter().map(|s| json!({"name": s.name, "location": s.location.as_str()})).collect::<Vec<_>>(),
                    "missing": e.missing(),
                })
            })
            .collect();
        print_json(&json!({ "installations": items }));
        return Ok(OK);
    }
    if entries.is_empty() {
        eprintln!(
            "no local installations (add one with `tether add NAME` or `tether install NAME --from SPEC`)"
        );
        return Ok(OK);
    }
    let rows: Vec<[String; 5]> = entries
        .iter()
        .map(|e| {
            [
                e.name.clone(),
                e.uid.to_string(),
                source_text(e.source.as_ref()),
                e.transport.to_owned(),
                inputs_text(e),
            ]
        })
        .collect();
    let titles = ["NAME", "UUID", "SOURCE", "TRANSPORT", "INPUTS"];
    let widths: Vec<usize> = (0..titles.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([titles[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: [&str; 5]| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:w$}  ", w = widths[i]));
            }
        }
        out.push('\n');
        out
    };
    let mut out = line(titles);
    for row in &rows {
        out.push_str(&line([&row[0], &row[1], &row[2], &row[3], &row[4]]));
    }
    print(&out);
    Ok(OK)
}

/// The unpacked bundles (`$TETHER_HOME/bundles/<sha256>`) the launch config of `uid` names.
fn bundles_of(
    store: &tether_store::Store,
    uid: Uuid,
    bundles: &std::path::Path,
) -> anyhow::Result<Vec<std::path::PathBuf>> {
    let Some(installation) = store.get(uid)? else {
        return Ok(Vec::new());
    };
    // Masked: the text is only searched for paths, but no secret needs to be in it.
    let text = installation
        .render(&tether_config::Secrets::new(), &tether_config::EmptyEnv)
        .to_json(tether_config::Exposure::Masked)
        .to_string();
    let prefix = format!("{}/", bundles.display());
    Ok(text
        .match_indices(&prefix)
        .filter_map(|(at, _)| text.get(at + prefix.len()..at + prefix.len() + 64))
        .filter(|sha| sha.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(|sha| bundles.join(sha))
        .collect())
}

pub fn remove(args: &RemoveArgs) -> anyhow::Result<u8> {
    let mut store = open_store()?;
    let uid = match Uuid::parse_str(args.installation.trim()) {
        Ok(uid) => uid,
        Err(_) => super::installations::find_installation(&store, &args.installation)?.uid,
    };
    let bundles = tether_install::bundle::bundles_dir(&crate::settings::data_dir()?);
    let mut unpacked = bundles_of(&store, uid, &bundles)?;
    if store.remove(uid)? {
        eprintln!("removed {uid}");
        // A bundle no other installation runs goes with it.
        for other in store.list()? {
            let kept = bundles_of(&store, other.uid, &bundles)?;
            unpacked.retain(|dir| !kept.contains(dir));
        }
        unpacked.dedup();
        for dir in unpacked {
            match tether_install::bundle::remove_unpacked(&dir) {
                Ok(()) => eprintln!("removed the unpacked bundle {}", dir.display()),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => eprintln!(
                    "warning: could not remove the unpacked bundle {}: {error}",
                    dir.display()
                ),
            }
        }
        Ok(OK)
    } else {
        Err(UsageError::new(format!("no local installation {uid} (see `tether list`)")).into())
    }
}
