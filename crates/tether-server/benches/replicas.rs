//! tether-server on SQLite vs one and two PostgreSQL replicas, run by hand in
//! release mode (`bench/server-replicas.sh`); prints its figures.
//!
//! 1. `createManagedMcpClientConfig` from 50 concurrent clients (the workspace's
//!    `HttpManagedMcpClient`), half COMMAND, half URL (each URL call mints and stores a proxy
//!    token), against: the SQLite server; one replica on PostgreSQL; two replicas on the same
//!    PostgreSQL, client `n` talking to replica `n % 2` (what a load balancer with sticky
//!    connections does). Resolutions/s, p50/p99.
//! 2. SIGKILL of one of two replicas under load: each client retries a failed call on the
//!    other replica (what a load balancer does once its health check fails). Every call ends in
//!    success; the surviving replica keeps serving; every acknowledged mint has its token row.
//!
//! PostgreSQL is a throwaway cluster on a Unix socket with `fsync=off` (the tests' cluster):
//! the figures compare the servers, not disks. Everything runs on loopback, every wait is
//! bounded.

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

use tether_graphql::{HttpManagedMcpClient, ManagedMcpClient as _, ManagedMcpError};
use uuid::Uuid;

use figures::{ms, quantile};
use support::{ServerProcess, Upstream, add, api_key, sentinel, test_mcp_bin};

const CALLS: usize = 4_000;
const CLIENTS: usize = 50;
/// How long one call may keep retrying before the bench fails.
const RECOVERY_LIMIT: Duration = Duration::from_secs(30);
/// Rate limiting off: one API key makes every call.
const SERVE_ARGS: [&str; 2] = ["--rate-limit", "0"];

fn main() {
    figures::run(bench());
}

/// An installation pair (COMMAND, URL) and an API key in the store of `data`.
struct Setup {
    key: String,
    command: Uuid,
    url: Uuid,
    _upstream: Upstream,
}

async fn setup(data: &Path) -> Setup {
    let key = api_key(data, "default").await;
    let upstream_token = sentinel("upstream");
    let upstream = Upstream::start(&upstream_token).await;
    let command_spec = format!(
        r#"{{"command": {}, "env": {{"TOKEN": "{{{{TOKEN}}}}"}}}}"#,
        support::json_str(&test_mcp_bin().to_string_lossy())
    );
    let command = add(
        data,
        "command",
        &command_spec,
        &["TOKEN=env:T"],
        "default",
        &[("T", "v")],
    )
    .await;
    let url_spec = format!(
        r#"{{"url": "{}", "headers": {{"Authorization": "Bearer {{{{UP}}}}"}}}}"#,
        upstream.url
    );
    let url = add(
        data,
        "remote",
        &url_spec,
        &["UP=env:UP"],
        "default",
        &[("UP", &upstream_token)],
    )
    .await;
    Setup {
        key,
        command,
        url,
        _upstream: upstream,
    }
}

/// `CALLS` calls from `CLIENTS` clients, client `n` on `servers[n % len]`; prints one line.
async fn load(label: &str, servers: &[&ServerProcess], setup: &Setup) {
    let clients: Vec<HttpManagedMcpClient> = (0..CLIENTS)
        .map(|n| servers[n % servers.len()].client(&setup.key))
        .collect();
    for client in &clients {
        client
            .create_managed_mcp_client_config(setup.command)
            .await
            .expect("warm-up call");
    }
    let per_client = CALLS / CLIENTS;
    let started = Instant::now();
    let results =
        futures_util::future::join_all(clients.iter().enumerate().map(|(n, client)| async move {
            let mut samples = Vec::with_capacity(per_client);
            for call in 0..per_client {
                let uid = if (n + call) % 2 == 0 {
                    setup.command
                } else {
                    setup.url
                };
                let at = Instant::now();
                let result = client.create_managed_mcp_client_config(uid).await;
                samples.push((at.elapsed(), result.is_err()));
            }
            samples
        }))
        .await;
    let elapsed = started.elapsed();
    let samples: Vec<_> = results.into_iter().flatten().collect();
    let errors = samples.iter().filter(|(_, failed)| *failed).count();
    let mut latencies: Vec<Duration> = samples.iter().map(|(d, _)| *d).collect();
    latencies.sort();
    println!(
        "   {label:<28} {:>6.0} resolutions/s   p50 {:>9}   p99 {:>9}   ({} calls, {errors} errors)",
        samples.len() as f64 / elapsed.as_secs_f64(),
        ms(quantile(&latencies, 0.50)),
        ms(quantile(&latencies, 0.99)),
        samples.len()
    );
}

