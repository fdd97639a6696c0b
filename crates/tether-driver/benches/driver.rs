//! Driver benchmarks (issue targets, checked here rather than in timed tests):
//! - resolve 32 managed UUIDs against a loopback GraphQL server that answers each call in
//!   50 ms: target ≤ 4 × 50 ms (sequential would be 1.6 s);
//! - start 16 stdio servers that each take ~300 ms to answer `initialize`: target all ready
//!   in ≤ 1.5 × 300 ms (with a startup concurrency of 16; the default of 8 is reported too).
//!
//! Run: `cargo bench -p tether-driver --bench driver`.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::Criterion;
use serde_json::{Value, json};
use tether_config::{EmptyEnv, Secrets};
use tether_driver::{McpSpec, NoLocalInstallations, Resolver, ServerStatus, Session, StartOptions};
use tether_graphql::{HttpClientSettings, HttpManagedMcpClient};
use uuid::Uuid;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

const UIDS: u128 = 32;
const RESPONSE_DELAY: Duration = Duration::from_millis(50);
const SERVERS: usize = 16;
const SLOW_START_MS: u64 = 300;

fn test_server() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let bin = target.join("release").join("tether-test-mcp");
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()))
        .args([
            "build",
            "--quiet",
            "--release",
            "-p",
            "tether-test-mcp",
            "--bin",
            "tether-test-mcp",
        ])
        .status();
    assert!(
        status.is_ok_and(|s| s.success()),
        "building tether-test-mcp failed"
    );
    bin
}

/// Answers each `createManagedMcpClientConfig` after 50 ms with a server named after the uid,
/// so 32 uids resolve to 32 distinct servers.
struct NamedAfterUid;

impl wiremock::Respond for NamedAfterUid {
    fn respond(&self, request: &wiremock::Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
        let uid = body["variables"]["input"]["uid"]
            .as_str()
            .unwrap_or("unknown")
            .to_owned();
        let config =
            json!({"mcpServers": {uid: {"command": "npx", "args": ["--token={{API_TOKEN}}"]}}});
        ResponseTemplate::new(200)
            .set_body_json(json!({ "data": { "createManagedMcpClientConfig": {
                "__typename": "CreateManagedMcpClientConfigOutput",
                "transportKind": "COMMAND",
                "mcpConfigJson": config.to_string(),
                "proxyUrl": null, "proxyToken": null, "authorizationHeaderName": null,
                "authorizationHeaderValue": null, "expiresAt": null,
            } } }))
            .set_delay(RESPONSE_DELAY)
    }
}

fn median(mut walls: Vec<Duration>) -> Duration {
    walls.sort();
    walls[walls.len() / 2]
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut criterion = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8))
        .configure_from_args();

    // 1. Managed resolution through the real HTTP client and the GraphQL wire format.
    let server = runtime.block_on(async {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(NamedAfterUid)
            .mount(&server)
            .await;
        server
    });
    let client = Arc::new(HttpManagedMcpClient::new(HttpClientSettings::new(
        format!("{}/graphql", server.uri()).parse()?,
    ))?);
    let specs: Vec<McpSpec> = (1..=UIDS)
        .map(|n| McpSpec::Uuid(Uuid::from_u128(n)))
        .collect();
    let resolver = Resolver::new(Arc::new(NoLocalInstallations), Some(client));
    let resolve = || async {
        let resolved = resolver
            .resolve(&specs)
            .await
            .unwrap_or_else(|e| panic!("resolution: {e}"));
        assert_eq!(resolved.ephemeral.len(), UIDS as usize);
        resolved
    };
    criterion.bench_function("resolve/32_managed_uids_50ms_each", |b| {
        b.to_async(&runtime).iter(resolve);
    });
    let resolve_median = median(
        (0..10)
            .map(|_| {
                let started = Instant::now();
                runtime.block_on(resolve());
                started.elapsed()
            })
            .collect(),
    );

    // 2. Stdio startup of 16 slow servers.
    let bin = test_server();
    let config: serde_json::Map<String, Value> = (0..SERVERS)
        .map(|i| {
            (
                format!("slow-{i}"),
                json!({"command": bin, "args": ["--slow-start", SLOW_START_MS.to_string()]}),
            )
        })
        .collect();
    let spec = McpSpec::parse(&Value::Object(config).to_string())?;
    let session = runtime.block_on(Session::resolve(
        Resolver::new(Arc::new(NoLocalInstallations), None),
        vec![spec],
        Secrets::new(),
        EmptyEnv,
    ))?;
    let start = |concurrency: usize| {
        let session = &session;
        let runtime = &runtime;
        move || {
            runtime.block_on(async {
                let options = StartOptions {
                    concurrency,
                    ..StartOptions::default()
                };
                let started = Instant::now();
                let held = session
                    .start(&options)
                    .await
                    .unwrap_or_else(|e| panic!("startup: {e}"));
                let elapsed = started.elapsed();
                assert!(
                    held.reports()
                        .iter()
                        .all(|r| matches!(r.status, ServerStatus::Ready { .. }))
                );
                held.shutdown().await;
                elapsed
            })
        }
    };
    criterion.bench_function("startup/16_stdio_servers_300ms_each", |b| {
        let run = start(16);
        b.iter_custom(|iters| (0..iters).map(|_| run()).sum());
    });
    criterion.final_summary();
    let run16 = start(16);
    let startup16 = median((0..7).map(|_| run16()).collect());
    let run8 = start(8);
    let startup8 = median((0..5).map(|_| run8()).collect());

    println!(
        "resolve: {UIDS} managed uids, {} ms per response: median {:.1} ms = {:.2}x one response (target <= 4x; sequential {} ms)",
        RESPONSE_DELAY.as_millis(),
        ms(resolve_median),
        ms(resolve_median) / ms(RESPONSE_DELAY),
        UIDS * RESPONSE_DELAY.as_millis()
    );
    println!(
        "startup: {SERVERS} stdio servers, {SLOW_START_MS} ms each: concurrency 16 median {:.1} ms = {:.2}x (target <= 1.5x); default concurrency 8 median {:.1} ms = {:.2}x",
        ms(startup16),
        ms(startup16) / SLOW_START_MS as f64,
        ms(startup8),
        ms(startup8) / SLOW_START_MS as f64
    );
    Ok(())
}
