//! Masking known secret values in text (a child's stderr, an error message, a log line).
//!
//! Redaction is by known value, never by key-name pattern. A [`Masker`] is built once from the
//! values and then masks any text in one pass (Aho-Corasick), so masking costs the length of the
//! text whatever the number of values. Every occurrence of every value is covered, overlapping
//! ones included; a run of overlapping occurrences becomes one [`MASK`].
//!
//! Forms longer than [`LONG_PATTERN_BYTES`] (a JSON service-account key, a PEM chain, in each of
//! its printed forms) are not put in the automaton, whose build costs far more per pattern byte
//! than a search does: each is found by a substring search of its own (`memchr::memmem`, linear
//! in the text), overlapping occurrences of a periodic value included in linear time (see
//! [`LongValue::spans`]). Building a masker is linear in the values' bytes either way.
//! A long value's forms that cannot hold its line breaks (its escaped, encoded and base64
//! forms, most of its ~80) are made only when a text holds their first bytes: see
//! [`crate::encodings::split_forms`] for why a prefix of the value gives those exactly.
//!
//! A value that spans lines (a PEM key, a JSON credential file) is also masked line by line, for
//! output that is cut into lines before it is masked (a log line per stderr line): each of its
//! lines is a value of its own once trimmed of surrounding whitespace, if it has at least
//! [`MIN_SECRET_LINE_BYTES`] bytes. Shorter lines (`{`, `}`, an empty line, a short base64 tail)
//! would mask ordinary text everywhere; they are still masked wherever the whole value appears.
//!
//! A value shorter than [`SHORT_SECRET_CHARS`] characters (a one-letter test secret, `x`) is
//! masked only where it stands alone: where the characters on either side of it are not letters,
//! digits or `_`. Masked inside words, it would corrupt every text (`exited` became
//! `e********ited`) while hiding nothing a guess would not find: a value that short is not a
//! secret anyone can keep. Where tether itself prints a value (a rendered config, a report of
//! what it passed on) it shows the mask by provenance whatever the length; this rule is about
//! finding values in text others wrote.
//!
//! Text that is not all ASCII is also searched folded: with its invisible characters left out
//! (zero-width spaces and joiners, bidirectional controls, variation selectors, the soft hyphen:
//! [`is_invisible`]) and each character in its NFKC form (full-width `ｔｏｋ` as `tok`), so a
//! value spelt with such characters inside it, or in full-width letters, is found too; what is
//! found there is masked in the text as written, the invisible characters inside it included.
//! ASCII text (most tool output) has nothing to fold and is searched once.
//!
//! Values are matched ignoring ASCII case when they are short enough for the automaton (at most
//! [`LONG_PATTERN_BYTES`] bytes per form): hex digests, base32 codes and host names change case
//! on the way; a longer form is searched as written and in its lower- and upper-case forms.
//! Text that already holds a mask is left as it is: masking twice (the driver, then a gateway)
//! gives what masking once does, also for a value made of `*`.
//!
//! **Invariant:** a masker never shows its values (`Debug` prints how many there are). Its
//! search tables hold copies of the values' bytes that are not zeroed on drop; it lives as long
//! as the run it masks for, in memory only.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;

use std::sync::{Arc, OnceLock};

use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};
use memchr::memmem;
use unicode_normalization::UnicodeNormalization as _;

use crate::encodings::{LazyForm, printed_forms, split_forms};
use crate::secret::{MASK, SecretValue};

/// Values with fewer characters than this are masked only where they stand alone (see the
/// module docs).
pub const SHORT_SECRET_CHARS: usize = 4;

/// The shortest line of a multi-line secret that is masked on its own (in bytes, after trimming
/// surrounding whitespace). A shorter line is masked only where the whole secret appears.
pub const MIN_SECRET_LINE_BYTES: usize = 8;

/// Above this many bytes of patterns in the automaton the search is an NFA: building a DFA costs a
/// state per pattern byte times the alphabet, and the builder picks one for a few patterns however
/// long they are; an NFA builds in time linear in the pattern bytes and searches only somewhat
/// slower.
const DFA_PATTERN_BYTES: usize = 4 * 1024;

/// Forms (and lines) longer than this are searched one by one with [`memmem`] instead of in the
/// automaton (see the module docs).
pub const LONG_PATTERN_BYTES: usize = 256;

/// How many leading bytes of a long form are searched first: a text that does not hold them
/// cannot hold the form, so the form's own finder and period are built only for a text that
/// does (most forms of a value never occur; building all of them cost most of a masker's
/// construction for a large secret).
const PREFIX_BYTES: usize = 32;

