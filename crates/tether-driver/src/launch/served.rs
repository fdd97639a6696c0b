//! HTTP-port packages: a process started like a stdio server that serves MCP over HTTP on a
//! loopback port (`"serves"` in its config). The driver holds its stdin open and drains its
//! stdout, dials its port until it accepts (within the startup timeout, watching the child),
//! then connects as to a remote; the child stays with the session and is stopped with it.

use std::sync::Arc;
use std::time::Duration;

use tether_config::ServedUrl;
use tokio::io::AsyncReadExt as _;
use tokio::process::{ChildStdin, ChildStdout};

use super::process::ChildProcess;
use super::remote::{RemoteTarget, remote_handshake};
use super::{BearerAuth, Client, TetherClient, failure};

/// How often the port is dialled while the package starts.
const DIAL_EVERY: Duration = Duration::from_millis(10);

/// Why a start failed.
pub(super) enum Failure {
    /// The process exited first (its status): the caller reports it with its stderr.
    Exited(String),
    /// Anything else (the caller adds the stderr tail and stops the process).
    Other(String),
}

/// Refuses to start a package whose port already accepts connections: whoever listens there
/// (another user's process squatting a published port) would get tether's handshake and
/// calls. Dialled once, before the package starts (a refused or timed-out dial: free).
pub(super) async fn port_free(served: &ServedUrl) -> Result<(), String> {
    let address = served.address();
    let dial = tokio::net::TcpStream::connect(&address);
    match tokio::time::timeout(Duration::from_secs(1), dial).await {
        Ok(Ok(_)) => Err(format!(
            "{address} (its \"serves\" url) already accepts connections before the package started: another process listens there (perhaps another user's), and tether does not hand it the handshake; stop it or give the package another port"
        )),
        _ => Ok(()),
    }
}

/// The inodes of the listening sockets that take a connection to loopback `port`, from
/// `/proc/net/tcp` and `tcp6` (state `0A`): bound to a loopback address (`127.x`, `::1`,
/// `::ffff:127.x`) or a wildcard. `None` where the tables cannot be read.
fn loopback_listeners(port: u16) -> Option<Vec<u64>> {
    let wanted = format!(":{port:04X}");
    let mut found = Vec::new();
    let mut read_any = false;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        read_any = true;
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) =
                (fields.get(1), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let Some(address) = local.strip_suffix(wanted.as_str()) else {
                continue;
            };
            let loopback = address.bytes().all(|b| b == b'0')
                || (address.len() == 8 && address.ends_with("7F"))
                || address == "00000000000000000000000001000000"
                || (address.starts_with("0000000000000000FFFF0000") && address.ends_with("7F"));
            if *state == "0A" && loopback {
                found.extend(inode.parse::<u64>().ok());
            }
        }
    }
    read_any.then_some(found)
}

/// The inodes of the sockets `pids` hold open (`/proc/PID/fd/N` → `socket:[INODE]`).
fn socket_inodes(pids: &[i32]) -> std::collections::HashSet<u64> {
    pids.iter()
        .filter_map(|pid| std::fs::read_dir(format!("/proc/{pid}/fd")).ok())
        .flatten()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|target| {
            let target = target
                .to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')?;
            target.parse().ok()
        })
        .collect()
}

/// Refuses a port that something other than the package (`root` and its descendants) listens
/// on: a process that took the port after [`port_free`] looked (another user's, in the attack)
/// would otherwise get the handshake and the calls. Each listening socket that takes a
/// loopback connection on the port must be held open by the package's processes.
fn listener_is_the_package(served: &ServedUrl, root: i32) -> Result<(), String> {
    let Some(port) = served.port() else {
        return Ok(());
    };
    let Some(listeners) = loopback_listeners(port) else {
        return Ok(());
    };
    let mut tree = crate::supervisor::descendants(root);
    tree.push(root);
    let held = socket_inodes(&tree);
    if listeners.iter().all(|inode| held.contains(inode)) {
        return Ok(());
    }
    Err(format!(
        "{} (its \"serves\" url) is listened on by a process that is not the package (perhaps another user's, which took the port as the package started), and tether does not hand it the handshake; stop it or give the package another port",
        served.address()
    ))
}

