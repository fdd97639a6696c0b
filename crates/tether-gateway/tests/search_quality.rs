//! Tool search's ranking quality on the labelled set (tests/data/tool-search): the tools of
//! 47 real servers and about 390 requests, each labelled with the tool(s) that answer it, its
//! kind (a paraphrase avoiding the tool's words; naming the product among look-alikes; a tool
//! of a lesser-known server; in the tool's own words; or the first set's "original") and its
//! split (tune or held-out, by a hash of its text: `split_rule`). Prints top-1/3/5 per ranker,
//! split and kind (`cargo test -p tether-gateway --test search_quality -- --nocapture`) and
//! holds the level reached on the held-out split of the new requests. `TOOL_SEARCH_SWEEP=1`
//! also prints the fusion settings tried on the tune split (how `FUSION` was chosen), and
//! `TOOL_SEARCH_TUNING=1` leaves the held-out split out of the output and the assertions (so
//! it is not looked at while tuning). specs/tool-search/TECH.md §5.

#![allow(
    clippy::expect_used,
    reason = "a test binary: helpers outside #[test] functions panic on bad test data too"
)]

use serde_json::Value;
use sha2::{Digest as _, Sha256};
use tether_gateway::search::{FUSION, Fusion, Indexed, Ranking, ToolIndex};

const TOOLS: &str = include_str!("data/tool-search/real-tools.json");
const QUERIES: &str = include_str!("data/tool-search/queries.json");

struct Query {
    text: String,
    expect: Vec<String>,
    kind: String,
    held_out: bool,
}

/// The kinds of request, in the order the table prints them.
const KINDS: [&str; 5] = [
    "paraphrase",
    "product",
    "lesser-known",
    "own-words",
    "original",
];

/// The split rule, fixed before tuning: held out when the first byte of the text's SHA-256 is
/// a multiple of 3; the first set's requests only if they were in its held-out half too.
fn split_rule(text: &str, kind: &str, former_half: Option<&str>) -> bool {
    let first = Sha256::digest(text.as_bytes())[0];
    first % 3 == 0 && (kind != "original" || former_half == Some("held-out"))
}

fn tools() -> Vec<Indexed> {
    let file: Value = serde_json::from_str(TOOLS).expect("real-tools.json");
    let mut tools = Vec::new();
    for server in file["servers"].as_array().expect("servers") {
        let server_name = server["server"].as_str().expect("server");
        let about = server["about"].as_str().unwrap_or("");
        for tool in server["tools"].as_array().expect("tools") {
            let own = tool["name"].as_str().expect("name").to_owned();
            let name = format!("{server_name}__{own}");
            let mut definition = tool.clone();
            definition["name"] = Value::String(name.clone());
            tools.push(Indexed {
                name,
                server: server_name.to_owned(),
                own,
                definition,
                about: about.to_owned(),
            });
        }
    }
    tools
}

fn queries() -> Vec<Query> {
    let file: Value = serde_json::from_str(QUERIES).expect("queries.json");
    file["queries"]
        .as_array()
        .expect("queries")
        .iter()
        .map(|q| {
            let text = q["query"].as_str().expect("query").to_owned();
            let kind = q["kind"].as_str().expect("kind").to_owned();
            let held_out = q["split"] == "held-out";
            assert_eq!(
                held_out,
                split_rule(&text, &kind, q["former_half"].as_str()),
                "{text:?}: its split is not the rule's"
            );
            Query {
                expect: q["expect"]
                    .as_array()
                    .expect("expect")
                    .iter()
                    .map(|e| e.as_str().expect("a name").to_owned())
                    .collect(),
                text,
                kind,
                held_out,
            }
        })
        .collect()
}

/// The baseline: tools ranked by how many of the request's words (three letters or more,
/// lower-cased) occur as substrings of the tool's name or description; ties in list order.
fn substring(tools: &[Indexed], query: &str, limit: usize) -> Vec<String> {
    let words: Vec<String> = query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() >= 3)
        .map(str::to_lowercase)
        .collect();
    let mut scored: Vec<(usize, usize)> = tools
        .iter()
        .enumerate()
        .map(|(i, tool)| {
            let haystack = format!(
                "{} {}",
                tool.name,
                tool.definition["description"].as_str().unwrap_or("")
            )
            .to_lowercase();
            (
                i,
                words
                    .iter()
                    .filter(|w| haystack.contains(w.as_str()))
                    .count(),
            )
        })
        .filter(|(_, hits)| *hits > 0)
        .collect();
    scored.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    scored
        .into_iter()
        .take(limit)
        .map(|(i, _)| tools[i].name.clone())
        .collect()
}

