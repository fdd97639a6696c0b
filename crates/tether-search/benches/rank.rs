//! Tool search alone, in process: indexing an offered set of tools (each catalogue rebuild does
//! it) and answering one request over it, for sets of 100 and 1,000 tools with names,
//! descriptions and parameters like a real server's.
//! `cargo bench -p tether-search --bench rank`.

#![allow(
    missing_docs,
    reason = "criterion's macros generate undocumented items"
)]

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use serde_json::json;
use tether_search::{Indexed, Ranking, ToolIndex};

const VERBS: [&str; 8] = [
    "create", "list", "delete", "update", "search", "read", "send", "fetch",
];
const THINGS: [&str; 10] = [
    "issue",
    "pull request",
    "file",
    "message",
    "calendar event",
    "invoice",
    "ticket",
    "page",
    "branch",
    "customer",
];

fn tools(count: usize) -> Vec<Indexed> {
    (0..count)
        .map(|i| {
            let verb = VERBS[i % VERBS.len()];
            let thing = THINGS[(i / VERBS.len()) % THINGS.len()];
            let server = format!("server{}", i / 50);
            let own = format!("{verb}_{}_{i}", thing.replace(' ', "_"));
            let name = format!("{server}__{own}");
            let definition = json!({
                "name": name,
                "description": format!("{verb} a {thing} in the workspace; returns the {thing} as JSON"),
                "inputSchema": {"type": "object", "properties": {
                    "id": {"type": "string", "description": format!("the {thing}'s id")},
                    "query": {"type": "string", "description": "words to match"}
                }}
            });
            Indexed {
                name,
                server,
                own,
                definition,
                about: String::new(),
            }
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("tool_search");
    for count in [100, 1000] {
        let offered = tools(count);
        group.bench_with_input(BenchmarkId::new("index", count), &offered, |b, offered| {
            b.iter(|| ToolIndex::new(offered.clone()));
        });
        let index = ToolIndex::new(offered);
        group.bench_with_input(BenchmarkId::new("find", count), &index, |b, index| {
            b.iter(|| {
                index.find(
                    "open a new ticket for a customer",
                    5,
                    None,
                    Ranking::Related,
                )
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
