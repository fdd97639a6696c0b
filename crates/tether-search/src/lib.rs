//! Tool search: the offered tools ranked against a request in words (`tether__find_tools`).
//!
//! Each tool is one BM25 document (the `bm25` crate's embedder and scorer, with this module's
//! tokenizer, `text.rs`): its own name and title [`NAME_REPEAT`] times, its server's name, its
//! description, its parameters' names and descriptions. A request counts by its own words, by
//! the words software uses for the same thing (`related.rs`, `domain.txt`) at
//! [`RELATED_WEIGHT`] ([`RELATED_WEIGHT_UNKNOWN`] for a word no tool has), and, for a word no
//! tool has, by the words WordNet relates to it (`related.txt`, generated offline and embedded)
//! at [`WORDNET_WEIGHT`]. A request that names a server multiplies its tools' scores by
//! [`SERVER_BOOST`]. That ranking is fused ([`FUSION`]) with the semantic stage
//! (`semantic.rs`): the cosine between the request's vector and each tool's, both means of a
//! static token-embedding table distilled offline from a sentence-embedding model and
//! embedded. specs/tool-search/TECH.md says why.

#![deny(missing_docs)]

mod related;
mod semantic;
mod text;

use std::collections::{HashMap, HashSet};

use bm25::{Embedder, EmbedderBuilder, Embedding, Scorer, TokenEmbedder as _, TokenEmbedding};
use serde_json::Value;

/// How many tools `tether__find_tools` returns when not told.
pub const DEFAULT_LIMIT: usize = 5;
/// The most tools `tether__find_tools` returns.
pub const MAX_LIMIT: usize = 20;

/// What a match on a related term counts for, against 1 for a term of the request itself...
pub const RELATED_WEIGHT: f32 = 0.4;
/// ... and when the request's word itself is in no tool's definition (the related terms are
/// then all there is to go on).
pub const RELATED_WEIGHT_UNKNOWN: f32 = 0.6;
/// What a match on a term WordNet relates to a request's word counts for, when that word is
/// in no tool's definition (WordNet is not asked about words the tools have).
pub const WORDNET_WEIGHT: f32 = 0.3;
/// What a tool's score is multiplied by when the request names its server.
pub const SERVER_BOOST: f32 = 2.0;
/// How much of a tool's description its vector reads (the start says what it does).
pub const DESCRIPTION_CHARS: usize = 300;
/// How often a tool's own name and title are repeated in its document (the other fields once).
pub const NAME_REPEAT: usize = 3;

/// How a request is ranked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ranking {
    /// BM25 over the request's own words only (the baseline the quality test reports).
    Plain,
    /// BM25 over the request's words, plus their related words (see the module's doc).
    Related,
    /// The semantic stage alone: tools by the cosine of their vector and the request's.
    Semantic,
    /// [`Ranking::Related`] and [`Ranking::Semantic`] fused by reciprocal rank (tether's).
    Fused,
}

/// How the two rankings are fused: a tool's score is `lexical / (k + its BM25 rank)` plus
/// `semantic / (k + its semantic rank)` (ranks from 1; a tool BM25 does not match has no
/// lexical part).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fusion {
    /// The reciprocal-rank constant.
    pub k: f32,
    /// The weight of the BM25 ranking.
    pub lexical: f32,
    /// The weight of the semantic ranking.
    pub semantic: f32,
    /// The least cosine for a tool BM25 does not match to be returned at all.
    pub min_cosine: f32,
    /// Fuse by score instead of rank: `lexical × BM25 / the best BM25 + semantic × cosine`.
    pub by_score: bool,
}

/// The fusion tether uses (chosen on the labelled set's tuning split, specs/tool-search/TECH.md).
pub const FUSION: Fusion = Fusion {
    k: 10.0,
    lexical: 1.0,
    semantic: 1.0,
    min_cosine: 0.3,
    by_score: true,
};

/// One offered tool, as the index holds it.
#[derive(Debug, Clone)]
pub struct Indexed {
    /// Its namespaced name (`SERVER__TOOL`).
    pub name: String,
    /// Its server's name in the run.
    pub server: String,
    /// Its name on its server.
    pub own: String,
    /// Its definition as offered (masked, the namespaced name in `name`).
    pub definition: Value,
    /// What its server says of itself (its title and instructions), empty when unknown.
    pub about: String,
}