/// Textbook BM25, for reference: the `bm25` crate's embedder and scorer over each tool's
/// name, description and parameters as lower-cased runs of letters and digits (so `snake_case`
/// splits, `camelCase` does not), no stemming, no stop words, no field weights, no related
/// terms, no server boost.
struct Textbook {
    tokens: Lower,
    scorer: bm25::Scorer<usize, u32>,
}

#[derive(Default, Clone, Copy)]
struct Lower;

impl bm25::Tokenizer for Lower {
    fn tokenize(&self, text: &str) -> Vec<String> {
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect()
    }
}

impl Textbook {
    fn new(tools: &[Indexed]) -> Self {
        let documents: Vec<String> = tools
            .iter()
            .map(|tool| {
                let mut text = format!(
                    "{} {}",
                    tool.own,
                    tool.definition["description"].as_str().unwrap_or("")
                );
                if let Some(properties) = tool.definition["inputSchema"]["properties"].as_object() {
                    for (name, property) in properties {
                        text.push(' ');
                        text.push_str(name);
                        text.push(' ');
                        text.push_str(property["description"].as_str().unwrap_or(""));
                    }
                }
                text
            })
            .collect();
        let corpus: Vec<&str> = documents.iter().map(String::as_str).collect();
        let embedder: bm25::Embedder<u32, Lower> =
            bm25::EmbedderBuilder::with_tokenizer_and_fit_to_corpus(Lower, &corpus).build();
        let mut scorer = bm25::Scorer::new();
        for (id, document) in documents.iter().enumerate() {
            scorer.upsert(&id, embedder.embed(document));
        }
        Self {
            tokens: Lower,
            scorer,
        }
    }

    fn rank(&self, tools: &[Indexed], query: &str, limit: usize) -> Vec<String> {
        use bm25::{TokenEmbedder as _, Tokenizer as _};
        let mut words = self.tokens.tokenize(query);
        words.sort();
        words.dedup();
        let query = bm25::Embedding(
            words
                .iter()
                .map(|w| bm25::TokenEmbedding {
                    index: u32::embed(w),
                    value: 1.0,
                })
                .collect(),
        );
        let mut matches = self.scorer.matches(&query);
        matches.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
        matches
            .into_iter()
            .take(limit)
            .map(|m| tools[m.id].name.clone())
            .collect()
    }
}

/// A ranker under test: a request to the names it ranks first.
type Ranker<'a> = dyn Fn(&str) -> Vec<String> + 'a;

/// Per cent of `queries` whose answer is in the top 1, 3 and 5 of `rank`.
fn top_k(queries: &[&Query], rank: &Ranker<'_>) -> [f64; 3] {
    let mut hits = [0usize; 3];
    for query in queries {
        let ranked = rank(&query.text);
        for (slot, k) in [1, 3, 5].into_iter().enumerate() {
            if ranked
                .iter()
                .take(k)
                .any(|name| query.expect.contains(name))
            {
                hits[slot] += 1;
            }
        }
    }
    hits.map(|h| 100.0 * h as f64 / queries.len() as f64)
}

/// `rank`'s top-1/3/5 on each split and kind, as table rows.
fn rows(label: &str, queries: &[Query], rank: &Ranker<'_>) -> Vec<String> {
    let mut rows = Vec::new();
    let splits: &[(&str, bool)] = if tuning() {
        &[("tune", false)]
    } else {
        &[("held-out", true), ("tune", false)]
    };
    for &(split, held_out) in splits {
        let of_split: Vec<&Query> = queries.iter().filter(|q| q.held_out == held_out).collect();
        let new: Vec<&Query> = of_split
            .iter()
            .copied()
            .filter(|q| q.kind != "original")
            .collect();
        let mut sets = vec![("new (4 kinds)".to_owned(), new)];
        for kind in KINDS {
            sets.push((
                kind.to_owned(),
                of_split
                    .iter()
                    .copied()
                    .filter(|q| q.kind == kind)
                    .collect(),
            ));
        }
        for (kind, set) in sets {
            let [t1, t3, t5] = top_k(&set, rank);
            rows.push(format!(
                "| {label} | {split} | {kind} ({}) | {t1:.1}% | {t3:.1}% | {t5:.1}% |",
                set.len()
            ));
        }
    }
    rows
}

/// `TOOL_SEARCH_TUNING=1`: while tuning, the held-out split is neither printed nor asserted.
fn tuning() -> bool {
    std::env::var_os("TOOL_SEARCH_TUNING").is_some()
}

fn new_held_out(queries: &[Query]) -> Vec<&Query> {
    queries
        .iter()
        .filter(|q| q.held_out && q.kind != "original")
        .collect()
}

