//! Tool search's cost, run by hand (`bench/tool-search.sh`); prints its figures.
//!
//! 1. In process, over 1,426 tools (the labelled set's 713 real tools under 2 server names
//!    each): building the index (p50 of 10; what every change of the offered set costs in
//!    search mode: BM25 and each tool's vector), and `find` for each of the labelled set's
//!    requests, 10 rounds: p50 and p99 of the calls, for plain BM25, BM25 with related terms
//!    and tether's fused ranking. The tables' first load is timed apart.
//! 2. End to end, release binaries: `tools/list` through `tether serve` in front of 10 ×
//!    server-everything and the test server, in `all` and `search` mode: the JSON bytes of the
//!    tools listed (about what a client puts in its model's context), and `tether__find_tools`
//!    through the gateway (p50 of 50).

#![allow(clippy::expect_used, reason = "a bench fails loudly")]

use std::path::Path;
use std::time::{Duration, Instant};

use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use serde_json::{Value, json};
use tether_gateway::search::{Indexed, Ranking, ToolIndex};

type Client = RunningService<RoleClient, ()>;

const TOOLS: &str = include_str!("../tests/data/tool-search/real-tools.json");
const QUERIES: &str = include_str!("../tests/data/tool-search/queries.json");
const COPIES: usize = 2;

mod common;

use common::{binary, ms};

fn main() {
    in_process();
    common::with_home(async |home| end_to_end(&home).await);
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    common::quantile(samples, p)
}

/// The real tools, `COPIES` times under other server names.
fn tools() -> Vec<Indexed> {
    let file: Value = serde_json::from_str(TOOLS).expect("real-tools.json");
    let mut tools = Vec::new();
    for copy in 0..COPIES {
        for server in file["servers"].as_array().expect("servers") {
            let server_name = format!("{}{copy}", server["server"].as_str().expect("a name"));
            let about = server["about"].as_str().unwrap_or("").to_owned();
            for tool in server["tools"].as_array().expect("tools") {
                let own = tool["name"].as_str().expect("a name").to_owned();
                let name = format!("{server_name}__{own}");
                let mut definition = tool.clone();
                definition["name"] = Value::String(name.clone());
                tools.push(Indexed {
                    name,
                    server: server_name.clone(),
                    own,
                    definition,
                    about: about.clone(),
                });
            }
        }
    }
    tools
}

fn in_process() {
    let queries: Vec<String> =
        serde_json::from_str::<Value>(QUERIES).expect("queries.json")["queries"]
            .as_array()
            .expect("queries")
            .iter()
            .map(|q| q["query"].as_str().expect("a query").to_owned())
            .collect();
    let tools = tools();
    let started = Instant::now();
    let index = ToolIndex::new(tools.clone());
    index.find("warm up the related-term table", 5, None, Ranking::Fused);
    println!(
        "first index of {} tools, with the related-term and embedding tables' load: {}",
        index.len(),
        ms(started.elapsed())
    );
    let mut builds: Vec<Duration> = (0..10)
        .map(|_| {
            let started = Instant::now();
            let index = ToolIndex::new(tools.clone());
            let elapsed = started.elapsed();
            drop(index);
            elapsed
        })
        .collect();
    println!(
        "building the index of {} tools: p50 {}",
        tools.len(),
        ms(percentile(&mut builds, 0.5))
    );
    for ranking in [Ranking::Plain, Ranking::Related, Ranking::Fused] {
        let mut samples = Vec::new();
        for _ in 0..10 {
            for query in &queries {
                let started = Instant::now();
                let found = index.find(query, 5, None, ranking);
                samples.push(started.elapsed());
                std::hint::black_box(found);
            }
        }
        println!(
            "find ({ranking:?}) over {} tools, {} calls: p50 {}, p99 {}",
            index.len(),
            samples.len(),
            ms(percentile(&mut samples, 0.5)),
            ms(percentile(&mut samples, 0.99))
        );
    }
}

async fn gateway(spec: &str, mode: &str, home: &Path) -> Client {
    let tether = binary("tether", "tether-cli");
    let args = ["serve", "--no-pins", "--mcp", spec, "--tool-mode", mode];
    common::stdio_client(&tether, &args, home).await.0
}

async fn end_to_end(home: &Path) {
    let Some(everything) = tether_testkit::server_everything() else {
        println!("server-everything is not installed: no end-to-end figures");
        return;
    };
    let test = binary("tether-test-mcp", "tether-test-mcp");
    let mut servers = serde_json::Map::new();
    for i in 0..10 {
        servers.insert(
            format!("ev{i}"),
            json!({"command": everything, "args": ["stdio"]}),
        );
    }
    servers.insert("test".to_owned(), json!({"command": test}));
    let spec = Value::Object(servers).to_string();
    let mut offered = 0;
    for mode in ["all", "search"] {
        let client = gateway(&spec, mode, home).await;
        let tools = client.list_all_tools().await.expect("tools/list");
        let bytes = serde_json::to_string(&tools).expect("the list").len();
        println!(
            "tools/list through the gateway, 10 × server-everything + test server, {mode} mode: {} tools, {bytes} bytes (about {} tokens)",
            tools.len(),
            bytes / 4
        );
        if mode == "all" {
            offered = tools.len();
        } else {
            let mut samples = Vec::new();
            for _ in 0..50 {
                let params = CallToolRequestParams::new("tether__find_tools").with_arguments(
                    json!({"query": "add two numbers"})
                        .as_object()
                        .cloned()
                        .unwrap_or_default(),
                );
                let started = Instant::now();
                client.call_tool(params).await.expect("tether__find_tools");
                samples.push(started.elapsed());
            }
            println!(
                "tether__find_tools through the gateway over {offered} tools: p50 {}",
                ms(percentile(&mut samples, 0.5))
            );
        }
        client.cancel().await.expect("closing the client");
    }
}
