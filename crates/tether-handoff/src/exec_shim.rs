//! The exec shim of a hand-off, both sides: in the harness's config every stdio server is
//! `tether __exec SOCKET ID`, and the shim gets that one server's real launch (command, args,
//! env, cwd) from tether over a Unix socket in the run directory, removes its
//! whole inherited environment but the variables every stdio server gets (the driver's
//! [`tether_driver::inherited_env`]: the allow-list plus `--pass-env` / `passEnv`, the same
//! rule as a direct launch), and `exec`s the server. So `AWS_SECRET_ACCESS_KEY` or
//! `GITHUB_TOKEN` in the harness's environment does not reach a server started through it.
//!
//! So no harness ever sees a stdio server's values (no expansion can alter them: Gemini CLI
//! expanded `$` twice), and a server never sees another server's values (harnesses pass their
//! whole environment to the servers they start). The values never touch the disk: tether holds
//! them in memory and answers each `ID` as often as the harness starts that server.
//!
//! Protocol: the shim connects, writes `ID\n`, reads the launch as one JSON object
//! (`{"command": …, "args": […], "env": [[name, value]…], "cwd": …|null, "pass_env": [name…],
//! "unset": [name…], "sandbox": POLICY|null}`)
//! until end of file. `unset` names the variables `--secret NAME=env:VAR` read secrets from:
//! the harness keeps them, the servers lose them (their own `env` may set them again).
//! An unknown id, a peer of another user, or a sandboxed peer (a server that read a shim's
//! command line in `/proc`: [`tether_sandbox::confined_peer`]) gets the connection closed
//! with nothing.
//!
//! A server with a sandbox (`POLICY`, a [`tether_sandbox::Policy`]: `--sandbox`, its own
//! `"sandbox"` key or config.toml) is not `exec`ed: the shim becomes its supervisor in place
//! ([`tether_driver::supervisor::supervise_in_place`]), which prepares the sandbox, applies it
//! in the server's child between fork and exec, passes the harness's SIGTERM/SIGHUP on, and
//! removes the private home and the cgroup when the server ends. The launch never reaches a
//! command line: the supervisor gets it in memory.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};
use tether_config::{RenderedServer, RenderedText, RenderedTransport, SecretValue};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use crate::error::HandoffError;

/// The hidden subcommand of `tether` that runs [`main`].
pub const SUBCOMMAND: &str = "__exec";

/// The prefix of the variables that carry references for a harness; the shim removes them.
const SECRET_PREFIX: &str = "TETHER_SECRET_";

/// The socket's file name in the run directory (short: a socket path has at most 107 bytes).
const SOCKET_NAME: &str = "exec.sock";

/// The exit code when the server cannot be started (as a shell's).
const CANNOT_START: u8 = 127;

/// The launches of one hand-off's stdio servers, by opaque id, and the socket they are served
/// on. Values stay in memory ([`SecretValue`], zeroized on drop).
pub(crate) struct LaunchChannel {
    socket: PathBuf,
    listener: std::os::unix::net::UnixListener,
    program: PathBuf,
    /// Inherited variables every server's environment loses (they hold secrets).
    hidden_env: Vec<String>,
    launches: HashMap<String, SecretValue>,
}

impl LaunchChannel {
    /// Binds the socket in `dir` (the private run directory). `program` is tether's own
    /// executable, which the harness will start as the shim; `hidden_env` names variables the
    /// shim removes from each server's inherited environment besides `TETHER_SECRET_*`.
    pub(crate) fn bind(
        dir: &Path,
        program: PathBuf,
        hidden_env: Vec<String>,
    ) -> Result<Self, HandoffError> {
        let socket = dir.join(SOCKET_NAME);
        let cannot_listen = || HandoffError::io(format!("cannot listen on {}", socket.display()));
        let listener = std::os::unix::net::UnixListener::bind(&socket).map_err(cannot_listen())?;
        listener.set_nonblocking(true).map_err(cannot_listen())?;
        Ok(Self {
            socket,
            listener,
            program,
            hidden_env,
            launches: HashMap::new(),
        })
    }

