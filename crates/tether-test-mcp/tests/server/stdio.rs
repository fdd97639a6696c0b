//! The server over stdio, driven by rmcp's child-process client.

use std::{
    collections::HashSet,
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use process_wrap::tokio::{CommandWrap, ProcessGroup};
use rmcp::{
    ServiceError, ServiceExt as _,
    model::{
        ClientCapabilities, ClientConfig, ErrorCode, Implementation, PaginatedRequestParams,
        ProtocolVersion,
    },
    service::ClientInitializeError,
    transport::TokioChildProcess,
};
use serde_json::json;
use tokio::{
    io::{AsyncBufReadExt as _, AsyncRead, AsyncReadExt as _, BufReader, Lines},
    process::{Child, ChildStderr, ChildStdin, ChildStdout},
};

use crate::support::{
    KillGroupOnDrop, call, expect_echo, kill, next_line, only_text, process_is_running,
    read_child_pid, server_command, wait_until_gone, within,
};

/// A time that a server told to wait or hang cannot answer within.
const SHORT: Duration = Duration::from_millis(500);

#[tokio::test]
async fn handshake_lists_and_calls_tools() -> anyhow::Result<()> {
    let transport = TokioChildProcess::new(server_command(&[]))?;
    // A `ClientConfig` is a client handler that names the client; `()` would do as well.
    let config = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("tether-test", "0"),
    );
    let client = within("the handshake", config.serve(transport)).await??;

    let info = client
        .peer_info()
        .context("no server info after the handshake")?;
    let server = info
        .server_info
        .as_ref()
        .context("no implementation info")?;
    assert_eq!(server.name, "tether-test-mcp");
    assert!(info.capabilities.tools.is_some());
    // The default lifecycle is the `initialize` handshake, at its newest version.
    assert_eq!(
        info.protocol_version,
        ProtocolVersion::LATEST_WITH_INITIALIZE
    );

    let tools = within("tools/list", client.list_all_tools()).await??;
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    assert_eq!(names, ["add", "echo", "env_check"]);
    for tool in &tools {
        assert!(
            tool.description.as_deref().is_some_and(|d| !d.is_empty()),
            "{} has no description",
            tool.name
        );
    }

    expect_echo(&client, "hello, tether").await?;

    let sum = within(
        "add",
        client.call_tool(call("add", json!({ "a": 40, "b": 2 }))?),
    )
    .await??;
    assert_eq!(only_text(&sum)?, "42");

    // A failure inside a tool is a result with isError, not a protocol error...
    let overflow = call("add", json!({ "a": i64::MAX, "b": 1 }))?;
    let overflow = within("add overflowing", client.call_tool(overflow)).await??;
    assert_eq!(overflow.is_error, Some(true));

    // ...while an unknown tool is a JSON-RPC error.
    match within(
        "an unknown tool",
        client.call_tool(call("nope", json!({}))?),
    )
    .await?
    {
        Err(ServiceError::McpError(error)) => assert_eq!(error.code, ErrorCode::INVALID_PARAMS),
        other => bail!("expected an MCP error, got {other:?}"),
    }

    within("closing the client", client.cancel()).await??;
    Ok(())
}

#[tokio::test]
async fn env_check_tells_presence_and_never_the_value() -> anyhow::Result<()> {
    const VALUE: &str = "tether-value-that-must-never-travel";
    let mut command = server_command(&[]);
    command
        .env("TETHER_TEST_PRESENT", VALUE)
        .env_remove("TETHER_TEST_ABSENT");
    let client = within("the handshake", ().serve(TokioChildProcess::new(command)?)).await??;

    for (name, set) in [("TETHER_TEST_PRESENT", true), ("TETHER_TEST_ABSENT", false)] {
        let result = within(
            name,
            client.call_tool(call("env_check", json!({ "name": name }))?),
        )
        .await??;
        let answer: serde_json::Value = serde_json::from_str(only_text(&result)?)?;
        assert_eq!(answer, json!({ "name": name, "set": set }));
        let wire = serde_json::to_string(&result)?;
        assert!(!wire.contains(VALUE), "the value leaked: {wire}");
    }

    let invalid = call("env_check", json!({ "name": "A=B" }))?;
    let invalid = within("an invalid name", client.call_tool(invalid)).await??;
    assert_eq!(invalid.is_error, Some(true));

    within("closing the client", client.cancel()).await??;
    Ok(())
}

#[tokio::test]
async fn tools_list_is_paginated_with_a_cursor() -> anyhow::Result<()> {
    let transport = TokioChildProcess::new(server_command(&["--tools", "120"]))?;
    let client = within("the handshake", ().serve(transport)).await??;

    let first = within("the first page", client.list_tools(None)).await??;
    assert_eq!(first.tools.len(), 50);
    let cursor = first
        .next_cursor
        .clone()
        .context("the first page has no cursor")?;
    let params = PaginatedRequestParams::default().with_cursor(Some(cursor));
    let second = within("the second page", client.list_tools(Some(params))).await??;
    assert_eq!(second.tools.len(), 50);
    assert!(
        second.tools.iter().all(|tool| !first.tools.contains(tool)),
        "pages overlap"
    );

    let all = within("every page", client.list_all_tools()).await??;
    let names: HashSet<&str> = all.iter().map(|tool| tool.name.as_ref()).collect();
    assert_eq!((all.len(), names.len()), (123, 123));
    assert!(names.contains("tool_119") && names.contains("env_check"));

    let numbered = within("tool_7", client.call_tool(call("tool_7", json!({}))?)).await??;
    assert_eq!(only_text(&numbered)?, "tool_7 answered");

    within("closing the client", client.cancel()).await??;
    Ok(())
}