/// One long form: a finder for its first bytes, and (made at the first text holding those) the
/// form itself when it is made lazily, its substring finder and its smallest period.
struct LongValue {
    prefix: memmem::Finder<'static>,
    /// The form's bytes: given, or made from `recipe` when first needed.
    form: OnceLock<zeroize::Zeroizing<Vec<u8>>>,
    /// How to make the form, for a form made lazily.
    recipe: Option<LazyForm>,
    search: OnceLock<(memmem::Finder<'static>, usize)>,
}

impl LongValue {
    fn new(form: &[u8]) -> Self {
        Self {
            prefix: memmem::Finder::new(&form[..form.len().min(PREFIX_BYTES)]).into_owned(),
            form: OnceLock::from(zeroize::Zeroizing::new(form.to_vec())),
            recipe: None,
            search: OnceLock::new(),
        }
    }

    /// A form made only once a text holds its first bytes.
    fn lazy(form: LazyForm) -> Self {
        Self {
            prefix: memmem::Finder::new(form.start.as_slice()).into_owned(),
            form: OnceLock::new(),
            recipe: Some(form),
            search: OnceLock::new(),
        }
    }

    fn form(&self) -> &[u8] {
        self.form.get_or_init(|| {
            let made = self.recipe.as_ref().and_then(LazyForm::make);
            zeroize::Zeroizing::new(made.map(String::into_bytes).unwrap_or_default())
        })
    }

    /// Pushes the span of every occurrence in `text`, overlapping ones included.
    ///
    /// Two overlapping occurrences lie a period apart, so after one at `a` the next can start no
    /// sooner than `a + period`; an occurrence at exactly `a + period` needs only the `period`
    /// bytes after this one compared. When that fails, the next occurrence lies more than
    /// `len - period` bytes on (two periods of a string sum to more than its length unless
    /// one divides the other), so the search resumes at least half the form's length further:
    /// every byte of text is examined a bounded number of times.
    fn spans(&self, text: &[u8], out: &mut Vec<Range<usize>>) {
        if self.prefix.find(text).is_none() {
            return;
        }
        let needle = self.form();
        if needle.is_empty() || text.len() < needle.len() {
            return;
        }
        let (finder, period) = self.search.get_or_init(|| {
            (
                memmem::Finder::new(needle).into_owned(),
                smallest_period(needle),
            )
        });
        let (len, period) = (needle.len(), *period);
        let mut from = 0;
        while from <= text.len() {
            let Some(found) = finder.find(&text[from..]) else {
                break;
            };
            let mut at = from + found;
            out.push(at..at + len);
            while period < len
                && text
                    .get(at + len..at + len + period)
                    .is_some_and(|next| next == &needle[len - period..])
            {
                at += period;
                out.push(at..at + len);
            }
            from = at + period.max(len - period + 1);
        }
    }
}

/// Where the forms of a long `raw` can be made lazily from: a prefix of at least
/// [`LAZY_PREFIX_CHARS`] characters that ends before an ASCII character. Every form is made
/// character by character (case mapping also looks one character ahead, base64 works in 3-byte
/// groups, and no ASCII character composes with the one before it or is reordered by Unicode
/// normalisation), so a form of that prefix, but for its last few bytes, begins the form of the
/// whole value. `None` for a value with no such place (it is then made in full).
fn lazy_prefix(raw: &str) -> Option<&str> {
    let (at, _) = raw
        .char_indices()
        .skip(LAZY_PREFIX_CHARS)
        .find(|(_, c)| c.is_ascii())?;
    Some(&raw[..at])
}

/// How many leading bytes of a form made lazily are searched before it is made: more than
/// [`PREFIX_BYTES`], since forms of one value often begin alike (its JSON form and the JSON
/// form of its NFD agree up to its first accented letter), and making a form that is not there
/// costs far more than searching a longer prefix. No lazily made form is shorter.
const LAZY_PREFIX_BYTES: usize = LONG_PATTERN_BYTES;

/// How many characters of a long value its lazily made forms' first bytes are made from (see
/// [`lazy_prefix`]): each gives at least a byte of a form, so usually `2 × LAZY_PREFIX_BYTES`
/// bytes or more (a value whose forms are shorter there is made in full).
const LAZY_PREFIX_CHARS: usize = 2 * LAZY_PREFIX_BYTES;

/// The smallest period of `bytes` (Knuth-Morris-Pratt's failure function of the whole string).
fn smallest_period(bytes: &[u8]) -> usize {
    let mut border = vec![0usize; bytes.len()];
    let mut k = 0;
    for i in 1..bytes.len() {
        while k > 0 && bytes[i] != bytes[k] {
            k = border[k - 1];
        }
        if bytes[i] == bytes[k] {
            k += 1;
        }
        border[i] = k;
    }
    bytes.len() - border.last().copied().unwrap_or(0)
}

/// A pattern as a key for finding repeated ones: equal when the texts are, hashed by length
/// and by the bytes at both ends only. A large secret has dozens of forms as long as itself;
/// hashing each whole cost more than making it, while the forms that agree in length and at
/// both ends are few and are then compared whole.
#[derive(PartialEq, Eq)]
struct Sampled<'a>(&'a str);

