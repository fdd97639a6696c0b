//! `tether add`: a registry entry → a launch config → a test-connect → a local installation.
//!
//! Required inputs come from `--set`/`--secret`, else are asked for on the terminal (hidden
//! for secrets); `--yes`, or no terminal, fails naming them instead. Nothing is stored unless
//! the server initialised and listed its tools. Secret inputs stay `{{NAME}}` placeholders in
//! the stored config; their values go to the secret store, written before the transaction that
//! makes the installation visible (`tether_store::Store::install_with`), so a kill at any
//! point leaves either nothing or everything.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::Path;

use anyhow::Context;
use serde_json::json;
use tether_config::{Origin, parse_config};
use tether_driver::{McpSpec, ServerStatus};
use tether_registry::add::{
    Answers, BuildError, BuiltConfig, MissingInput, package_config, remote_config,
};
use tether_registry::mcpb::bundle_config;
use tether_registry::model::{Package, Remote, ServerJson};
use tether_registry::{Registries, runner};

use crate::bundle::Bundle;
use crate::cli::{AddArgs, PackageArg, SpecArgs};
use crate::exit::{FAILED, OK, Reported, UsageError};
use crate::output::{Progress, print};
use crate::{secrets, settings};

/// What `add` installs: one package or one remote of the entry, or a downloaded bundle.
pub(crate) enum Choice<'a> {
    Package(&'a Package),
    Remote(&'a Remote),
    /// An mcpb package, downloaded, verified and unpacked.
    Bundle(&'a Package, Box<Bundle>),
}

impl Choice<'_> {
    pub(crate) fn describe(&self) -> String {
        match self {
            Choice::Package(p) => format!(
                "{} package {}{}",
                p.registry_type,
                p.identifier,
                p.version
                    .as_deref()
                    .map(|v| format!(" {v}"))
                    .unwrap_or_default()
            ),
            Choice::Remote(r) => format!("remote {} ({})", r.url, r.kind),
            Choice::Bundle(p, _) => Choice::Package(p).describe(),
        }
    }

    /// The names of every input of this option (what `--set` and `--secret` may name).
    fn input_names(&self) -> Vec<String> {
        let option = match self {
            Choice::Package(p) => tether_registry::package_option(p),
            Choice::Remote(r) => tether_registry::remote_option(r),
            Choice::Bundle(_, bundle) => return bundle.manifest.input_names(),
        };
        option.inputs.into_iter().map(|i| i.name).collect()
    }

    pub(crate) fn build(&self, answers: &Answers) -> Result<BuiltConfig, BuildError> {
        match self {
            Choice::Package(p) => package_config(p, answers),
            Choice::Remote(r) => remote_config(r, answers),
            Choice::Bundle(_, bundle) => {
                bundle_config(&bundle.manifest, &bundle.dir.to_string_lossy(), answers)
            }
        }
    }
}

/// Whether `program` is an executable file in a `PATH` directory.
fn on_path(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(Path::new(&dir).join(program))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// `--package` decides; else the first stdio package whose runner is on PATH, else the first
/// remote.
pub(crate) fn choose<'a>(
    server: &'a ServerJson,
    asked: Option<PackageArg>,
) -> anyhow::Result<Choice<'a>> {
    let available = server.transports().join(", ");
    if let Some(asked) = asked {
        let kind = asked.as_str();
        if kind == "remote" {
            return server.remotes.first().map(Choice::Remote).ok_or_else(|| {
                UsageError::new(format!(
                    "{} has no remote (it has: {available})",
                    server.name
                ))
                .into()
            });
        }
        return server
            .packages
            .iter()
            .find(|p| p.registry_type == kind)
            .map(Choice::Package)
            .ok_or_else(|| {
                UsageError::new(format!(
                    "{} has no {kind} package (it has: {available})",
                    server.name
                ))
                .into()
            });
    }
    if let Some(first) = usable(server).into_iter().next() {
        return Ok(first);
    }
    let runners: Vec<String> = server.packages.iter().map(runner).collect();
    Err(UsageError::new(format!(
        "{} has no remote and none of its packages' runners is on PATH ({}); install one, or pick a package with --package",
        server.name,
        runners.join(", ")
    ))
    .into())
}

