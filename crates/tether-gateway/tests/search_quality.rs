//! Tool search's ranking quality on the labelled set (tests/data/tool-search): 165 tools of 19
//! real servers and 143 requests, each labelled with the tool(s) that answer it. Prints top-1,
//! top-3 and top-5 for a plain substring match, textbook BM25, plain BM25 (tether's index
//! without related terms) and tether's ranker, over the whole set, the held-out half and the
//! tuning half (`cargo test -p tether-gateway --test search_quality -- --nocapture`), and holds
//! the bar of the right tool in the top 3 for at least 85% of the requests, and the
//! lead measured over BM25: 15 points over textbook BM25, 10 over tether's own index without
//! related terms on the whole set, and the 25 over the latter on the requests that
//! paraphrase their tool (share no word with its name; specs/tool-search/TECH.md §5).

#![allow(
    clippy::expect_used,
    reason = "a test binary: helpers outside #[test] functions panic on bad test data too"
)]

use serde_json::Value;
use tether_gateway::search::{Indexed, Ranking, ToolIndex};

const TOOLS: &str = include_str!("data/tool-search/real-tools.json");
const QUERIES: &str = include_str!("data/tool-search/queries.json");

struct Query {
    text: String,
    expect: Vec<String>,
    held_out: bool,
}

fn tools() -> Vec<Indexed> {
    let file: Value = serde_json::from_str(TOOLS).expect("real-tools.json");
    let mut tools = Vec::new();
    for server in file["servers"].as_array().expect("servers") {
        let server_name = server["server"].as_str().expect("server");
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
        .map(|q| Query {
            text: q["query"].as_str().expect("query").to_owned(),
            expect: q["expect"]
                .as_array()
                .expect("expect")
                .iter()
                .map(|e| e.as_str().expect("a name").to_owned())
                .collect(),
            held_out: q["half"] == "held-out",
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

/// The words of `text` a request could share with a tool's name: runs of letters split at
/// `snake_case`, `kebab-case` and `camelCase`, lower-cased, a plural `s` dropped.
fn name_words(text: &str) -> Vec<String> {
    let mut spaced = String::new();
    let mut previous_lower = false;
    for c in text.chars() {
        if c.is_uppercase() && previous_lower {
            spaced.push(' ');
        }
        previous_lower = c.is_lowercase();
        spaced.push(c);
    }
    spaced
        .split(|c: char| !c.is_alphabetic())
        .filter(|w| w.len() >= 3)
        .map(|w| {
            let w = w.to_lowercase();
            w.strip_suffix('s').map_or(w.clone(), str::to_owned)
        })
        .collect()
}

/// Whether `query` paraphrases its tool: it shares no word with the own name (after `__`) of
/// any tool it expects ("save this text to a note on disk" → `write_file`), the case the issue
/// says plain BM25 misses.
fn paraphrases(query: &Query) -> bool {
    let words = name_words(&query.text);
    query.expect.iter().all(|name| {
        let own = name.split_once("__").map_or(name.as_str(), |(_, own)| own);
        name_words(own).iter().all(|w| !words.contains(w))
    })
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

#[test]
fn the_ranker_finds_the_right_tool_in_its_top_3_for_85_percent_of_requests() {
    let tools = tools();
    let queries = queries();
    assert!(tools.len() >= 150, "{} tools", tools.len());
    assert!(queries.len() >= 120, "{} queries", queries.len());
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
    let rankers: [(&str, Box<Ranker<'_>>); 4] = [
        ("substring", Box::new(|q: &str| substring(&tools, q, 5))),
        (
            "textbook BM25",
            Box::new(|q: &str| textbook.rank(&tools, q, 5)),
        ),
        ("plain BM25", Box::new(by(Ranking::Plain))),
        ("tether", Box::new(by(Ranking::Related))),
    ];
    let all: Vec<&Query> = queries.iter().collect();
    let held_out: Vec<&Query> = queries.iter().filter(|q| q.held_out).collect();
    let paraphrased: Vec<&Query> = queries.iter().filter(|q| paraphrases(q)).collect();
    let mut figures = Vec::new();
    println!(
        "{} tools, {} requests ({} held out, {} paraphrasing the tool's name)",
        tools.len(),
        all.len(),
        held_out.len(),
        paraphrased.len()
    );
    println!("| ranker | set | top-1 | top-3 | top-5 |\n|---|---|---|---|---|");
    for (label, rank) in &rankers {
        let tuning: Vec<&Query> = queries.iter().filter(|q| !q.held_out).collect();
        let sets = [
            ("all", &all),
            ("held-out", &held_out),
            ("tuning", &tuning),
            ("paraphrased", &paraphrased),
        ];
        for (set, queries) in sets {
            let [t1, t3, t5] = top_k(queries, rank.as_ref());
            println!("| {label} | {set} | {t1:.1}% | {t3:.1}% | {t5:.1}% |");
            figures.push((*label, set, t3));
        }
    }
    for query in all.iter().filter(|q| !q.held_out) {
        let found = rankers[3].1(&query.text);
        if !found.iter().take(3).any(|n| query.expect.contains(n)) {
            println!(
                "missed (tuning half): {:?} → {:?}, wanted {:?}",
                query.text, found, query.expect
            );
        }
    }
    let top3_in = |label: &str, wanted: &str| {
        figures
            .iter()
            .find(|(l, set, _)| *l == label && *set == wanted)
            .map(|(_, _, t3)| *t3)
            .unwrap_or_default()
    };
    let top3 = |label: &str| top3_in(label, "all");
    assert!(top3("tether") >= 85.0, "top-3 {:.1}%", top3("tether"));
    assert!(
        top3("tether") - top3("textbook BM25") >= 15.0,
        "tether {:.1}% against textbook BM25 {:.1}%",
        top3("tether"),
        top3("textbook BM25")
    );
    assert!(
        top3("tether") - top3("plain BM25") >= 10.0,
        "tether {:.1}% against plain BM25 {:.1}%",
        top3("tether"),
        top3("plain BM25")
    );
    // The 25 points, where its gap is: the requests that do not name their tool.
    assert!(
        paraphrased.len() >= 40,
        "{} paraphrasing requests",
        paraphrased.len()
    );
    let (ours, plain) = (
        top3_in("tether", "paraphrased"),
        top3_in("plain BM25", "paraphrased"),
    );
    assert!(
        ours - plain >= 25.0,
        "paraphrasing requests: tether {ours:.1}% against plain BM25 {plain:.1}%"
    );
}
