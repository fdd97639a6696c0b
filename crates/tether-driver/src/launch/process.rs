//! Spawning a stdio server as the leader of its own process group, and ending the group.
//!
//! The child runs without a shell, with a cleared environment plus [`ENV_WHITELIST`] plus the
//! server's own `env`. In the `tether` binary it runs under the supervisor
//! ([`crate::supervisor`]), which leads the group, adopts every orphaned descendant and kills
//! them all when the server exits, on shutdown, or when tether dies. Without a supervisor (a
//! library user), it is tied on Linux to the spawning thread's death with `PR_SET_PDEATHSIG`,
//! and kills itself before exec when tether died before that signal was armed. Ending it
//! terminates the whole group (TERM, then KILL after a grace period), so launchers such as
//! `npx` leave no grandchildren behind.

use std::collections::VecDeque;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tether_config::{Masker, SecretValue};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, ChildStdin, ChildStdout};

/// Variables a stdio server inherits from tether's environment (the rest is cleared).
pub const ENV_WHITELIST: [&str; 10] = [
    "HOME", "LOGNAME", "PATH", "SHELL", "USER", "LANG", "LC_ALL", "TERM", "TMPDIR", "TZ",
];

/// The environment a stdio server inherits, read from this process's own: each
/// [`ENV_WHITELIST`] variable that is set, then each of `pass_env` (`--pass-env`, a server's
/// `passEnv`) that is set. Everything else is left out. The one rule for every way tether
/// starts a server: the direct launch and the gateway ([`ChildProcess::spawn`]) and the exec
/// shim of a hand-off, which runs inside the harness and so must drop the harness's
/// environment the same way.
pub fn inherited_env(pass_env: &[String]) -> Vec<(String, std::ffi::OsString)> {
    let mut inherited: Vec<(String, std::ffi::OsString)> = Vec::new();
    for name in ENV_WHITELIST
        .iter()
        .map(|name| (*name).to_owned())
        .chain(pass_env.iter().cloned())
    {
        if inherited.iter().any(|(known, _)| *known == name) {
            continue;
        }
        if let Some(value) = std::env::var_os(&name) {
            inherited.push((name, value));
        }
    }
    inherited
}

/// How much of a child's stderr is kept: the last 64 KiB.
pub const STDERR_TAIL_BYTES: usize = 64 * 1024;

/// The longest stderr line forwarded to the log as one event: a longer run of bytes without a
/// line end (`\n` or `\r`) is forwarded in pieces of this size, so a child that never ends a
/// line cannot grow tether's memory.
pub const STDERR_LINE_BYTES: usize = 8 * 1024;

/// How long a child group gets between SIGTERM and SIGKILL.
pub const TERMINATE_GRACE: Duration = Duration::from_secs(2);

/// What a stdio server is launched with, rendered: the values are real. Any of them may
/// have come from a secret or the environment, so each stays a [`SecretValue`] (zeroized
/// when the launch is dropped) until it is handed to [`tokio::process::Command`].
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
    /// A ring: dropping the oldest bytes costs what is dropped, not what is kept.
    bytes: Mutex<VecDeque<u8>>,
    closed: std::sync::atomic::AtomicBool,
    /// Built once per child: every captured line is masked with it.
    masker: Masker,
    /// Extra bytes kept beyond the limit so a secret straddling the cut is still masked whole.
    margin: usize,
}

impl StderrTail {
    fn new(secrets: Vec<SecretValue>) -> Self {
        let masker = Masker::new(&secrets);
        Self {
            bytes: Mutex::new(VecDeque::new()),
            closed: std::sync::atomic::AtomicBool::new(false),
            margin: masker.longest(),
            masker,
        }
    }

