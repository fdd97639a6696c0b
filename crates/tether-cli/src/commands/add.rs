//! `tether add`: a registry entry → a launch config → a test-connect → a local installation.
//! The steps are `tether-install`'s; this is the glue: flags, questions on the terminal, what
//! is printed.
//!
//! Required inputs come from `--set`/`--secret`, else are asked for on the terminal (hidden
//! for secrets); `--yes`, or no terminal, fails naming them instead. Nothing is stored unless
//! the server initialised and listed its tools. Secret inputs stay `{{NAME}}` placeholders in
//! the stored config; their values go to the secret store, written before the transaction that
//! makes the installation visible (`tether_store::Store::install_with`), so a kill at any
//! point leaves either nothing or everything.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::Arc;

use tether_install::bundle::Bundle;
use tether_install::{Choice, InstallError, Trial, TrialOptions, choose, local_name, usable};
use tether_registry::Registries;
use tether_registry::add::{Answers, BuildError, MissingInput};
use tether_registry::model::ServerJson;

use crate::cli::AddArgs;
use crate::exit::{FAILED, OK, Reported, UsageError};
use crate::output::{Progress, print};
use crate::{secrets, settings};

impl tether_install::Progress for Progress {
    fn step(&self, message: &str) {
        Progress::step(self, message);
    }
}

/// An install step's failure as the CLI reports it: the entry or a wish that cannot work is
/// bad input (exit 2); the driver's errors keep their own exit code.
pub(crate) fn failure(error: InstallError) -> anyhow::Error {
    if error.is_bad_input() {
        return UsageError::new(error.to_string()).into();
    }
    match error {
        InstallError::Driver(driver) => driver.into(),
        other => other.into(),
    }
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
    UsageError::new(error.usage_text()).into()
}

/// `tether add`.
pub async fn add(args: &AddArgs) -> anyhow::Result<u8> {
    let registries = Registries::new(settings::registry_settings(false, &args.registries)?)?;
    let (response, _, registry) = registries
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
            let choice = choose(server, asked.map(|asked| asked.as_str())).map_err(failure)?;
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
        Choice::Package(package) if choice.needs_download() => {
            let progress = Progress::new();
            let bundle = tether_install::bundle::fetch(
                &package.identifier,
                package.file_sha256.as_deref(),
                &settings::data_dir()?,
                &progress,
                settings::bundle_policy(args.require_signature, args.allow_self_signed)?,
            )
            .await
            .map_err(failure)?;
            progress.finish();
            eprintln!(
                "verified and unpacked the bundle {} {} ({}) into {}",
                bundle.manifest.name,
                bundle.manifest.version.as_deref().unwrap_or(""),
                bundle.signature,
                bundle.dir.display()
            );
            Choice::Bundle(package, Box::new(bundle))
        }
        other => other,
    };
    let outcome = add_chosen(args, (&registry, server), &choice).await;
    // Nothing stays behind from a failed add: a bundle this run unpacked goes again.
    if outcome.is_err()
        && let Choice::Bundle(_, bundle) = &choice
    {
        discard(bundle);
    }
    outcome
}

/// Removes a bundle this run unpacked, with a warning when that fails.
fn discard(bundle: &Bundle) {
    if let Err(error) = bundle.discard() {
        eprintln!(
            "warning: could not remove the unpacked bundle {}: {error}",
            bundle.dir.display()
        );
    }
}

/// `add` once the way to run it is chosen (and a bundle unpacked): inputs, test-connect,
/// install.
async fn add_chosen(
    args: &AddArgs,
    (registry, server): (&str, &ServerJson),
    choice: &Choice<'_>,
) -> anyhow::Result<u8> {
    let interactive = !args.yes && std::io::stdin().is_terminal();
    let mut given = secrets::read(&args.secrets)?;
    let known = choice.input_names();
    let key = tether_registry::smithery_add::SMITHERY_KEY_INPUT;
    // A Smithery-hosted server: the key from SMITHERY_API_KEY, the file or the store.
    if known.iter().any(|n| n == key)
        && !given.names().any(|n| n == key)
        && let Some(value) = settings::smithery_api_key()?
    {
        given.insert(key, value);
    }
    let mut answers = answers(args, given.names().map(str::to_owned).collect())?;
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
        match choice
            .build(&answers)
            .map(|b| choice.sandboxed(b, args.sandbox.as_deref()))
        {
            Ok(built) => break built.map_err(failure)?,
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
    super::installations::check_new_name(
        &local,
        &super::installations::installed()?,
        "pass --name OTHER",
    )?;

    let progress = Progress::new();
    let options = TrialOptions {
        startup_timeout: std::time::Duration::from_secs(args.timeout),
        tokens: Some(Arc::new(super::tokens::OauthTokens)),
    };
    // SIGINT or SIGTERM during the test-connect stops the server and exits 130/143.
    let trial = tether_install::test_connect(&local, &built, &given, &options, &progress);
    let trial = match super::until_signal(trial).await? {
        Ok(trial) => trial.map_err(failure)?,
        Err(signal) => return Err(signal.into()),
    };
    match trial {
        Trial::Ready(tools) => {
            progress.finish();
            let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
            let (count, sandbox) = (names.len(), tether_install::sandbox_note(&built));
            eprintln!(
                "test-connect: ready, {count} tools: {}{sandbox}",
                names.join(", ")
            );
        }
        Trial::Failed(reason) => {
            progress.finish();
            eprintln!("test-connect failed: {reason}\nnothing was stored");
            return Err(Reported(FAILED).into());
        }
    }

    let mut store = settings::open_store()?;
    let uid = tether_install::install_built(
        &mut store,
        (registry, server),
        choice,
        &local,
        &built,
        &given,
    )
    .map_err(failure)?;
    settings::announce(&store);
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
