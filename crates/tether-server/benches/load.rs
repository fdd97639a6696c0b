//! Load and failure bench of tether-server, run by hand in release mode; prints its figures.
//!
//! ```text
//! cargo bench -p tether-server --bench load
//! ```
//!
//! 1. 2,000 `createManagedMcpClientConfig` calls from 50 concurrent clients (the workspace's
//!    `HttpManagedMcpClient`, one per client), half COMMAND, half URL (each URL call mints and
//!    stores a proxy token): no error; throughput; p50/p99 latency. Targets: ≥ 1,000 calls/s,
//!    p99 ≤ 50 ms.
//! 2. Proxy overhead: `tools/list` on one MCP session straight to `tether-test-mcp` and on one
//!    through `/mcp-proxy/{uid}`, interleaved; added p50 latency. Target ≤ 2 ms.
//! 3. Failure: 50 clients call in a loop; the server is SIGKILLed mid-load and restarted on the
//!    same port. Clients see transport errors and retry; every call ends in success; the store
//!    passes `PRAGMA integrity_check` right after the kill and at the end.
//!
//! Everything runs on loopback, every wait is bounded.

#![allow(clippy::expect_used, reason = "a bench fails loudly")]

#[path = "figures.rs"]
#[allow(dead_code, reason = "each bench uses part of it")]
mod figures;

#[path = "../tests/server/pg.rs"]
mod pg;

#[path = "../tests/server/support.rs"]
#[expect(dead_code, reason = "the bench uses part of the test helpers")]
mod support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tether_graphql::{HttpManagedMcpClient, ManagedMcpClient as _, ManagedMcpError};
use uuid::Uuid;

use figures::{ms, quantile};
use support::{ServerProcess, Upstream, add, api_key, sentinel, test_mcp_bin};

const CALLS: usize = 2_000;
const CLIENTS: usize = 50;
const PROXY_SAMPLES: usize = 1_000;
/// How long one call may keep retrying through the restart before the bench fails.
const RECOVERY_LIMIT: Duration = Duration::from_secs(30);

fn main() {
    figures::run(bench());
}

fn summary(samples: &mut [Duration]) -> String {
    samples.sort();
    format!(
        "p50 {}, p99 {}, max {}",
        ms(quantile(samples, 0.50)),
        ms(quantile(samples, 0.99)),
        ms(samples.last().copied().unwrap_or_default())
    )
}

fn verdict(met: bool) -> &'static str {
    if met { "target met" } else { "TARGET MISSED" }
}

async fn bench() {
    let dir = tempfile::tempdir().expect("creating a temp dir");
    let data = dir.path().join("data");
    let key = api_key(&data, "default").await;
    let upstream_token = sentinel("upstream");
    let upstream = Upstream::start(&upstream_token).await;
    let command_spec = format!(
        r#"{{"command": {}, "env": {{"TOKEN": "{{{{TOKEN}}}}", "CLIENT": "{{{{CLIENT}}}}"}}}}"#,
        support::json_str(&test_mcp_bin().to_string_lossy())
    );
    let command = add(
        &data,
        "command",
        &command_spec,
        &["TOKEN=env:T"],
        "default",
        &[("T", "server-value")],
    )
    .await;
    let url_spec = format!(
        r#"{{"url": "{}", "headers": {{"Authorization": "Bearer {{{{UP}}}}"}}}}"#,
        upstream.url
    );
    let url = add(
        &data,
        "remote",
        &url_spec,
        &["UP=env:UP"],
        "default",
        &[("UP", &upstream_token)],
    )
    .await;
    let server = ServerProcess::spawn("127.0.0.1:0", &data, &["--rate-limit", "0"], "warn").await;
    println!(
        "tether-server load bench: {} (release), {} cores, loopback",
        env!("CARGO_PKG_VERSION"),
        std::thread::available_parallelism().map_or(0, usize::from)
    );

    config_load(&server, &key, command, url).await;
    println!(
        "\n2. proxy overhead: tools/list on one session, {PROXY_SAMPLES} samples each, interleaved"
    );
    println!("   upstream tether-test-mcp (rmcp, axum):");
    proxy_overhead(&server, &key, &upstream.url, &upstream_token, url).await;
    println!("   upstream @modelcontextprotocol/server-everything streamableHttp (Node):");
    if let Some((_everything, everything_url, everything)) = everything_upstream(&data).await {
        proxy_overhead(&server, &key, &everything_url, "unused", everything).await;
    }
    let port = server
        .base
        .rsplit(':')
        .next()
        .unwrap_or_else(|| panic!("no port in {}", server.base))
        .to_owned();
    kill_and_restart(server, &data, &port, &key, command, url).await;
}

