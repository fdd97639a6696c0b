//! The cost of OpenTelemetry export (traces and metrics) on one `tools/call` through `tether
//! serve` (stdio): two gateways in front of the same kind of server, one exporting to an
//! OTLP/HTTP receiver on loopback (`tether_testkit::otlp`), one with export off, called in
//! turn (paired); p50 and p99 of each and the difference. Twice: over the test server's echo
//! (no work of its own: the gateway's cost alone) and over server-everything's (Node, a real
//! server). The target: p50 +5 % at most with export on.
//!
//! Run by hand: `cargo bench -p tether-gateway --bench export` (`TETHER_BENCH_PROFILE=dist`
//! for what users install; else release binaries when `target/release` has them, else the
//! debug ones: say which with the figures). `OTEL_TRACES_EXPORTER=none` or
//! `OTEL_METRICS_EXPORTER=none` in the bench's environment measure one signal alone. With
//! `TETHER_BASELINE=PATH` (a `tether` built without export, e.g. main's), a third gateway
//! runs that binary in the same rotation: export off against no export code at all.

#![allow(clippy::expect_used, reason = "a bench fails loudly")]

use std::process::Stdio;
use std::time::Instant;

use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use serde_json::json;

mod common;

use common::{binary, ms, quantile};

const SAMPLES: usize = 1_000;
const WARMUP: usize = 100;

type Client = RunningService<RoleClient, ()>;

fn main() {
    common::with_home(bench);
}

async fn gateway(
    tether: &std::path::Path,
    home: &std::path::Path,
    spec: &str,
    otlp: Option<&str>,
) -> Client {
    let mut command = tokio::process::Command::new(tether);
    command
        .args(["serve", "--wait-for-servers", "--mcp", spec])
        .env("TETHER_HOME", home)
        .env("NO_COLOR", "1")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    if let Some(endpoint) = otlp {
        command.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint);
    }
    let (transport, _) = TokioChildProcess::builder(command)
        .stderr(Stdio::null())
        .spawn()
        .expect("spawning tether serve");
    ().serve(transport).await.expect("initializing the gateway")
}

async fn call(client: &Client, tool: &str, arguments: &serde_json::Value) {
    let params = CallToolRequestParams::new(tool.to_owned())
        .with_arguments(arguments.as_object().cloned().unwrap_or_default());
    client.call_tool(params).await.expect("calling the tool");
}

async fn bench(home: std::path::PathBuf) {
    let server = binary("tether-test-mcp", "tether-test-mcp");
    let spec = json!({"test": {"command": server.to_string_lossy()}}).to_string();
    let echo = json!({"text": "x"});
    paired(&home, "the test server", &spec, "test__echo", &echo).await;
    // A real server's echo (Node), whose own work is part of every call, as in use.
    match tether_testkit::server_everything() {
        Some(everything) => {
            let spec = json!({"ev": {"command": everything.to_string_lossy(), "args": ["stdio"]}})
                .to_string();
            let echo = json!({"message": "x"});
            paired(&home, "server-everything", &spec, "ev__echo", &echo).await;
        }
        None => println!("server-everything: skipped (npm packages not installed)"),
    }
}

/// `SAMPLES` paired calls of `tool` through a gateway exporting and one not, over `spec`.
async fn paired(
    home: &std::path::Path,
    label: &str,
    spec: &str,
    tool: &str,
    arguments: &serde_json::Value,
) {
    let receiver = tether_testkit::otlp::OtlpReceiver::start()
        .await
        .expect("an OTLP receiver");
    let tether = binary("tether", "tether-cli");
    let (home, spec) = (home.to_owned(), spec.to_owned());
    let off = gateway(&tether, &home, &spec, None).await;
    let on = gateway(&tether, &home, &spec, Some(&receiver.endpoint)).await;
    let baseline = match std::env::var_os("TETHER_BASELINE") {
        Some(path) => Some(gateway(path.as_ref(), &home, &spec, None).await),
        None => None,
    };
    let (mut quiet, mut exporting, mut before) = (Vec::new(), Vec::new(), Vec::new());
    for index in 0..(WARMUP + SAMPLES) {
        if let Some(baseline) = &baseline {
            let started = Instant::now();
            call(baseline, tool, arguments).await;
            if index >= WARMUP {
                before.push(started.elapsed());
            }
        }
        let started = Instant::now();
        call(&off, tool, arguments).await;
        let a = started.elapsed();
        let started = Instant::now();
        call(&on, tool, arguments).await;
        let b = started.elapsed();
        if index >= WARMUP {
            quiet.push(a);
            exporting.push(b);
        }
    }
    quiet.sort();
    exporting.sort();
    let (o50, o99) = (quantile(&quiet, 0.5), quantile(&quiet, 0.99));
    let (e50, e99) = (quantile(&exporting, 0.5), quantile(&exporting, 0.99));
    let added = e50.as_secs_f64() / o50.as_secs_f64().max(f64::MIN_POSITIVE) - 1.0;
    println!(
        "tools/call of {label} through tether serve (stdio), {SAMPLES} paired calls: export off p50 {} p99 {}; export on p50 {} p99 {}; p50 {:+.1} %  [target: <= +5 %]",
        ms(o50),
        ms(o99),
        ms(e50),
        ms(e99),
        added * 100.0
    );
    if !before.is_empty() {
        before.sort();
        let b50 = quantile(&before, 0.5);
        println!(
            "   baseline binary p50 {} p99 {}; export off vs baseline p50 {:+.1} %",
            ms(b50),
            ms(quantile(&before, 0.99)),
            (o50.as_secs_f64() / b50.as_secs_f64().max(f64::MIN_POSITIVE) - 1.0) * 100.0
        );
    }
    drop(on);
    let spans = receiver.spans().len();
    println!("   spans received so far: {spans}");
    drop(off);
}
