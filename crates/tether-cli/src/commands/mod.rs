//! The subcommands, and what they share: reading specs and secrets, resolving, starting.

pub(crate) mod add;
mod audit;
mod auth;
mod call;
mod export;
mod gateway;
mod install;
mod installations;
mod policy;
mod registry;
mod run;
mod serve;
mod setup_mcp;
mod stored;
mod test;
mod tokens;
mod trust;

pub use add::add;
pub use audit::audit;
pub use auth::auth;
pub use call::call;
pub use export::export;
pub use install::{install, list, remove};
pub use registry::{search, show};
pub use run::run;
pub use serve::serve;
pub use setup_mcp::setup_mcp;
pub use stored::secrets;
pub use test::test;
pub use tokens::bearer_auth;
pub use trust::trust;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tether_config::{InputPrompt, ProcessEnv, SecretValue};
use tether_driver::{McpRuntime, Session, SessionBuilder, SpecError, SpecHost, StartOptions};
use tether_graphql::ManagedMcpClient;
use tokio::signal::unix::{SignalKind, signal};

use crate::cli::{SecretArgs, SpecArgs};
use crate::exit::{Reported, UsageError};
use crate::output::Progress;
use crate::secrets;
use crate::settings;
use crate::typed;

/// How an `--mcp` value is named in a message: as typed when [`typed::shown`] allows (a name,
/// a path), else by position, since inline JSON and what looks like a credential may hold a
/// secret.
fn mcp_label(value: &str, index: usize, count: usize) -> String {
    let position = format!("#{} (of {count}", index + 1);
    match typed::shown(value) {
        Some(shown) => format!("--mcp {}", typed::shell_quote(shown)),
        None if value.trim_start().starts_with(['{', '"', '/']) => {
            format!("--mcp value {position}, inline JSON)")
        }
        None => format!(
            "--mcp value {position}, {} characters, not shown: it may be a secret)",
            value.trim().chars().count()
        ),
    }
}

/// The harness shorthands `--mcp` reads (`claude:`, `codex:`, …): the rows with config files
/// of their own.
fn shorthands() -> Vec<String> {
    tether_harness::HARNESSES
        .iter()
        .filter(|harness| !harness.own_configs.is_empty())
        .map(|harness| format!("{}:", harness.name))
        .collect()
}

/// The error for an `--mcp` value that is no spec: one line naming what was typed and what is
/// wrong with it, and a hint line with what `--mcp` accepts (the installations' names and the
/// harness shorthands, a near one first).
fn spec_error(
    value: &str,
    index: usize,
    count: usize,
    error: tether_driver::DriverError,
    installed: &[(String, uuid::Uuid)],
) -> anyhow::Error {
    use tether_driver::DriverError;
    let label = mcp_label(value, index, count);
    let trimmed = value.trim();
    let path = Path::new(trimmed);
    let reason = match error {
        DriverError::Config { source, .. } => {
            return UsageError::new(format!("{label}: {source}")).into();
        }
        DriverError::InvalidSpec { reason } if path.is_file() => {
            return UsageError::new(format!("{label}: {reason}")).into();
        }
        _ if path.exists() => " exists but is not a file".to_owned(),
        _ if trimmed.contains(['/', '\\'])
            || trimmed.ends_with(".json")
            || trimmed.ends_with(".jsonc") =>
        {
            ": no such file".to_owned()
        }
        _ => {
            " is not an installed server's name, a harness shorthand, a UUID, a file or inline JSON"
                .to_owned()
        }
    };
    let mut names: Vec<&str> = installed.iter().map(|(name, _)| name.as_str()).collect();
    names.dedup();
    let shorthands = shorthands();
    let near = typed::shown(value).and_then(|shown| {
        typed::closest(
            shown,
            names
                .iter()
                .copied()
                .chain(shorthands.iter().map(String::as_str)),
        )
    });
    let installed_text = if names.is_empty() {
        "none yet".to_owned()
    } else {
        names.join(", ")
    };
    let hint = format!(
        "{}--mcp takes an installed server's name ({installed_text}), a harness's servers ({}), a UUID, a JSON file or inline JSON",
        near.map(|word| format!("did you mean {word}? "))
            .unwrap_or_default(),
        shorthands.join(", ")
    );
    UsageError::new(format!("{label}{reason}\nhint: {hint}")).into()
}

