//! The semantic stage: a static token-embedding table distilled from a sentence-embedding
//! model (all-MiniLM-L6-v2) by `build-data/distil-embeddings.py` and embedded in the binary
//! (`embeddings.bin`). A text's vector is the mean of its WordPiece tokens' rows (each row
//! already weighted down the more common its token is), normalised; two texts are as close as
//! their vectors' cosine. No model runs and nothing is downloaded: a request is embedded in
//! microseconds.
//!
//! The WordPiece tokenizer is BERT's (lower-cased, accents stripped, greedy longest match with
//! `##` continuations) over the words `text::split` cuts (so `getFileInfo` is get, file, info
//! before WordPiece sees it). It is written here: the one crate that implements it
//! (`tokenizers`) brings a regex engine, rayon and the model formats this table does not need.

use std::collections::HashMap;
use std::sync::LazyLock;

use unicode_normalization::UnicodeNormalization as _;
use unicode_normalization::char::is_combining_mark;

use super::text;

/// The table as `build-data/distil-embeddings.py` writes it.
const BYTES: &[u8] = include_bytes!("embeddings.bin");

/// A word longer than this is not split (BERT's limit); it counts for nothing.
const MAX_WORD_CHARS: usize = 100;

/// The distilled table: a row of `dims` int8 values and a scale per token.
pub(crate) struct Table {
    dims: usize,
    scales: Vec<f32>,
    values: &'static [u8],
    vocabulary: HashMap<&'static str, u32>,
}

static TABLE: LazyLock<Table> = LazyLock::new(|| Table::parse(BYTES).unwrap_or_else(Table::empty));

/// The table, parsed on first use.
pub(crate) fn table() -> &'static Table {
    &TABLE
}

impl Table {
    fn empty() -> Self {
        Self {
            dims: 1,
            scales: Vec::new(),
            values: &[],
            vocabulary: HashMap::new(),
        }
    }

    /// `b"TSEMB1\0\0"`, u32 rows, u32 dims (little-endian), rows × (f32 scale, dims × i8),
    /// then each row's token as a u8 length and UTF-8 bytes. `None` if it is not that.
    fn parse(bytes: &'static [u8]) -> Option<Self> {
        let rest = bytes.strip_prefix(b"TSEMB1\0\0")?;
        let u32_at = |at: usize| -> Option<usize> {
            let word: [u8; 4] = rest.get(at..at + 4)?.try_into().ok()?;
            usize::try_from(u32::from_le_bytes(word)).ok()
        };
        let (rows, dims) = (u32_at(0)?, u32_at(4)?);
        let row_bytes = 4 + dims;
        let body = rest.get(8..8 + rows * row_bytes)?;
        let mut scales = Vec::with_capacity(rows);
        for row in body.chunks_exact(row_bytes) {
            let scale: [u8; 4] = row.get(..4)?.try_into().ok()?;
            scales.push(f32::from_le_bytes(scale));
        }
        let mut vocabulary = HashMap::with_capacity(rows);
        let mut names = rest.get(8 + rows * row_bytes..)?;
        for row in 0..rows {
            let (&len, tail) = names.split_first()?;
            let token = std::str::from_utf8(tail.get(..usize::from(len))?).ok()?;
            vocabulary.insert(token, u32::try_from(row).ok()?);
            names = tail.get(usize::from(len)..)?;
        }
        Some(Self {
            dims,
            scales,
            values: body,
            vocabulary,
        })
    }

    /// How many numbers a vector has.
    pub(crate) fn dims(&self) -> usize {
        self.dims
    }

    /// The WordPiece tokens of `text` (their rows), in order.
    pub(crate) fn tokens(&self, text: &str) -> Vec<u32> {
        let mut tokens = Vec::new();
        for word in text::split(text) {
            let word: String = word.nfd().filter(|c| !is_combining_mark(*c)).collect();
            self.word_pieces(&word, &mut tokens);
        }
        tokens
    }

    /// Greedy longest-match-first WordPiece of one lower-cased word; a word with a piece
    /// that is in no row adds nothing (BERT's `[UNK]`, which the table leaves out).
    fn word_pieces(&self, word: &str, tokens: &mut Vec<u32>) {
        if word.chars().count() > MAX_WORD_CHARS {
            return;
        }
        let mut pieces = Vec::new();
        let mut start = 0;
        let mut piece = String::new();
        while start < word.len() {
            let mut end = word.len();
            let mut found = None;
            while end > start {
                if word.is_char_boundary(end) {
                    piece.clear();
                    if start > 0 {
                        piece.push_str("##");
                    }
                    piece.push_str(word.get(start..end).unwrap_or_default());
                    if let Some(&row) = self.vocabulary.get(piece.as_str()) {
                        found = Some(row);
                        break;
                    }
                }
                end -= 1;
            }
            let Some(row) = found else {
                return;
            };
            pieces.push(row);
            start = end;
        }
        tokens.extend(pieces);
    }

    /// Adds `weight` times token `row`'s vector to `sum`.
    fn add(&self, sum: &mut [f32], row: u32, weight: f32) {
        let row = row as usize;
        let scale = self.scales.get(row).copied().unwrap_or_default() * weight;
        let start = row * (4 + self.dims) + 4;
        if let Some(values) = self.values.get(start..start + self.dims) {
            for (s, &v) in sum.iter_mut().zip(values) {
                *s += scale * f32::from(v.cast_signed());
            }
        }
    }

    /// The normalised mean of `tokens`' vectors (all zeros for none).
    pub(crate) fn embed(&self, tokens: &[u32]) -> Vec<f32> {
        let mut sum = vec![0.0; self.dims];
        for &token in tokens {
            self.add(&mut sum, token, 1.0);
        }
        normalise(&mut sum);
        sum
    }
}

/// Scales `vector` to length 1 (a zero vector stays zero).
pub(crate) fn normalise(vector: &mut [f32]) {
    let norm = vector.iter().map(|v| v * v).sum::<f32>().sqrt();
    if norm > 0.0 {
        for v in vector {
            *v /= norm;
        }
    }
}

/// The dot product (the cosine, for normalised vectors).
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_loads_and_splits_words_into_pieces() {
        let table = table();
        assert!(
            table.vocabulary.len() > 20_000,
            "{}",
            table.vocabulary.len()
        );
        assert!(!table.tokens("getFileInfo").is_empty());
        // "kubectl" is no vocabulary word: pieces of it are.
        assert!(table.tokens("kubectl").len() >= 2);
    }

    #[test]
    fn paraphrases_are_closer_than_unrelated_texts() {
        let table = table();
        let v = |text: &str| table.embed(&table.tokens(text));
        let read = v("read the contents of a file");
        assert!(
            dot(&read, &v("open a document and show its text"))
                > dot(&read, &v("weather forecast for tomorrow"))
        );
    }
}
