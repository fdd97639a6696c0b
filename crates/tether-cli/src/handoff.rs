//! Handing the run's servers to a third-party harness and running it.
//!
//! - Secrets stay off command lines always, and off disk wherever the harness can read a value
//!   from its environment: the config holds references (`${TETHER_SECRET_n}`, `{env:…}`,
//!   Codex's `env_vars`/`env_http_headers`) and the values go only into the harness process's
//!   environment.
//! - Files tether writes live in a private run directory (`$TETHER_HOME/run/<pid>-<random>`,
//!   0700, files 0600), removed when the run ends — normally, on error, or on SIGTERM/SIGHUP
//!   (forwarded to the harness first). A directory left by a killed tether is swept by the next
//!   run. The user's own config files are never written.

use std::ffi::OsString;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::Context;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tether_config::{RenderedServer, SecretValue};
use tether_harness::{Format, export_with_references};
use tokio::signal::unix::{SignalKind, signal};

use crate::cli::HarnessArg;
use crate::exit::UsageError;
use crate::settings;

/// What a harness process gets: extra arguments after the program, environment, and the
/// private directory holding any files (removed on drop).
struct Prepared {
    args: Vec<OsString>,
    env: Vec<(String, SecretValue)>,
    plain_env: Vec<(String, OsString)>,
    _dir: RunDir,
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

    /// The directory.
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

fn format_of(harness: HarnessArg) -> Format {
    match harness {
        HarnessArg::Claude => Format::Claude,
        HarnessArg::Codex => Format::Codex,
        HarnessArg::Gemini => Format::Gemini,
        HarnessArg::Opencode | HarnessArg::Builtin => Format::Opencode,
    }
}

fn prepare(
    harness: HarnessArg,
    servers: &[RenderedServer],
    strict: bool,
    no_secrets_on_disk: bool,
) -> anyhow::Result<Prepared> {
    let dir = RunDir::create()?;
    let export = export_with_references(servers, format_of(harness), no_secrets_on_disk)?;
    for field in &export.inlined {
        tracing::info!(
            "{field}: the harness cannot read this value from its environment; it is in a private 0600 file removed after the run"
        );
    }
    let mut args = Vec::new();
    let mut plain_env = Vec::new();
    match harness {
        HarnessArg::Claude => {
            let file = dir.write("mcp.json", &export.text)?;
            args.push("--mcp-config".into());
            args.push(file.into_os_string());
            if strict {
                args.push("--strict-mcp-config".into());
            }
        }
        HarnessArg::Gemini => {
            let file = dir.write("settings.json", &export.text)?;
            plain_env.push((
                "GEMINI_CLI_SYSTEM_SETTINGS_PATH".to_owned(),
                file.into_os_string(),
            ));
        }
        HarnessArg::Opencode => {
            // The whole config through the environment: no file at all.
            plain_env.push((
                "OPENCODE_CONFIG_CONTENT".to_owned(),
                export.text.clone().into(),
            ));
        }
        HarnessArg::Codex => {
            let home = codex_home(&dir, &export.text)?;
            plain_env.push(("CODEX_HOME".to_owned(), home.into_os_string()));
        }
        HarnessArg::Builtin => {
            return Err(UsageError::new("the built-in harness takes no command").into());
        }
    }
    Ok(Prepared {
        args,
        env: export.env,
        plain_env,
        _dir: dir,
    })
}

/// A private `CODEX_HOME`: the user's own `config.toml` with tether's `mcp_servers` in place of
/// theirs, and every other entry of their Codex home (auth, sessions, history) linked in, so
/// their login and history carry over and their own file is never edited.
fn codex_home(dir: &RunDir, servers_toml: &str) -> anyhow::Result<PathBuf> {
    let home = dir.path().join("codex-home");
    std::fs::DirBuilder::new().mode(0o700).create(&home)?;
    let user_home = std::env::var_os("CODEX_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".codex")));
    let mut config = toml::Table::new();
    if let Some(user_home) = &user_home {
        let user_config = user_home.join("config.toml");
        if let Ok(text) = std::fs::read_to_string(&user_config) {
            config = toml::from_str(&text).map_err(|e| {
                UsageError::new(format!(
                    "cannot read {}: {}",
                    user_config.display(),
                    e.message()
                ))
            })?;
        }
        if let Ok(entries) = std::fs::read_dir(user_home) {
            for entry in entries.flatten() {
                if entry.file_name() != "config.toml" {
                    let _ = std::os::unix::fs::symlink(entry.path(), home.join(entry.file_name()));
                }
            }
        }
    }
    let ours: toml::Table =
        toml::from_str(servers_toml).context("tether built an invalid Codex config")?;
    if let Some(servers) = ours.get("mcp_servers") {
        config.insert("mcp_servers".to_owned(), servers.clone());
    }
    let text = toml::to_string(&config).context("cannot write the Codex config")?;
    let relative = Path::new("codex-home").join("config.toml");
    dir.write(relative.to_str().unwrap_or("codex-home/config.toml"), &text)?;
    Ok(home)
}

/// Runs the harness command with the servers handed over; returns its exit code.
pub async fn run_harness(
    harness: HarnessArg,
    command: &[String],
    servers: &[RenderedServer],
    strict: bool,
    no_secrets_on_disk: bool,
) -> anyhow::Result<u8> {
    let Some((program, rest)) = command.split_first() else {
        return Err(UsageError::new("no harness command given after `--`").into());
    };
    let prepared = prepare(harness, servers, strict, no_secrets_on_disk)?;
    let mut child = tokio::process::Command::new(program);
    child
        .args(&prepared.args)
        .args(rest)
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

fn forward(pid: Option<Pid>, signal: Signal) {
    if let Some(pid) = pid {
        let _ = kill(pid, signal);
    }
}
