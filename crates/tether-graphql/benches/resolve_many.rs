//! `resolve_many` with 32 uids against a loopback wiremock server that delays every response
//! by 50 ms. Sequential resolution would take 32 × 50 ms = 1.6 s; the target is under
//! 4 × 50 ms = 200 ms. After criterion's report, prints the median wall time of a few extra
//! runs and its ratio to one 50 ms response.

use std::time::{Duration, Instant};

use criterion::Criterion;
use serde_json::json;
use tether_graphql::{HttpClientSettings, HttpManagedMcpClient, ManagedMcpClient};
use uuid::Uuid;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

const UIDS: u128 = 32;
const RESPONSE_DELAY: Duration = Duration::from_millis(50);
const SUMMARY_RUNS: usize = 15;

fn response() -> ResponseTemplate {
    ResponseTemplate::new(200)
        .set_body_json(json!({ "data": { "createManagedMcpClientConfig": {
            "__typename": "CreateManagedMcpClientConfigOutput",
            "transportKind": "COMMAND",
            "mcpConfigJson": "{\"mcpServers\":{\"a\":{\"command\":\"npx\"}}}",
            "proxyUrl": null,
            "proxyToken": null,
            "authorizationHeaderName": null,
            "authorizationHeaderValue": null,
            "expiresAt": null,
        } } }))
        .set_delay(RESPONSE_DELAY)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Runtime::new()?;
    let server = runtime.block_on(async {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(response())
            .mount(&server)
            .await;
        server
    });
    let settings = HttpClientSettings::new(format!("{}/graphql", server.uri()).parse()?);
    let concurrency = settings.concurrency;
    let client = HttpManagedMcpClient::new(settings)?;
    let uids: Vec<Uuid> = (1..=UIDS).map(Uuid::from_u128).collect();
    let resolve = || async {
        let results = client.resolve_many(&uids).await;
        assert!(results.iter().all(Result::is_ok), "a resolution failed");
        results
    };

    let mut criterion = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8))
        .configure_from_args();
    criterion.bench_function("resolve_many/32_uids_50ms_each", |bencher| {
        bencher.to_async(&runtime).iter(resolve);
    });
    criterion.final_summary();

    let mut walls: Vec<Duration> = (0..SUMMARY_RUNS)
        .map(|_| {
            let started = Instant::now();
            runtime.block_on(resolve());
            started.elapsed()
        })
        .collect();
    walls.sort();
    let median = walls[walls.len() / 2];
    let ms = |duration: Duration| duration.as_secs_f64() * 1000.0;
    println!(
        "resolve_many: {UIDS} uids, {} ms per response, concurrency {concurrency}: \
         wall median {:.1} ms (min {:.1}, max {:.1}, {SUMMARY_RUNS} runs); \
         ratio to one response {:.2}x; target < 4x (200 ms); sequential would be {} ms",
        RESPONSE_DELAY.as_millis(),
        ms(median),
        ms(walls[0]),
        ms(walls[walls.len() - 1]),
        median.as_secs_f64() / RESPONSE_DELAY.as_secs_f64(),
        RESPONSE_DELAY.as_millis() * UIDS,
    );
    Ok(())
}
