//! `tether-test-mcp`: a small MCP server that tether's tests launch and call.
//!
//! It serves three tools (`echo`, `env_check`, `add`, plus `--tools N` numbered ones) over stdio
//! (the default) or Streamable HTTP (`--http ADDRESS`), and misbehaves on request so a launcher's
//! failure handling can be tested: `--slow-start`, `--start-when-file`, `--exit-unless-file`, `--exit-early`, `--hang`, `--stderr-env`,
//! `--spawn-child`, records cancelled slow echoes with `--record-cancellations`, reflects a variable into a tool with `--reflect-env`, answers with a large result with `--big-tool`, gives its own instructions with `--instructions`, speaks only MCP 2026-07-28 with `--modern-only` (otherwise only the revisions with `initialize`), ignores `server/discover` with `--ignore-discover`, grows its tool list with `--grow-tools`, checks a delivered secret with `--expect-env-file` and an undelivered one with `--refuse-env-value-file`. `--conformance` serves instead what the official MCP conformance suite's server scenarios call (`conformance.rs`). Logs go to stderr only; in stdio mode stdout carries nothing but the protocol.

mod big;
mod conformance;
mod http;
mod modern;
mod oauth;
mod probe;
mod reflect;
mod server;
mod tasks;

use std::{net::SocketAddr, process::ExitCode, time::Duration};

use anyhow::Context as _;
use clap::Parser;
use rmcp::ServiceExt as _;

use crate::server::{InitializeBehaviour, TestServer};

/// The environment variable that sets the log filter (tracing `EnvFilter` syntax; default `warn`).
const LOG_FILTER_ENV: &str = "RUST_LOG";

/// The program's name, as it starts its own stderr lines.
const PROGRAM: &str = "tether-test-mcp";

/// A small MCP server for tests: tools `echo`, `env_check`, `add`, and failure modes on request.
#[derive(Debug, Parser)]
#[command(name = PROGRAM, version)]
struct Cli {
    /// Serve Streamable HTTP at http://ADDRESS/mcp instead of stdio (port 0 picks a free port;
    /// the bound address is printed as `listening on http://HOST:PORT/mcp`).
    #[arg(long, value_name = "ADDRESS")]
    http: Option<SocketAddr>,

    /// With --http: answer 401 unless `Authorization: Bearer <value of VAR>` is sent.
    #[arg(long, value_name = "VAR", requires = "http")]
    require_bearer_env: Option<String>,

    /// With --http: also be an OAuth authorization server on the same port, and answer `/mcp`
    /// only with an access token it issued (see src/oauth.rs).
    #[arg(long, requires = "http", conflicts_with = "require_bearer_env")]
    oauth: bool,

    /// With --oauth: how long an access token lives, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 3600, requires = "oauth")]
    oauth_token_ttl: u64,

    /// With --oauth: support client-id metadata documents (an `https://` client id is taken
    /// unregistered; see src/oauth.rs).
    #[arg(long, requires = "oauth")]
    oauth_cimd: bool,

    /// Wait this many milliseconds before answering `initialize`.
    #[arg(long, value_name = "MS", conflicts_with = "hang")]
    slow_start: Option<u64>,

    /// Answer `initialize` only once the file PATH exists (looked for every 10 ms): a test
    /// holds the server back, then releases it by creating the file.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["hang", "slow_start"])]
    start_when_file: Option<std::path::PathBuf>,

    /// Print a line to stderr and exit with code 3 before answering anything unless the file
    /// PATH exists: a test makes the server's starts fail until it creates the file.
    #[arg(long, value_name = "PATH")]
    exit_unless_file: Option<std::path::PathBuf>,

    /// Print a line to stderr and exit with CODE before answering anything.
    #[arg(long, value_name = "CODE")]
    exit_early: Option<u8>,

    /// Read requests but never answer `initialize`; keeps running until killed.
    #[arg(long)]
    hang: bool,

    /// At startup, write `VAR=<value>` to stderr (to test that a launcher masks captured stderr).
    #[arg(long, value_name = "VAR")]
    stderr_env: Vec<String>,

    /// Start a long-lived grandchild (`sleep 300`, in our process group, on no pipes of ours) and
    /// print `child pid N` to stderr.
    #[arg(long)]
    spawn_child: bool,

    /// Refuse to start (exit 3, before answering anything) unless the environment variable NAME
    /// holds exactly the contents of the file PATH: proves a launcher delivered a secret
    /// byte for byte without the secret appearing on this command line. Repeatable.
    #[arg(long, value_name = "NAME=PATH")]
    expect_env_file: Vec<String>,

    /// Refuse to start (exit 3, before answering anything) if any environment variable holds
    /// exactly the contents of the file PATH: proves a launcher kept another server's secret
    /// away from this one. Repeatable.
    #[arg(long, value_name = "PATH")]
    refuse_env_value_file: Vec<String>,

    /// Make `echo` wait this many milliseconds before answering (to test call timeouts).
    #[arg(long, value_name = "MS", default_value_t = 0)]
    slow_echo: u64,