/// A listening socket on `port` bound to a wildcard address (`0.0.0.0`, `::`) rather than
/// loopback, from `/proc/net/tcp` and `tcp6` (state `0A`, LISTEN): `ADDRESS:PORT` as shown.
fn bound_beyond_loopback(port: u16) -> Option<String> {
    let wanted = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .find_map(|table| {
            let text = std::fs::read_to_string(table).ok()?;
            text.lines().skip(1).find_map(|line| {
                let mut fields = line.split_whitespace();
                let local = fields.nth(1)?;
                let state = fields.nth(1)?;
                let (address, _) = local.split_once(':')?;
                let wildcard = address.bytes().all(|b| b == b'0');
                (state == "0A" && local.ends_with(&wanted) && wildcard).then(|| {
                    if address.len() > 8 {
                        format!("[::]:{port}")
                    } else {
                        format!("0.0.0.0:{port}")
                    }
                })
            })
        })
}

/// Waits until the package listens at `served`'s port, then runs the MCP handshake over HTTP.
pub(super) async fn connect(
    served: &ServedUrl,
    child: &mut ChildProcess,
    (mut stdout, stdin): (ChildStdout, ChildStdin),
    client: TetherClient,
    timeout: Duration,
    bearer_auth: Option<Arc<dyn BearerAuth>>,
) -> Result<(Client, Vec<rmcp::model::Tool>), Failure> {
    // Its stdin stays open and its stdout is read (and dropped) for as long as it runs: a
    // package that reads stdin or logs to stdout must not see EOF or a broken pipe.
    tokio::spawn(async move {
        let _stdin = stdin;
        let mut sink = [0u8; 4096];
        while matches!(stdout.read(&mut sink).await, Ok(n) if n > 0) {}
    });
    let address = served.address();
    let deadline = tokio::time::Instant::now() + timeout;
    let listening = async {
        loop {
            if tokio::net::TcpStream::connect(&address).await.is_ok() {
                return;
            }
            tokio::time::sleep(DIAL_EVERY).await;
        }
    };
    tokio::select! {
        () = listening => {}
        status = child.wait() => {
            return Err(Failure::Exited(status.map_or_else(|e| e.to_string(), |s| s.to_string())));
        }
        () = tokio::time::sleep_until(deadline) => {
            return Err(Failure::Other(format!(
                "it did not listen on {address} within {} s (its \"serves\" url)",
                timeout.as_secs_f64()
            )));
        }
    }
    if let Some(root) = child.pid() {
        listener_is_the_package(served, root).map_err(Failure::Other)?;
    }
    if let Some(bound) = served.port().and_then(bound_beyond_loopback) {
        if !served.any_interface {
            return Err(Failure::Other(format!(
                "it listens on {bound}, every interface: its tools would be reachable from your network, not only from tether (a sandbox limits its port, not the address); make it listen on 127.0.0.1, or allow it with \"anyInterface\": true in its \"serves\""
            )));
        }
        tracing::warn!("the package listens on {bound}");
        eprintln!(
            "tether: warning: the HTTP-port package listens on {bound}, every interface (\"anyInterface\": true): its tools are reachable from your network, not only from tether"
        );
    }
    let http = reqwest::Client::builder()
        .user_agent(concat!("tether/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| Failure::Other(format!("cannot build the HTTP client: {e}")))?;
    let headers = reqwest::header::HeaderMap::new();
    let kind = served.transport;
    let target = RemoteTarget {
        url: &served.url,
        headers: &headers,
        timeout,
        bearer_auth,
        helper: None,
    };
    let handshake = remote_handshake(client, kind, http, &target);
    tokio::select! {
        outcome = tokio::time::timeout_at(deadline, handshake) => match outcome {
            // A package tether started on loopback gets no Authorization header: no slot.
            Ok(Ok((client, tools, _))) => Ok((client, tools)),
            Ok(Err(err)) => Err(Failure::Other(failure::describe(&served.url, kind, &*err))),
            Err(_) => Err(Failure::Other(format!(
                "no answer from {} to initialize/tools/list within {} s",
                served.url,
                timeout.as_secs_f64()
            ))),
        },
        status = child.wait() => {
            Err(Failure::Exited(status.map_or_else(|e| e.to_string(), |s| s.to_string())))
        }
    }
}
