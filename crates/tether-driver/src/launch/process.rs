//! Spawning a stdio server as the leader of its own process group, and ending the group.
//!
//! The child runs without a shell, with a cleared environment plus [`ENV_WHITELIST`] plus the
//! server's own `env`; on Linux it is tied to the spawning thread's death with
//! `PR_SET_PDEATHSIG`, and kills itself before exec when tether died before that signal was
//! armed. Ending it terminates the whole group (TERM, then KILL after a grace
//! period), so launchers such as `npx` leave no grandchildren behind.

use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tether_config::{SecretValue, mask_known_values};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// Variables a stdio server inherits from tether's environment (the rest is cleared).
pub const ENV_WHITELIST: [&str; 10] = [
    "HOME", "LOGNAME", "PATH", "SHELL", "USER", "LANG", "LC_ALL", "TERM", "TMPDIR", "TZ",
];

/// How much of a child's stderr is kept: the last 64 KiB.
pub const STDERR_TAIL_BYTES: usize = 64 * 1024;

/// How long a child group gets between SIGTERM and SIGKILL.
pub const TERMINATE_GRACE: Duration = Duration::from_secs(2);

/// What a stdio server is launched with, rendered: the values are real. Any of them may
/// have come from a secret or the environment, so each stays a [`SecretValue`] (zeroized
/// when the launch is dropped) until it is handed to [`Command`].
pub struct StdioLaunch {
    pub command: SecretValue,
    pub args: Vec<SecretValue>,
    /// Added after [`ENV_WHITELIST`]; a name here overrides the inherited value.
    pub env: Vec<(String, SecretValue)>,
    pub cwd: Option<SecretValue>,
}

/// The last bytes a child wrote to stderr, with secrets masked when read.
#[derive(Default)]
pub struct StderrTail {
    bytes: Mutex<Vec<u8>>,
    closed: std::sync::atomic::AtomicBool,
    secrets: Vec<SecretValue>,
    /// Extra bytes kept beyond the limit so a secret straddling the cut is still masked whole.
    margin: usize,
}

impl StderrTail {
    fn new(secrets: Vec<SecretValue>) -> Self {
        let margin = secrets.iter().map(|s| s.expose().len()).max().unwrap_or(0);
        Self {
            bytes: Mutex::new(Vec::new()),
            closed: std::sync::atomic::AtomicBool::new(false),
            secrets,
            margin,
        }
    }

    fn push(&self, chunk: &[u8]) {
        let mut bytes = self
            .bytes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        bytes.extend_from_slice(chunk);
        let keep = STDERR_TAIL_BYTES + self.margin;
        if bytes.len() > keep {
            let cut = bytes.len() - keep;
            bytes.drain(..cut);
        }
    }