    /// With --slow-echo: when a waiting `echo` is cancelled (`notifications/cancelled`),
    /// append `echo cancelled: TEXT` to PATH (for tests of cancellation passed on).
    #[arg(long, value_name = "PATH", requires = "slow_echo")]
    record_cancellations: Option<std::path::PathBuf>,

    /// Also serve N numbered tools `tool_0`..`tool_{N-1}` (tools/list pages hold 50 tools).
    #[arg(long, value_name = "N", default_value_t = 0)]
    tools: usize,

    /// Also serve a tool `extra` described by TEXT (for the gateway's pinning and
    /// prompt-injection tests: a changed or poisoned description).
    #[arg(long, value_name = "TEXT")]
    extra_tool: Option<String>,

    /// The input schema of `extra`, as a JSON object (default: an empty object schema), for
    /// the scan of property names and descriptions a client shows the model.
    #[arg(long, value_name = "JSON", requires = "extra_tool")]
    extra_tool_schema: Option<String>,

    /// The `_meta` of `extra`, as a JSON object (for MCP Apps: `{"ui": {…}}`).
    #[arg(long, value_name = "JSON", requires = "extra_tool")]
    extra_tool_meta: Option<String>,

    /// Also list a prompt `extra` described by TEXT, declaring `prompts` (for the
    /// prompt-injection scan of prompts: `tether test --json`, the gateway).
    #[arg(long, value_name = "TEXT")]
    extra_prompt: Option<String>,

    /// Also serve `add_tool {name}`, which adds a tool NAME and sends
    /// `notifications/tools/list_changed` (for the gateway's list_changed tests).
    #[arg(long)]
    grow_tools: bool,

    /// Also list the resource template TEMPLATE, declaring `resources` (repeatable); a
    /// `resources/read` of any URI answers "URI read by the server of TEMPLATES" (every
    /// template, joined by spaces), so a test sees which server a read reached.
    #[arg(long, value_name = "TEMPLATE")]
    resource_template: Vec<String>,

    /// Also serve `client_capabilities`, which answers with the capabilities the client
    /// declared in its initialize, as JSON (for what the gateway declares to servers).
    #[arg(long)]
    capabilities_tool: bool,

    /// Also serve `reflect`, a hostile tool that reflects the environment variable VAR: its
    /// description holds `VAR=<value>`, and a call answers with the value in many printed
    /// forms (for the masking of what servers send).
    #[arg(long, value_name = "VAR")]
    reflect_env: Option<String>,

    /// Also serve `big {bytes, blob_bytes?, env?}`, which answers with BYTES bytes of text
    /// (and a blob of BLOB_BYTES; ENV's NAME=VALUE at both ends of the text), for the
    /// gateway's output budget.
    #[arg(long)]
    big_tool: bool,

    /// Also serve `probe {action, path?, port?, count?, mb?}`, a hostile tool that tries to
    /// read, list or append to a path, connect to a loopback port, hold COUNT processes or
    /// reserve MB MiB, and says whether it could (for the sandbox's tests).
    #[arg(long)]
    probe_tool: bool,

    /// The instructions of the initialize answer (default: a sentence naming the tools).
    #[arg(long, value_name = "TEXT")]
    instructions: Option<String>,

    /// Serve the tools, prompts and resources the MCP conformance suite's server scenarios
    /// call, speaking 2025-11-25 only (with --http or over stdio).
    #[arg(long)]
    conformance: bool,

    /// Speak MCP 2026-07-28 only (`server/discover`, no `initialize`) and serve `ask_name`,
    /// which elicits through an `InputRequiredResult`. Without it the server speaks only the
    /// revisions with `initialize` (up to 2025-11-25).
    #[arg(long)]
    modern_only: bool,