/// What `add` can use without `--package`, in the order it prefers them: each stdio package
/// whose runner is on PATH, then each remote.
fn usable(server: &ServerJson) -> Vec<Choice<'_>> {
    server
        .packages
        .iter()
        .filter(|p| p.transport.kind == "stdio" && p.registry_type != "mcpb" && on_path(&runner(p)))
        .map(Choice::Package)
        .chain(server.remotes.iter().map(Choice::Remote))
        // Last: a bundle is downloaded and unpacked before it can even be tried.
        .chain(
            server
                .packages
                .iter()
                .filter(|p| p.registry_type == "mcpb" && p.runtime_hint.is_none())
                .map(Choice::Package),
        )
        .collect()
}

/// Lets the user pick one of `choices` (more than one) by number on the terminal; an empty
/// answer takes the first, the one `choose` would take.
fn pick<'a>(name: &str, mut choices: Vec<Choice<'a>>) -> anyhow::Result<Choice<'a>> {
    eprintln!("{name} can run in {} ways:", choices.len());
    for (number, choice) in choices.iter().enumerate() {
        eprintln!("  {}. {}", number + 1, choice.describe());
    }
    for _ in 0..3 {
        let answer = secrets::ask("which one (Enter for 1)", None, false)?;
        let answer = answer.expose().trim();
        if answer.is_empty() {
            return Ok(choices.swap_remove(0));
        }
        match answer.parse::<usize>() {
            Ok(number) if (1..=choices.len()).contains(&number) => {
                return Ok(choices.swap_remove(number - 1));
            }
            _ => eprintln!("answer a number from 1 to {}", choices.len()),
        }
    }
    Err(UsageError::new(format!(
        "no choice made for {name}; pass --package npm|pypi|oci|nuget|mcpb|remote"
    ))
    .into())
}

fn answers(args: &AddArgs, secret_names: Vec<String>) -> anyhow::Result<Answers> {
    let mut answers = Answers {
        values: BTreeMap::new(),
        secrets: secret_names,
    };
    for pair in &args.set {
        let (name, value) = pair.split_once('=').ok_or_else(|| {
            UsageError::new(format!(
                "--set takes NAME=VALUE (got {name:?} without '=')",
                name = pair
            ))
        })?;
        answers.set(name, value);
    }
    Ok(answers)
}

/// Asks for each missing input on the terminal: hidden for a secret (into `given`), a line for
/// a value (into `answers`).
fn ask(
    missing: &[MissingInput],
    answers: &mut Answers,
    given: &mut tether_config::Secrets,
) -> anyhow::Result<()> {
    for input in missing {
        let value = secrets::ask(&input.name, input.description.as_deref(), input.secret)?;
        if input.secret {
            given.insert(input.name.clone(), value);
            answers.secret(&input.name);
        } else {
            answers.set(&input.name, value.expose());
        }
    }
    Ok(())
}

fn build_error(error: BuildError) -> anyhow::Error {
    match error {
        BuildError::Missing(missing) => {
            let mut text = String::from("the entry needs values for:");
            for input in &missing {
                let flag = if input.secret {
                    format!("--secret {}=SOURCE", input.name)
                } else {
                    format!("--set {}=VALUE", input.name)
                };
                text.push_str(&format!(
                    "\n  {flag}{}",
                    input
                        .description
                        .as_deref()
                        .map(|d| format!("  ({d})"))
                        .unwrap_or_default()
                ));
            }
            UsageError::new(text).into()
        }
        other => UsageError::new(other.to_string()).into(),
    }
}

/// How a test-connect went.
pub(crate) enum Trial {
    /// Initialised and listed these tools.
    Ready(Vec<tether_driver::ToolInfo>),
    /// Did not get there, for this reason (secrets masked).
    Failed(String),
}