impl std::hash::Hash for Sampled<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        const ENDS: usize = 64;
        let bytes = self.0.as_bytes();
        state.write_usize(bytes.len());
        if bytes.len() <= 2 * ENDS {
            state.write(bytes);
        } else {
            state.write(&bytes[..ENDS]);
            state.write(&bytes[bytes.len() - ENDS..]);
        }
    }
}

/// How a masker finds what to mask.
#[derive(Clone)]
enum Search {
    /// No non-empty value: nothing to mask.
    Nothing,
    /// One automaton over the short forms, and a substring search per long one.
    Values(Option<Automaton>, Arc<[LongValue]>),
    /// The automaton could not be built (a value set beyond its size limits): every non-empty
    /// text is masked whole rather than shown unmasked.
    Everything,
}

/// A pattern to search, and whether it must stand alone to count.
type Pattern<'a> = (&'a str, bool);

/// The automaton over the short forms, and which of its patterns must stand alone to count.
#[derive(Clone)]
struct Automaton {
    search: AhoCorasick,
    /// By pattern id: whether the pattern is a form of a value shorter than
    /// [`SHORT_SECRET_CHARS`] (matched only where it stands alone).
    standalone: Arc<[bool]>,
}

/// A set of known secret values, ready to mask text in one pass.
#[derive(Clone)]
pub struct Masker {
    search: Search,
    count: usize,
    longest: usize,
    /// Some form is made of `*` only: matches inside an existing mask are then ignored.
    starry: bool,
}