    /// `server` as the harness must see it: a stdio server becomes `tether __exec SOCKET ID`
    /// with no environment of its own (its launch is kept here); a remote one is unchanged.
    /// `sandbox` is the one the server starts in (none: it is `exec`ed as it is).
    pub(crate) fn route(
        &mut self,
        server: &RenderedServer,
        sandbox: Option<&tether_sandbox::Policy>,
    ) -> Result<RenderedServer, HandoffError> {
        let RenderedTransport::Stdio {
            command,
            args,
            env,
            cwd,
        } = &server.transport
        else {
            return Ok(server.clone());
        };
        let launch = json!({
            "command": command.expose(),
            "args": args.iter().map(RenderedText::expose).collect::<Vec<_>>(),
            "env": env.iter().map(|(k, v)| json!([k, v.expose()])).collect::<Vec<_>>(),
            "cwd": cwd.as_ref().map(RenderedText::expose),
            "pass_env": server.options.pass_env,
            "unset": self.hidden_env,
            "sandbox": sandbox,
        });
        let id = tether_http::token::random_hex(16)?;
        self.launches
            .insert(id.clone(), SecretValue::new(launch.to_string()));
        let mut routed = server.clone();
        routed.transport = RenderedTransport::Stdio {
            command: RenderedText::plain(&self.program.to_string_lossy()),
            args: [SUBCOMMAND, &self.socket.to_string_lossy(), &id]
                .into_iter()
                .map(RenderedText::plain)
                .collect(),
            env: indexmap::IndexMap::new(),
            cwd: None,
        };
        Ok(routed)
    }

    /// Answers shims until the returned task is aborted (when the harness has exited).
    pub(crate) fn serve(self) -> Result<tokio::task::JoinHandle<()>, HandoffError> {
        let listener = tokio::net::UnixListener::from_std(self.listener).map_err(
            HandoffError::io(format!("cannot listen on {}", self.socket.display())),
        )?;
        let launches = Arc::new(self.launches);
        let uid = nix::unistd::getuid().as_raw();
        Ok(tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let launches = Arc::clone(&launches);
                tokio::spawn(async move {
                    let _ = answer(stream, &launches, uid).await;
                });
            }
        }))
    }
}

/// Reads one id and writes its launch (nothing for an unknown id or a foreign peer).
async fn answer(
    mut stream: tokio::net::UnixStream,
    launches: &HashMap<String, SecretValue>,
    uid: u32,
) -> std::io::Result<()> {
    let peer = stream.peer_cred()?;
    // A sandboxed server that found this socket (and an id, on a shim's command line) is
    // confined where the shims the harness starts are not: it gets nothing.
    if peer.uid() != uid || peer.pid().is_none_or(tether_sandbox::confined_peer) {
        return Ok(());
    }
    let (reader, mut writer) = stream.split();
    let mut line = String::new();
    // An id is 32 hex digits: a peer that sends more gets nothing.
    let read = tokio::io::AsyncReadExt::take(reader, 128);
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        tokio::io::BufReader::new(read).read_line(&mut line),
    )
    .await;
    if let Some(launch) = launches.get(line.trim_end()) {
        writer.write_all(launch.expose().as_bytes()).await?;
    }
    writer.shutdown().await
}

/// The shim's `main`: `args` are those after [`SUBCOMMAND`] (`SOCKET ID`). Returns only when
/// the server cannot be started (the exit code, 127 as a shell's; 2 for wrong arguments);
/// otherwise the process becomes the server.
pub fn main(args: &[OsString]) -> u8 {
    let [socket, id] = args else {
        eprintln!("tether {SUBCOMMAND}: internal use only: SOCKET ID");
        return 2;
    };
    match launch(Path::new(socket), &id.to_string_lossy()) {
        Ok((command, Some(sandbox))) => tether_driver::supervisor::supervise_in_place(
            command,
            &tether_driver::supervisor::SuperviseOptions {
                forward_signals: true,
                remove_on_orphan: None,
                sandbox: Some(sandbox),
            },
        ),
        Ok((mut command, None)) => {
            let error = command.exec();
            // No value in the message: the command itself may hold a secret.
            eprintln!("tether: cannot start the MCP server's command: {error}");
            CANNOT_START
        }
        Err(error) => {
            eprintln!("tether {SUBCOMMAND}: {}", tether_log::error_chain(&error));
            CANNOT_START
        }
    }
}

