//! The gateway's overhead, run by hand (`bench/gateway.sh` builds the release binaries and runs
//! this); prints its figures.
//!
//! 1. One `tools/call` (`echo`) straight to `tether-test-mcp` and through `tether serve`, over
//!    stdio and over Streamable HTTP, interleaved, one call at a time: p50/p99 each and the
//!    added latency. Targets: p50 ≤ +1 ms, p99 ≤ +3 ms.
//! 2. `tools/list` over 16 servers (50 tools each) at the gateway vs the slowest server's own
//!    `tools/list`. Target ≤ 1.1×. Then the same over 16 server-everything processes (Node),
//!    real servers whose own `tools/list` does work of its own.
//! 3. 100 concurrent `echo` calls spread over 8 servers, each with its own text: every answer
//!    must be its own call's text (none lost, none cross-wired).
//!
//! Everything runs on loopback with real processes; the binaries are `target/release/tether`
//! and `target/release/tether-test-mcp` when built, else the debug ones.

#![allow(clippy::expect_used, reason = "a bench fails loudly")]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt as _;

type Client = RunningService<RoleClient, ()>;

const SAMPLES: usize = 2_000;
const WARMUP: usize = 200;

mod common;

use common::{binary, ms, quantile};

fn main() {
    common::with_home(|home| {
        HOME.set(home).expect("set once");
        bench()
    });
}

/// The `TETHER_HOME` of every process the bench starts: a temporary directory, so that the
/// gateway's pins and audit logs never touch the machine's own (nor carry over between runs).
fn home() -> &'static Path {
    HOME.get().expect("main sets the home first")
}

static HOME: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

async fn stdio_client(program: &Path, args: &[&str]) -> Client {
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .env("NO_COLOR", "1")
        .env("TETHER_HOME", home());
    let (transport, _) = TokioChildProcess::builder(command)
        .stderr(Stdio::null())
        .spawn()
        .expect("spawning a stdio server");
    ().serve(transport).await.expect("initializing over stdio")
}

async fn http_client(url: &str) -> Client {
    let config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
    ().serve(StreamableHttpClientTransport::from_config(config))
        .await
        .expect("initializing over HTTP")
}

/// A process that prints `listening on URL` as its first stdout line.
async fn listening(program: &Path, args: &[&str]) -> (tokio::process::Child, String) {
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .env("NO_COLOR", "1")
        .env("TETHER_HOME", home())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawning a listener");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut line = String::new();
    tokio::io::BufReader::new(stdout)
        .read_line(&mut line)
        .await
        .expect("reading the listening line");
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected line {line:?}"))
        .to_owned();
    (child, url)
}