    fn push(&self, chunk: &[u8]) {
        let mut bytes = self
            .bytes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        bytes.extend(chunk);
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

    /// The captured text (at most [`STDERR_TAIL_BYTES`]), every known secret masked and every
    /// control character but line feed and tab escaped (it is shown on terminals).
    pub fn text(&self) -> String {
        let mut bytes = self
            .bytes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let masked = self
            .masker
            .mask(&String::from_utf8_lossy(bytes.make_contiguous()));
        let start = masked.len().saturating_sub(STDERR_TAIL_BYTES);
        let start = (start..=masked.len())
            .find(|i| masked.is_char_boundary(*i))
            .unwrap_or(masked.len());
        tether_config::escape_controls(&masked[start..]).into_owned()
    }

    /// The last `lines` lines of [`StderrTail::text`], for error messages.
    pub fn last_lines(&self, lines: usize) -> String {
        let text = self.text();
        let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

/// A running stdio child, leader of its own process group. Dropping it kills the group.
pub struct ChildProcess {
    child: Child,
    pgid: Option<Pid>,
    /// Whether the group leader is tether's supervisor (see [`crate::supervisor`]).
    supervised: bool,
    /// Its stderr, as captured so far.
    pub stderr: Arc<StderrTail>,
    /// Without a supervisor: the sandbox's private home and cgroup, removed after the group.
    _sandboxed: Option<crate::supervisor::SandboxKept>,
    /// Its egress proxy, without a supervisor (aborted with `Self`).
    _proxy: Option<crate::supervisor::ProxyTask>,
}

impl ChildProcess {
    /// Spawns `launch` for the server `name`; returns the child and its stdio for the MCP
    /// transport. `secrets` are masked in captured stderr and in stderr log lines.
    pub fn spawn(
        name: &str,
        launch: &StdioLaunch,
        secrets: Vec<SecretValue>,
        sandbox: Option<&tether_sandbox::Policy>,
    ) -> std::io::Result<(Self, ChildStdout, ChildStdin)> {
        let supervised = crate::supervisor::installed();
        let mut options = crate::supervisor::SuperviseOptions::default();
        if let (true, Some(policy)) = (supervised, sandbox) {
            options.sandbox = Some(serde_json::to_string(policy).map_err(std::io::Error::other)?);
        }
        let args: Vec<&str> = launch.args.iter().map(SecretValue::expose).collect();
        let mut command = crate::supervisor::supervised_command(
            std::ffi::OsStr::new(launch.command.expose()),
            &args,
            &options,
        );
        command
            .env_clear()
            .envs(inherited_env(&[]))
            .envs(launch.env.iter().map(|(k, v)| (k.as_str(), v.expose())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // The supervisor must get the chance to end what it adopted: dropping sends it
            // SIGUSR1 (see `Drop`), not SIGKILL.
            .kill_on_drop(!supervised);
        // A sandboxed child without a supervisor leads a session of its own (its hook calls
        // setsid, which a group leader cannot): its group is still its pid.
        if supervised || sandbox.is_none() {
            command.process_group(0);
        }
        if let Some(cwd) = &launch.cwd {
            command.current_dir(cwd.expose());
        }
        // Without a supervisor, the sandbox is prepared here and its leftovers go with `Self`.
        let mut sandboxed = None;
        let mut egress = None;
        if !supervised {
            let hook = match sandbox {
                Some(policy) => {
                    let json = serde_json::to_string(policy).map_err(std::io::Error::other)?;
                    let program = std::ffi::OsString::from(launch.command.expose());
                    let args: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
                    let (hook, kept, proxy) = crate::supervisor::sandbox_for(
                        &json,
                        command.as_std_mut(),
                        &program,
                        &args,
                        false,
                    )
                    .map_err(std::io::Error::other)?;
                    sandboxed = Some(kept);
                    egress = proxy;
                    Some(hook)
                }
                None => None,
            };
            crate::supervisor::tie_to_parent(command.as_std_mut(), hook);
        }
        let mut child = command.spawn()?;
        let proxy = crate::supervisor::start_egress(egress);
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
                supervised,
                stderr,
                _sandboxed: sandboxed,
                _proxy: proxy,
            },
            stdout,
            stdin,
        ))
    }

    /// The child's pid, while it has not been waited for.
    pub fn pid(&self) -> Option<i32> {
        self.child.id().and_then(|pid| i32::try_from(pid).ok())
    }

    /// The process group id (the child's pid).
    pub fn pgid(&self) -> Option<i32> {
        self.pgid.map(Pid::as_raw)
    }

    /// Asks the whole group to end now, without waiting (a holder that cannot take the child
    /// out of a shared runtime): SIGTERM to the group, or, under tether's supervisor, the
    /// signal that makes it end every descendant. Dropping the child later finishes the job.
    pub fn stop(&self) {
        if let Some(pgid) = self.pgid {
            if self.supervised {
                let _ = nix::sys::signal::kill(pgid, Signal::SIGUSR1);
            } else {
                let _ = killpg(pgid, Signal::SIGTERM);
            }
        }
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
            if self.supervised {
                // The supervisor kills every descendant, those outside the group too.
                let _ = nix::sys::signal::kill(pgid, Signal::SIGUSR1);
            } else {
                let _ = killpg(pgid, Signal::SIGKILL);
            }
        }
    }
}

/// Reads the child's stderr into the tail and forwards each line (masked) to tracing.
///
/// Memory stays bounded whatever the child writes: bytes go into the tail as they arrive, and a
/// line is cut at `\n`, at `\r` (progress bars redraw one line with it) or after
/// [`STDERR_LINE_BYTES`] bytes without either.
async fn capture_stderr(name: String, mut pipe: impl AsyncRead + Unpin, tail: Arc<StderrTail>) {
    let mut lines = LineSplitter::new(tail.masker.longest());
    let mut chunk = vec![0_u8; STDERR_LINE_BYTES];
    let forward = |piece: Piece<'_>| {
        if !tracing::enabled!(tracing::Level::DEBUG) {
            return;
        }
        let text = piece.masked(&tail.masker);
        let text = tether_config::escape_controls(text.trim_end());
        if !text.is_empty() {
            tracing::debug!(server = %name, "stderr: {text}");
        }
    };
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => {
                lines.finish(forward);
                tail.closed
                    .store(true, std::sync::atomic::Ordering::Release);
                break;
            }
            Ok(read) => {
                let bytes = chunk.get(..read).unwrap_or_default();
                tail.push(bytes);
                lines.feed(bytes, forward);
            }
        }
    }
}