async fn bench() {
    println!(
        "tether-server replicas bench: {} (release), {} cores, loopback, {CLIENTS} clients",
        env!("CARGO_PKG_VERSION"),
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    println!("\n1. createManagedMcpClientConfig, half COMMAND, half URL (mints a token):");
    {
        let dir = tempfile::tempdir().expect("temp dir");
        let data = dir.path().join("data");
        let setup = setup(&data).await;
        let server = ServerProcess::spawn("127.0.0.1:0", &data, &SERVE_ARGS, "warn").await;
        load("SQLite, 1 server", &[&server], &setup).await;
        server.terminate().await;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    pg::force(&data);
    let setup = setup(&data).await;
    let replica_a = ServerProcess::spawn("127.0.0.1:0", &data, &SERVE_ARGS, "warn").await;
    load("PostgreSQL, 1 replica", &[&replica_a], &setup).await;
    let replica_b = ServerProcess::spawn("127.0.0.1:0", &data, &SERVE_ARGS, "warn").await;
    load("PostgreSQL, 2 replicas", &[&replica_a, &replica_b], &setup).await;
    kill_one_replica(replica_a, replica_b, &data, &setup).await;
}

/// The proxy token rows of the database standing for `data`.
fn token_rows(data: &Path) -> usize {
    pg::shared()
        .sql(
            &pg::database_name(data),
            "SELECT count(*) FROM proxy_tokens",
        )
        .parse()
        .expect("a count")
}

async fn kill_one_replica(
    replica_a: ServerProcess,
    replica_b: ServerProcess,
    data: &Path,
    setup: &Setup,
) {
    let pairs: Vec<Arc<[HttpManagedMcpClient; 2]>> = (0..CLIENTS)
        .map(|n| {
            let (first, second) = if n % 2 == 0 {
                (&replica_a, &replica_b)
            } else {
                (&replica_b, &replica_a)
            };
            Arc::new([first.client(&setup.key), second.client(&setup.key)])
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let killed = Arc::new(AtomicBool::new(false));
    let failovers = Arc::new(AtomicUsize::new(0));
    let served_after_kill = Arc::new(AtomicUsize::new(0));
    let tokens_before = token_rows(data);
    let (command, url) = (setup.command, setup.url);
    let tasks: Vec<_> = pairs
        .into_iter()
        .enumerate()
        .map(|(n, pair)| {
            let (stop, killed) = (Arc::clone(&stop), Arc::clone(&killed));
            let (failovers, served_after_kill) =
                (Arc::clone(&failovers), Arc::clone(&served_after_kill));
            tokio::spawn(async move {
                let (mut succeeded, mut url_succeeded, mut longest) =
                    (0_usize, 0_usize, Duration::ZERO);
                let mut current = 0;
                let mut call = n;
                while !stop.load(Ordering::Relaxed) {
                    let uid = if call % 2 == 0 { command } else { url };
                    call += 1;
                    let started = Instant::now();
                    loop {
                        match pair[current].create_managed_mcp_client_config(uid).await {
                            Ok(_) => break,
                            Err(
                                ManagedMcpError::Transport { .. }
                                | ManagedMcpError::Http {
                                    status: 502..=504, ..
                                },
                            ) => {
                                failovers.fetch_add(1, Ordering::Relaxed);
                                current = 1 - current;
                                assert!(
                                    started.elapsed() < RECOVERY_LIMIT,
                                    "a call did not recover within {RECOVERY_LIMIT:?}"
                                );
                            }
                            Err(other) => panic!("unexpected error: {other}"),
                        }
                    }
                    succeeded += 1;
                    url_succeeded += usize::from(uid == url);
                    if killed.load(Ordering::Relaxed) {
                        served_after_kill.fetch_add(1, Ordering::Relaxed);
                    }
                    longest = longest.max(started.elapsed());
                }
                (succeeded, url_succeeded, longest)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    replica_a.kill().await;
    killed.store(true, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut succeeded, mut url_succeeded, mut longest) = (0, 0, Duration::ZERO);
    for task in tasks {
        let (s, u, l) = task.await.expect("client task");
        succeeded += s;
        url_succeeded += u;
        longest = longest.max(l);
    }
    let status = replica_b.terminate().await;
    let tokens_added = token_rows(data) - tokens_before;
    println!("\n2. SIGKILL of replica A of two, under load (clients fail over to B):");
    println!(
        "   {succeeded} calls succeeded, {} after the kill (all on B); {} failovers; longest call incl. failover {}",
        served_after_kill.load(Ordering::Relaxed),
        failovers.load(Ordering::Relaxed),
        ms(longest)
    );
    println!(
        "   {url_succeeded} acknowledged mints, {tokens_added} token rows added; replica B exited {status}"
    );
    let intact = tokens_added >= url_succeeded && served_after_kill.load(Ordering::Relaxed) > 0;
    println!(
        "   no acknowledged mint lost, B kept serving: {}",
        if intact { "yes" } else { "NO" }
    );
}