/// The launcher-owned child: spawn it yourself, give rmcp its pipes, keep the `Child`.
#[tokio::test]
async fn exit_early_gives_its_code_and_stderr_line_to_an_owned_child() -> anyhow::Result<()> {
    let (mut child, pipes, stderr) = spawn_owned(&["--exit-early", "3"])?;
    expect_early_exit(().serve(pipes), stderr).await?;
    let status = within("the exit", child.wait()).await??;
    assert_eq!(status.code(), Some(3));
    Ok(())
}

#[tokio::test]
async fn exit_early_through_tokio_child_process_keeps_stderr() -> anyhow::Result<()> {
    let (transport, stderr) = TokioChildProcess::builder(server_command(&["--exit-early", "3"]))
        .stderr(Stdio::piped())
        .spawn()?;
    let stderr = stderr.context("builder.stderr(piped) gives no handle")?;
    expect_early_exit(().serve(transport), stderr).await
}

/// Spawns the server with `args` on pipes the caller owns: the child, its `(stdout, stdin)` for
/// rmcp's async-read/write transport, and its stderr.
fn spawn_owned(args: &[&str]) -> anyhow::Result<(Child, (ChildStdout, ChildStdin), ChildStderr)> {
    let mut command = server_command(args);
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn()?;
    let stdin = child.stdin.take().context("no stdin pipe")?;
    let stdout = child.stdout.take().context("no stdout pipe")?;
    let stderr = child.stderr.take().context("no stderr pipe")?;
    Ok((child, (stdout, stdin), stderr))
}

/// Expects `handshake` to fail because the server exited with `--exit-early 3`, and its `stderr`
/// to say so.
async fn expect_early_exit<T>(
    handshake: impl Future<Output = Result<T, ClientInitializeError>>,
    mut stderr: impl AsyncRead + Unpin,
) -> anyhow::Result<()> {
    let error = match within("the handshake", handshake).await? {
        Ok(_) => bail!("the handshake succeeded"),
        Err(error) => error,
    };
    // Which one depends on whether the child was gone before rmcp wrote `initialize`.
    assert!(
        matches!(
            error,
            ClientInitializeError::ConnectionClosed(_)
                | ClientInitializeError::TransportError { .. }
        ),
        "{error:?}"
    );
    let mut text = String::new();
    within("reading stderr", stderr.read_to_string(&mut text)).await??;
    assert!(
        text.contains("tether-test-mcp: exiting early with code 3 as asked"),
        "{text:?}"
    );
    Ok(())
}

#[tokio::test]
async fn the_builder_overrides_stdio_set_on_the_command() -> anyhow::Result<()> {
    let mut command = server_command(&[]);
    command.stderr(Stdio::piped());
    let (transport, stderr) = TokioChildProcess::builder(command).spawn()?;
    // The builder's own default (inherit) replaced the Command's piped stderr.
    assert!(stderr.is_none());
    let client = within("the handshake", ().serve(transport)).await??;
    within("closing the client", client.cancel()).await??;
    Ok(())
}

#[tokio::test]
async fn stderr_env_reaches_captured_stderr() -> anyhow::Result<()> {
    let mut command = server_command(&["--stderr-env", "TETHER_TEST_STDERR"]);
    command.env("TETHER_TEST_STDERR", "visible-on-purpose");
    let (transport, stderr) = TokioChildProcess::builder(command)
        .stderr(Stdio::piped())
        .spawn()?;
    let mut lines = BufReader::new(stderr.context("no stderr handle")?).lines();
    let client = within("the handshake", ().serve(transport)).await??;
    let line = next_line(&mut lines, "the stderr line").await?;
    assert_eq!(line, "TETHER_TEST_STDERR=visible-on-purpose");
    within("closing the client", client.cancel()).await??;
    Ok(())
}

#[tokio::test]
async fn slow_start_delays_the_initialize_answer() -> anyhow::Result<()> {
    let transport = TokioChildProcess::new(server_command(&["--slow-start", "5000"]))?;
    let pid = transport.id().context("no pid")?;
    let attempt = tokio::time::timeout(SHORT, ().serve(transport)).await;
    assert!(attempt.is_err(), "initialize was answered before the delay");
    // Dropping the unfinished handshake dropped the transport, which kills the child.
    wait_until_gone(i32::try_from(pid)?).await?;

    let transport = TokioChildProcess::new(server_command(&["--slow-start", "700"]))?;
    let started = Instant::now();
    let client = within("the slow handshake", ().serve(transport)).await??;
    assert!(started.elapsed() >= Duration::from_millis(700));
    within("closing the client", client.cancel()).await??;
    Ok(())
}