/// One line (or one piece of an over-long line) with the bytes around it that a secret cut by
/// the piece's edges may lie in.
struct Piece<'a> {
    bytes: &'a [u8],
    keep: std::ops::Range<usize>,
}

impl Piece<'_> {
    /// The piece's text with every value of `masker` masked, also one that crosses its edges.
    fn masked(&self, masker: &Masker) -> String {
        let part = |range: std::ops::Range<usize>| {
            String::from_utf8_lossy(self.bytes.get(range).unwrap_or_default()).into_owned()
        };
        let before = part(0..self.keep.start);
        let kept = part(self.keep.clone());
        let text = before.clone() + &kept + &part(self.keep.end..self.bytes.len());
        masker.mask_range(&text, before.len()..before.len() + kept.len())
    }
}

/// Cuts a byte stream into lines at `\n` or `\r`, and a line without an end into pieces of
/// [`STDERR_LINE_BYTES`] bytes. A piece is handed over with up to `context` bytes on each side
/// (the longest masked value), so masking finds a value the cut went through; memory stays below
/// [`STDERR_LINE_BYTES`] plus twice `context`.
struct LineSplitter {
    pending: Vec<u8>,
    /// How many bytes at the start of `pending` were handed over already (left context).
    shown: usize,
    context: usize,
}

