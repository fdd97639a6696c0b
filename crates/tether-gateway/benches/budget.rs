//! The output budget's cost, run by hand (`bench/gateway.sh` runs it after the gateway bench);
//! prints its figures.
//!
//! 1. In process: the check every `tools/call` result goes through (its counted size against
//!    the budget) on a small result, per call; and `budget::apply` on a 10 MB text result
//!    (counting, the random id, the cut, the notice, keeping the whole), p50 of 20.
//! 2. End to end, release binaries on loopback: a `tools/call` of `tether-test-mcp --big-tool`
//!    answering 10,000,000 bytes, straight to the server and through `tether serve` (which
//!    cuts it to 25,000 tokens) and through one with no budget in practice, then
//!    `resources/read` of the whole; p50 of 10 each.

#![allow(clippy::expect_used, reason = "a bench fails loudly")]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, ReadResourceRequestParams};
use rmcp::service::{RoleClient, RunningService};
use serde_json::{Value, json};
use tether_gateway::budget::{self, ResultBudget, ResultStore};

type Client = RunningService<RoleClient, ()>;

const BIG: usize = 10_000_000;

mod common;

use common::{binary, ms};

fn main() {
    in_process();
    common::with_home(async |home| end_to_end(&home).await);
}

fn p50(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn in_process() {
    let small = json!({"content": [{"type": "text", "text": "x"}], "isError": false});
    let limit = ResultBudget::default().max_bytes();
    const CHECKS: u32 = 1_000_000;
    let started = Instant::now();
    let mut over = 0_u32;
    for _ in 0..CHECKS {
        if budget::result_bytes(std::hint::black_box(&small)) > limit {
            over += 1;
        }
    }
    let per_check = started.elapsed() / CHECKS;
    assert_eq!(over, 0);
    println!(
        "budget check of a small result (echo's): {} ns per tools/call",
        per_check.as_nanos()
    );

    let line = "the quick brown fox jumps over the lazy dog, café 0123456\n";
    let text = line.repeat(BIG / line.len());
    let big = json!({"content": [{"type": "text", "text": text}]});
    let store = ResultStore::new(budget::DEFAULT_STORED_RESULTS_BYTES);
    let owner: Arc<str> = Arc::from("bench");
    let mut samples = Vec::new();
    for _ in 0..20 {
        let result = big.clone();
        let started = Instant::now();
        let answer = budget::apply(&ResultBudget::default(), &store, &owner, result);
        samples.push(started.elapsed());
        assert!(budget::result_bytes(&answer) <= limit);
    }
    println!(
        "budget::apply on a {} byte text result (cut to 25,000 tokens, the whole kept): p50 {}",
        text.len(),
        ms(p50(samples))
    );
}

async fn stdio_client(program: &Path, args: &[&str], home: &Path) -> Client {
    common::stdio_client(program, args, home).await.0
}

async fn big_call(client: &Client, tool: &str) -> (Value, Duration) {
    let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(
        json!({"bytes": BIG})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    );
    let started = Instant::now();
    let result = client.call_tool(params).await.expect("calling big");
    let elapsed = started.elapsed();
    (serde_json::to_value(result).expect("a result"), elapsed)
}

async fn end_to_end(home: &Path) {
    let tether = binary("tether", "tether-cli");
    let server = binary("tether-test-mcp", "tether-test-mcp");
    let direct = stdio_client(&server, &["--big-tool"], home).await;
    let spec = format!(
        r#"{{"test": {{"command": {}, "args": ["--big-tool"]}}}}"#,
        json!(server.to_string_lossy())
    );
    let audit = home.join("budget.jsonl").to_string_lossy().into_owned();
    let gateway = stdio_client(&tether, &["serve", "--mcp", &spec, "--audit", &audit], home).await;
    let audit_whole = home.join("whole.jsonl").to_string_lossy().into_owned();
    let no_budget = stdio_client(
        &tether,
        &[
            "serve",
            "--mcp",
            &spec,
            "--audit",
            &audit_whole,
            "--max-result-tokens",
            "100000000",
        ],
        home,
    )
    .await;
    let (mut straight, mut through, mut read) = (Vec::new(), Vec::new(), Vec::new());
    let mut whole_through = Vec::new();
    for _ in 0..10 {
        straight.push(big_call(&direct, "big").await.1);
        whole_through.push(big_call(&no_budget, "test__big").await.1);
        let (cut, elapsed) = big_call(&gateway, "test__big").await;
        through.push(elapsed);
        let blocks = cut["content"].as_array().expect("content");
        let uri = blocks.last().expect("the link")["uri"]
            .as_str()
            .expect("a URI")
            .to_owned();
        let started = Instant::now();
        let whole = gateway
            .read_resource(ReadResourceRequestParams::new(uri))
            .await
            .expect("reading the whole");
        read.push(started.elapsed());
        let whole = serde_json::to_value(whole).expect("contents");
        assert_eq!(
            whole["contents"][0]["text"].as_str().map(str::len),
            Some(BIG)
        );
    }
    println!(
        "tools/call of a {BIG} byte result over stdio: direct p50 {} (the client receives it whole); through the gateway with no budget (--max-result-tokens 100000000) p50 {}; through the gateway p50 {} (the client receives 25,000 tokens and a link); resources/read of the whole through the gateway p50 {}",
        ms(p50(straight)),
        ms(p50(whole_through)),
        ms(p50(through)),
        ms(p50(read))
    );
}