    /// Over stdio, drop every `server/discover` request unanswered (a legacy server that
    /// ignores unknown methods), for the bound on a client's probe.
    #[arg(long, conflicts_with_all = ["http", "modern_only"])]
    ignore_discover: bool,
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("{PROGRAM}: error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Everything but the mapping of an error to the exit code.
fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    for name in &cli.stderr_env {
        match std::env::var(name) {
            Ok(value) => eprintln!("{name}={value}"),
            Err(_) => eprintln!("{PROGRAM}: {name} is not set"),
        }
    }
    if cli.spawn_child {
        let child = std::process::Command::new("sleep")
            .arg("300")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .context("spawning the grandchild `sleep 300`")?;
        // Deliberately not waited for: the launcher under test must kill it with the group. It
        // holds none of our pipes, so a surviving grandchild cannot stall a reader's EOF.
        eprintln!("child pid {}", child.id());
    }
    for expectation in &cli.expect_env_file {
        let (name, path) = expectation
            .split_once('=')
            .context("--expect-env-file takes NAME=PATH")?;
        let expected = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
        if std::env::var(name).ok().as_deref() != Some(expected.as_str()) {
            eprintln!("{PROGRAM}: {name} does not hold the expected value; exiting");
            return Ok(ExitCode::from(3));
        }
    }
    for path in &cli.refuse_env_value_file {
        let refused = std::fs::read(path).with_context(|| format!("reading {path}"))?;
        if let Some((name, _)) =
            std::env::vars_os().find(|(_, value)| value.as_encoded_bytes() == refused.as_slice())
        {
            eprintln!(
                "{PROGRAM}: {} holds a value this server must not see; exiting",
                name.to_string_lossy()
            );
            return Ok(ExitCode::from(3));
        }
    }
    if let Some(path) = &cli.exit_unless_file
        && !path.exists()
    {
        eprintln!(
            "{PROGRAM}: {} does not exist; exiting as asked (--exit-unless-file)",
            path.display()
        );
        return Ok(ExitCode::from(3));
    }
    if let Some(code) = cli.exit_early {
        eprintln!("{PROGRAM}: exiting early with code {code} as asked");
        return Ok(ExitCode::from(code));
    }

    init_logging();
    let initialize = if cli.hang {
        InitializeBehaviour::Never
    } else if let Some(path) = cli.start_when_file.clone() {
        InitializeBehaviour::AnswerWhenFile(path)
    } else if let Some(ms) = cli.slow_start {
        InitializeBehaviour::AnswerAfter(Duration::from_millis(ms))
    } else {
        InitializeBehaviour::Answer
    };
    let expected_bearer = cli
        .require_bearer_env
        .as_deref()
        .map(|var| std::env::var(var).with_context(|| format!("--require-bearer-env {var}")))
        .transpose()?;
    let json_object = |text: Option<&str>, flag: &str| {
        text.map(|text| {
            serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(text)
                .with_context(|| format!("{flag} must be a JSON object"))
        })
        .transpose()
    };
    let extra_schema = json_object(cli.extra_tool_schema.as_deref(), "--extra-tool-schema")?;
    let extra_meta = json_object(cli.extra_tool_meta.as_deref(), "--extra-tool-meta")?;
    let server = TestServer::new(cli.tools, initialize)
        .with_echo_delay(Duration::from_millis(cli.slow_echo))
        .with_cancellations(cli.record_cancellations.clone())
        .with_extra_tool(cli.extra_tool.as_deref(), extra_schema, extra_meta)
        .with_extra_prompt(cli.extra_prompt.as_deref())
        .with_tool_growth(cli.grow_tools)
        .with_capabilities_tool(cli.capabilities_tool)
        .with_resource_templates(cli.resource_template.clone())
        .with_reflected(cli.reflect_env.as_deref())
        .with_big_tool(cli.big_tool)
        .with_probe_tool(cli.probe_tool)
        .with_instructions(cli.instructions.as_deref())
        .with_modern_only(cli.modern_only);
    let hang = cli.hang;

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    if cli.conformance {
        let server = conformance::ConformanceServer::default();
        return runtime
            .block_on(async move {
                match cli.http {
                    Some(address) => http::serve(address, server, expected_bearer, None).await,
                    None => serve_stdio(server, false).await,
                }
            })
            .map(|()| ExitCode::SUCCESS);
    }
    if hang && cli.http.is_none() {
        // Over stdio a hung server reads its stdin to the end without ever answering, says on
        // stderr when the end came, and outlives it: only a kill ends it.
        return runtime.block_on(async {
            use tokio::io::AsyncReadExt as _;
            let mut stdin = tokio::io::stdin();
            let mut buffer = [0_u8; 4096];
            while let Ok(read) = stdin.read(&mut buffer).await
                && read > 0
            {}
            eprintln!("{PROGRAM}: --hang: stdin closed; waiting to be killed");
            std::future::pending::<anyhow::Result<ExitCode>>().await
        });
    }
    runtime.block_on(async move {
        let served = match cli.http {
            Some(address) => {
                let oauth = cli.oauth.then(|| http::OAuthOptions {
                    ttl: Duration::from_secs(cli.oauth_token_ttl),
                    client_metadata_documents: cli.oauth_cimd,
                });
                http::serve(address, server, expected_bearer, oauth).await
            }
            None => serve_stdio(server, cli.ignore_discover).await,
        };
        if hang {
            // A hung server outlives its client: only a kill ends it.
            tracing::info!(?served, "--hang: waiting to be killed");
            std::future::pending::<()>().await;
        }
        served
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Serves MCP over stdin/stdout until the client closes stdin.
async fn serve_stdio<S: rmcp::ServerHandler>(
    server: S,
    ignore_discover: bool,
) -> anyhow::Result<()> {
    let running = if ignore_discover {
        let stdio =
            rmcp::transport::IntoTransport::<rmcp::RoleServer, std::io::Error, _>::into_transport(
                rmcp::transport::stdio(),
            );
        server.serve(modern::IgnoreDiscover(stdio)).await
    } else {
        server.serve(rmcp::transport::stdio()).await
    }
    .context("MCP handshake over stdio")?;
    let reason = running.waiting().await.context("serving over stdio")?;
    tracing::info!(?reason, "stdio session ended");
    Ok(())
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env(LOG_FILTER_ENV)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
}
