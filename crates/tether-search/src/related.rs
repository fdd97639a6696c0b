//! Related terms, two tables loaded and stemmed once, on first use:
//! - `domain.txt`, hand-written: groups of words software uses for the same thing (a folder is
//!   a directory, a PR a pull request); WordNet knows these words in their everyday senses only.
//! - `related.txt`: for a common English word, the words of real servers' tool definitions
//!   WordNet relates to it (a synonym in one of its three most frequent senses, or that sense's
//!   direct hypernym). Generated offline by `build-data/wordnet-related.py` from WordNet 3.1
//!   (about 120 KB, embedded).

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use super::text::Words;

/// The table as generated: `WORD RELATED...` a line, `#` lines are comments.
const TABLE: &str = include_str!("related.txt");

/// Groups of words software uses interchangeably, a group a line (`domain.txt`).
const DOMAIN: &str = include_str!("domain.txt");

/// Where a relation comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// `related.txt`, from WordNet.
    WordNet,
    /// `domain.txt`, software's own synonyms.
    Domain,
}

type Table = HashMap<String, Vec<String>>;

/// Stem → related stems from WordNet (several words may share a stem: their lists merge).
static WORDNET: LazyLock<Table> = LazyLock::new(|| {
    let words = Words::default();
    let mut table: HashMap<String, HashSet<String>> = HashMap::new();
    for line in TABLE.lines().filter(|line| !line.starts_with('#')) {
        let mut fields = line.split_whitespace();
        let Some(word) = fields.next() else {
            continue;
        };
        let key = words.stem(word);
        let entry = table.entry(key.clone()).or_default();
        entry.extend(
            fields
                .map(|related| words.stem(related))
                .filter(|s| *s != key),
        );
    }
    sorted(table)
});

/// Stem → related stems from `domain.txt`: each word of a group to every other.
static DOMAIN_TABLE: LazyLock<Table> = LazyLock::new(|| {
    let words = Words::default();
    let mut table: HashMap<String, HashSet<String>> = HashMap::new();
    for line in DOMAIN.lines().filter(|line| !line.starts_with('#')) {
        let group: Vec<String> = line.split_whitespace().map(|w| words.stem(w)).collect();
        for key in &group {
            let entry = table.entry(key.clone()).or_default();
            entry.extend(group.iter().filter(|s| *s != key).cloned());
        }
    }
    sorted(table)
});

fn sorted(table: HashMap<String, HashSet<String>>) -> Table {
    table
        .into_iter()
        .map(|(key, related)| {
            let mut related: Vec<String> = related.into_iter().collect();
            related.sort();
            (key, related)
        })
        .collect()
}

/// The stems `source` relates to any of `stems`, each once, in a stable order.
pub(crate) fn of(source: Source, stems: &[String]) -> Vec<String> {
    let table = match source {
        Source::WordNet => &*WORDNET,
        Source::Domain => &*DOMAIN_TABLE,
    };
    let mut seen = HashSet::new();
    stems
        .iter()
        .filter_map(|stem| table.get(stem))
        .flatten()
        .filter(|related| seen.insert(related.as_str()))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_loads_and_relates_stems() {
        assert!(WORDNET.len() > 1000, "{}", WORDNET.len());
        let related = of(Source::WordNet, &["retriev".to_owned()]);
        assert!(related.contains(&"fetch".to_owned()), "{related:?}");
        assert!(of(Source::WordNet, &["zzzz".to_owned()]).is_empty());
        let related = of(Source::Domain, &["folder".to_owned()]);
        assert!(related.contains(&"directori".to_owned()), "{related:?}");
    }
}