/// The offered tools, indexed for [`ToolIndex::find`]. Built whole from the offered set each
/// time it changes (the catalogue's rebuild).
pub struct ToolIndex {
    tools: Vec<Indexed>,
    /// Each tool's whole document: name, title, server, description, parameters.
    documents: Scorer<usize, u32>,
    /// Every stem of every document.
    known: HashSet<String>,
    words: text::Words,
    /// Each tool's vector (the semantic stage), normalised.
    vectors: Vec<Vec<f32>>,
}

impl std::fmt::Debug for ToolIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolIndex")
            .field("tools", &self.tools.len())
            .finish_non_exhaustive()
    }
}

impl ToolIndex {
    /// Indexes `tools` (in the order ties are broken in).
    pub fn new(tools: Vec<Indexed>) -> Self {
        let words = text::Words::default();
        let mut memory = HashMap::new();
        let mut known = HashSet::new();
        let documents: Vec<String> = tools
            .iter()
            .map(|tool| {
                let stems = words.stems_remembered(&document(tool), &mut memory);
                known.extend(stems.iter().cloned());
                stems.join(" ")
            })
            .collect();
        let table = semantic::table();
        let vectors = tools.iter().map(|tool| meaning(table, tool)).collect();
        Self {
            documents: scorer(&documents),
            tools,
            known,
            words,
            vectors,
        }
    }

    /// How many tools are indexed.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether no tool is indexed.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The tools that best answer `query`, best first, at most `limit`, only `server`'s when
    /// given. A tool that shares no word (nor related word) with the request, and whose
    /// meaning is not close to it either ([`Fusion::min_cosine`]), is not returned.
    pub fn find(
        &self,
        query: &str,
        limit: usize,
        server: Option<&str>,
        ranking: Ranking,
    ) -> Vec<&Indexed> {
        self.find_with(query, limit, server, ranking, FUSION)
    }

    /// [`ToolIndex::find`] with another fusion (the quality test chooses [`FUSION`] with it).
    pub fn find_with(
        &self,
        query: &str,
        limit: usize,
        server: Option<&str>,
        ranking: Ranking,
        fusion: Fusion,
    ) -> Vec<&Indexed> {
        let wanted = |id: &usize| {
            server.is_none_or(|server| {
                self.tools
                    .get(*id)
                    .is_some_and(|tool| tool.server == server)
            })
        };
        let ranked: Vec<usize> = match ranking {
            Ranking::Plain | Ranking::Related => self
                .lexical(query, ranking)
                .into_iter()
                .map(|(id, _)| id)
                .filter(wanted)
                .collect(),
            Ranking::Semantic => self
                .semantic(query)
                .into_iter()
                .filter(|(id, cosine)| *cosine >= fusion.min_cosine && wanted(id))
                .map(|(id, _)| id)
                .collect(),
            Ranking::Fused => self
                .fused(query, fusion)
                .into_iter()
                .filter(wanted)
                .collect(),
        };
        ranked
            .into_iter()
            .take(limit)
            .filter_map(|id| self.tools.get(id))
            .collect()
    }

    /// The two rankings fused by reciprocal rank, best first.
    fn fused(&self, query: &str, fusion: Fusion) -> Vec<usize> {
        let mut scores: HashMap<usize, f32> = HashMap::new();
        let lexical = self.lexical(query, Ranking::Related);
        for (rank, (id, _)) in lexical.iter().enumerate() {
            *scores.entry(*id).or_default() += fusion.lexical / (fusion.k + rank as f32 + 1.0);
        }
        if lexical.is_empty() && self.words.stems(query).is_empty() {
            return Vec::new();
        }
        if fusion.by_score {
            scores.clear();
            let best = lexical.first().map_or(1.0, |(_, score)| *score);
            for (id, score) in &lexical {
                scores.insert(*id, fusion.lexical * score / best);
            }
        }
        for (rank, (id, cosine)) in self.semantic(query).into_iter().enumerate() {
            let matched = scores.contains_key(&id);
            if matched || cosine >= fusion.min_cosine {
                *scores.entry(id).or_default() += if fusion.by_score {
                    fusion.semantic * cosine.max(0.0)
                } else {
                    fusion.semantic / (fusion.k + rank as f32 + 1.0)
                };
            }
        }
        let mut ranked: Vec<(usize, f32)> = scores.into_iter().collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        ranked.into_iter().map(|(id, _)| id).collect()
    }

