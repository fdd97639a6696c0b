//! Handing the run's servers to a third-party harness and running it.
//!
//! - A stdio server is `tether __exec SOCKET ID` in the harness's config (`exec_shim.rs`): its
//!   command, args, env and cwd reach it from tether's memory over a socket in the run
//!   directory, byte-exact, and no other server or the harness sees them.
//! - A URL server with headers or a secret in its URL is `http://127.0.0.1:PORT/KEY` plus a
//!   per-run bearer token in the harness's config (`bridge.rs`): tether forwards to the real
//!   URL with the real headers, so neither the harness nor its environment holds them.
//! - Secrets stay off command lines always, and off disk wherever the harness can read a value
//!   from its environment: what still needs one (a plain URL server has none; a stdio server's
//!   values go through the shim) is written as a reference (`${TETHER_SECRET_n}`, `{env:…}`,
//!   Codex's `env_http_headers`) and the value goes only into the harness process's
//!   environment.
//! - Files tether writes live in a private run directory (`$TETHER_HOME/run/<pid>-<random>`,
//!   0700, files 0600), removed when the run ends — normally, on error, or on SIGTERM/SIGHUP
//!   (forwarded to the harness first). The harness runs under tether's supervisor
//!   (`tether_driver::supervisor`): if tether is SIGKILLed, the supervisor kills the harness and
//!   every process it started and removes the run directory. A directory left anyway (the
//!   supervisor killed too) is swept by the next run. The user's own config files are never
//!   written.

use std::ffi::OsString;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::Context;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tether_config::{RenderedServer, RenderedTransport, SecretValue};
use tether_driver::supervisor::{SuperviseOptions, supervised_command};
use tether_env::EnvVars;
use tether_harness::{Delivery, Strict, export_with_references};
use tokio::signal::unix::{SignalKind, signal};

use crate::bridge::{self, Bridge};
use crate::cli::HarnessArg;
use crate::exec_shim::LaunchChannel;
use crate::exit::UsageError;
use crate::settings;

/// What a harness process gets: extra arguments after the program, environment, and the
/// private directory holding any files (removed on drop).
struct Prepared {
    args: Vec<OsString>,
    env: Vec<(String, SecretValue)>,
    plain_env: Vec<(String, OsString)>,
    /// Serves the stdio servers' launches to the exec shims the harness starts.
    launches: Option<LaunchChannel>,
    /// Forwards the harness's requests to URL servers, adding their real headers.
    bridge: Option<Bridge>,
    dir: RunDir,
}

/// A private run directory, removed on drop.
pub struct RunDir {
    path: PathBuf,
}