async fn config_load(server: &ServerProcess, key: &str, command: Uuid, url: Uuid) {
    let clients: Vec<HttpManagedMcpClient> = (0..CLIENTS).map(|_| server.client(key)).collect();
    // Warm-up: one call per client (connections, caches); not measured.
    for client in &clients {
        client
            .create_managed_mcp_client_config(command)
            .await
            .expect("minting a COMMAND config");
    }
    let per_client = CALLS / CLIENTS;
    let started = Instant::now();
    let results =
        futures_util::future::join_all(clients.iter().enumerate().map(|(n, client)| async move {
            let mut samples = Vec::with_capacity(per_client);
            for call in 0..per_client {
                let (uid, is_url) = if (n + call) % 2 == 0 {
                    (command, false)
                } else {
                    (url, true)
                };
                let at = Instant::now();
                let result = client.create_managed_mcp_client_config(uid).await;
                samples.push((is_url, at.elapsed(), result.err().map(|e| e.to_string())));
            }
            samples
        }))
        .await;
    let elapsed = started.elapsed();
    let samples: Vec<_> = results.into_iter().flatten().collect();
    let errors: Vec<&String> = samples.iter().filter_map(|(_, _, e)| e.as_ref()).collect();
    let mut all: Vec<Duration> = samples.iter().map(|(_, d, _)| *d).collect();
    let mut url_only: Vec<Duration> = samples
        .iter()
        .filter(|(u, _, _)| *u)
        .map(|(_, d, _)| *d)
        .collect();
    let mut command_only: Vec<Duration> = samples
        .iter()
        .filter(|(u, _, _)| !*u)
        .map(|(_, d, _)| *d)
        .collect();
    let throughput = samples.len() as f64 / elapsed.as_secs_f64();
    all.sort();
    let p99 = quantile(&all, 0.99);
    println!(
        "\n1. createManagedMcpClientConfig: {} calls from {CLIENTS} clients in {:.3} s: {throughput:.0} calls/s, {} errors",
        samples.len(),
        elapsed.as_secs_f64(),
        errors.len()
    );
    println!("   all:     {}", summary(&mut all));
    println!("   COMMAND: {}", summary(&mut command_only));
    println!(
        "   URL:     {}  (mints and stores a proxy token)",
        summary(&mut url_only)
    );
    println!(
        "   throughput ≥ 1,000/s: {}; p99 ≤ 50 ms: {}; no error: {}",
        verdict(throughput >= 1000.0),
        verdict(p99 <= Duration::from_millis(50)),
        verdict(errors.is_empty())
    );
    if let Some(error) = errors.first() {
        println!("   first error: {error}");
    }
    let counted = server.config_requests(key).await;
    println!("   /metrics counter: {counted} (warm-up {CLIENTS} + {CALLS})");
}

/// A Streamable HTTP MCP session driven by hand, so one request = one measured round trip.
struct McpSession {
    http: reqwest::Client,
    url: String,
    authorization: String,
    session: String,
    protocol: String,
}

/// The JSON of the first non-empty `data:` line of an event-stream body (rmcp sends an empty
/// priming event first) (or the body itself as JSON).
fn message(body: &str) -> Value {
    let text = body
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .find(|data| !data.trim().is_empty())
        .unwrap_or(body);
    serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("not a JSON-RPC message ({e}): {body}"))
}