/// Starts `built` as `local` in a scratch directory with `given`, runs initialize and
/// tools/list within `timeout_secs`, and shuts it down: nothing is stored. Prints nothing on
/// stdout (`tether setup-mcp` speaks MCP there).
pub(crate) async fn test_connect(
    local: &str,
    built: &BuiltConfig,
    given: &tether_config::Secrets,
    timeout_secs: u64,
    progress: &Progress,
) -> anyhow::Result<Trial> {
    let scratch = tempfile::tempdir().context("creating a scratch directory")?;
    let mut trial = built.server.clone();
    if trial.get("command").is_some() {
        trial["cwd"] = json!(scratch.path());
    }
    let specs = SpecArgs {
        mcp: Vec::new(),
        task: None,
        server_url: None,
        managed_timeout: None,
        pass_env: Vec::new(),
    };
    let parsed = vec![McpSpec::parse(&json!({ local: trial }).to_string())?];
    let session = super::session_with(&specs, parsed, None, given.clone(), progress).await?;
    let runtime = super::start(
        &session,
        &super::start_options(timeout_secs, false),
        progress,
    )
    .await?;
    let reports = runtime.reports().to_vec();
    runtime.shutdown().await;
    Ok(match reports.into_iter().next().map(|r| r.status) {
        Some(ServerStatus::Ready { tools }) => Trial::Ready(tools),
        Some(ServerStatus::Failed { reason }) => Trial::Failed(reason),
        // A registry entry has no `disabled` field; an empty report means nothing started.
        Some(ServerStatus::Disabled) | None => Trial::Failed("the server did not start".to_owned()),
    })
}

/// Stores `built` as the local installation `local` of `server` (through `choice`), with
/// `given`'s values in the secret store, atomically: its UUID and the open store.
pub(crate) fn install_built(
    server: &ServerJson,
    choice: &Choice<'_>,
    local: &str,
    built: &BuiltConfig,
    given: &tether_config::Secrets,
) -> anyhow::Result<(uuid::Uuid, tether_store::Store)> {
    let text = json!({ local: built.server }).to_string();
    let parsed = parse_config(&text, Origin::User)?;
    let [parsed_server] = <[_; 1]>::try_from(parsed.servers)
        .map_err(|_| anyhow::anyhow!("the built config does not hold exactly one server"))?;
    let mut installation = parsed_server.into_installation();
    installation.server.name = local.to_owned();
    let source = tether_store::InstallSource {
        registry: "official".to_owned(),
        name: server.name.clone(),
        version: server.version.clone(),
        package: choice.describe(),
    };
    let mut store = settings::open_store()?;
    let uid = store.install_with(&installation, given, Some(&source))?;
    settings::announce(&store);
    Ok((uid, store))
}

/// The local name an entry installs under: the part after its last `/`.
pub(crate) fn local_name(server: &ServerJson) -> String {
    server
        .name
        .rsplit('/')
        .next()
        .unwrap_or(&server.name)
        .to_owned()
}

/// `tether add`.
pub async fn add(args: &AddArgs) -> anyhow::Result<u8> {
    if args.name.starts_with('@') {
        return Err(UsageError::new(format!(
            "{} looks like a Smithery name; tether add takes entries of the official registry only (for now); `tether show {} --source smithery` describes it",
            args.name, args.name
        ))
        .into());
    }
    let registries = Registries::new(settings::registry_settings(false)?)?;
    let (response, _) = registries
        .official_server(&args.name, args.version.as_deref())
        .await?;
    let server = &response.server;
    if response.status().is_hidden() {
        eprintln!(
            "warning: {} is {} in the registry",
            server.name,
            response.status().as_str()
        );
    }
    // Several usable ways and a person at the terminal: ask which; otherwise the preferred one
    // (a local package whose runner is on PATH, else a remote), saying what else there was.
    let interactive = !args.yes && std::io::stdin().is_terminal();
    let choice = match args.package {
        None if interactive && usable(server).len() > 1 => pick(&server.name, usable(server))?,
        asked => {
            let choice = choose(server, asked)?;
            let others = usable(server).len().saturating_sub(1);
            if asked.is_none() && others > 0 {
                eprintln!(
                    "{} has {others} other way{} to run (see `tether show {}`); --package picks one",
                    server.name,
                    if others == 1 { "" } else { "s" },
                    server.name
                );
            }
            choice
        }
    };
    eprintln!(
        "using the {} of {} {}",
        choice.describe(),
        server.name,
        server.version
    );
    let choice = match choice {
        Choice::Package(package)
            if package.registry_type == "mcpb" && package.runtime_hint.is_none() =>
        {
            let progress = Progress::new();
            let bundle = crate::bundle::fetch(
                &package.identifier,
                package.file_sha256.as_deref(),
                &settings::data_dir()?,
                &progress,
            )
            .await?;
            progress.finish();
            eprintln!(
                "verified and unpacked the bundle {} {} into {}",
                bundle.manifest.name,
                bundle.manifest.version.as_deref().unwrap_or(""),
                bundle.dir.display()
            );
            Choice::Bundle(package, Box::new(bundle))
        }
        other => other,
    };
    let outcome = add_chosen(args, server, &choice).await;
    // Nothing stays behind from a failed add: a bundle this run unpacked goes again.
    if outcome.is_err()
        && let Choice::Bundle(_, bundle) = &choice
    {
        bundle.discard();
    }
    outcome
}