impl Masker {
    /// The masker for `values`. Empty values are ignored; each value is searched in every form
    /// libraries print it in ([`printed_forms`]: percent-encoded, lower-cased, JSON- and
    /// `Debug`-escaped), and a multi-line value adds each of its lines of at least
    /// [`MIN_SECRET_LINE_BYTES`] bytes (trimmed) as a value of its own.
    pub fn new<'a>(values: impl IntoIterator<Item = &'a SecretValue>) -> Self {
        // Each value's forms, the value itself first: `count` (what `Debug` shows) counts the
        // values and their lines as given, not the encoded forms searched besides. A long
        // value's forms that cannot hold its line breaks are made only once a text holds their
        // first bytes (`lazy`): most of a large secret's forms never occur, and making them all
        // was most of the cost of a masker for one.
        let mut lazy: Vec<LongValue> = Vec::new();
        let forms: Vec<Vec<SecretValue>> = values
            .into_iter()
            .filter(|value| !value.is_empty())
            .map(|value| {
                let raw = value.expose();
                let Some(prefix) = (raw.len() > LONG_PATTERN_BYTES)
                    .then(|| lazy_prefix(raw))
                    .flatten()
                else {
                    return printed_forms(value);
                };
                let (now, later) = split_forms(value, prefix, LAZY_PREFIX_BYTES);
                lazy.extend(later.into_iter().map(LongValue::lazy));
                now
            })
            .collect();
        // Each pattern once, with whether every value it is a form of is short.
        let mut seen: HashMap<Sampled<'_>, usize> = HashMap::new();
        let mut patterns: Vec<Pattern<'_>> = Vec::new();
        let mut count = 0;
        for value_forms in &forms {
            let short = value_forms
                .first()
                .is_some_and(|raw| raw.expose().chars().count() < SHORT_SECRET_CHARS);
            for (index, value) in value_forms.iter().enumerate() {
                let value = value.expose();
                let lines = value
                    .contains(['\n', '\r'])
                    .then(|| value.split(['\n', '\r']).map(str::trim))
                    .into_iter()
                    .flatten()
                    .filter(|line| line.len() >= MIN_SECRET_LINE_BYTES);
                for pattern in std::iter::once(value).chain(lines) {
                    if pattern.is_empty() {
                        continue;
                    }
                    if let Some(&at) = seen.get(&Sampled(pattern)) {
                        patterns[at].1 &= short;
                        continue;
                    }
                    seen.insert(Sampled(pattern), patterns.len());
                    patterns.push((pattern, short));
                    if index == 0 {
                        count += 1;
                    }
                }
            }
        }
        let longest = patterns.iter().map(|(p, _)| p.len()).max().unwrap_or(0);
        let starry = patterns.iter().any(|(p, _)| p.bytes().all(|b| b == b'*'));
        let (long, short): (Vec<Pattern<'_>>, Vec<Pattern<'_>>) = patterns
            .iter()
            .partition(|(p, _)| p.len() > LONG_PATTERN_BYTES);
        let long: Arc<[LongValue]> = long
            .iter()
            .map(|(p, _)| LongValue::new(p.as_bytes()))
            .chain(lazy)
            .collect();
        let total: usize = short.iter().map(|(p, _)| p.len()).sum();
        let kind = (total > DFA_PATTERN_BYTES).then_some(AhoCorasickKind::ContiguousNFA);
        let search = if patterns.is_empty() && long.is_empty() {
            Search::Nothing
        } else if short.is_empty() {
            Search::Values(None, long)
        } else {
            AhoCorasick::builder()
                .match_kind(MatchKind::Standard)
                .ascii_case_insensitive(true)
                .kind(kind)
                .build(short.iter().map(|(p, _)| p))
                .map_or(Search::Everything, |search| {
                    let standalone = short.iter().map(|(_, alone)| *alone).collect();
                    Search::Values(Some(Automaton { search, standalone }), long)
                })
        };
        Self {
            search,
            count,
            longest,
            starry,
        }
    }

    /// Whether there is nothing to mask.
    pub fn is_empty(&self) -> bool {
        matches!(self.search, Search::Nothing)
    }

    /// The length in bytes of the longest value: a window of text that may cut a value must
    /// reach this far past the cut for the value to be found whole. (A long value's forms made
    /// lazily are made here, once: a caller asks this before streaming text past the masker.)
    pub fn longest(&self) -> usize {
        let lazy = match &self.search {
            Search::Values(_, long) => long.iter().map(|value| value.form().len()).max(),
            Search::Nothing | Search::Everything => None,
        };
        self.longest.max(lazy.unwrap_or(0))
    }

    /// `text` with every occurrence of every value replaced by [`MASK`].
    pub fn mask(&self, text: &str) -> String {
        self.mask_range(text, 0..text.len())
    }

    /// The masked form of the part of `text` in `keep` (byte offsets, moved inwards to character
    /// boundaries). Values are searched in the whole `text`, so a value that lies partly inside
    /// `keep` is found and shown as one [`MASK`]: give `text` at least [`Masker::longest`] bytes
    /// of context on each side of a cut.
    pub fn mask_range(&self, text: &str, keep: Range<usize>) -> String {
        let end = floor_char_boundary(text, keep.end.min(text.len()));
        let start = ceil_char_boundary(text, keep.start.min(end));
        match self.covered(text) {
            Some(covered) => render(text, &covered, start..end),
            None if start < end => MASK.to_owned(),
            None => String::new(),
        }
    }

    /// Each of `pieces` masked, also where a value runs from one piece into the next (a value
    /// split across two content blocks): each piece's part of such a value becomes a [`MASK`].
    pub fn mask_pieces(&self, pieces: &[&str]) -> Vec<String> {
        let joined = pieces.concat();
        let Some(across) = self.covered(&joined) else {
            return pieces
                .iter()
                .map(|piece| if piece.is_empty() { "" } else { MASK }.to_owned())
                .collect();
        };
        let mut out = Vec::with_capacity(pieces.len());
        let mut offset = 0;
        for piece in pieces {
            let range = offset..offset + piece.len();
            offset = range.end;
            // A piece's own occurrences (one standing alone in it may not in the joined
            // text), and its parts of those that cross its edges.
            let whole: Range<usize> = 0..piece.len();
            let mut spans = self.covered(piece).unwrap_or_else(|| Vec::from([whole]));
            spans.extend(
                across
                    .iter()
                    .filter(|span| span.start < range.start || span.end > range.end)
                    .filter(|span| span.start < range.end && span.end > range.start)
                    .map(|span| {
                        span.start.max(range.start) - range.start
                            ..span.end.min(range.end) - range.start
                    }),
            );
            let spans = merge(spans);
            out.push(render(piece, &spans, 0..piece.len()));
        }
        out
    }

    /// Where `text` holds a value, as sorted spans that do not overlap; `None` when everything
    /// is to be masked (no automaton could be built).
    fn covered(&self, text: &str) -> Option<Vec<Range<usize>>> {
        let (automaton, long) = match &self.search {
            Search::Nothing => return Some(Vec::new()),
            Search::Everything => return None,
            Search::Values(automaton, long) => (automaton, long),
        };
        let mut found: Vec<Range<usize>> = Vec::new();
        search(automaton.as_ref(), long, text, &mut found)?;
        if let Some(folded) = Folded::of(text) {
            let mut inner = Vec::new();
            search(automaton.as_ref(), long, &folded.text, &mut inner)?;
            found.extend(inner.into_iter().map(|span| folded.original(span)));
        }
        if self.starry {
            let masks = mask_runs(text);
            found.retain(|span| {
                !masks
                    .iter()
                    .any(|run| run.start <= span.start && span.end <= run.end)
            });
        }
        Some(merge(found))
    }
}

