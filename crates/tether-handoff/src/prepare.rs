//! What a harness process gets: its extra arguments, its environment, the launch channel and
//! the bridge its servers are routed through, and the run directory holding its config.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use tether_config::{RenderedServer, RenderedTransport, SecretValue};
use tether_env::EnvVars;
use tether_harness::{Delivery, Strict, export_with_references};

use crate::HandOff;
use crate::bridge::{self, Bridge};
use crate::error::HandoffError;
use crate::exec_shim::LaunchChannel;
use crate::run_dir::RunDir;

/// What a harness process gets, and the private directory holding any files (removed on drop).
pub(crate) struct Prepared {
    /// Arguments before the user's.
    pub(crate) args: Vec<OsString>,
    /// Values the config references (`TETHER_SECRET_n`).
    pub(crate) env: Vec<(String, SecretValue)>,
    /// Variables that hold no secret: where the config is, the private cache.
    pub(crate) plain_env: Vec<(String, OsString)>,
    /// Serves the stdio servers' launches to the exec shims the harness starts.
    pub(crate) launches: Option<LaunchChannel>,
    /// Forwards the harness's requests to URL servers, adding their real headers.
    pub(crate) bridge: Option<Bridge>,
    pub(crate) dir: RunDir,
}

/// Makes the run directory and everything the harness of `handoff` gets for `servers`.
pub(crate) fn prepare(
    handoff: &HandOff<'_>,
    servers: &[RenderedServer],
) -> Result<Prepared, HandoffError> {
    let harness = handoff.harness;
    let Some(run) = harness.run else {
        return Err(HandoffError::NotRunnable { name: harness.name });
    };
    let user_args = handoff.command.get(1..).unwrap_or_default();
    let strict = handoff.strict;
    let dir = RunDir::create(handoff.home)?;
    // A config handed over in a variable would reach every stdio server the harness starts:
    // the shim removes it too.
    let mut hidden_env = handoff.hidden_env.to_vec();
    if let Delivery::InlineEnv { env } = run.delivery {
        hidden_env.push(env.to_owned());
    }
    // Each stdio server goes through the exec shim: the harness sees `tether __exec SOCKET ID`
    // and none of the server's values; each URL server with headers or a secret URL goes
    // through the loopback bridge: the harness sees `http://127.0.0.1:PORT/KEY` and a per-run
    // token. So no value of any server reaches the harness.
    let mut launches: Option<LaunchChannel> = None;
    let mut bridge: Option<Bridge> = None;
    let mut routed = Vec::with_capacity(servers.len());
    for server in servers {
        // (An HTTP-port package arrives here as the URL it serves on: `run::start_served`.)
        let server = match &server.transport {
            RenderedTransport::Stdio { .. } => {
                let channel = match launches.as_mut() {
                    Some(channel) => channel,
                    None => launches.insert(LaunchChannel::bind(
                        dir.path(),
                        handoff.program.to_owned(),
                        hidden_env.clone(),
                    )?),
                };
                let invalid = |problem| HandoffError::InvalidServer {
                    server: server.name.clone(),
                    problem,
                };
                let sandbox = match handoff.sandbox {
                    Some(start) => start.sandbox_for(server).map_err(invalid)?,
                    None => None,
                };
                // A strict sandbox that cannot be enforced here is refused now, not inside
                // the harness (where the shim's refusal would be one failed server among many).
                if let Some(policy) = sandbox.as_ref().filter(|p| p.strict) {
                    let missing = tether_sandbox::assess(policy).missing;
                    if !missing.is_empty() {
                        let label = policy.label.clone();
                        let refused = tether_sandbox::SandboxError::NotEnforced { label, missing };
                        return Err(invalid(refused.to_string()));
                    }
                }
                channel.route(server, sandbox.as_ref())?
            }
            RenderedTransport::Remote { .. } if bridge::needs_bridge(server) => {
                let bridge = match bridge.as_mut() {
                    Some(bridge) => bridge,
                    None => bridge.insert(Bridge::bind(handoff.bearer_auth.clone())?),
                };
                bridge.route(server)?
            }
            RenderedTransport::Remote { .. } => server.clone(),
        };
        routed.push(server);
    }
    let export = export_with_references(&routed, harness.format, handoff.no_secrets_on_disk)?;
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
        let cache = dir.create_dir(Path::new(&format!("{}-cache", harness.name)))?;
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
            env, config_dir, ..
        } => {
            // A private home: the user's own config file with tether's servers in place of
            // theirs, every other entry of their home (credentials, sessions, trusted folders)
            // linked in.
            let user_dir = crate::trust::user_config_dir(harness);
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
fn with_setting(config: &str, setting: &[&str], names: &[String]) -> Result<String, HandoffError> {
    let mut value: serde_json::Value =
        serde_json::from_str(config).map_err(HandoffError::Rewrite)?;
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
    serde_json::to_string_pretty(&value).map_err(HandoffError::Rewrite)
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
    merge: impl FnOnce(Option<&str>) -> Result<String, HandoffError>,
) -> Result<PathBuf, HandoffError> {
    let home = dir.create_dir(relative)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allowed_list_is_set_at_its_path_keeping_the_rest() {
        let text = with_setting(
            r#"{"mcp": {"other": 1, "allowed": ["old"]}, "theme": "dark"}"#,
            &["mcp", "allowed"],
            &["a".to_owned(), "b".to_owned()],
        )
        .expect("setting the list");
        let value: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(
            value,
            serde_json::json!({"mcp": {"other": 1, "allowed": ["a", "b"]}, "theme": "dark"})
        );
        let created =
            with_setting("{}", &["mcp", "allowed"], &["a".to_owned()]).expect("setting the list");
        let value: serde_json::Value = serde_json::from_str(&created).expect("JSON");
        assert_eq!(value, serde_json::json!({"mcp": {"allowed": ["a"]}}));
    }
}