#[tokio::test]
async fn hang_never_answers_and_outlives_its_stdin() -> anyhow::Result<()> {
    let (mut child, pipes, stderr) = spawn_owned(&["--hang"])?;
    let attempt = tokio::time::timeout(SHORT, ().serve(pipes)).await;
    assert!(attempt.is_err(), "a hung server answered");
    // The handshake's transport, and so the child's stdin, is gone: once the server says it
    // read the end of its stdin, it is still running.
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    within("the server reading the end of its stdin", async {
        while let Some(line) = lines.next_line().await? {
            if line.contains("stdin closed") {
                return Ok(());
            }
        }
        bail!("stderr ended before the server said its stdin closed")
    })
    .await??;
    assert!(
        child.try_wait()?.is_none(),
        "--hang exited when stdin closed"
    );
    kill(child).await
}

/// A graceful close (cancel, or drop of the running client) ends only the server: with
/// `ProcessGroup::leader()` the grandchild still lives until someone kills the group.
#[tokio::test]
async fn a_graceful_close_leaves_the_grandchild_to_the_launcher() -> anyhow::Result<()> {
    let GroupLeader {
        transport,
        group,
        grandchild,
        _stderr,
    } = spawn_group_leader(&[]).await?;

    let client = within("the handshake", ().serve(transport)).await??;
    expect_echo(&client, "x").await?;
    within("closing the client", client.cancel()).await??;
    wait_until_gone(group.0).await?;
    let survived = process_is_running(grandchild);

    // The group outlives its leader while a member lives, so the leader's pid still names it.
    drop(group);
    wait_until_gone(grandchild).await?;
    assert!(
        survived,
        "expected the grandchild to survive a graceful close"
    );
    Ok(())
}

/// Dropping a `TokioChildProcess` whose child still runs kills it; with `ProcessGroup::leader()`
/// that kill is `killpg`, so the grandchild goes too.
#[tokio::test]
async fn dropping_a_live_transport_kills_the_whole_group() -> anyhow::Result<()> {
    let GroupLeader {
        transport,
        group,
        grandchild,
        _stderr,
    } = spawn_group_leader(&["--hang"]).await?;

    let attempt = tokio::time::timeout(SHORT, ().serve(transport)).await;
    assert!(attempt.is_err(), "a hung server answered");
    wait_until_gone(group.0).await?;
    wait_until_gone(grandchild).await
}

/// A `--spawn-child` server that `TokioChildProcess` started as the leader of its own group.
struct GroupLeader {
    transport: TokioChildProcess,
    /// Named by the server's pid; killed when dropped.
    group: KillGroupOnDrop,
    grandchild: i32,
    /// Kept open so the server never writes into a closed pipe.
    _stderr: Lines<BufReader<ChildStderr>>,
}

async fn spawn_group_leader(args: &[&str]) -> anyhow::Result<GroupLeader> {
    let mut command = CommandWrap::from(server_command(&["--spawn-child"]));
    command.command_mut().args(args);
    command.wrap(ProcessGroup::leader());
    let (transport, stderr) = TokioChildProcess::builder(command)
        .stderr(Stdio::piped())
        .spawn()?;
    let group = KillGroupOnDrop(i32::try_from(transport.id().context("no pid")?)?);
    let mut stderr = BufReader::new(stderr.context("no stderr handle")?).lines();
    let grandchild = read_child_pid(&mut stderr).await?;
    Ok(GroupLeader {
        transport,
        group,
        grandchild,
        _stderr: stderr,
    })
}

/// `pre_exec` hooks set on the `tokio::process::Command` survive into rmcp's `CommandWrap`; a
/// parent-death signal fires when the *thread* that spawned the child ends.
#[test]
fn a_parent_death_signal_set_in_pre_exec_ends_the_server_with_its_spawning_thread()
-> anyhow::Result<()> {
    let spawner = std::thread::spawn(|| -> anyhow::Result<i32> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async {
            // --hang ignores stdin closing, so only the signal can end it.
            let mut command = server_command(&["--hang"]);
            command.kill_on_drop(false).process_group(0);
            set_parent_death_signal(&mut command);
            let (transport, _) = TokioChildProcess::builder(command)
                .stderr(Stdio::null())
                .spawn()?;
            let pid = i32::try_from(transport.id().context("no pid")?)?;
            // Let go of the child without killing it (no KillOnDrop wrapper, kill_on_drop off).
            drop(transport.into_inner());
            Ok(pid)
        })
    });
    let server = spawner
        .join()
        .map_err(|_| anyhow::anyhow!("the spawning thread panicked"))??;

    let _group = KillGroupOnDrop(server);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(wait_until_gone(server))
}

/// Asks the kernel to SIGKILL the child when the thread that spawned it ends (Linux only).
fn set_parent_death_signal(command: &mut tokio::process::Command) {
    #[expect(
        unsafe_code,
        reason = "pre_exec is unsafe: the hook runs between fork and exec"
    )]
    // SAFETY: the hook calls only prctl, which is async-signal-safe, and allocates nothing.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