/// What the driver's [`SessionBuilder`] asks of this program: the store and the managed
/// client as the settings open them, the terminal for inputs, the stored OAuth tokens, the
/// progress line, and the wording of a spec that cannot be read.
struct Host<'a> {
    specs: &'a SpecArgs,
    progress: &'a Progress,
}

impl SpecHost for Host<'_> {
    type Error = anyhow::Error;

    fn refuse(&self, error: SpecError) -> anyhow::Error {
        match error {
            SpecError::Refused(text) => UsageError::new(text).into(),
            SpecError::NotASpec {
                index,
                error,
                installed,
            } => spec_error(
                &self.specs.mcp[index],
                index,
                self.specs.mcp.len(),
                *error,
                &installed,
            ),
            SpecError::Driver(error) => (*error).into(),
        }
    }

    fn store_exists(&self) -> anyhow::Result<bool> {
        Ok(settings::data_dir()?
            .join(tether_store::DATABASE_FILE)
            .is_file())
    }

    fn open_store(&self) -> anyhow::Result<tether_store::Store> {
        settings::open_store()
    }

    fn managed_client(&self) -> anyhow::Result<Option<Arc<dyn ManagedMcpClient>>> {
        settings::managed_client(self.specs.server_url.as_deref(), self.specs.managed_timeout)
    }

    /// Asks as VS Code would, with its description, hidden when `password: true`; only on a
    /// terminal.
    fn ask_input(&self, input: &InputPrompt) -> anyhow::Result<Option<SecretValue>> {
        if !std::io::IsTerminal::is_terminal(&std::io::stdin()) {
            return Ok(None);
        }
        let value = secrets::ask(&input.id, input.description.as_deref(), input.password)?;
        Ok(Some(value))
    }

    fn step(&self, step: &str) {
        self.progress.step(step);
    }

    fn apply_tokens(&self, session: Session) -> BoxFuture<'_, Session> {
        Box::pin(tokens::apply_stored_tokens(session))
    }
}

/// The `--mcp` values and `--task` of `specs`, read once by the driver.
fn read_specs(specs: &SpecArgs, host: &Host<'_>) -> anyhow::Result<SessionBuilder> {
    Ok(
        SessionBuilder::read(&specs.mcp, specs.task.as_deref(), host)?
            .with_pass_env(&specs.pass_env),
    )
}

/// Reads specs and secrets, resolves local-first and renders: the run's [`Session`]. Its
/// masking set (the secrets' values and every sensitive value of every rendered server) is
/// registered with the log layer before anything else can print.
pub async fn session(
    specs: &SpecArgs,
    secret_args: &SecretArgs,
    progress: &Progress,
) -> anyhow::Result<Session> {
    let host = Host { specs, progress };
    let builder = read_specs(specs, &host)?;
    // Secrets may be typed at a prompt (`NAME=prompt`, a VS Code input): no spinner meanwhile.
    let secrets = progress.suspend(|| {
        let mut secrets = secrets::read(secret_args)?;
        builder.ask_for_inputs(&mut secrets, &host)?;
        anyhow::Ok(secrets)
    })?;
    builder.build(secrets, ProcessEnv, &host).await
}

/// VS Code inputs kept as references: what [`session_keeping_inputs`] filled them with.
#[derive(Default)]
pub struct KeptInputs {
    /// The inputs the specs' servers use, in spec order.
    pub prompts: Vec<tether_config::InputPrompt>,
    /// The values that filled them (`${input:ID}` each), to find them in rendered servers.
    pub references: Vec<tether_config::SecretValue>,
}

/// [`session`] for a VS Code export: every `${input:ID}` the specs use is filled with the
/// text `${input:ID}` itself (VS Code prompts for it), so no value is asked for or read for it,
/// even when a `--secret ID=…` gives one.
pub async fn session_keeping_inputs(
    specs: &SpecArgs,
    secret_args: &SecretArgs,
    progress: &Progress,
) -> anyhow::Result<(Session, KeptInputs)> {
    let host = Host { specs, progress };
    let builder = read_specs(specs, &host)?;
    let prompts = builder.used_inputs();
    let mut secrets = progress.suspend(|| secrets::read_except(secret_args, &prompts))?;
    let mut references = Vec::with_capacity(prompts.len());
    for input in &prompts {
        secrets.insert(input.id.clone(), format!("${{input:{}}}", input.id));
    }
    // What rendering places are clones of the stored values: keep one of each to find them by.
    references.extend(prompts.iter().filter_map(|input| secrets.get(&input.id)));
    let session = builder.build(secrets, ProcessEnv, &host).await?;
    Ok((
        session,
        KeptInputs {
            prompts,
            references,
        },
    ))
}