    /// Waits (at most `limit`) until the child's stderr reached end of file, so that a tail
    /// read after the child exited holds its last words.
    pub async fn wait_closed(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        while !self.closed.load(std::sync::atomic::Ordering::Acquire)
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The captured text (at most [`STDERR_TAIL_BYTES`]), every known secret masked.
    pub fn text(&self) -> String {
        let bytes = self
            .bytes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let masked = mask_known_values(&String::from_utf8_lossy(&bytes), &self.secrets);
        let start = masked.len().saturating_sub(STDERR_TAIL_BYTES);
        let start = (start..=masked.len())
            .find(|i| masked.is_char_boundary(*i))
            .unwrap_or(masked.len());
        masked[start..].to_owned()
    }

    /// The last `lines` lines of [`StderrTail::text`], for error messages.
    pub fn last_lines(&self, lines: usize) -> String {
        let text = self.text();
        let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    fn mask(&self, line: &str) -> String {
        mask_known_values(line, &self.secrets)
    }
}

/// A running stdio child, leader of its own process group. Dropping it kills the group.
pub struct ChildProcess {
    child: Child,
    pgid: Option<Pid>,
    /// Its stderr, as captured so far.
    pub stderr: Arc<StderrTail>,
}

impl ChildProcess {
    /// Spawns `launch` for the server `name`; returns the child and its stdio for the MCP
    /// transport. `secrets` are masked in captured stderr and in stderr log lines.
    pub fn spawn(
        name: &str,
        launch: &StdioLaunch,
        secrets: Vec<SecretValue>,
    ) -> std::io::Result<(Self, ChildStdout, ChildStdin)> {
        let mut command = Command::new(launch.command.expose());
        command
            .args(launch.args.iter().map(SecretValue::expose))
            .env_clear()
            .envs(
                ENV_WHITELIST
                    .iter()
                    .filter_map(|key| std::env::var_os(key).map(|value| (key.to_string(), value))),
            )
            .envs(launch.env.iter().map(|(k, v)| (k.as_str(), v.expose())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        if let Some(cwd) = &launch.cwd {
            command.current_dir(cwd.expose());
        }
        tie_to_parent(&mut command);
        let mut child = command.spawn()?;
        let pgid = child
            .id()
            .and_then(|pid| i32::try_from(pid).ok())
            .map(Pid::from_raw);
        let missing = || std::io::Error::other("the child's stdio was not piped");
        let stdout = child.stdout.take().ok_or_else(missing)?;
        let stdin = child.stdin.take().ok_or_else(missing)?;
        let stderr = Arc::new(StderrTail::new(secrets));
        if let Some(pipe) = child.stderr.take() {
            tokio::spawn(capture_stderr(name.to_owned(), pipe, Arc::clone(&stderr)));
        }
        Ok((
            Self {
                child,
                pgid,
                stderr,
            },
            stdout,
            stdin,
        ))
    }

    /// The process group id (the child's pid).
    pub fn pgid(&self) -> Option<i32> {
        self.pgid.map(Pid::as_raw)
    }

    /// Waits for the child to exit.
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// Ends the whole group: SIGTERM, then SIGKILL after [`TERMINATE_GRACE`] if the leader
    /// is still alive; a final SIGKILL catches grandchildren that outlived the leader.
    pub async fn terminate(mut self) {
        if let Some(pgid) = self.pgid {
            let _ = killpg(pgid, Signal::SIGTERM);
            if tokio::time::timeout(TERMINATE_GRACE, self.child.wait())
                .await
                .is_err()
            {
                tracing::debug!(
                    pgid = pgid.as_raw(),
                    "MCP server ignored SIGTERM; killing its group"
                );
            }
            let _ = killpg(pgid, Signal::SIGKILL);
            let _ = self.child.wait().await;
            self.pgid = None;
        }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

#[cfg(target_os = "linux")]
fn tie_to_parent(command: &mut Command) {
    // Captured before the fork: the pid the child must still have as its parent once the
    // death signal is set.
    let parent = nix::unistd::getpid();
    // SAFETY: the closure runs in the forked child before exec and makes only the
    // async-signal-safe prctl(2), getppid(2) and kill(2) calls (no allocation: the errors are
    // raw errno values); it touches no memory shared with the parent.
    #[expect(
        unsafe_code,
        reason = "pre_exec is the only way to set PR_SET_PDEATHSIG for the child"
    )]
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)?;
            // The parent may have died between fork and prctl: the signal was then never
            // armed and the child was re-parented. End it as the signal would have.
            if nix::unistd::getppid() != parent {
                nix::sys::signal::raise(Signal::SIGKILL).map_err(std::io::Error::from)?;
                return Err(nix::errno::Errno::ESRCH.into());
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn tie_to_parent(_command: &mut Command) {}

/// Reads the child's stderr into the tail and forwards each line (masked) to tracing.
async fn capture_stderr(name: String, pipe: impl AsyncRead + Unpin, tail: Arc<StderrTail>) {
    let mut reader = BufReader::new(pipe);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => {
                tail.closed
                    .store(true, std::sync::atomic::Ordering::Release);
                break;
            }
            Ok(_) => {
                tail.push(&line);
                let text = String::from_utf8_lossy(&line);
                tracing::debug!(server = %name, "stderr: {}", tail.mask(text.trim_end()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_end_and_masks_values() {
        let tail = StderrTail::new(vec![SecretValue::from("sk-SENTINEL")]);
        tail.push(&vec![b'x'; STDERR_TAIL_BYTES]);
        tail.push(b"\ntoken=sk-SENTINEL\n");
        let text = tail.text();
        assert!(text.len() <= STDERR_TAIL_BYTES);
        assert!(text.ends_with("token=********\n"));
        assert!(!text.contains("SENTINEL"));
        assert_eq!(tail.last_lines(1), "token=********");
    }
}