/// Adds where `text` holds a value to `found` (unsorted); `None` when the automaton fails.
fn search(
    automaton: Option<&Automaton>,
    long: &[LongValue],
    text: &str,
    found: &mut Vec<Range<usize>>,
) -> Option<()> {
    if let Some(automaton) = automaton {
        let matches = automaton.search.try_find_overlapping_iter(text).ok()?;
        found.extend(
            matches
                .filter(|m| {
                    !automaton
                        .standalone
                        .get(m.pattern().as_usize())
                        .copied()
                        .unwrap_or(false)
                        || stands_alone(text, &m.range())
                })
                .map(|m| m.range()),
        );
    }
    for value in long {
        value.spans(text.as_bytes(), found);
    }
    Some(())
}

/// Whether `c` is invisible where it is printed (default-ignorable characters a server may put
/// inside a value to break it up): the soft hyphen, the combining grapheme joiner, the Arabic
/// letter mark, the Hangul fillers, Khmer's inherent vowels, Mongolian's variation selectors,
/// zero-width spaces and joiners and the direction marks (U+200B–U+200F), bidirectional
/// embeddings, overrides and isolates, the word joiner and invisible operators
/// (U+2060–U+2064), variation selectors, the byte-order mark, tags. The injection scan's
/// `hidden-characters` rule uses this set too (tether-scan).
pub fn is_invisible(c: char) -> bool {
    matches!(u32::from(c),
        0x00AD | 0x034F | 0x061C | 0x115F..=0x1160 | 0x17B4..=0x17B5 | 0x180B..=0x180F
        | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x2069 | 0x3164
        | 0xFE00..=0xFE0F | 0xFEFF | 0xFFA0 | 0xE0000..=0xE007F | 0xE0100..=0xE01EF)
}

/// Text folded for a second search (the masker's, the secret scan's): invisible characters
/// left out, every other character in its NFKC form; and, for each byte of it, the span of the
/// character of the text it came from.
pub struct Folded {
    text: zeroize::Zeroizing<String>,
    from: Vec<Range<usize>>,
}

impl Folded {
    /// The folded text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// `text` folded, when folding changes it (never for ASCII text). Most non-ASCII text
    /// (accents, CJK, emoji) is NFKC already: the quick check (a table lookup a character)
    /// says so without folding anything.
    pub fn of(text: &str) -> Option<Self> {
        use unicode_normalization::{IsNormalized, is_nfkc_quick};
        if text.is_ascii() {
            return None;
        }
        // One pass over the characters that may fold: not ASCII, not the letters of Latin-1,
        // Cyrillic, CJK or Hangul syllables (all visible and NFKC). Leaving characters out can
        // only make the check unsure, never sure wrongly.
        let mut invisible = false;
        let others = text
            .chars()
            .filter(|c| !matches!(c, '\0'..='\u{7f}' | '\u{c0}'..='\u{ff}' | '\u{400}'..='\u{4ff}' | '\u{4e00}'..='\u{9fff}' | '\u{ac00}'..='\u{d7a3}'))
            .inspect(|c| invisible |= is_invisible(*c));
        if is_nfkc_quick(others) == IsNormalized::Yes && !invisible {
            return None;
        }
        let mut folded = zeroize::Zeroizing::new(String::with_capacity(text.len()));
        let mut from = Vec::with_capacity(text.len());
        for (at, c) in text.char_indices() {
            if !folds(c) {
                folded.push(c);
            } else if !is_invisible(c) {
                folded.extend(std::iter::once(c).nfkc());
            }
            from.resize(folded.len(), at..at + c.len_utf8());
        }
        // Combining marks make the quick check unsure, and fold to themselves.
        (*folded != text).then_some(Self { text: folded, from })
    }

    /// The span of the text that `span` of the folded text came from.
    pub fn original(&self, span: Range<usize>) -> Range<usize> {
        let start = self.from.get(span.start).map_or(0, |s| s.start);
        let end = span
            .end
            .checked_sub(1)
            .and_then(|last| self.from.get(last))
            .map_or(start, |s| s.end);
        start..end
    }
}

/// Whether folding changes `c`: an invisible character, or one NFKC writes otherwise.
fn folds(c: char) -> bool {
    if c.is_ascii() {
        return false;
    }
    let mut folded = std::iter::once(c).nfkc();
    is_invisible(c) || folded.next() != Some(c) || folded.next().is_some()
}

/// Whether `span` of `text` has no letter, digit or `_` right before or right after it.
fn stands_alone(text: &str, span: &Range<usize>) -> bool {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let before = text.get(..span.start).and_then(|t| t.chars().next_back());
    let after = text.get(span.end..).and_then(|t| t.chars().next());
    !before.is_some_and(word) && !after.is_some_and(word)
}

/// The runs of at least [`MASK`]'s length of `*` in `text` (masks already there).
fn mask_runs(text: &str) -> Vec<Range<usize>> {
    let mut runs = Vec::new();
    let bytes = text.as_bytes();
    let mut at = 0;
    while let Some(found) = memchr::memchr(b'*', &bytes[at..]) {
        let start = at + found;
        let end = bytes[start..]
            .iter()
            .position(|&b| b != b'*')
            .map_or(bytes.len(), |len| start + len);
        if end - start >= MASK.len() {
            runs.push(start..end);
        }
        at = end;
    }
    runs
}