impl RunDir {
    /// Creates `$TETHER_HOME/run/<pid>-<random>` (0700), sweeping directories of dead runs.
    pub fn create() -> anyhow::Result<Self> {
        let root = settings::data_dir()?.join("run");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&root)
            .with_context(|| format!("cannot create {}", root.display()))?;
        sweep_stale(&root);
        let name = format!("{}-{}", std::process::id(), uuid::Uuid::new_v4().simple());
        let path = root.join(name);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        Ok(Self { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `name` in the directory with mode 0600.
    pub fn write(&self, name: &str, text: &str) -> anyhow::Result<PathBuf> {
        use std::io::Write;
        let path = self.path.join(name);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        file.write_all(text.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(path)
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            tracing::warn!(
                "cannot remove the run directory {}: {e}",
                self.path.display()
            );
        }
    }
}

/// Removes run directories whose tether process is gone (a SIGKILLed run cannot clean up).
fn sweep_stale(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let alive = Path::new("/proc").join(pid.to_string()).exists();
        if !alive && pid != i32::try_from(std::process::id()).unwrap_or(-1) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn prepare(
    harness: HarnessArg,
    servers: &[RenderedServer],
    user_args: &[String],
    strict: bool,
    no_secrets_on_disk: bool,
    hidden_env: &[String],
) -> anyhow::Result<Prepared> {
    let HarnessArg::Handoff(harness) = harness else {
        return Err(UsageError::new("the built-in harness takes no command").into());
    };
    let Some(run) = harness.run else {
        return Err(UsageError::new(format!(
            "{} is an export format, not a harness tether can run",
            harness.name
        ))
        .into());
    };
    let dir = RunDir::create()?;
    // A config handed over in a variable would reach every stdio server the harness starts:
    // the shim removes it too.
    let mut hidden_env = hidden_env.to_vec();
    if let Delivery::InlineEnv { env } = run.delivery {
        hidden_env.push(env.to_owned());
    }
    // Each stdio server goes through the exec shim: the harness sees `tether __exec SOCKET ID`
    // and none of the server's values; each URL server with headers or a secret URL goes
    // through the loopback bridge: the harness sees `http://127.0.0.1:PORT/KEY` and a per-run
    // token (issue 10 item 3).
    let mut launches: Option<LaunchChannel> = None;
    let mut bridge: Option<Bridge> = None;
    let mut routed = Vec::with_capacity(servers.len());
    for server in servers {
        let server = match &server.transport {
            RenderedTransport::Stdio { .. } => {
                let channel = match launches.as_mut() {
                    Some(channel) => channel,
                    None => {
                        let program =
                            std::env::current_exe().context("cannot locate tether's executable")?;
                        launches.insert(LaunchChannel::bind(
                            dir.path(),
                            program,
                            hidden_env.clone(),
                        )?)
                    }
                };
                channel.route(server)
            }
            RenderedTransport::Remote { .. } if bridge::needs_bridge(server) => {
                let bridge = match bridge.as_mut() {
                    Some(bridge) => bridge,
                    None => bridge.insert(Bridge::bind()?),
                };
                bridge.route(server)?
            }
            RenderedTransport::Remote { .. } => server.clone(),
        };
        routed.push(server);
    }
    let export = export_with_references(&routed, harness.format, no_secrets_on_disk)?;
    for field in &export.inlined {
        tracing::info!(
            "{field}: the harness cannot read this value from its environment; it is in a private 0600 file removed after the run"
        );
    }
    for note in export.config.notes() {
        eprintln!("note: {note}");
    }
    let mut config = export.config;
    let mut args = Vec::new();
    let mut plain_env = Vec::new();
    if let Some(cache_env) = run.private_cache_env {
        // Claude writes each server's expanded headers to `$XDG_CACHE_HOME/claude-cli-nodejs/
        // …/mcp-logs-*`: point its cache at the run directory (removed afterwards), and give
        // the servers it starts the user's own cache directory back.
        let user_cache = std::env::var_os(cache_env).or_else(|| {
            std::env::var_os(EnvVars::HOME)
                .map(|h| PathBuf::from(h).join(".cache").into_os_string())
        });
        if let Some(user_cache) = user_cache.as_ref().and_then(|v| v.to_str()) {
            config.set_default_stdio_env(cache_env, user_cache);
        }
        let cache = dir.path().join(format!("{}-cache", harness.name));
        std::fs::DirBuilder::new().mode(0o700).create(&cache)?;
        plain_env.push((cache_env.to_owned(), cache.into_os_string()));
    }
    match run.delivery {
        Delivery::FileFlag { flag } => {
            // One argument, `FLAG=FILE`, before the user's: Claude's `--mcp-config` takes
            // several values and would swallow a subcommand such as `mcp list` otherwise.
            let file = dir.write(harness.config_file, &config.to_text())?;
            let mut arg = OsString::from(flag);
            arg.push("=");
            arg.push(file.as_os_str());
            args.push(arg);
        }
        Delivery::PrivateHome {
            env,
            default_home,
            config_dir,
        } => {
            // A private home: the user's own config file with tether's servers in place of
            // theirs, every other entry of their home (credentials, sessions, trusted folders)
            // linked in.
            let user_home = std::env::var_os(env).map(PathBuf::from).or_else(|| {
                std::env::var_os(EnvVars::HOME).map(|h| PathBuf::from(h).join(default_home))
            });
            let user_dir = user_home.map(|h| join_nonempty(h, config_dir));
            let home = PathBuf::from(format!("{}-home", harness.name));
            // Strict: the allowed list in the settings too, which subcommands read.
            let allowed: Option<(&[&str], Vec<String>)> = match run.strict {
                Strict::AllowedNames { setting, .. } if strict => {
                    Some((setting, servers.iter().map(|s| s.name.clone()).collect()))
                }
                _ => None,
            };
            private_home(
                &dir,
                user_dir.as_deref(),
                &join_nonempty(home.clone(), config_dir),
                harness.config_file,
                |user_text| {
                    let merged = config.merged_into(user_text)?;
                    Ok(match &allowed {
                        Some((setting, names)) => with_setting(&merged, setting, names)?,
                        None => merged,
                    })
                },
            )?;
            plain_env.push((env.to_owned(), dir.path().join(home).into_os_string()));
        }
        Delivery::InlineEnv { env } => {
            // The whole config through the environment: no file at all.
            plain_env.push((env.to_owned(), config.to_text().into()));
        }
    }
    if strict {
        match run.strict {
            Strict::Unavailable => {}
            Strict::Flag(flag) => args.push(flag.into()),
            // `FLAG=NAME` once per server: Gemini's flag takes one value per occurrence, so
            // `FLAG a b` would make `b` the prompt. A subcommand (`gemini mcp list`) refuses
            // the flag and reads the setting written above instead.
            Strict::AllowedNames {
                flag, subcommands, ..
            } => {
                let subcommand = user_args
                    .first()
                    .is_some_and(|first| subcommands.contains(&first.as_str()));
                if !subcommand {
                    args.extend(
                        servers
                            .iter()
                            .map(|s| OsString::from(format!("{flag}={}", s.name))),
                    );
                }
            }
        }
    }
    Ok(Prepared {
        args,
        env: export.env,
        plain_env,
        launches,
        bridge,
        dir,
    })
}

/// The JSON text `config` with `names` at the object path `setting` (created as needed,
/// replacing what was there).
fn with_setting(config: &str, setting: &[&str], names: &[String]) -> anyhow::Result<String> {
    let mut value: serde_json::Value =
        serde_json::from_str(config).context("re-reading the harness config tether wrote")?;
    let Some((last, parents)) = setting.split_last() else {
        return Ok(config.to_owned());
    };
    let mut at = &mut value;
    for key in parents {
        if !at.get(*key).is_some_and(serde_json::Value::is_object) {
            at[*key] = serde_json::json!({});
        }
        at = &mut at[*key];
    }
    at[*last] = serde_json::json!(names);
    Ok(serde_json::to_string_pretty(&value)?)
}

/// `path/part`, or `path` itself when `part` is empty.
fn join_nonempty(path: PathBuf, part: &str) -> PathBuf {
    if part.is_empty() {
        path
    } else {
        path.join(part)
    }
}

/// Builds a private copy of a harness's home directory at `relative` inside the run directory:
/// every entry of the user's `user_home` is symlinked in except `config_name`, which is written
/// (0600) by `merge` from the user's own text. The user's files are never written.
fn private_home(
    dir: &RunDir,
    user_home: Option<&Path>,
    relative: &Path,
    config_name: &str,
    merge: impl FnOnce(Option<&str>) -> anyhow::Result<String>,
) -> anyhow::Result<PathBuf> {
    let home = dir.path().join(relative);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&home)
        .with_context(|| format!("cannot create {}", home.display()))?;
    let mut user_text = None;
    if let Some(user_home) = user_home {
        user_text = std::fs::read_to_string(user_home.join(config_name)).ok();
        if let Ok(entries) = std::fs::read_dir(user_home) {
            for entry in entries.flatten() {
                if entry.file_name() != config_name {
                    let _ = std::os::unix::fs::symlink(entry.path(), home.join(entry.file_name()));
                }
            }
        }
    }
    let text = merge(user_text.as_deref())?;
    let relative_file = relative.join(config_name);
    dir.write(&relative_file.to_string_lossy(), &text)?;
    Ok(home)
}

/// Runs the harness command with the servers handed over; returns its exit code. `hidden_env`
/// names variables of tether's environment that hold secrets (`--secret NAME=env:VAR`): the
/// harness keeps them, its stdio servers do not get them.
pub async fn run_harness(
    harness: HarnessArg,
    command: &[String],
    servers: &[RenderedServer],
    strict: bool,
    no_secrets_on_disk: bool,
    hidden_env: &[String],
) -> anyhow::Result<u8> {
    let Some((program, rest)) = command.split_first() else {
        return Err(UsageError::new("no harness command given after `--`").into());
    };
    // The supervisor starts the program: find it first, so that a missing one stays a usage
    // error of tether's (exit 2) rather than the supervisor's exit 127.
    if let Err(e) = find_program(program) {
        return Err(
            UsageError::new(format!("cannot start the harness command `{program}`: {e}")).into(),
        );
    }
    let mut prepared = prepare(
        harness,
        servers,
        rest,
        strict,
        no_secrets_on_disk,
        hidden_env,
    )?;
    // Stops answering shims when this function returns, however it returns.
    let _serving = prepared
        .launches
        .take()
        .map(LaunchChannel::serve)
        .transpose()?
        .map(AbortOnDrop);
    let _bridging = prepared
        .bridge
        .take()
        .map(Bridge::serve)
        .transpose()?
        .map(AbortOnDrop);
    let args: Vec<&std::ffi::OsStr> = prepared
        .args
        .iter()
        .map(OsString::as_os_str)
        .chain(rest.iter().map(std::ffi::OsStr::new))
        .collect();
    // Through the supervisor: it passes TERM and HUP on, and if tether is killed it kills the
    // harness and everything it started, then removes the run directory.
    let mut child = supervised_command(
        std::ffi::OsStr::new(program),
        &args,
        &SuperviseOptions {
            forward_signals: true,
            remove_on_orphan: Some(prepared.dir.path().to_owned()),
        },
    );
    child
        .envs(prepared.plain_env.iter().map(|(k, v)| (k, v)))
        .envs(prepared.env.iter().map(|(k, v)| (k, v.expose())));
    let mut child = child.spawn().map_err(|e| {
        UsageError::new(format!("cannot start the harness command `{program}`: {e}"))
    })?;
    let pid = child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .map(Pid::from_raw);
    let mut term = signal(SignalKind::terminate())?;
    let mut hangup = signal(SignalKind::hangup())?;
    // Ctrl-C reaches the harness from the terminal; tether keeps waiting for it to finish.
    let mut interrupt = signal(SignalKind::interrupt())?;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status?,
            _ = term.recv() => forward(pid, Signal::SIGTERM),
            _ = hangup.recv() => forward(pid, Signal::SIGHUP),
            _ = interrupt.recv() => {}
        }
    };
    drop(prepared);
    Ok(
        match (
            status.code(),
            std::os::unix::process::ExitStatusExt::signal(&status),
        ) {
            (Some(code), _) => u8::try_from(code).unwrap_or(1),
            (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(1),
            (None, None) => 1,
        },
    )
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Where `program` would be executed from: itself when it holds a `/`, else the first
/// executable file of that name on `PATH` (as `execvp` searches).
fn find_program(program: &str) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |path: &Path| {
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let path = PathBuf::from(program);
        return if executable(&path) {
            Ok(path)
        } else {
            Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no executable file there",
            ))
        };
    }
    std::env::var_os(EnvVars::PATH)
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(program))
        .find(|path| executable(path))
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "not found on PATH"))
}

fn forward(pid: Option<Pid>, signal: Signal) {
    if let Some(pid) = pid {
        let _ = kill(pid, signal);
    }
}
