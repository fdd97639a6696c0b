//! Running the harness: found on `PATH` first, started under tether's supervisor with what
//! [`prepare`](crate::prepare) made, TERM and HUP passed on, its exit code returned, the run
//! directory removed however this returns.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tether_config::RenderedServer;
use tether_driver::supervisor::{SuperviseOptions, supervised_command};
use tether_env::EnvVars;
use tokio::signal::unix::{SignalKind, signal};

use crate::HandOff;
use crate::bridge::Bridge;
use crate::error::HandoffError;
use crate::exec_shim::LaunchChannel;
use crate::prepare::prepare;

/// Runs the harness command of `handoff` with `servers` handed over; returns its exit code
/// (128 + the signal's number when a signal ended it).
///
/// The program is looked up on `PATH` before anything is made, so a missing one is
/// [`HandoffError::CannotStart`]. While the harness runs, tether answers its exec shims and
/// bridges its URL servers; SIGTERM and SIGHUP are passed on to it, SIGINT (which the
/// terminal sends it too) is waited out. The run directory is removed when this returns.
pub async fn run_harness(
    handoff: HandOff<'_>,
    servers: &[RenderedServer],
) -> Result<u8, HandoffError> {
    let Some((program, rest)) = handoff.command.split_first() else {
        return Err(HandoffError::NoCommand);
    };
    let cannot_start = |reason| HandoffError::CannotStart {
        program: program.clone(),
        reason,
    };
    // The supervisor starts the program: find it first, so that a missing one stays a usage
    // error of tether's (exit 2) rather than the supervisor's exit 127.
    find_program(program).map_err(cannot_start)?;
    // HTTP-port packages run in tether for the whole run; the harness gets their URLs.
    let (served, servers) = start_served(&handoff, servers).await?;
    let mut prepared = prepare(&handoff, &servers)?;
    // Stops answering shims and bridging when this function returns, however it returns.
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
    let args: Vec<&OsStr> = prepared
        .args
        .iter()
        .map(OsString::as_os_str)
        .chain(rest.iter().map(OsStr::new))
        .collect();
    // Through the supervisor: it passes TERM and HUP on, and if tether is killed it kills the
    // harness and everything it started, then removes the run directory.
    let mut child = supervised_command(
        OsStr::new(program),
        &args,
        &SuperviseOptions {
            forward_signals: true,
            remove_on_orphan: Some(prepared.dir.path().to_owned()),
            sandbox: None,
        },
    );
    child
        .envs(prepared.plain_env.iter().map(|(k, v)| (k, v)))
        .envs(prepared.env.iter().map(|(k, v)| (k, v.expose())));
    // With trace export on, the run is a span (under the caller's TRACEPARENT, if any) and
    // the harness gets its own TRACEPARENT naming it.
    let traced =
        tracing::info_span!(target: "tether_telemetry", "tether.run", otel.name = "tether run");
    if let Ok(parent) = std::env::var(EnvVars::TRACEPARENT) {
        tether_log::telemetry::continue_trace(&traced, &parent);
    }
    if let Some(traceparent) = tether_log::telemetry::traceparent(&traced) {
        child.env(EnvVars::TRACEPARENT, traceparent);
    }
    let mut child = child.spawn().map_err(cannot_start)?;
    let pid = child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .map(Pid::from_raw);
    let watch = |kind| signal(kind).map_err(HandoffError::io("cannot watch for signals"));
    let mut term = watch(SignalKind::terminate())?;
    let mut hangup = watch(SignalKind::hangup())?;
    // Ctrl-C reaches the harness from the terminal; tether keeps waiting for it to finish.
    let mut interrupt = watch(SignalKind::interrupt())?;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status.map_err(HandoffError::io("waiting for the harness"))?,
            _ = term.recv() => forward(pid, Signal::SIGTERM),
            _ = hangup.recv() => forward(pid, Signal::SIGHUP),
            _ = interrupt.recv() => {}
        }
    };
    drop(prepared);
    if let Some(served) = served {
        served.shutdown().await;
    }
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

/// Starts the HTTP-port packages (`"serves"`) among `servers` as tether's own, under the
/// sandbox each would start in, waiting until each answers on its port; returns them (stop
/// them after the harness) and `servers` with each of those as the plain URL server it serves
/// (a loopback URL without a secret: the harness connects to it directly). A package that
/// does not start fails the run, saying why, before the harness starts.
async fn start_served(
    handoff: &HandOff<'_>,
    servers: &[RenderedServer],
) -> Result<(Option<tether_driver::McpRuntime>, Vec<RenderedServer>), HandoffError> {
    let served: Vec<RenderedServer> = servers
        .iter()
        .filter(|server| server.options.serves.is_some())
        .cloned()
        .collect();
    if served.is_empty() {
        return Ok((None, servers.to_vec()));
    }
    let options = handoff.sandbox.cloned().unwrap_or_default();
    let failed = |server: &str, problem: String| HandoffError::InvalidServer {
        server: server.to_owned(),
        problem: format!("its HTTP-port package did not start: {problem}"),
    };
    let first = served[0].name.clone();
    let runtime = tether_driver::McpRuntime::start(served, &options)
        .await
        .map_err(|error| failed(&first, error.to_string()))?;
    for report in runtime.reports() {
        if let tether_driver::ServerStatus::Failed { reason } = &report.status {
            return Err(failed(&report.name, reason.clone()));
        }
    }
    let routed = servers
        .iter()
        .map(|server| {
            let mut routed = server.clone();
            if let Some(served) = routed.options.serves.take() {
                routed.transport = tether_config::RenderedTransport::Remote {
                    url: tether_config::RenderedText::plain(&served.url),
                    headers: indexmap::IndexMap::new(),
                    transport: served.transport,
                };
            }
            routed
        })
        .collect();
    Ok((Some(runtime), routed))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_is_found_as_execvp_would() {
        assert!(find_program("sh").is_ok_and(|path| path.is_absolute()));
        assert!(find_program("/bin/sh").is_ok());
        let missing = find_program("tether-no-such-program").expect_err("not on PATH");
        assert_eq!(missing.to_string(), "not found on PATH");
        let dir = tempfile::tempdir().expect("creating a temporary directory");
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "").expect("writing the file");
        let error = find_program(&plain.to_string_lossy()).expect_err("not executable");
        assert_eq!(error.to_string(), "no executable file there");
    }
}
