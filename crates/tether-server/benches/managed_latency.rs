//! Batched resolution's figure against the real server: managed uids resolved through `tether-server`
//! behind a loopback proxy that holds every byte from client to server 50 ms (a 50 ms round
//! trip), batched (one GraphQL operation of up to 32 aliased fields) and unbatched (one
//! operation per uid, `batch_size` 1, 16 at a time: the path before batching, still reachable
//! as a client setting). Prints medians; run by hand (`bench/managed.sh` also times the `tether`
//! binary, release build, through the same proxy):
//!
//! ```text
//! cargo bench -p tether-server --bench managed_latency
//! ```
//!
//! Targets: 32 uids ≤ one uid + 20 ms in ≤ 2 requests; 256 uids ≤ one uid + 60 ms.

#![allow(clippy::expect_used, reason = "a bench fails loudly")]

#[path = "figures.rs"]
#[allow(dead_code, reason = "each bench uses part of it")]
mod figures;

#[path = "../tests/server/pg.rs"]
mod pg;

#[path = "../tests/server/support.rs"]
#[expect(dead_code, reason = "the bench uses part of the test helpers")]
mod support;

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tether_graphql::{
    HttpClientSettings, HttpManagedMcpClient, ManagedMcpClient as _, RetryPolicy, SecretValue,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use uuid::Uuid;

use support::{ServerProcess, add, api_key};

/// One-way delay the proxy adds from client to server.
const DELAY: Duration = Duration::from_millis(50);
/// Runs per figure; the median is printed.
const RUNS: usize = 9;
/// Installations made (the largest resolution asks for all of them).
const UIDS: usize = 256;

fn main() {
    figures::run(bench());
}

/// A loopback TCP proxy to `upstream` that delivers each chunk the client sends [`DELAY`]
/// after it arrived (in order; the answer comes back at once), and counts HTTP requests.
struct DelayingProxy {
    address: String,
    requests: Arc<AtomicUsize>,
}

impl DelayingProxy {
    async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binding");
        let address = listener.local_addr().expect("address").to_string();
        let requests = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&requests);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let counter = Arc::clone(&counter);
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (mut client_read, mut client_write) = client.into_split();
                    let (mut server_read, mut server_write) = server.into_split();
                    let (sender, mut receiver) =
                        tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
                    tokio::spawn(async move {
                        let mut buffer = vec![0u8; 64 * 1024];
                        while let Ok(n) = client_read.read(&mut buffer).await {
                            if n == 0 {
                                break;
                            }
                            let chunk = buffer[..n].to_vec();
                            counter.fetch_add(
                                chunk.windows(5).filter(|w| w == b"POST ").count(),
                                Ordering::Relaxed,
                            );
                            if sender
                                .send((tokio::time::Instant::now() + DELAY, chunk))
                                .is_err()
                            {
                                break;
                            }
                        }
                    });
                    tokio::spawn(async move {
                        while let Some((due, chunk)) = receiver.recv().await {
                            tokio::time::sleep_until(due).await;
                            if server_write.write_all(&chunk).await.is_err() {
                                break;
                            }
                        }
                    });
                    let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                });
            }
        });
        Self { address, requests }
    }
}

fn client(endpoint: &str, key: &str, batch_size: usize) -> HttpManagedMcpClient {
    let settings = HttpClientSettings {
        api_key: Some(SecretValue::from(key)),
        retry: RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        },
        batch_size,
        ..HttpClientSettings::new(endpoint.parse().expect("graphql url"))
    };
    HttpManagedMcpClient::new(settings).expect("client")
}