    /// Every tool by the cosine of its vector with the request's, best first.
    fn semantic(&self, query: &str) -> Vec<(usize, f32)> {
        let table = semantic::table();
        let tokens = table.tokens(query);
        if tokens.is_empty() {
            return Vec::new();
        }
        let query = table.embed(&tokens);
        let mut ranked: Vec<(usize, f32)> = self
            .vectors
            .iter()
            .enumerate()
            .map(|(id, vector)| (id, semantic::dot(&query, vector)))
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        ranked
    }

    /// BM25 (with related terms for [`Ranking::Related`]) and the named-server boost: the
    /// tools sharing a word with the request, best first.
    fn lexical(&self, query: &str, ranking: Ranking) -> Vec<(usize, f32)> {
        let mut own: Vec<String> = self.words.stems(query);
        let mut seen = HashSet::new();
        own.retain(|stem| seen.insert(stem.clone()));
        let mut scores: HashMap<usize, f32> = HashMap::new();
        self.add(&mut scores, &own, 1.0);
        if ranking != Ranking::Plain {
            for stem in &own {
                let known = self.known.contains(stem);
                let weight = if known {
                    RELATED_WEIGHT
                } else {
                    RELATED_WEIGHT_UNKNOWN
                };
                let one = std::slice::from_ref(stem);
                let mut domain = related::of(related::Source::Domain, one);
                domain.retain(|stem| !seen.contains(stem));
                self.add(&mut scores, &domain, weight);
                if !known {
                    let mut wordnet = related::of(related::Source::WordNet, one);
                    wordnet.retain(|stem| !seen.contains(stem) && !domain.contains(stem));
                    self.add(&mut scores, &wordnet, WORDNET_WEIGHT);
                }
            }
        }
        // A request that names a server (every word of its name) wants that server's tools.
        for (id, score) in &mut scores {
            let named = self.tools.get(*id).is_some_and(|tool| {
                let server = self.words.stems(&tool.server);
                !server.is_empty() && server.iter().all(|stem| seen.contains(stem))
            });
            if named {
                *score *= SERVER_BOOST;
            }
        }
        let mut ranked: Vec<(usize, f32)> = scores
            .into_iter()
            .filter(|(_, score)| *score > 0.0)
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        ranked
    }
}

impl ToolIndex {
    /// Adds `weight` times the score of `stems` on each field to `scores`.
    fn add(&self, scores: &mut HashMap<usize, f32>, stems: &[String], weight: f32) {
        if stems.is_empty() {
            return;
        }
        let query = embedding(stems);
        for matched in self.documents.matches(&query) {
            *scores.entry(matched.id).or_default() += weight * matched.score;
        }
    }
}

/// A scorer of `documents` (stems, space-separated), by position.
fn scorer(documents: &[String]) -> Scorer<usize, u32> {
    let corpus: Vec<&str> = documents.iter().map(String::as_str).collect();
    let embedder: Embedder<u32, text::Stemmed> =
        EmbedderBuilder::with_tokenizer_and_fit_to_corpus(text::Stemmed, &corpus).build();
    let mut scorer = Scorer::new();
    for (id, document) in documents.iter().enumerate() {
        scorer.upsert(&id, embedder.embed(document));
    }
    scorer
}

/// A query's stems as the scorer's embedding (only the indices count for a query).
fn embedding(stems: &[String]) -> Embedding<u32> {
    Embedding(
        stems
            .iter()
            .map(|stem| TokenEmbedding {
                index: u32::embed(stem),
                value: 1.0,
            })
            .collect(),
    )
}

/// A tool's vector: the sum of the normalised vectors of its name (own name, title, server),
/// of the start of its description ([`DESCRIPTION_CHARS`]), and of its parameters' names and
/// what its server says of itself at half weight; normalised. Apart, so a long description
/// does not drown the name.
fn meaning(table: &semantic::Table, tool: &Indexed) -> Vec<f32> {
    let definition = &tool.definition;
    let text = |key: &str| definition.get(key).and_then(Value::as_str).unwrap_or("");
    let name = [tool.own.as_str(), text("title"), &tool.server].join("\n");
    let description = text("description");
    let description = description
        .char_indices()
        .nth(DESCRIPTION_CHARS)
        .map_or(description, |(end, _)| {
            description.get(..end).unwrap_or(description)
        });
    let mut rest = tool.about.clone();
    if let Some(properties) = definition
        .pointer("/inputSchema/properties")
        .and_then(Value::as_object)
    {
        for name in properties.keys() {
            rest.push('\n');
            rest.push_str(name);
        }
    }
    let mut sum = vec![0.0; table.dims()];
    for (part, weight) in [
        (name.as_str(), 1.0),
        (description, 1.0),
        (rest.as_str(), 0.5),
    ] {
        let vector = table.embed(&table.tokens(part));
        for (s, v) in sum.iter_mut().zip(vector) {
            *s += weight * v;
        }
    }
    semantic::normalise(&mut sum);
    sum
}

