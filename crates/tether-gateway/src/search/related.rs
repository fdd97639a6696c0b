//! The related-term table: for a common English word, the words of real servers' tool
//! definitions WordNet relates to it (a synonym in one of its three most frequent senses, or
//! that sense's direct hypernym). Generated offline by `build-data/wordnet-related.py` from
//! WordNet 3.1 into `related.txt` (about 120 KB, embedded), plus `domain.txt`, software's
//! own interchangeable words (WordNet knows their everyday senses only); stemmed once, on
//! first use.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use super::text::Words;

/// The table as generated: `WORD RELATED...` a line, `#` lines are comments.
const TABLE: &str = include_str!("related.txt");

/// Groups of words software uses interchangeably, a group a line (`domain.txt`).
const DOMAIN: &str = include_str!("domain.txt");

/// Stem → related stems (several words may share a stem: their lists are merged).
static RELATED: LazyLock<HashMap<String, Vec<String>>> = LazyLock::new(|| {
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
    for line in DOMAIN.lines().filter(|line| !line.starts_with('#')) {
        let group: Vec<String> = line.split_whitespace().map(|w| words.stem(w)).collect();
        for key in &group {
            let entry = table.entry(key.clone()).or_default();
            entry.extend(group.iter().filter(|s| *s != key).cloned());
        }
    }
    table
        .into_iter()
        .map(|(key, related)| {
            let mut related: Vec<String> = related.into_iter().collect();
            related.sort();
            (key, related)
        })
        .collect()
});

/// The stems related to any of `stems`, each once, in a stable order.
pub(crate) fn of(stems: &[String]) -> Vec<String> {
    let mut seen = HashSet::new();
    stems
        .iter()
        .filter_map(|stem| RELATED.get(stem))
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
        assert!(RELATED.len() > 1000, "{}", RELATED.len());
        let related = of(&["retriev".to_owned()]);
        assert!(related.contains(&"fetch".to_owned()), "{related:?}");
        assert!(of(&["zzzz".to_owned()]).is_empty());
    }
}