impl McpSession {
    async fn open(url: &str, authorization: &str) -> Self {
        let http = reqwest::Client::new();
        let response = http
            .post(url)
            .header("Authorization", authorization)
            .header("Accept", "application/json, text/event-stream")
            .json(
                &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "tether-server-bench", "version": "0"}}}),
            )
            .send()
            .await
            .expect("initialize");
        assert!(
            response.status().is_success(),
            "initialize: {}",
            response.status()
        );
        let session = response.headers()["mcp-session-id"]
            .to_str()
            .expect("the session id is ASCII")
            .to_owned();
        let init = message(
            &response
                .text()
                .await
                .expect("reading the initialize answer"),
        );
        let protocol = init["result"]["protocolVersion"]
            .as_str()
            .unwrap_or("2025-06-18")
            .to_owned();
        let session = Self {
            http,
            url: url.to_owned(),
            authorization: authorization.to_owned(),
            session,
            protocol,
        };
        let initialized = session
            .post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        assert!(
            initialized.status().is_success(),
            "initialized: {}",
            initialized.status()
        );
        session
    }

    async fn post(&self, body: &Value) -> reqwest::Response {
        self.http
            .post(&self.url)
            .header("Authorization", &self.authorization)
            .header("Accept", "application/json, text/event-stream")
            .header("Mcp-Session-Id", &self.session)
            .header("Mcp-Protocol-Version", &self.protocol)
            .json(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {body}: {e}"))
    }

    /// One `tools/list` round trip, body read in full.
    async fn tools_list(&self, id: usize) -> Duration {
        let started = Instant::now();
        let response = self
            .post(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}))
            .await;
        let body = response
            .text()
            .await
            .expect("reading the tools/list answer");
        let elapsed = started.elapsed();
        assert!(
            message(&body)["result"]["tools"]
                .to_string()
                .contains("echo"),
            "{body}"
        );
        elapsed
    }
}