fn ms(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1000.0)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Median time and requests per run of resolving `uids` with a fresh client each run (no
/// connection or batch-size memory carried over), after one warm-up run.
async fn measure(
    proxy: &DelayingProxy,
    endpoint: &str,
    key: &str,
    batch_size: usize,
    uids: &[Uuid],
) -> (Duration, usize) {
    let mut samples = Vec::with_capacity(RUNS);
    let mut requests = 0;
    for run in 0..=RUNS {
        let client = client(endpoint, key, batch_size);
        let before = proxy.requests.load(Ordering::Relaxed);
        let started = Instant::now();
        let results = client.resolve_many(uids).await;
        let elapsed = started.elapsed();
        assert!(
            results.iter().all(Result::is_ok),
            "a uid failed: {:?}",
            results.iter().find_map(|r| r.as_ref().err())
        );
        if run > 0 {
            samples.push(elapsed);
            requests = proxy.requests.load(Ordering::Relaxed) - before;
        }
    }
    (median(samples), requests)
}

/// Median time of `tether export --format json` over `uids` through the proxy, if the
/// `tether` binary is named by `TETHER_BIN` (`bench/managed.sh` builds and names it).
fn cli_export(endpoint: &str, key: &str, uids: &[Uuid]) -> Option<Duration> {
    let tether = std::env::var_os("TETHER_BIN")?;
    let home = tempfile::tempdir().expect("creating a temp dir");
    let mut samples = Vec::with_capacity(RUNS);
    for run in 0..=RUNS {
        let mut command = std::process::Command::new(&tether);
        command
            .args(["export", "--format", "json"])
            .env("TETHER_SERVER_URL", endpoint)
            .env("TETHER_API_KEY", key)
            .env("TETHER_HOME", home.path())
            .env_remove("TETHER_API_KEY_FILE")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for uid in uids {
            command.args(["--mcp", &uid.to_string()]);
        }
        let started = Instant::now();
        let out = command.output().expect("running tether");
        let elapsed = started.elapsed();
        assert!(
            out.status.success(),
            "tether export failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        if run > 0 {
            samples.push(elapsed);
        }
    }
    Some(median(samples))
}

async fn bench() {
    let dir = tempfile::tempdir().expect("creating a temp dir");
    let data = dir.path().join("data");
    let key = api_key(&data, "default").await;
    let mut uids = Vec::with_capacity(UIDS);
    for index in 0..UIDS {
        let spec = format!(r#"{{"command": "/opt/mcp/server-{index}", "args": ["--level=info"]}}"#);
        uids.push(add(&data, &format!("s{index}"), &spec, &[], "default", &[]).await);
    }
    let server = ServerProcess::spawn("127.0.0.1:0", &data, &[], "warn").await;
    let upstream = server.base.trim_start_matches("http://").to_owned();
    let proxy = DelayingProxy::start(upstream).await;
    let endpoint = format!("http://{}/graphql", proxy.address);
    println!(
        "batched resolution against tether-server {} (release) behind a {} ms loopback delay, {} cores; medians of {RUNS}",
        env!("CARGO_PKG_VERSION"),
        DELAY.as_millis(),
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    let (one, one_requests) = measure(&proxy, &endpoint, &key, 32, &uids[..1]).await;
    println!("  1 uid: {} ({one_requests} request)", ms(one));
    let (batched, batched_requests) = measure(&proxy, &endpoint, &key, 32, &uids[..32]).await;
    println!(
        "  32 uids batched (batch_size 32): {} in {batched_requests} request(s) = one uid + {}  [target: <= one uid + 20 ms, <= 2 requests: {}]",
        ms(batched),
        ms(batched.saturating_sub(one)),
        if batched <= one + Duration::from_millis(20) && batched_requests <= 2 {
            "met"
        } else {
            "MISSED"
        }
    );
    let (single, single_requests) = measure(&proxy, &endpoint, &key, 1, &uids[..32]).await;
    println!(
        "  32 uids unbatched (batch_size 1, 16 at a time): {} in {single_requests} requests = x{:.2} of batched",
        ms(single),
        single.as_secs_f64() / batched.as_secs_f64()
    );
    let (many, many_requests) = measure(&proxy, &endpoint, &key, 32, &uids).await;
    println!(
        "  256 uids batched (8 batches of 32): {} in {many_requests} requests = one uid + {}  [target: <= one uid + 60 ms: {}]",
        ms(many),
        ms(many.saturating_sub(one)),
        if many <= one + Duration::from_millis(60) {
            "met"
        } else {
            "MISSED"
        }
    );
    if let Some(cli) = cli_export(&endpoint, &key, &uids[..32]) {
        println!(
            "  tether export --format json, 32 UUIDs (whole process): {}",
            ms(cli)
        );
    }
}
