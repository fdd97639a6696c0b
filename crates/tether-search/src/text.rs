//! Words of tool definitions and requests, as the ranker compares them: identifiers split
//! (`snake_case`, `camelCase`, `kebab-case`, `HTTPServer`, `v2`), lower-cased, common English
//! function words dropped, each word stemmed (Snowball English, `rust-stemmers`), so
//! `list_directory_with_sizes` and "listing directories by size" share `list`, `directori`,
//! `size`.

use std::collections::HashMap;

use rust_stemmers::{Algorithm, Stemmer};

/// Words too common to tell tools apart (requests are full of them; definitions too).
const STOP_WORDS: &[&str] = &[
    "a", "about", "after", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be",
    "been", "but", "by", "can", "could", "did", "do", "does", "for", "from", "had", "has", "have",
    "he", "her", "here", "his", "how", "i", "if", "in", "into", "is", "it", "its", "just", "me",
    "my", "of", "on", "or", "our", "please", "she", "should", "so", "some", "that", "the", "their",
    "them", "then", "there", "these", "they", "this", "those", "to", "us", "was", "we", "were",
    "what", "when", "where", "which", "who", "will", "with", "would", "you", "your",
];

/// Splits, lower-cases, filters and stems.
pub(crate) struct Words {
    stemmer: Stemmer,
}

impl Default for Words {
    fn default() -> Self {
        Self {
            stemmer: Stemmer::create(Algorithm::English),
        }
    }
}

impl Words {
    /// The stems of `text`, in order, repeated as often as they occur.
    pub(crate) fn stems(&self, text: &str) -> Vec<String> {
        self.stems_remembered(text, &mut HashMap::new())
    }

    /// [`Words::stems`], each word stemmed once: `memory` keeps word → stem across calls
    /// (an index's documents share most of their words).
    pub(crate) fn stems_remembered(
        &self,
        text: &str,
        memory: &mut HashMap<String, String>,
    ) -> Vec<String> {
        let mut stems = Vec::new();
        for word in split(text) {
            if word.len() < 2 || STOP_WORDS.binary_search(&word.as_str()).is_ok() {
                continue;
            }
            if let Some(stem) = memory.get(&word) {
                stems.push(stem.clone());
                continue;
            }
            let stem = self.stemmer.stem(plural_acronym(&word)).into_owned();
            memory.insert(word, stem.clone());
            stems.push(stem);
        }
        stems
    }

    /// One word's stem (a related-term table entry's side).
    pub(crate) fn stem(&self, word: &str) -> String {
        self.stemmer.stem(&word.to_lowercase()).into_owned()
    }
}

/// The tokenizer of text that is stems already, space-separated (an index's documents are
/// stemmed once, then embedded).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Stemmed;

impl bm25::Tokenizer for Stemmed {
    fn tokenize(&self, input_text: &str) -> Vec<String> {
        input_text
            .split(' ')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    }
}

/// `prs` → `pr`, `dbs` → `db`: an acronym's plural, which the stemmer keeps (it strips an
/// `s` only after a vowel).
fn plural_acronym(word: &str) -> &str {
    match word.strip_suffix('s') {
        Some(stem)
            if (2..=3).contains(&stem.len())
                && !stem.ends_with('s')
                && !stem.contains(|c: char| "aeiouy".contains(c)) =>
        {
            stem
        }
        _ => word,
    }
}

/// The lower-cased words of `text`: runs of letters or digits, cut where an identifier's
/// case or kind changes (`getFileInfo` → get, file, info; `HTTPServer` → http, server;
/// `v2api` → v, 2, api).
pub(crate) fn split(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut current = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            flush(&mut current, &mut words);
            continue;
        }
        if let Some(&previous) = i.checked_sub(1).and_then(|p| chars.get(p)) {
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            let boundary = (previous.is_lowercase() && c.is_uppercase())
                || (previous.is_uppercase() && c.is_uppercase() && next_lower)
                || (previous.is_alphabetic() != c.is_alphabetic() && previous.is_alphanumeric());
            if boundary {
                flush(&mut current, &mut words);
            }
        }
        current.extend(c.to_lowercase());
    }
    flush(&mut current, &mut words);
    words
}

fn flush(current: &mut String, words: &mut Vec<String>) {
    if !current.is_empty() {
        words.push(std::mem::take(current));
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    #[test]
    fn stop_words_are_sorted_for_the_binary_search() {
        assert!(STOP_WORDS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn identifiers_split_at_case_kind_and_punctuation() {
        assert_eq!(
            split("list_directory_with-sizes getFileInfo HTTPServer v2api"),
            [
                "list",
                "directory",
                "with",
                "sizes",
                "get",
                "file",
                "info",
                "http",
                "server",
                "v",
                "2",
                "api"
            ]
        );
        assert_eq!(split("Größe_ändern"), ["größe", "ändern"]);
    }

    #[test]
    fn words_are_stemmed_and_function_words_dropped() {
        let words = Words::default();
        assert_eq!(
            words.stems("Listing the directories by their sizes"),
            ["list", "directori", "size"]
        );
        assert_eq!(
            words.stems("list_directory_with_sizes"),
            ["list", "directori", "size"]
        );
    }
}
