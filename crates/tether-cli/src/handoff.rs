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
use tether_env::EnvVars;
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

/// The format a third-party harness reads; `None` for the built-in one.
fn format_of(harness: HarnessArg) -> Option<Format> {
    match harness {
        HarnessArg::Claude => Some(Format::Claude),
        HarnessArg::Codex => Some(Format::Codex),
        HarnessArg::Gemini => Some(Format::Gemini),
        HarnessArg::Opencode => Some(Format::Opencode),
        HarnessArg::Builtin => None,
    }
}

fn prepare(
    harness: HarnessArg,
    servers: &[RenderedServer],
    strict: bool,
    no_secrets_on_disk: bool,
) -> anyhow::Result<Prepared> {
    let format = format_of(harness)
        .ok_or_else(|| UsageError::new("the built-in harness takes no command"))?;
    let dir = RunDir::create()?;
    let export = export_with_references(servers, format, no_secrets_on_disk)?;
    for field in &export.inlined {
        tracing::info!(
            "{field}: the harness cannot read this value from its environment; it is in a private 0600 file removed after the run"
        );
    }
    let mut args = Vec::new();
    let mut plain_env = Vec::new();
    match harness {
        HarnessArg::Claude => {
            // Claude writes each server's expanded headers to `$XDG_CACHE_HOME/claude-cli-nodejs/
            // …/mcp-logs-*`: point its cache at the run directory (removed afterwards), and give
            // the servers it starts the user's own cache directory back.
            let user_cache = std::env::var_os(EnvVars::XDG_CACHE_HOME).or_else(|| {
                std::env::var_os(EnvVars::HOME)
                    .map(|h| PathBuf::from(h).join(".cache").into_os_string())
            });
            let text = with_stdio_env(&export.text, EnvVars::XDG_CACHE_HOME, user_cache.as_ref())?;
            let file = dir.write("mcp.json", &text)?;
            let cache = dir.path().join("claude-cache");
            std::fs::DirBuilder::new().mode(0o700).create(&cache)?;
            plain_env.push((EnvVars::XDG_CACHE_HOME.to_owned(), cache.into_os_string()));
            args.push("--mcp-config".into());
            args.push(file.into_os_string());
            if strict {
                args.push("--strict-mcp-config".into());
            }
        }
        HarnessArg::Gemini => {
            // A private Gemini home: the user's own settings with tether's mcpServers, and the rest
            // of their ~/.gemini (credentials, trusted folders) linked in.
            let user_home = std::env::var_os(EnvVars::GEMINI_CLI_HOME)
                .or_else(|| std::env::var_os(EnvVars::HOME))
                .map(|h| PathBuf::from(h).join(".gemini"));
            let ours: serde_json::Value = serde_json::from_str(&export.text)
                .context("tether built invalid Gemini settings")?;
            private_home(
                &dir,
                user_home.as_deref(),
                Path::new("gemini-home/.gemini"),
                "settings.json",
                |user_text| {
                    let mut settings: serde_json::Value = match user_text {
                        Some(text) => serde_json::from_str(text).map_err(|e| {
                            UsageError::new(format!("cannot read your Gemini settings.json: {e}"))
                        })?,
                        None => serde_json::json!({}),
                    };
                    if !settings.is_object() {
                        settings = serde_json::json!({});
                    }
                    settings["mcpServers"] = ours["mcpServers"].clone();
                    Ok(serde_json::to_string_pretty(&settings).unwrap_or_default())
                },
            )?;
            plain_env.push((
                EnvVars::GEMINI_CLI_HOME.to_owned(),
                dir.path().join("gemini-home").into_os_string(),
            ));
            if strict {
                args.push("--allowed-mcp-server-names".into());
                args.extend(servers.iter().map(|s| OsString::from(&s.name)));
            }
        }
        HarnessArg::Opencode => {
            // The whole config through the environment: no file at all.
            plain_env.push((
                EnvVars::OPENCODE_CONFIG_CONTENT.to_owned(),
                export.text.clone().into(),
            ));
        }
        HarnessArg::Codex => {
            // A private CODEX_HOME: the user's config.toml with tether's mcp_servers in place of
            // theirs, the rest of their Codex home (auth, sessions, history) linked in.
            let user_home = std::env::var_os(EnvVars::CODEX_HOME)
                .map(PathBuf::from)
                .or_else(|| {
                    std::env::var_os(EnvVars::HOME).map(|h| PathBuf::from(h).join(".codex"))
                });
            let ours: toml::Table =
                toml::from_str(&export.text).context("tether built an invalid Codex config")?;
            let home = private_home(
                &dir,
                user_home.as_deref(),
                Path::new("codex-home"),
                "config.toml",
                |user_text| {
                    let mut config: toml::Table = match user_text {
                        Some(text) => toml::from_str(text).map_err(|e| {
                            UsageError::new(format!(
                                "cannot read your Codex config.toml: {}",
                                e.message()
                            ))
                        })?,
                        None => toml::Table::new(),
                    };
                    if let Some(servers) = ours.get("mcp_servers") {
                        config.insert("mcp_servers".to_owned(), servers.clone());
                    }
                    Ok(toml::to_string(&config).unwrap_or_default())
                },
            )?;
            plain_env.push((EnvVars::CODEX_HOME.to_owned(), home.into_os_string()));
        }
        // Refused by `format_of` above; kept as an error rather than a panic.
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

/// Adds `name = value` to the `env` of every stdio server of a Claude config that does not set
/// it already.
fn with_stdio_env(text: &str, name: &str, value: Option<&OsString>) -> anyhow::Result<String> {
    let Some(value) = value.and_then(|v| v.to_str()) else {
        return Ok(text.to_owned());
    };
    let mut config: serde_json::Value =
        serde_json::from_str(text).context("tether built an invalid Claude config")?;
    if let Some(servers) = config["mcpServers"].as_object_mut() {
        for server in servers.values_mut() {
            if server.get("command").is_some() && server["env"].get(name).is_none() {
                server["env"][name] = serde_json::Value::String(value.to_owned());
            }
        }
    }
    Ok(serde_json::to_string_pretty(&config).unwrap_or_default() + "\n")
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
