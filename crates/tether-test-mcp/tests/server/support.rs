//! Helpers shared by the process-level tests: the binary, time limits, process checks.

use std::{future::Future, process::Stdio, time::Duration};

use anyhow::{Context as _, bail};
use rmcp::{
    Peer, RoleClient,
    model::{CallToolRequestParams, CallToolResult},
};
use tokio::{
    io::{AsyncBufReadExt as _, AsyncRead, BufReader},
    process::Command,
};

/// The server binary under test.
pub const BINARY: &str = env!("CARGO_BIN_EXE_tether-test-mcp");

/// The longest any single step may take before a test gives up (a debug build on 2 busy cores).
pub const STEP_LIMIT: Duration = Duration::from_secs(20);

/// A command for the server binary with `args`, quiet logs and no inherited `RUST_LOG`.
pub fn server_command(args: &[&str]) -> Command {
    let mut command = Command::new(BINARY);
    command
        .args(args)
        .env("RUST_LOG", "warn")
        .kill_on_drop(true);
    command
}

/// Runs `step`, failing the test with `what` if it takes longer than [`STEP_LIMIT`].
pub async fn within<F: Future>(what: &str, step: F) -> anyhow::Result<F::Output> {
    tokio::time::timeout(STEP_LIMIT, step)
        .await
        .with_context(|| format!("{what} took longer than {STEP_LIMIT:?}"))
}

/// The next line of `reader`, within [`STEP_LIMIT`].
pub async fn next_line<R: AsyncRead + Unpin>(
    lines: &mut tokio::io::Lines<BufReader<R>>,
    what: &str,
) -> anyhow::Result<String> {
    within(what, lines.next_line())
        .await??
        .with_context(|| format!("{what}: the stream ended"))
}

/// Reads stderr lines until one says `child pid N` and returns N. The caller keeps `lines` open,
/// so the server never writes into a closed pipe.
pub async fn read_child_pid<R: AsyncRead + Unpin>(
    lines: &mut tokio::io::Lines<BufReader<R>>,
) -> anyhow::Result<i32> {
    loop {
        let line = next_line(lines, "the `child pid` line").await?;
        if let Some(pid) = line.strip_prefix("child pid ") {
            return pid.trim().parse().context("parsing the grandchild pid");
        }
    }
}

/// Whether `pid` names a process that is still running (a zombie counts as gone).
pub fn process_is_running(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state is the first field after the command name, which is in parentheses.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    !matches!(state, Some("Z" | "X") | None)
}

/// Waits until `pid` is no longer running, failing after [`STEP_LIMIT`].
pub async fn wait_until_gone(pid: i32) -> anyhow::Result<()> {
    within(&format!("process {pid} to go away"), async {
        while process_is_running(pid) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

/// Sends SIGKILL to the process group `pgid` (a test's clean-up of a grandchild).
pub fn kill_group(pgid: i32) -> anyhow::Result<()> {
    #[expect(unsafe_code, reason = "killpg has no safe std equivalent")]
    // SAFETY: killpg only sends a signal; it touches no memory of ours.
    let result = unsafe { libc::killpg(pgid, libc::SIGKILL) };
    if result != 0 {
        let error = std::io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::ESRCH) {
            return Err(error).with_context(|| format!("killpg({pgid})"));
        }
    }
    Ok(())
}

/// Kills the process group it names when dropped, so a failing test leaves no grandchild behind.
pub struct KillGroupOnDrop(pub i32);

impl Drop for KillGroupOnDrop {
    fn drop(&mut self) {
        if let Err(error) = kill_group(self.0) {
            eprintln!("clean-up: {error:#}");
        }
    }
}

/// Spawns the server in HTTP mode on a free loopback port and returns it with its `/mcp` URL.
pub async fn spawn_http(
    args: &[&str],
    envs: &[(&str, &str)],
) -> anyhow::Result<(tokio::process::Child, String)> {
    let mut command = server_command(&["--http", "127.0.0.1:0"]);
    command
        .args(args)
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = command.spawn().context("spawning the HTTP server")?;
    let stdout = child.stdout.take().context("no stdout pipe")?;
    let mut lines = BufReader::new(stdout).lines();
    let line = next_line(&mut lines, "the listening line").await?;
    let Some(url) = line.strip_prefix("listening on ") else {
        bail!("unexpected first stdout line {line:?}");
    };
    if !url.starts_with("http://127.0.0.1:") || !url.ends_with("/mcp") {
        bail!("unexpected URL {url:?}");
    }
    Ok((child, url.to_owned()))
}

/// Kills a child this test started and reaps it.
pub async fn kill(mut child: tokio::process::Child) -> anyhow::Result<()> {
    child.start_kill().context("killing the server")?;
    within("reaping the server", child.wait()).await??;
    Ok(())
}

/// A `tools/call` request for `name` with JSON object `arguments`.
pub fn call(
    name: &'static str,
    arguments: serde_json::Value,
) -> anyhow::Result<CallToolRequestParams> {
    let serde_json::Value::Object(arguments) = arguments else {
        bail!("tool arguments must be a JSON object");
    };
    Ok(CallToolRequestParams::new(name).with_arguments(arguments))
}

/// The single text content of a tool result.
pub fn only_text(result: &CallToolResult) -> anyhow::Result<&str> {
    match result.content.as_slice() {
        [block] => Ok(block
            .as_text()
            .context("the content is not text")?
            .text
            .as_str()),
        other => bail!("expected one content block, got {other:?}"),
    }
}

/// Calls `echo` with `text` and checks that the same text comes back.
pub async fn expect_echo(client: &Peer<RoleClient>, text: &str) -> anyhow::Result<()> {
    let echoed = within(
        "echo",
        client.call_tool(call("echo", serde_json::json!({ "text": text }))?),
    )
    .await??;
    assert_eq!(only_text(&echoed)?, text);
    assert_eq!(echoed.is_error, Some(false));
    Ok(())
}
