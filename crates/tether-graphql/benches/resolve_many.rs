//! `resolve_many` against a loopback wiremock server that delays every response by 50 ms and
//! answers single operations and batches (one aliased field per uid) alike.
//!
//! Criterion measures 32 uids batched; a summary after it compares, in one run, one uid, 32
//! uids and 256 uids batched (default batch size 32) with 32 uids sent one operation each
//! (waves of 16, the concurrency bound): the targets are 32 uids ≤ one uid + 20 ms in
//! ≤ 2 requests, and 256 uids ≤ one uid + 60 ms.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::Criterion;
use serde_json::{Value, json};
use tether_graphql::{HttpClientSettings, HttpManagedMcpClient, ManagedMcpClient};
use uuid::Uuid;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

const RESPONSE_DELAY: Duration = Duration::from_millis(50);
const SUMMARY_RUNS: usize = 9;

fn output() -> Value {
    json!({
        "__typename": "CreateManagedMcpClientConfigOutput",
        "transportKind": "COMMAND",
        "mcpConfigJson": "{\"mcpServers\":{\"a\":{\"command\":\"npx\"}}}",
        "proxyUrl": null,
        "proxyToken": null,
        "authorizationHeaderName": null,
        "authorizationHeaderValue": null,
        "expiresAt": null,
    })
}

/// Answers one result per alias (or the single field), 50 ms late; counts requests.
struct Endpoint {
    requests: Arc<AtomicUsize>,
}

impl Respond for Endpoint {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
        let variables = body["variables"].as_object().cloned().unwrap_or_default();
        let data = if variables.contains_key("input") {
            json!({ "createManagedMcpClientConfig": output() })
        } else {
            let fields: serde_json::Map<String, Value> = (0..variables.len())
                .map(|index| (format!("m{index}"), output()))
                .collect();
            Value::Object(fields)
        };
        ResponseTemplate::new(200)
            .set_body_json(json!({ "data": data }))
            .set_delay(RESPONSE_DELAY)
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Runtime::new()?;
    let requests = Arc::new(AtomicUsize::new(0));
    let server = runtime.block_on(async {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(Endpoint {
                requests: Arc::clone(&requests),
            })
            .mount(&server)
            .await;
        server
    });
    let settings = HttpClientSettings::new(format!("{}/graphql", server.uri()).parse()?);
    let batched = HttpManagedMcpClient::new(settings.clone())?;
    let single = HttpManagedMcpClient::new(HttpClientSettings {
        batch_size: 1,
        ..settings
    })?;
    let uids = |count: u128| -> Vec<Uuid> { (1..=count).map(Uuid::from_u128).collect() };
    let resolve = |client: &HttpManagedMcpClient, uids: Vec<Uuid>| {
        let results = runtime.block_on(client.resolve_many(&uids));
        assert!(results.iter().all(Result::is_ok), "a resolution failed");
    };

    let mut criterion = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .configure_from_args();
    let thirty_two = uids(32);
    criterion.bench_function("resolve_many/32_uids_batched_50ms", |bencher| {
        bencher.to_async(&runtime).iter(|| async {
            let results = batched.resolve_many(&thirty_two).await;
            assert!(results.iter().all(Result::is_ok), "a resolution failed");
        });
    });
    criterion.final_summary();

    let ms = |duration: Duration| duration.as_secs_f64() * 1000.0;
    let median = |label: &str, client: &HttpManagedMcpClient, count: u128| -> f64 {
        let before = requests.load(Ordering::Relaxed);
        let mut walls: Vec<Duration> = (0..SUMMARY_RUNS)
            .map(|_| {
                let started = Instant::now();
                resolve(client, uids(count));
                started.elapsed()
            })
            .collect();
        walls.sort();
        let per_run = (requests.load(Ordering::Relaxed) - before) / SUMMARY_RUNS;
        let median = ms(walls[walls.len() / 2]);
        println!(
            "resolve_many {label}: {count} uids, wall median {median:.1} ms (min {:.1}, max {:.1}, {SUMMARY_RUNS} runs), {per_run} requests per run",
            ms(walls[0]),
            ms(walls[walls.len() - 1]),
        );
        median
    };
    let one = median("single", &single, 1);
    let waves = median("one operation per uid", &single, 32);
    let b32 = median("batched", &batched, 32);
    let b256 = median("batched", &batched, 256);
    println!(
        "one uid {one:.1} ms; 32 batched {b32:.1} ms (+{:.1} ms, target +20); 256 batched {b256:.1} ms (+{:.1} ms, target +60); 32 one operation each {waves:.1} ms (×{:.2} of batched)",
        b32 - one,
        b256 - one,
        waves / b32,
    );
    Ok(())
}