#[test]
fn the_ranker_finds_the_right_tool_on_requests_it_was_not_tuned_on() {
    let tools = tools();
    let queries = queries();
    let servers: std::collections::HashSet<&str> =
        tools.iter().map(|tool| tool.server.as_str()).collect();
    assert!(servers.len() >= 40, "{} servers", servers.len());
    assert!(queries.len() >= 300, "{} queries", queries.len());
    let index = ToolIndex::new(tools.clone());
    let by = |ranking: Ranking| {
        let index = &index;
        move |query: &str| -> Vec<String> {
            index
                .find(query, 5, None, ranking)
                .iter()
                .map(|tool| tool.name.clone())
                .collect()
        }
    };
    let textbook = Textbook::new(&tools);
    let rankers: [(&str, Box<Ranker<'_>>); 6] = [
        ("substring", Box::new(|q: &str| substring(&tools, q, 5))),
        (
            "textbook BM25",
            Box::new(|q: &str| textbook.rank(&tools, q, 5)),
        ),
        ("plain BM25", Box::new(by(Ranking::Plain))),
        (
            "BM25 + related terms (before)",
            Box::new(by(Ranking::Related)),
        ),
        ("semantic only", Box::new(by(Ranking::Semantic))),
        ("tether", Box::new(by(Ranking::Fused))),
    ];
    println!(
        "{} tools of {} servers, {} requests ({} held out)",
        tools.len(),
        servers.len(),
        queries.len(),
        queries.iter().filter(|q| q.held_out).count()
    );
    println!(
        "| ranker | split | kind (requests) | top-1 | top-3 | top-5 |\n|---|---|---|---|---|---|"
    );
    for (label, rank) in &rankers {
        for row in rows(label, &queries, rank.as_ref()) {
            println!("{row}");
        }
    }
    let tune: Vec<&Query> = queries.iter().filter(|q| !q.held_out).collect();
    for query in &tune {
        let found = rankers[5].1(&query.text);
        if !found.iter().take(3).any(|n| query.expect.contains(n)) {
            println!(
                "missed (tune): [{}] {:?} → {:?}, wanted {:?}",
                query.kind, query.text, found, query.expect
            );
        }
    }
    if std::env::var_os("TOOL_SEARCH_SWEEP").is_some() {
        sweep(&index, &tune);
    }
    if tuning() {
        return;
    }
    // The level reached on the new requests' held-out split, measured once after tuning on
    // the tune split (the bar is 85% top-3 and 65% top-1: not reached, TECH.md §5).
    let held_out = new_held_out(&queries);
    let [t1, t3, _] = top_k(&held_out, rankers[5].1.as_ref());
    assert!(t3 >= 67.0, "held-out top-3 {t3:.1}%");
    assert!(t1 >= 41.0, "held-out top-1 {t1:.1}%");
    let [_, plain3, _] = top_k(&held_out, rankers[2].1.as_ref());
    assert!(
        t3 >= plain3 + 5.0,
        "held-out top-3 {t3:.1}% against plain BM25 {plain3:.1}%"
    );
    // No loss where BM25 is strong: the requests in the tools' own words, top-5.
    let own: Vec<&Query> = queries.iter().filter(|q| q.kind == "own-words").collect();
    let [_, _, ours] = top_k(&own, rankers[5].1.as_ref());
    let [_, _, plain] = top_k(&own, rankers[2].1.as_ref());
    assert!(
        ours >= plain,
        "own words top-5: tether {ours:.1}% against plain BM25 {plain:.1}%"
    );
}

/// Prints top-1/3/5 on the tune split for the fusion settings tried (how [`FUSION`] was chosen).
fn sweep(index: &ToolIndex, tune: &[&Query]) {
    let mut tried = Vec::new();
    for k in [5.0, 10.0, 30.0] {
        for semantic in [0.25, 0.5, 1.0] {
            tried.push(Fusion {
                k,
                semantic,
                by_score: false,
                ..FUSION
            });
        }
    }
    for semantic in [0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0] {
        tried.push(Fusion {
            semantic,
            by_score: true,
            ..FUSION
        });
    }
    for fusion in tried {
        let rank = |query: &str| -> Vec<String> {
            index
                .find_with(query, 5, None, Ranking::Fused, fusion)
                .iter()
                .map(|tool| tool.name.clone())
                .collect()
        };
        let [t1, t3, t5] = top_k(tune, &rank);
        println!("sweep (tune): {fusion:?}: {t1:.1}% / {t3:.1}% / {t5:.1}%");
    }
}