/// A tool's document: its fields, its own name and title repeated for weight.
fn document(tool: &Indexed) -> String {
    let definition = &tool.definition;
    let text = |key: &str| definition.get(key).and_then(Value::as_str).unwrap_or("");
    let mut parts: Vec<&str> = Vec::new();
    parts.extend(std::iter::repeat_n(tool.own.as_str(), NAME_REPEAT));
    parts.extend(std::iter::repeat_n(text("title"), NAME_REPEAT));
    parts.push(&tool.server);
    parts.push(&tool.about);
    parts.push(text("description"));
    let mut document = parts.join("\n");
    if let Some(properties) = definition
        .pointer("/inputSchema/properties")
        .and_then(Value::as_object)
    {
        for (name, property) in properties {
            document.push('\n');
            document.push_str(name);
            if let Some(description) = property.get("description").and_then(Value::as_str) {
                document.push('\n');
                document.push_str(description);
            }
        }
    }
    document
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    fn tool(server: &str, own: &str, description: &str) -> Indexed {
        let name = format!("{server}__{own}");
        Indexed {
            definition: json!({"name": name, "description": description, "inputSchema": {"type": "object"}}),
            name,
            server: server.to_owned(),
            own: own.to_owned(),
            about: String::new(),
        }
    }

    fn names(found: &[&Indexed]) -> Vec<String> {
        found.iter().map(|tool| tool.name.clone()).collect()
    }

    fn index() -> ToolIndex {
        ToolIndex::new(vec![
            tool("fs", "read_file", "Read the complete contents of a file."),
            tool("fs", "write_file", "Create a new file or overwrite one."),
            tool("web", "fetch", "Fetches a URL from the internet."),
            tool("notes", "write_note", "Write a note."),
        ])
    }

    #[test]
    fn name_words_split_and_stemmed_match_a_request() {
        let index = index();
        let found = index.find("reading files", 5, None, Ranking::Plain);
        assert_eq!(names(&found)[0], "fs__read_file");
    }

    #[test]
    fn limit_and_server_bound_the_answer_and_unrelated_tools_are_left_out() {
        let index = index();
        assert_eq!(
            names(&index.find("write a file", 5, None, Ranking::Plain)),
            ["fs__write_file", "notes__write_note", "fs__read_file"]
        );
        assert_eq!(
            names(&index.find("write", 1, None, Ranking::Plain)).len(),
            1
        );
        assert_eq!(
            names(&index.find("write", 5, Some("notes"), Ranking::Plain)),
            ["notes__write_note"]
        );
        assert!(index.find("zebra", 5, None, Ranking::Related).is_empty());
        assert!(index.find("", 5, None, Ranking::Related).is_empty());
    }

    #[test]
    fn the_semantic_stage_finds_a_tool_by_meaning_and_keeps_bm25s_order_on_its_words() {
        let index = ToolIndex::new(vec![
            tool("fs", "read_file", "Read the complete contents of a file."),
            tool("lang", "translate", "Translate text between languages."),
            tool("web", "fetch", "Fetches a URL from the internet."),
            tool("cal", "calculate", "Evaluates an arithmetic expression."),
        ]);
        // No word of the request is in any tool; its meaning is.
        assert!(
            index
                .find("put this paragraph into french", 5, None, Ranking::Plain)
                .is_empty()
        );
        assert_eq!(
            names(&index.find("put this paragraph into french", 1, None, Ranking::Fused)),
            ["lang__translate"]
        );
        assert_eq!(
            names(&index.find("read a file", 1, None, Ranking::Fused)),
            ["fs__read_file"]
        );
        assert!(index.find("", 5, None, Ranking::Fused).is_empty());
    }

    #[test]
    fn related_words_find_what_the_request_does_not_name() {
        let index = index();
        // "retrieve" names no tool; WordNet relates it to "fetch".
        assert!(index.find("retrieve", 5, None, Ranking::Plain).is_empty());
        assert_eq!(
            names(&index.find("retrieve", 5, None, Ranking::Related))[0],
            "web__fetch"
        );
    }
}