async fn echo(client: &Client, tool: &str, text: &str) -> String {
    let arguments = json!({ "text": text });
    let params = CallToolRequestParams::new(tool.to_owned())
        .with_arguments(arguments.as_object().cloned().unwrap_or_default());
    let result = client.call_tool(params).await.expect("calling echo");
    let value = serde_json::to_value(result).expect("a result");
    value["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Interleaved samples of one call on `direct` and on `gateway`.
async fn overhead(label: &str, direct: &Client, gateway: &Client) {
    let mut straight = Vec::with_capacity(SAMPLES);
    let mut through = Vec::with_capacity(SAMPLES);
    for index in 0..(WARMUP + SAMPLES) {
        let started = Instant::now();
        echo(direct, "echo", "x").await;
        let a = started.elapsed();
        let started = Instant::now();
        echo(gateway, "test__echo", "x").await;
        let b = started.elapsed();
        if index >= WARMUP {
            straight.push(a);
            through.push(b);
        }
    }
    straight.sort();
    through.sort();
    let (d50, d99) = (quantile(&straight, 0.5), quantile(&straight, 0.99));
    let (g50, g99) = (quantile(&through, 0.5), quantile(&through, 0.99));
    println!(
        "tools/call over {label}: direct p50 {} p99 {}; through the gateway p50 {} p99 {}; added p50 {} p99 {}  [targets: p50 <= +1 ms, p99 <= +3 ms]",
        ms(d50),
        ms(d99),
        ms(g50),
        ms(g99),
        ms(g50.saturating_sub(d50)),
        ms(g99.saturating_sub(d99)),
    );
}

fn servers_spec(server: &Path, count: usize, extra: &[&str]) -> String {
    named_servers_spec("s", server, count, extra)
}

/// `{"PREFIX0": {...}, "PREFIX1": {...}, …}`: `count` servers running `server EXTRA…`.
fn named_servers_spec(prefix: &str, server: &Path, count: usize, extra: &[&str]) -> String {
    let args: Vec<String> = extra.iter().map(|a| json!(a).to_string()).collect();
    let entries: Vec<String> = (0..count)
        .map(|i| {
            format!(
                r#""{prefix}{i}": {{"command": {}, "args": [{}]}}"#,
                json!(server.to_string_lossy()),
                args.join(",")
            )
        })
        .collect();
    format!("{{{}}}", entries.join(","))
}

/// p50 of `tools/list` on `program ARGS` over stdio, measured from writing the request to
/// reading the whole answer line, without parsing it.
async fn raw_list_p50(program: &Path, args: &[&str]) -> Duration {
    use tokio::io::AsyncWriteExt as _;
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .env("TETHER_HOME", home())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawning a stdio server");
    let mut stdin = child.stdin.take().expect("its stdin");
    let mut stdout = tokio::io::BufReader::new(child.stdout.take().expect("its stdout"));
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"}}});
    let mut line = String::new();
    stdin
        .write_all(format!("{initialize}\n").as_bytes())
        .await
        .expect("writing initialize");
    stdout
        .read_line(&mut line)
        .await
        .expect("reading initialize");
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
        .await
        .expect("writing initialized");
    let mut samples = Vec::new();
    for index in 0..(WARMUP + SAMPLES / 4) {
        let request = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"tools/list\"}}\n",
            index + 1
        );
        let started = Instant::now();
        stdin
            .write_all(request.as_bytes())
            .await
            .expect("writing tools/list");
        loop {
            line.clear();
            stdout
                .read_line(&mut line)
                .await
                .expect("reading the answer");
            if line.contains("\"result\"") {
                break;
            }
        }
        if index >= WARMUP {
            samples.push(started.elapsed());
        }
    }
    samples.sort();
    quantile(&samples, 0.5)
}

async fn bench() {
    let tether = binary("tether", "tether-cli");
    let server = binary("tether-test-mcp", "tether-test-mcp");
    let audit = |name: &str| home().join(name).to_string_lossy().into_owned();

    // 1a. stdio.
    let direct = stdio_client(&server, &[]).await;
    let spec = format!(
        r#"{{"test": {{"command": {}}}}}"#,
        json!(server.to_string_lossy())
    );
    let audit_stdio = audit("stdio.jsonl");
    let gateway = stdio_client(&tether, &["serve", "--mcp", &spec, "--audit", &audit_stdio]).await;
    overhead("stdio", &direct, &gateway).await;
    drop((direct, gateway));

    // 1b. Streamable HTTP: the gateway over HTTP in front of the server over HTTP.
    let (_upstream, upstream_url) = listening(&server, &["--http", "127.0.0.1:0"]).await;
    let spec = format!(r#"{{"test": {{"url": {}}}}}"#, json!(upstream_url));
    let audit_http = audit("http.jsonl");
    let (_gateway_process, gateway_url) = listening(
        &tether,
        &[
            "serve",
            "--mcp",
            &spec,
            "--listen",
            "127.0.0.1:0",
            "--no-auth",
            "--audit",
            &audit_http,
        ],
    )
    .await;
    let direct = http_client(&upstream_url).await;
    let gateway = http_client(&gateway_url).await;
    overhead("Streamable HTTP", &direct, &gateway).await;
    drop((direct, gateway));

    // 2. tools/list over 16 servers of 50 tools.
    let mut slowest = Duration::ZERO;
    let mut directs = Vec::new();
    for _ in 0..16 {
        directs.push(stdio_client(&server, &["--tools", "50"]).await);
    }
    for client in &directs {
        let mut samples = Vec::new();
        for _ in 0..50 {
            let started = Instant::now();
            client.list_all_tools().await.expect("tools/list");
            samples.push(started.elapsed());
        }
        samples.sort();
        slowest = slowest.max(quantile(&samples, 0.5));
    }
    drop(directs);
    let spec = servers_spec(&server, 16, &["--tools", "50"]);
    let audit_list = audit("list.jsonl");
    let gateway = stdio_client(&tether, &["serve", "--mcp", &spec, "--audit", &audit_list]).await;
    let mut samples = Vec::new();
    let mut count = 0;
    for _ in 0..50 {
        let started = Instant::now();
        count = gateway.list_all_tools().await.expect("tools/list").len();
        samples.push(started.elapsed());
    }
    samples.sort();
    let at_gateway = quantile(&samples, 0.5);
    // The same number of tools from one server directly (its pages hold 50 tools each).
    let same_size = (count.saturating_sub(4)).to_string();
    let one = stdio_client(&server, &["--tools", &same_size]).await;
    let mut one_samples = Vec::new();
    for _ in 0..50 {
        let started = Instant::now();
        one.list_all_tools().await.expect("tools/list");
        one_samples.push(started.elapsed());
    }
    one_samples.sort();
    drop(one);
    println!(
        "tools/list over 16 servers ({count} tools): gateway p50 {}; slowest server's own p50 {} (ratio {:.2}, target <= 1.1); one server with as many tools, directly: p50 {}",
        ms(at_gateway),
        ms(slowest),
        at_gateway.as_secs_f64() / slowest.as_secs_f64().max(f64::EPSILON),
        ms(quantile(&one_samples, 0.5)),
    );
    drop(gateway);
    // The same without any client's parsing: request written, answer line read as bytes.
    let raw_gateway = raw_list_p50(
        &tether,
        &[
            "serve",
            "--mcp",
            &spec,
            "--audit",
            &audit("raw.jsonl"),
            "--no-pins",
        ],
    )
    .await;
    let raw_one = raw_list_p50(&server, &["--tools", "50"]).await;
    println!(
        "tools/list as bytes (no client parsing): gateway ({count} tools) p50 {}; one server's first page (50 of its 53 tools) p50 {} (ratio {:.2})",
        ms(raw_gateway),
        ms(raw_one),
        raw_gateway.as_secs_f64() / raw_one.as_secs_f64().max(f64::EPSILON),
    );

    // 2b. The same with real servers: 16 server-everything processes (Node; 13 tools each,
    // as offered to a client that declares no capability).
    match tether_testkit::server_everything() {
        Some(everything) => {
            list_over_everything(&tether, &everything, &audit("everything.jsonl")).await
        }
        None => {
            println!("tools/list over 16 server-everything: skipped (npm packages not installed)")
        }
    }

    // 3. 100 concurrent calls over 8 servers.
    let spec = servers_spec(&server, 8, &[]);
    let audit_concurrent = audit("concurrent.jsonl");
    let gateway = std::sync::Arc::new(
        stdio_client(
            &tether,
            &["serve", "--mcp", &spec, "--audit", &audit_concurrent],
        )
        .await,
    );
    let started = Instant::now();
    let mut calls = tokio::task::JoinSet::new();
    for index in 0..100 {
        let gateway = std::sync::Arc::clone(&gateway);
        calls.spawn(async move {
            let text = format!("call-{index}");
            let tool = format!("s{}__echo", index % 8);
            let answer = echo(&gateway, &tool, &text).await;
            (text, answer)
        });
    }
    let mut wrong = 0;
    let mut answered = 0;
    while let Some(outcome) = calls.join_next().await {
        let (text, answer) = outcome.expect("a call task");
        answered += 1;
        if text != answer {
            wrong += 1;
        }
    }
    println!(
        "100 concurrent calls over 8 servers: {answered} answered, {wrong} wrong or cross-wired, in {}",
        ms(started.elapsed())
    );
    assert_eq!((answered, wrong), (100, 0));
    let lines = std::fs::read_to_string(&audit_concurrent).unwrap_or_default();
    let audited = lines.lines().filter(|l| !l.is_empty()).count();
    let value: Option<Value> = lines
        .lines()
        .next()
        .and_then(|l| serde_json::from_str(l).ok());
    println!(
        "audit: {audited} lines for the 100 calls (first: outcome {})",
        value.map(|v| v["outcome"].to_string()).unwrap_or_default()
    );
}

/// p50 of `list_all_tools` over 50 requests after 10 warm-up ones.
async fn list_p50(client: &Client) -> (Duration, usize) {
    let mut samples = Vec::new();
    let mut count = 0;
    for index in 0..60 {
        let started = Instant::now();
        count = client.list_all_tools().await.expect("tools/list").len();
        if index >= 10 {
            samples.push(started.elapsed());
        }
    }
    samples.sort();
    (quantile(&samples, 0.5), count)
}

/// 2b: `tools/list` at a gateway over 16 server-everything processes vs the slowest one's own.
async fn list_over_everything(tether: &Path, everything: &Path, audit: &str) {
    let mut slowest = Duration::ZERO;
    let mut own_tools = 0;
    for _ in 0..16 {
        let client = stdio_client(everything, &["stdio"]).await;
        let (p50, count) = list_p50(&client).await;
        slowest = slowest.max(p50);
        own_tools = count;
    }
    let spec = named_servers_spec("ev", everything, 16, &["stdio"]);
    let gateway = stdio_client(tether, &["serve", "--mcp", &spec, "--audit", audit]).await;
    let (at_gateway, count) = list_p50(&gateway).await;
    println!(
        "tools/list over 16 server-everything ({count} tools at the gateway, {own_tools} each): gateway p50 {}; slowest server's own p50 {} (ratio {:.2}, target <= 1.1)",
        ms(at_gateway),
        ms(slowest),
        at_gateway.as_secs_f64() / slowest.as_secs_f64().max(f64::EPSILON),
    );
    drop(gateway);
    // The same as bytes: what the gateway and a server take, without the client's parsing.
    let raw_gateway = raw_list_p50(
        tether,
        &[
            "serve",
            "--mcp",
            &spec,
            "--audit",
            &format!("{audit}.raw"),
            "--no-pins",
        ],
    )
    .await;
    let raw_one = raw_list_p50(everything, &["stdio"]).await;
    println!(
        "tools/list over 16 server-everything as bytes (no client parsing): gateway p50 {}; one server-everything p50 {} (ratio {:.2})",
        ms(raw_gateway),
        ms(raw_one),
        raw_gateway.as_secs_f64() / raw_one.as_secs_f64().max(f64::EPSILON),
    );
}
