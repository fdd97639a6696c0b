//! `tether install`, `tether list`, `tether remove`: the local store.

use serde_json::json;
use tether_config::{Origin, VariableValue, parse_config};
use tether_driver::McpSpec;
use tether_store::Store;
use uuid::Uuid;

use crate::cli::{InstallArgs, ListArgs, RemoveArgs};
use crate::exit::{OK, UsageError};
use crate::output::{print, print_json};
use crate::{secrets, settings};

fn open_store() -> anyhow::Result<Store> {
    settings::open_store()
}

pub fn install(args: &InstallArgs) -> anyhow::Result<u8> {
    let name = args.name.trim();
    if name.is_empty() {
        return Err(UsageError::new("the installation needs a non-empty NAME").into());
    }
    let text = match McpSpec::parse(&args.from)? {
        McpSpec::Json { text, .. } => text,
        McpSpec::Uuid(_) => {
            return Err(
                UsageError::new("--from takes a JSON file or inline JSON, not a UUID").into(),
            );
        }
    };
    let parsed = parse_config(&text, Origin::User)?;
    if !parsed.references.is_empty() {
        return Err(UsageError::new(
            "--from holds a warp_id reference; install takes a server config with a command or url",
        )
        .into());
    }
    let [server] = <[_; 1]>::try_from(parsed.servers).map_err(|servers: Vec<_>| {
        UsageError::new(format!(
            "--from holds {} servers; install takes exactly one (install each separately)",
            servers.len()
        ))
    })?;
    let mut installation = server.into_installation();
    installation.server.name = name.to_owned();
    // Values given now are stored for every run; the rest stay placeholders for run secrets.
    let given = secrets::read(&args.secrets)?;
    for variable in installation
        .server
        .variable_names()
        .map(str::to_owned)
        .collect::<Vec<_>>()
    {
        if let Some(value) = given.get(&variable) {
            installation
                .values
                .insert(variable, VariableValue::new(value.clone()));
        }
    }
    let mut store = open_store()?;
    let uid = store.install(&installation)?;
    settings::announce(&store);
    print(&format!("{uid}\n"));
    // What a run must still supply: the placeholders left after applying what was given now.
    let open: Vec<String> = installation
        .render(&given, &tether_config::EmptyEnv)
        .unresolved_placeholders()
        .iter()
        .cloned()
        .collect();
    if !open.is_empty() {
        eprintln!(
            "installed '{name}'; pass these at run time with --secret: {}",
            open.join(", ")
        );
    }
    Ok(OK)
}

pub fn list(args: &ListArgs) -> anyhow::Result<u8> {
    let entries = open_store()?.list()?;
    if args.json {
        let items: Vec<_> = entries
            .iter()
            .map(|e| json!({"uid": e.uid, "name": e.name, "variables": e.variable_names}))
            .collect();
        print_json(&json!({ "installations": items }));
        return Ok(OK);
    }
    if entries.is_empty() {
        eprintln!("no local installations (add one with `tether install NAME --from SPEC`)");
        return Ok(OK);
    }
    let width = entries
        .iter()
        .map(|e| e.name.chars().count())
        .max()
        .unwrap_or(4)
        .max(4);
    let mut out = format!("{:36}  {:width$}  VARIABLES\n", "UUID", "NAME");
    for entry in &entries {
        out.push_str(&format!(
            "{}  {:width$}  {}\n",
            entry.uid,
            entry.name,
            entry.variable_names.join(", ")
        ));
    }
    print(&out);
    Ok(OK)
}

pub fn remove(args: &RemoveArgs) -> anyhow::Result<u8> {
    let uid = Uuid::parse_str(args.uid.trim())
        .map_err(|_| UsageError::new("remove takes an installation UUID (see `tether list`)"))?;
    if open_store()?.remove(uid)? {
        eprintln!("removed {uid}");
        Ok(OK)
    } else {
        Err(UsageError::new(format!("no local installation {uid} (see `tether list`)")).into())
    }
}