/// Resolves and renders without the stored OAuth tokens (which applying may refresh): for
/// what only looks at the servers (`auth status` finding an installation's URL). The masking
/// set is registered as for a run.
pub async fn resolve_only(
    specs: &SpecArgs,
    secret_args: &SecretArgs,
    progress: &Progress,
) -> anyhow::Result<Session> {
    let host = Host { specs, progress };
    let builder = read_specs(specs, &host)?;
    let secrets = secrets::read(secret_args)?;
    builder.resolve(secrets, ProcessEnv, &host).await
}

/// What the specs of `session` declare when they declare no server: "file ./mcp.json declares
/// no MCP servers", for a line of its own.
fn nothing_declared(session: &Session) -> String {
    let labels: Vec<String> = session
        .specs()
        .iter()
        .enumerate()
        .map(|(index, spec)| spec.label(Some(index)))
        .collect();
    match labels.as_slice() {
        [one] => format!("{one} declares no MCP servers (its server map is empty)"),
        many => format!(
            "{} declare no MCP servers (their server maps are empty)",
            many.join(", ")
        ),
    }
}

/// A command that starts servers (`run`, `test`, `serve`, `call`, `trust`) with none to start
/// is an input error: the specs were read, and none of them declares a server.
pub fn require_servers(session: &Session) -> anyhow::Result<()> {
    if session.servers().is_empty() {
        return Err(
            UsageError::new(format!("nothing to start: {}", nothing_declared(session))).into(),
        );
    }
    Ok(())
}

/// `tether export` of specs that declare no server writes the empty config it was asked for,
/// and says so on stderr.
pub fn warn_if_no_servers(session: &Session) {
    if session.servers().is_empty() {
        eprintln!(
            "tether export: {}, so the config holds none",
            nothing_declared(session)
        );
    }
}

/// Exit code for a run stopped by a signal.
fn signal_exit(kind: SignalKind) -> u8 {
    u8::try_from(128 + kind.as_raw_value()).unwrap_or(1)
}

/// Runs `work` until it completes or SIGINT/SIGTERM arrives. A signal drops `work` (for a
/// startup that kills every child's process group) and gives the exit code it calls for
/// (130/143) as `Err`.
pub async fn until_signal<T>(work: impl Future<Output = T>) -> anyhow::Result<Result<T, Reported>> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(tokio::select! {
        done = work => Ok(done),
        _ = term.recv() => Err(Reported(signal_exit(SignalKind::terminate()))),
        _ = int.recv() => Err(Reported(signal_exit(SignalKind::interrupt()))),
    })
}

/// Starts every server of `session`; SIGINT or SIGTERM during startup stops them and exits
/// 130/143.
pub async fn start(
    session: &Session,
    options: &StartOptions,
    progress: &Progress,
) -> anyhow::Result<McpRuntime> {
    progress.step(&match session.servers().len() {
        1 => "starting 1 MCP server…".to_owned(),
        n => format!("starting {n} MCP servers…"),
    });
    let runtime = until_signal(session.start(options)).await??;
    Ok(runtime?)
}

/// Start options from a timeout in seconds and `--sandbox` (else `sandbox` in config.toml).
pub fn start_options(
    timeout_secs: u64,
    strict: bool,
    sandbox: &crate::cli::SandboxArg,
) -> anyhow::Result<StartOptions> {
    let sandbox = sandbox.sandbox.as_deref();
    Ok(StartOptions {
        startup_timeout: Duration::from_secs(timeout_secs.max(1)),
        strict,
        bearer_auth: Some(tokens::bearer_auth()),
        sandbox: settings::sandbox(sandbox)?,
        sandbox_wins: sandbox.is_some(),
        ..StartOptions::default()
    })
}

/// Says on stderr which sandbox each stdio server of `session` runs under and what it enforces.
pub fn announce_sandbox(command: &str, session: &Session, options: &StartOptions) {
    for line in options.sandbox_lines(session.servers()) {
        tether_log::eprintln_masked!("tether {command}: {line}");
    }
}