impl LineSplitter {
    fn new(context: usize) -> Self {
        Self {
            pending: Vec::new(),
            shown: 0,
            context,
        }
    }

    /// Adds `bytes`, handing each completed line or piece to `emit`.
    fn feed(&mut self, mut bytes: &[u8], mut emit: impl FnMut(Piece<'_>)) {
        while !bytes.is_empty() {
            let room = STDERR_LINE_BYTES + self.context - (self.pending.len() - self.shown);
            let window = bytes.get(..room.min(bytes.len())).unwrap_or(bytes);
            if let Some(end) = window.iter().position(|b| *b == b'\n' || *b == b'\r') {
                self.pending
                    .extend_from_slice(window.get(..end).unwrap_or_default());
                emit(Piece {
                    bytes: &self.pending,
                    keep: self.shown..self.pending.len(),
                });
                self.pending.clear();
                self.shown = 0;
                bytes = bytes.get(end + 1..).unwrap_or_default();
                continue;
            }
            self.pending.extend_from_slice(window);
            bytes = bytes.get(window.len()..).unwrap_or_default();
            if self.pending.len() - self.shown == STDERR_LINE_BYTES + self.context {
                let end = self.shown + STDERR_LINE_BYTES;
                emit(Piece {
                    bytes: &self.pending,
                    keep: self.shown..end,
                });
                let drop = end.saturating_sub(self.context);
                self.pending.drain(..drop);
                self.shown = end - drop;
            }
        }
    }

    /// Hands over what is left after the last line end, once the stream ended.
    fn finish(&mut self, mut emit: impl FnMut(Piece<'_>)) {
        if self.pending.len() > self.shown {
            emit(Piece {
                bytes: &self.pending,
                keep: self.shown..self.pending.len(),
            });
        }
        self.pending.clear();
        self.shown = 0;
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

    fn split(input: &[&[u8]], values: &[&str]) -> Vec<String> {
        let values: Vec<SecretValue> = values.iter().copied().map(SecretValue::from).collect();
        let masker = Masker::new(&values);
        let mut splitter = LineSplitter::new(masker.longest());
        let mut lines = Vec::new();
        for bytes in input {
            splitter.feed(bytes, |piece| lines.push(piece.masked(&masker)));
        }
        splitter.finish(|piece| lines.push(piece.masked(&masker)));
        lines
    }

    #[test]
    fn lines_end_at_newline_and_carriage_return_across_chunks() {
        let lines = split(&[b"one\ntw", b"o\r50%\r", b"100%\r\nlast"], &[]);
        assert_eq!(lines, ["one", "two", "50%", "100%", "", "last"]);
    }

    #[test]
    fn a_line_without_an_end_is_cut_at_the_bound() {
        let long = vec![b'x'; STDERR_LINE_BYTES * 2 + 5];
        let lines = split(&[&long, b"\n"], &[]);
        let lengths: Vec<usize> = lines.iter().map(String::len).collect();
        assert_eq!(lengths, vec![STDERR_LINE_BYTES, STDERR_LINE_BYTES, 5]);
    }

    #[test]
    fn a_value_the_cut_goes_through_is_masked_on_both_sides() {
        let secret = "SENTINEL-across-the-cut";
        let mut long = vec![b'x'; STDERR_LINE_BYTES - 10];
        long.extend_from_slice(secret.as_bytes());
        long.extend_from_slice(&vec![b'y'; STDERR_LINE_BYTES]);
        let lines = split(&[&long], &[secret]);
        assert_eq!(lines.len(), 2, "a full piece and the rest");
        for line in &lines {
            assert!(!line.contains("SENTINEL"), "{line}");
            assert!(!line.contains("across"), "{line}");
        }
        let first = lines.first().expect("a first piece");
        assert!(first.ends_with("x********"), "{first}");
        let second = lines.get(1).expect("a second piece");
        assert!(second.starts_with("********y"), "{second}");
    }
}