/// `spans` sorted by start, overlapping ones joined.
fn merge(mut spans: Vec<Range<usize>>) -> Vec<Range<usize>> {
    spans.sort_unstable_by_key(|span| span.start);
    let mut covered: Vec<Range<usize>> = Vec::with_capacity(spans.len());
    for span in spans {
        match covered.last_mut() {
            Some(last) if last.end > span.start => last.end = last.end.max(span.end),
            _ => covered.push(span),
        }
    }
    covered
}

/// The part `start..end` of `text` with each of `covered` (sorted, disjoint) that reaches into
/// it replaced by one [`MASK`].
fn render(text: &str, covered: &[Range<usize>], keep: Range<usize>) -> String {
    let (start, end) = (keep.start, keep.end);
    let mut out = String::with_capacity(end - start);
    let mut at = start;
    let first = covered.partition_point(|span| span.end <= start);
    for span in &covered[first..] {
        if span.start >= end {
            break;
        }
        if at < span.start {
            out.push_str(&text[at..span.start]);
        }
        out.push_str(MASK);
        at = span.end;
    }
    if at < end {
        out.push_str(&text[at..end]);
    }
    out
}

impl Masker {
    /// A masker with no values: it masks nothing (usable in a `static`).
    pub const EMPTY: Self = Self {
        search: Search::Nothing,
        count: 0,
        longest: 0,
        starry: false,
    };
}

impl Default for Masker {
    /// A masker with no values: it masks nothing.
    fn default() -> Self {
        Self::EMPTY
    }
}

impl fmt::Debug for Masker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Masker")
            .field("values", &self.count)
            .finish_non_exhaustive()
    }
}

fn floor_char_boundary(text: &str, index: usize) -> usize {
    (0..=index)
        .rev()
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(0)
}

fn ceil_char_boundary(text: &str, index: usize) -> usize {
    (index..=text.len())
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(text.len())
}