/// Fetches the launch for `id` and builds the server's command from it; with the sandbox it
/// starts in (a [`tether_sandbox::Policy`] as JSON), if any.
fn launch(
    socket: &Path,
    id: &str,
) -> Result<(std::process::Command, Option<String>), HandoffError> {
    let unreachable = |source| HandoffError::ShimUnreachable {
        socket: socket.to_owned(),
        source,
    };
    let mut stream = std::os::unix::net::UnixStream::connect(socket).map_err(unreachable)?;
    stream
        .write_all(format!("{id}\n").as_bytes())
        .and_then(|()| stream.shutdown(std::net::Shutdown::Write))
        .map_err(unreachable)?;
    let mut text = String::new();
    stream.read_to_string(&mut text).map_err(unreachable)?;
    let text = SecretValue::new(text);
    let launch: Value = serde_json::from_str(text.expose())
        .map_err(|_| HandoffError::UnknownServerId { id: id.to_owned() })?;
    let string = |value: &Value| value.as_str().map(str::to_owned);
    let program = string(&launch["command"]).ok_or(HandoffError::NoLaunchCommand)?;
    let mut command = std::process::Command::new(program);
    command.args(
        launch["args"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(string),
    );
    // The harness's environment is dropped but for what every stdio server gets; a
    // `TETHER_SECRET_*` reference is never passed on, even when `passEnv` names it.
    let pass_env: Vec<String> = launch["pass_env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(string)
        .collect();
    command.env_clear();
    for (name, value) in tether_driver::inherited_env(&pass_env) {
        if !name.starts_with(SECRET_PREFIX) {
            command.env(name, value);
        }
    }
    for name in launch["unset"].as_array().into_iter().flatten() {
        if let Some(name) = name.as_str() {
            command.env_remove(name);
        }
    }
    for pair in launch["env"].as_array().into_iter().flatten() {
        if let (Some(name), Some(value)) = (string(&pair[0]), string(&pair[1])) {
            command.env(name, value);
        }
    }
    if let Some(cwd) = string(&launch["cwd"]) {
        command.current_dir(cwd);
    }
    let sandbox = launch
        .get("sandbox")
        .filter(|policy| policy.is_object())
        .map(Value::to_string);
    Ok((command, sandbox))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_config::{EmptyEnv, Origin, Secrets, parse_config};

    const SECRET: &str = "p@$$w0rd $HOME ${X} $$ \\$ $UNDEFINED \"q\" 'q' \\ {{d}} é✓";

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_shim_gets_its_own_launch_byte_exact_and_an_unknown_id_nothing() {
        let parsed = parse_config(
            r#"{"a": {"command": "srv", "args": ["--k={{T}}"], "env": {"K": "{{T}}"}, "cwd": "/tmp"},
                "r": {"url": "http://127.0.0.1:9/mcp", "headers": {"X": "{{T}}"}}}"#,
            Origin::User,
        )
        .expect("parsing the config");
        let secrets: Secrets = [("T", SECRET)].into_iter().collect();
        let servers: Vec<RenderedServer> = parsed
            .servers
            .into_iter()
            .map(|s| s.into_installation().render(&secrets, &EmptyEnv))
            .collect();
        let dir = tempfile::tempdir().expect("creating a temporary directory");
        let mut channel = LaunchChannel::bind(
            dir.path(),
            PathBuf::from("/bin/tether"),
            vec!["SRC".to_owned()],
        )
        .expect("binding");
        let policy = tether_sandbox::Mode::parse("default")
            .and_then(|mode| mode.policy())
            .expect("the default policy")
            .expect("a sandbox");
        let routed: Vec<RenderedServer> = servers
            .iter()
            .map(|s| channel.route(s, Some(&policy)).expect("routing"))
            .collect();
        let [stdio, remote] = routed.as_slice() else {
            panic!("two servers expected");
        };
        assert_eq!(
            Some(remote),
            servers.get(1),
            "a remote server is not routed"
        );
        let RenderedTransport::Stdio {
            command,
            args,
            env,
            cwd,
        } = &stdio.transport
        else {
            panic!("the routed server is not stdio");
        };
        assert_eq!(command.expose(), "/bin/tether");
        assert!(env.is_empty() && cwd.is_none());
        assert!(
            stdio.sensitive_values().is_empty(),
            "no value of the server is left"
        );
        let shown: Vec<String> = args.iter().map(RenderedText::expose).collect();
        assert_eq!(shown.first().map(String::as_str), Some(SUBCOMMAND));
        let socket = PathBuf::from(shown.get(1).expect("a socket argument"));
        let id = shown.get(2).expect("an id argument").clone();
        let _serving = channel.serve().expect("serving");

        let asked = socket.clone();
        let (command, sandbox) = tokio::task::spawn_blocking(move || launch(&asked, &id))
            .await
            .expect("joining the shim")
            .expect("getting the launch");
        let sandbox: tether_sandbox::Policy =
            serde_json::from_str(&sandbox.expect("the sandbox is in the launch"))
                .expect("the sandbox is a policy");
        assert_eq!(sandbox, policy, "the sandbox reaches the shim whole");
        assert_eq!(command.get_program(), "srv");
        let args: Vec<&std::ffi::OsStr> = command.get_args().collect();
        assert_eq!(args, [format!("--k={SECRET}").as_str()]);
        let envs: Vec<_> = command
            .get_envs()
            .filter(|(name, _)| *name == "K")
            .collect();
        assert_eq!(
            envs,
            [(
                std::ffi::OsStr::new("K"),
                Some(std::ffi::OsStr::new(SECRET))
            )]
        );
        assert_eq!(command.get_current_dir(), Some(Path::new("/tmp")));

        let unknown = tokio::task::spawn_blocking(move || launch(&socket, "0123"))
            .await
            .expect("joining the shim");
        let Err(error) = unknown else {
            panic!("an unknown id got a launch");
        };
        let error = error.to_string();
        assert!(error.contains("does not know the server id"), "{error}");
    }
}