/// A URL installation for `server-everything` in streamableHttp mode, when npm installed it
/// into `<repo>/.cache/npm` (see `.ci/run`); the process is killed on drop.
async fn everything_upstream(data: &Path) -> Option<(tokio::process::Child, String, Uuid)> {
    let bin = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../.cache/npm/node_modules/.bin/mcp-server-everything"
    ));
    if !bin.exists() {
        println!("   (server-everything is not installed in .cache/npm: skipped)");
        return None;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("picking a free port");
    let child = tokio::process::Command::new(bin)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("server-everything");
    let deadline = Instant::now() + support::STEP;
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "server-everything did not listen"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let url = format!("http://127.0.0.1:{port}/mcp");
    let uid = add(
        data,
        "everything",
        &format!(r#"{{"url": "{url}"}}"#),
        &[],
        "default",
        &[],
    )
    .await;
    Some((child, url, uid))
}

async fn proxy_overhead(
    server: &ServerProcess,
    key: &str,
    upstream: &str,
    upstream_token: &str,
    uid: Uuid,
) {
    let config = server
        .client(key)
        .create_managed_mcp_client_config(uid)
        .await
        .expect("minting a URL config");
    let proxy_url = config
        .proxy_url
        .expect("the URL config has a proxy URL")
        .to_string();
    let proxy_token = config
        .proxy_token
        .expect("the URL config has a proxy token");
    let direct = McpSession::open(upstream, &format!("Bearer {upstream_token}")).await;
    let proxied = McpSession::open(&proxy_url, &format!("Bearer {}", proxy_token.expose())).await;
    for id in 1..=50 {
        direct.tools_list(id).await;
        proxied.tools_list(id).await;
    }
    let (mut direct_samples, mut proxied_samples) = (Vec::new(), Vec::new());
    for id in 0..PROXY_SAMPLES {
        // Alternate which goes first so neither always meets a warmer connection.
        if id % 2 == 0 {
            direct_samples.push(direct.tools_list(100 + id).await);
            proxied_samples.push(proxied.tools_list(100 + id).await);
        } else {
            proxied_samples.push(proxied.tools_list(100 + id).await);
            direct_samples.push(direct.tools_list(100 + id).await);
        }
    }
    direct_samples.sort();
    proxied_samples.sort();
    let added = quantile(&proxied_samples, 0.5).saturating_sub(quantile(&direct_samples, 0.5));
    println!("   direct:  {}", summary(&mut direct_samples));
    println!("   proxied: {}", summary(&mut proxied_samples));
    println!(
        "   added p50: {} ({}; target ≤ 2 ms); added p99: {}",
        ms(added),
        verdict(added <= Duration::from_millis(2)),
        ms(quantile(&proxied_samples, 0.99).saturating_sub(quantile(&direct_samples, 0.99)))
    );
}

fn integrity(data: &Path) -> String {
    let conn = tether_sqlite::open(data, tether_server::DATABASE_FILE)
        .expect("opening the server's database");
    conn.query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .expect("integrity_check")
}

fn proxy_token_rows(data: &Path) -> i64 {
    let conn = tether_sqlite::open(data, tether_server::DATABASE_FILE)
        .expect("opening the server's database");
    conn.query_row("SELECT count(*) FROM proxy_tokens", [], |row| row.get(0))
        .expect("count")
}

async fn kill_and_restart(
    server: ServerProcess,
    data: &Path,
    port: &str,
    key: &str,
    command: Uuid,
    url: Uuid,
) {
    let clients: Vec<Arc<HttpManagedMcpClient>> =
        (0..CLIENTS).map(|_| Arc::new(server.client(key))).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let transport_errors = Arc::new(AtomicUsize::new(0));
    let tokens_before = proxy_token_rows(data);
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(n, client)| {
            let stop = Arc::clone(&stop);
            let transport_errors = Arc::clone(&transport_errors);
            tokio::spawn(async move {
                let (mut succeeded, mut url_succeeded, mut longest) =
                    (0_usize, 0_usize, Duration::ZERO);
                let mut call = n;
                while !stop.load(Ordering::Relaxed) {
                    let uid = if call % 2 == 0 { command } else { url };
                    call += 1;
                    let started = Instant::now();
                    loop {
                        match client.create_managed_mcp_client_config(uid).await {
                            Ok(_) => break,
                            Err(
                                ManagedMcpError::Transport { .. }
                                | ManagedMcpError::Http {
                                    status: 502..=504, ..
                                },
                            ) => {
                                transport_errors.fetch_add(1, Ordering::Relaxed);
                                assert!(
                                    started.elapsed() < RECOVERY_LIMIT,
                                    "a call did not recover within {RECOVERY_LIMIT:?}"
                                );
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                            Err(other) => panic!("unexpected error: {other}"),
                        }
                    }
                    succeeded += 1;
                    url_succeeded += usize::from(uid == url);
                    longest = longest.max(started.elapsed());
                }
                (succeeded, url_succeeded, longest)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    server.kill().await;
    let killed_at = Instant::now();
    let after_kill = integrity(data);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let restarted = ServerProcess::spawn(
        &format!("127.0.0.1:{port}"),
        data,
        &["--rate-limit", "0"],
        "warn",
    )
    .await;
    let down_for = killed_at.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut succeeded, mut url_succeeded, mut longest) = (0, 0, Duration::ZERO);
    for task in tasks {
        let (s, u, l) = task.await.expect("client task");
        succeeded += s;
        url_succeeded += u;
        longest = longest.max(l);
    }
    let status = restarted.terminate().await;
    let at_end = integrity(data);
    let tokens_added = proxy_token_rows(data) - tokens_before;
    println!(
        "\n3. SIGKILL mid-load, restart on the same port after {:.2} s:",
        down_for.as_secs_f64()
    );
    println!(
        "   {succeeded} calls succeeded ({url_succeeded} minted a token; {tokens_added} token rows added), {} transport errors retried, longest call incl. retries {}",
        transport_errors.load(Ordering::Relaxed),
        ms(longest)
    );
    println!(
        "   integrity_check right after the kill: {after_kill}; at the end: {at_end}; restarted server exited {status}"
    );
    let intact = after_kill == "ok"
        && at_end == "ok"
        && usize::try_from(tokens_added).is_ok_and(|added| added >= url_succeeded);
    println!(
        "   store intact, every acknowledged token stored: {}",
        verdict(intact)
    );
}