/// Replaces every occurrence of each known secret value in `text` with [`MASK`].
///
/// Builds a [`Masker`] for this one call; a caller that masks many texts with the same values
/// builds the masker once.
pub fn mask_known_values<'a>(
    text: &str,
    values: impl IntoIterator<Item = &'a SecretValue>,
) -> String {
    Masker::new(values).mask(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn check(text: &str, values: &[&str], expect: &str) {
        let values: Vec<SecretValue> = values.iter().copied().map(SecretValue::from).collect();
        assert_eq!(mask_known_values(text, &values), expect, "masking {text:?}");
    }

    #[test]
    fn masks_longest_value_first() {
        let a = SecretValue::from("abc");
        let b = SecretValue::from("abcdef");
        let empty = SecretValue::from("");
        assert_eq!(
            mask_known_values("x abcdef y abc", [&a, &b, &empty]),
            "x ******** y ********"
        );
    }

    #[test]
    fn overlapping_and_adjacent_values() {
        // Overlapping occurrences are covered whole, whichever starts first.
        check("abcdef", &["bcdef", "abcd"], "********");
        check("xabcdefx", &["abcd", "cdef"], "x********x");
        // Adjacent occurrences stay two masks; the mask itself is never masked again.
        check("abcdabcd", &["abcd"], "****************");
        check("a * b", &["*"], "a ******** b");
        check("no secret here", &["zzz"], "no secret here");
        check("", &["zzz"], "");
        check("é-clé-é", &["clé"], "é-********-é");
    }

    /// Every start at which `text` holds `pattern`, as spans.
    fn naive(text: &[u8], pattern: &[u8]) -> Vec<Range<usize>> {
        (0..text.len())
            .filter(|&i| text[i..].starts_with(pattern))
            .map(|i| i..i + pattern.len())
            .collect()
    }

    proptest::proptest! {
        #[test]
        fn long_value_search_finds_every_overlapping_occurrence(
            // Shorter and longer than the prefix searched first.
            pattern in "[ab]{1,12}|[ab]{30,70}",
            text in "[ab]{0,300}",
        ) {
            let value = LongValue::new(pattern.as_bytes());
            let mut spans = Vec::new();
            value.spans(text.as_bytes(), &mut spans);
            proptest::prop_assert_eq!(spans, naive(text.as_bytes(), pattern.as_bytes()));
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(64))]
        /// A long value's forms made lazily (from a prefix) are found exactly as its forms made
        /// whole are: each of its printed forms, alone in a text, is masked. The characters are
        /// the ones whose forms depend on their neighbours or change length: combining marks
        /// and letters that compose, Hangul jamo, final sigma, controls, quotes, `\`.
        #[test]
        fn every_form_of_a_long_value_is_masked(
            value in "([a-z0-9 ]|[\"'\\\\<>&%$\n\t\u{1}]|[éΣσςİẞ\u{301}\u{323}\u{1100}\u{1161}\u{11a8}\u{2028}😀]){560,700}",
        ) {
            every_form_is_masked(&value)?;
        }

        /// The same for values whose base forms coincide (no quote, `<`, `>` or `&`: the
        /// shell-quoted and HTML forms are the value itself; no accent: NFC and NFD too).
        #[test]
        fn every_form_of_a_long_value_with_coinciding_forms_is_masked(
            value in "([a-z0-9 ]|[\"\\\\%$\n\t]|[ΣẞÉ😀]){560,700}",
        ) {
            every_form_is_masked(&value)?;
        }
    }

    fn every_form_is_masked(value: &str) -> Result<(), proptest::test_runner::TestCaseError> {
        let secret = SecretValue::from(value);
        let masker = Masker::new([&secret]);
        for form in crate::encodings::printed_forms(&secret) {
            let text = format!("<{}>", form.expose());
            let masked = masker.mask(&text);
            proptest::prop_assert!(
                !masked.contains(form.expose()) && masked.contains(MASK),
                "a form of {} bytes was not masked",
                form.expose().len()
            );
        }
        Ok(())
    }

    #[test]
    fn periods() {
        assert_eq!(smallest_period(b"abcabcab"), 3);
        assert_eq!(smallest_period(b"aaaa"), 1);
        assert_eq!(smallest_period(b"abcd"), 4);
        assert_eq!(smallest_period(b"abaab"), 3);
        assert_eq!(smallest_period(b"x"), 1);
    }

    #[test]
    fn long_values_are_masked_like_short_ones() {
        let long = "0123456789abcdef-\"-ü".repeat(40);
        assert!(long.len() > LONG_PATTERN_BYTES);
        let masker = Masker::new([&SecretValue::from(long.as_str())]);
        let text = format!("a {long} b {long}{long} c \"{}\"", long.to_uppercase());
        let masked = masker.mask(&text);
        // The value repeats itself: two copies side by side are overlapping occurrences, one
        // mask. Its upper-case form is a form of its own.
        assert_eq!(masked, format!("a {MASK} b {MASK} c \"{MASK}\""));
        // Its JSON form, and one overlapping a short value, are masked too.
        let json = serde_json::to_string(&long).expect("JSON");
        let both = Masker::new([
            &SecretValue::from(long.as_str()),
            &SecretValue::from("xx0123"),
        ]);
        assert_eq!(
            both.mask(&format!("<xx{}>", &json[1..json.len() - 1])),
            format!("<{MASK}>")
        );
        // A periodic value repeated past its own length is one mask.
        let periodic = "ab".repeat(200);
        let masker = Masker::new([&SecretValue::from(periodic.as_str())]);
        assert_eq!(
            masker.mask(&format!("[{}a]", "ab".repeat(1000))),
            format!("[{MASK}a]")
        );
    }

    #[test]
    fn multi_line_values_mask_each_long_line() {
        let pem =
            "-----BEGIN KEY-----\r\nMIIEvQIBADANBgkq\n  hkiG9w0BAQEF  \n}\nAg==\n-----END KEY-----";
        let masker = Masker::new([&SecretValue::from(pem)]);
        assert_eq!(masker.mask(&format!("k={pem}!")), "k=********!");
        assert_eq!(masker.mask("line MIIEvQIBADANBgkq"), "line ********");
        assert_eq!(masker.mask("    hkiG9w0BAQEF"), "    ********");
        assert_eq!(masker.mask("-----END KEY-----"), "********");
        // Lines shorter than the minimum are not values of their own.
        assert_eq!(masker.mask("} Ag=="), "} Ag==");
        assert_eq!(format!("{masker:?}"), "Masker { values: 5, .. }");
    }

    #[test]
    fn printed_forms_of_a_value_are_masked_too() {
        let masker = Masker::new([&SecretValue::from("Tok en\"<1>")]);
        for printed in [
            "url: http://h/p?key=Tok%20en%22%3C1%3E",
            "form: Tok+en%22%3C1%3E",
            "host: tok en\"<1>",
            "json: \"Tok en\\\"<1>\"",
        ] {
            let masked = masker.mask(printed);
            assert!(masked.contains(MASK), "{printed} → {masked}");
            assert!(
                !masked.to_lowercase().contains("tok"),
                "{printed} → {masked}"
            );
        }
        assert_eq!(format!("{masker:?}"), "Masker { values: 1, .. }");
    }

    #[test]
    fn a_range_masks_values_that_straddle_its_bounds() {
        let masker = Masker::new([&SecretValue::from("SECRET")]);
        let text = "aaSECRETbbSECRETcc";
        assert_eq!(masker.mask_range(text, 4..14), "********bb********");
        assert_eq!(masker.mask_range(text, 0..2), "aa");
        assert_eq!(masker.mask_range(text, 9..10), "b");
        assert_eq!(masker.mask_range("é", 1..2), "");
        assert!(Masker::new([&SecretValue::from("")]).is_empty());
        assert_eq!(masker.longest(), 6);
    }

    #[test]
    fn short_values_are_masked_only_where_they_stand_alone() {
        let masker = Masker::new([&SecretValue::from("x")]);
        for (text, expect) in [
            ("the server exited", "the server exited"),
            ("TOKEN=x", "TOKEN=********"),
            (
                "{\"type\":\"text\",\"text\":\"x\"}",
                "{\"type\":\"text\",\"text\":\"********\"}",
            ),
            ("x", "********"),
            ("X y", "******** y"),
            ("tool get_x", "tool get_x"),
            ("é x é", "é ******** é"),
        ] {
            assert_eq!(masker.mask(text), expect, "masking {text:?}");
        }
        // Four characters and more: masked inside words too.
        let masker = Masker::new([&SecretValue::from("xyzw")]);
        assert_eq!(masker.mask("axyzwb"), "a********b");
    }

    #[test]
    fn case_is_ignored_and_masking_twice_changes_nothing() {
        let masker = Masker::new([&SecretValue::from("deadBEEF00")]);
        assert_eq!(masker.mask("h=DEADbeef00."), "h=********.");
        for value in ["*", "**", "te*t"] {
            let masker = Masker::new([&SecretValue::from(value)]);
            let once = masker.mask(&format!("a {value} b"));
            assert_eq!(once, "a ******** b");
            assert_eq!(masker.mask(&once), once, "{value}");
        }
    }

    #[test]
    fn a_value_split_across_pieces_is_masked_in_each() {
        let masker = Masker::new([&SecretValue::from("split-SECRET"), &SecretValue::from("x")]);
        assert_eq!(
            masker.mask_pieces(&["a split-", "SECRET b", "c", "x"]),
            ["a ********", "******** b", "c", "********"]
        );
        assert_eq!(masker.mask_pieces(&["none", "here"]), ["none", "here"]);
    }

    /// The evasions a hostile server tries: a known value with invisible characters inside it, in
    /// full-width letters, in hex, percent-encoded byte by byte, in base64 text at each
    /// alignment, split across two pieces — each masked.
    #[test]
    fn invisible_full_width_and_encoded_forms_are_masked() {
        use base64::Engine as _;
        use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
        let secret = "tok-Sup3rS3cret~9f3a?";
        let masker = Masker::new([&SecretValue::from(secret)]);
        let spread = |between: &str| {
            let chars: Vec<String> = secret.chars().map(String::from).collect();
            chars.join(between)
        };
        let full_width: String = secret
            .chars()
            .map(|c| char::from_u32(u32::from(c) + 0xFEE0).unwrap_or(c))
            .collect();
        let hex: String = secret.bytes().map(|b| format!("{b:02x}")).collect();
        let percent: String = secret.bytes().map(|b| format!("%{b:02X}")).collect();
        let mut texts = vec![
            spread("\u{200B}"),
            spread("\u{2060}"),
            format!("{}\u{FEFF}{}", &secret[..6], &secret[6..]),
            format!("{}\u{202E}\u{2066}{}", &secret[..9], &secret[9..]),
            format!("{}\u{200D}{}", &full_width[..9], &full_width[9..]),
            full_width,
            hex.clone(),
            hex.to_uppercase(),
            percent.clone(),
            percent.to_lowercase(),
        ];
        for prefix in ["", "a", "ab"] {
            let payload = format!("{prefix}{secret} and more");
            texts.push(STANDARD.encode(&payload));
            texts.push(URL_SAFE_NO_PAD.encode(&payload));
        }
        for form in texts {
            let text = format!("before {form} after");
            let masked = masker.mask(&text);
            assert!(
                masked.starts_with("before ") && masked.contains(MASK),
                "{form:?}: {masked:?}"
            );
            assert!(
                !masked.to_lowercase().contains("s3cr"),
                "{form:?}: {masked:?}"
            );
            let folded: String = masked
                .chars()
                .filter(|c| !is_invisible(*c))
                .nfkc()
                .collect();
            assert!(
                !folded.contains("Sup3r") && !folded.contains(&hex[..12]),
                "{form:?}: {masked:?}"
            );
        }
        // Split across pieces, with an invisible character at the cut.
        assert_eq!(
            masker.mask_pieces(&["x tok-Sup3r\u{200B}", "S3cret~9f3a? y"]),
            ["x ********", "******** y"]
        );
        // Text around what was folded stays as written.
        assert_eq!(masker.mask("ｆｕｌｌ é \u{200B}"), "ｆｕｌｌ é \u{200B}");
    }
}