/// `add` once the way to run it is chosen (and a bundle unpacked): inputs, test-connect,
/// install.
async fn add_chosen(
    args: &AddArgs,
    server: &ServerJson,
    choice: &Choice<'_>,
) -> anyhow::Result<u8> {
    let interactive = !args.yes && std::io::stdin().is_terminal();
    let mut given = secrets::read(&args.secrets)?;
    let mut answers = answers(args, given.names().map(str::to_owned).collect())?;
    let known = choice.input_names();
    if let Some(unknown) = answers.values.keys().find(|name| !known.contains(name)) {
        return Err(UsageError::new(format!(
            "--set {unknown}: the {} has no input named {unknown} (its inputs: {})",
            choice.describe(),
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        ))
        .into());
    }
    // Ask for what is missing, on a terminal and without --yes; a wrong answer (a value
    // outside the choices) is an error like a wrong --set.
    let mut rounds = 0;
    let built = loop {
        match choice.build(&answers) {
            Ok(built) => break built,
            Err(BuildError::Missing(missing)) if interactive && rounds < 3 => {
                rounds += 1;
                eprintln!(
                    "{} needs {} more input{}:",
                    server.name,
                    missing.len(),
                    if missing.len() == 1 { "" } else { "s" }
                );
                ask(&missing, &mut answers, &mut given)?;
            }
            Err(error) => return Err(build_error(error)),
        }
    };
    let local = args
        .local_name
        .clone()
        .unwrap_or_else(|| local_name(server));

    let progress = Progress::new();
    match test_connect(&local, &built, &given, args.timeout, &progress).await? {
        Trial::Ready(tools) => {
            progress.finish();
            let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
            eprintln!(
                "test-connect: ready, {} tools: {}",
                names.len(),
                names.join(", ")
            );
        }
        Trial::Failed(reason) => {
            progress.finish();
            eprintln!("test-connect failed: {reason}\nnothing was stored");
            return Err(Reported(FAILED).into());
        }
    }

    let (uid, store) = install_built(server, choice, &local, &built, &given)?;
    print(&format!("{uid}\n"));
    let stored = store.stored(uid)?;
    let secrets_stored: Vec<&str> = stored
        .iter()
        .filter(|s| s.literal)
        .map(|s| s.name.as_str())
        .collect();
    if secrets_stored.is_empty() {
        eprintln!("added '{local}'; use it with: tether test --mcp {uid}");
    } else {
        let place = match stored.iter().find(|s| s.literal).map(|s| s.location) {
            Some(tether_store::Location::File) => {
                format!("the file {}", store.secret_store().file_path().display())
            }
            _ => "the OS credential store".to_owned(),
        };
        eprintln!(
            "added '{local}'; its secrets ({}) are stored in {place}; use it with: tether test --mcp {uid}",
            secrets_stored.join(", ")
        );
    }
    Ok(OK)
}
