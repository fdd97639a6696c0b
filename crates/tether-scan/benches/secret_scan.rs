//! The secret scan's cost (`--secret-scan`), run by hand (`bench/gateway.sh` runs it): what
//! `secret_scan::scan` adds to one `tools/call`, in process, on results of the sizes a tool
//! returns — echo's one-line result, 10 KB and 100 KB of prose with no secret, 10 KB with one
//! key in it (masked) — p50 of 2,000 runs each (200 for 100 KB), after 100 unmeasured.

#![allow(clippy::expect_used, reason = "a bench fails loudly")]

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tether_scan::secrets::{SecretScan, scan};

fn result_of(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": false})
}

/// Prose of `bytes` bytes: words, numbers, paths and a URL, as a tool's output has.
fn prose(bytes: usize) -> String {
    let line = "The build of service-42 finished in 3.2 s; see /var/log/build/2026-12-05.log or https://ci.example.com/runs/8731 for details, token budget 25000.\n";
    line.repeat(bytes / line.len() + 1)[..bytes].to_owned()
}

fn p50_of(label: &str, value: &Value, runs: usize) {
    let mut samples = Vec::with_capacity(runs);
    for index in 0..(runs + 100) {
        let mut copy = value.clone();
        let started = Instant::now();
        let found = scan(std::hint::black_box(&mut copy), SecretScan::Mask);
        let took = started.elapsed();
        std::hint::black_box(found);
        if index >= 100 {
            samples.push(took);
        }
    }
    samples.sort();
    let p50: Duration = samples[samples.len() / 2];
    println!(
        "secret scan of {label}: p50 {:.1} µs per tools/call result",
        p50.as_secs_f64() * 1e6
    );
}

fn main() {
    p50_of("echo's result (1 line)", &result_of("x"), 2_000);
    p50_of(
        "a 10 KB text result, no secret",
        &result_of(&prose(10_000)),
        2_000,
    );
    p50_of(
        "a 100 KB text result, no secret",
        &result_of(&prose(100_000)),
        200,
    );
    let mut with_key = prose(10_000);
    with_key.insert_str(5_000, " AKIAQ3EXAMPLE7ZZ2WXY ");
    let mut masked = result_of(&with_key);
    assert_eq!(scan(&mut masked, SecretScan::Mask), ["aws-access-key-id"]);
    p50_of(
        "a 10 KB text result with one key (masked)",
        &result_of(&with_key),
        2_000,
    );
}
