//! The output budget of `tools/call` results: a result larger than the budget reaches the
//! client cut to fit, with a text block saying how much was cut and a `resource_link` to
//! `tether://results/ID`, whose `resources/read` gives back the whole result
//! (specs/gateway/TECH.md §3e).
//!
//! Size is counted as bytes, a token being [`BYTES_PER_TOKEN`] bytes: a text block's UTF-8
//! bytes, an image's or audio's base64 `data`, an embedded resource's `text` (UTF-8 bytes) or
//! `blob` (base64), any other block (a `resource_link`, one of a later protocol) as its JSON,
//! and `structuredContent` as its JSON. `_meta`, `isError` and the block's own keys are not
//! counted.
//!
//! Cutting keeps, in order: `structuredContent` if it fits whole, then the content blocks
//! while they fit whole; the first text block (or embedded text resource) that does not fit
//! is cut — at the last newline in the last quarter of what fits, else at the last character
//! boundary — and every later block is left out. An image, audio, blob or link that does not
//! fit is left out whole. [`NOTICE_RESERVE`] bytes of the budget are kept for the notice and
//! the link, so the cut answer, counted the same way, is within the budget.
//!
//! The result is cut after it was masked, and the whole kept is the masked one: both parts
//! hold masked text only.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Map, Value, json};

/// The bytes a token is counted as.
pub const BYTES_PER_TOKEN: usize = 4;

/// The default `--max-result-tokens`: Claude Code's own limit (`MAX_MCP_OUTPUT_TOKENS`).
pub const DEFAULT_MAX_RESULT_TOKENS: usize = 25_000;

/// The smallest budget accepted: the notice and the link alone need [`NOTICE_RESERVE`].
pub const MIN_MAX_RESULT_TOKENS: usize = 256;

/// The largest budget accepted (400 MB of text: no budget in practice).
pub const MAX_MAX_RESULT_TOKENS: usize = 100_000_000;

/// The default bound on what a gateway keeps of cut results, all sessions together.
pub const DEFAULT_STORED_RESULTS_BYTES: usize = 256 * 1024 * 1024;

/// The bytes of the budget kept for the notice and the link of a cut result.
pub const NOTICE_RESERVE: usize = 640;

/// Every URI under this scheme is the gateway's own: never routed to a server.
pub const GATEWAY_URI_SCHEME: &str = "tether://";

/// The URI of a kept result is this followed by its id.
pub const RESULTS_URI_PREFIX: &str = "tether://results/";

/// How long ids of dropped results are remembered (to say "dropped" rather than "unknown").
const DROPPED_REMEMBERED: usize = 4096;

/// The budget of one gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResultBudget {
    /// A `tools/call` result counted above this many tokens is cut.
    pub max_tokens: usize,
    /// The most bytes (counted as results are) kept for `resources/read`; the oldest results
    /// are dropped first.
    pub stored_bytes: usize,
}

impl Default for ResultBudget {
    fn default() -> Self {
        Self {
            max_tokens: DEFAULT_MAX_RESULT_TOKENS,
            stored_bytes: DEFAULT_STORED_RESULTS_BYTES,
        }
    }
}

impl ResultBudget {
    /// The budget in bytes.
    pub fn max_bytes(&self) -> usize {
        self.max_tokens.saturating_mul(BYTES_PER_TOKEN)
    }
}

/// Checks a `--max-result-tokens` value: one line saying what is accepted otherwise.
pub fn parse_max_result_tokens(text: &str) -> Result<usize, String> {
    let range = format!(
        "a whole number of tokens from {MIN_MAX_RESULT_TOKENS} to {MAX_MAX_RESULT_TOKENS} ({BYTES_PER_TOKEN} bytes count as a token)"
    );
    match text.trim().parse::<usize>() {
        Ok(n) if (MIN_MAX_RESULT_TOKENS..=MAX_MAX_RESULT_TOKENS).contains(&n) => Ok(n),
        Ok(n) => Err(format!("{n} is out of range: give {range}")),
        Err(_) => Err(format!("'{text}' is not a number: give {range}")),
    }
}

/// Counts bytes written, writing nothing.
struct Counter(usize);

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The length of `value` as compact JSON, without building the text.
pub(crate) fn json_len(value: &impl serde::Serialize) -> usize {
    let mut counter = Counter(0);
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

fn str_len(value: Option<&Value>) -> usize {
    value.and_then(Value::as_str).map_or(0, str::len)
}

/// The counted bytes of one content block (see the module docs).
pub fn block_bytes(block: &Value) -> usize {
    match block.get("type").and_then(Value::as_str) {
        Some("text") => str_len(block.get("text")),
        Some("image" | "audio") => str_len(block.get("data")),
        Some("resource") => {
            let resource = block.get("resource");
            let text = resource.and_then(|r| r.get("text"));
            let blob = resource.and_then(|r| r.get("blob"));
            str_len(text) + str_len(blob)
        }
        _ => json_len(block),
    }
}

/// The counted bytes of a `tools/call` result (see the module docs).
pub fn result_bytes(result: &Value) -> usize {
    let content: usize = content_of(result).iter().map(block_bytes).sum();
    let structured = result.get("structuredContent").map_or(0, json_len);
    content + structured
}

fn content_of(result: &Value) -> &[Value] {
    result
        .get("content")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Where `text` is cut to keep at most `limit` bytes: after the last newline in the last
/// quarter of what fits, else at the last character boundary at or before `limit`.
pub fn cut_point(text: &str, limit: usize) -> usize {
    if text.len() <= limit {
        return text.len();
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let floor = end - end / 4;
    match text.as_bytes()[floor..end]
        .iter()
        .rposition(|&b| b == b'\n')
    {
        Some(at) => floor + at + 1,
        None => end,
    }
}

/// What cutting kept and left out, for the notice.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Kept {
    bytes: usize,
    blocks_left_out: usize,
    structured_left_out: bool,
}

/// `result`'s first part within `allowance` bytes (see the module docs), without the notice.
fn first_part(result: &Value, allowance: usize) -> (Value, Kept) {
    let mut kept = Kept::default();
    let mut left = allowance;
    let mut out = Map::new();
    for (key, value) in result.as_object().into_iter().flatten() {
        if key != "content" && key != "structuredContent" {
            out.insert(key.clone(), value.clone());
        }
    }
    if let Some(structured) = result.get("structuredContent") {
        let size = json_len(structured);
        if size <= left {
            left -= size;
            kept.bytes += size;
            out.insert("structuredContent".to_owned(), structured.clone());
        } else {
            kept.structured_left_out = true;
        }
    }
    let content = content_of(result);
    let mut blocks = Vec::new();
    for (index, block) in content.iter().enumerate() {
        let size = block_bytes(block);
        if size <= left {
            left -= size;
            kept.bytes += size;
            blocks.push(block.clone());
            continue;
        }
        let path: &[&str] = match block.get("type").and_then(Value::as_str) {
            Some("text") => &["text"],
            Some("resource") => &["resource", "text"],
            _ => &[],
        };
        let text = path
            .iter()
            .try_fold(block, |value, key| value.get(key))
            .and_then(Value::as_str)
            .filter(|_| !path.is_empty());
        let mut cut_blocks = 0;
        if let Some(text) = text {
            let end = cut_point(text, left);
            if end > 0 {
                kept.bytes += end;
                blocks.push(replaced(block, path, &text[..end]));
                cut_blocks = 1;
            }
        }
        kept.blocks_left_out = content.len() - index - cut_blocks;
        break;
    }
    out.insert("content".to_owned(), Value::Array(blocks));
    (Value::Object(out), kept)
}

/// A copy of `value` with the string at `path` replaced by `text`, without copying the string
/// it replaces (a cut block's text may be megabytes).
fn replaced(value: &Value, path: &[&str], text: &str) -> Value {
    match (value, path) {
        (Value::Object(map), [key, rest @ ..]) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = match (k == key, rest.is_empty()) {
                        (false, _) => v.clone(),
                        (true, true) => Value::String(text.to_owned()),
                        (true, false) => replaced(v, rest, text),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        _ => Value::String(text.to_owned()),
    }
}

/// Why the whole of a cut result is not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NotKept {
    /// Larger than everything the gateway keeps (this many bytes).
    TooLarge(usize),
    /// No random id could be made for it.
    NoRandomness,
}

/// The answer to a result over budget: its first part, the notice, and the link to the whole
/// (`id`, when it was kept).
fn cut_answer(
    result: &Value,
    budget: &ResultBudget,
    total: usize,
    kept: Result<&str, NotKept>,
) -> Value {
    let allowance = budget.max_bytes().saturating_sub(NOTICE_RESERVE);
    let (mut answer, first) = first_part(result, allowance);
    let cut_bytes = total - first.bytes;
    let mut notice = format!(
        "[tether: this result was cut to fit the gateway's budget of {} tokens (--max-result-tokens; {BYTES_PER_TOKEN} bytes count as a token): {} of {total} bytes kept, {cut_bytes} bytes (about {} tokens) cut",
        budget.max_tokens,
        first.bytes,
        cut_bytes.div_ceil(BYTES_PER_TOKEN),
    );
    if first.blocks_left_out > 0 {
        notice.push_str(&format!(
            ", {} content block(s) left out",
            first.blocks_left_out
        ));
    }
    if first.structured_left_out {
        notice.push_str(", structuredContent left out");
    }
    let link = match kept {
        Ok(id) => {
            let uri = format!("{RESULTS_URI_PREFIX}{id}");
            notice.push_str(&format!(
                ". The whole result: resources/read {uri} (kept for this session).]"
            ));
            Some(json!({
                "type": "resource_link",
                "uri": uri,
                "name": format!("result-{id}"),
                "description": "The whole tool result the gateway cut",
                "mimeType": "application/json",
            }))
        }
        Err(NotKept::TooLarge(limit)) => {
            notice.push_str(&format!(
                ". The whole result is larger than the {} MiB the gateway keeps, so it was not kept.]",
                limit / (1024 * 1024)
            ));
            None
        }
        Err(NotKept::NoRandomness) => {
            notice.push_str(". The whole result was not kept (no random id could be made).]");
            None
        }
    };
    if let Some(blocks) = answer.get_mut("content").and_then(Value::as_array_mut) {
        blocks.push(json!({"type": "text", "text": notice}));
        blocks.extend(link);
    }
    answer
}

/// One result kept for `resources/read`.
struct Stored {
    /// The client connection that may read it.
    owner: Arc<str>,
    result: Arc<Value>,
    bytes: usize,
}

#[derive(Default)]
struct Inner {
    results: HashMap<String, Stored>,
    /// Ids, oldest first.
    order: VecDeque<String>,
    bytes: usize,
    /// Ids dropped to stay within the bound, with their owner; the oldest forgotten first.
    dropped: VecDeque<(String, Arc<str>)>,
}

/// Why a `tether://results/ID` read fails ([`ResultStore::read`]); the gateway answers
/// `-32002` (resource not found) with a message saying which.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadFailure {
    /// No such result in this session (never made, another session's, or the session's
    /// results were forgotten long ago).
    Unknown,
    /// Dropped to keep the stored results within their bound.
    Dropped,
}

/// The results a gateway keeps for `resources/read`, for all its client connections, within
/// one bound in bytes; each readable only from the connection it was made for.
pub struct ResultStore {
    inner: Mutex<Inner>,
    limit: usize,
}

impl std::fmt::Debug for ResultStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResultStore")
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

impl ResultStore {
    /// An empty store keeping at most `limit` bytes (counted as results are).
    pub fn new(limit: usize) -> Self {
        Self {
            inner: Mutex::default(),
            limit,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `result` (`bytes` counted, at most the limit) for `owner`; drops the oldest
    /// results to make room.
    fn keep(&self, owner: &Arc<str>, id: String, result: Value, bytes: usize) {
        if bytes > self.limit {
            return;
        }
        let mut inner = self.lock();
        while inner.bytes + bytes > self.limit {
            let Some(oldest) = inner.order.pop_front() else {
                break;
            };
            if let Some(gone) = inner.results.remove(&oldest) {
                inner.bytes -= gone.bytes;
                tracing::debug!(bytes = gone.bytes, "dropped a kept result to make room");
                inner.dropped.push_back((oldest, gone.owner));
                if inner.dropped.len() > DROPPED_REMEMBERED {
                    inner.dropped.pop_front();
                }
            }
        }
        inner.bytes += bytes;
        inner.order.push_back(id.clone());
        inner.results.insert(
            id,
            Stored {
                owner: Arc::clone(owner),
                result: Arc::new(result),
                bytes,
            },
        );
    }

    /// The whole result `id`, if `owner` may read it.
    pub fn read(&self, owner: &str, id: &str) -> Result<Arc<Value>, ReadFailure> {
        let inner = self.lock();
        match inner.results.get(id) {
            Some(stored) if &*stored.owner == owner => Ok(Arc::clone(&stored.result)),
            Some(_) => Err(ReadFailure::Unknown),
            None if inner
                .dropped
                .iter()
                .any(|(gone, by)| gone == id && &**by == owner) =>
            {
                Err(ReadFailure::Dropped)
            }
            None => Err(ReadFailure::Unknown),
        }
    }

    /// Forgets every result of `owner` (its connection closed).
    pub fn forget(&self, owner: &str) {
        let mut inner = self.lock();
        let Inner {
            results,
            order,
            bytes,
            dropped,
        } = &mut *inner;
        results.retain(|_, stored| {
            let mine = &*stored.owner == owner;
            if mine {
                *bytes -= stored.bytes;
            }
            !mine
        });
        order.retain(|id| results.contains_key(id));
        dropped.retain(|(_, by)| &**by != owner);
    }

    /// The bytes kept now.
    #[cfg(test)]
    fn kept_bytes(&self) -> usize {
        self.lock().bytes
    }
}

/// Applies `budget` to a masked `tools/call` result: the result itself when it fits, else
/// the cut answer, the whole having been kept in `store` for `owner` (a client connection's
/// id).
pub fn apply(budget: &ResultBudget, store: &ResultStore, owner: &Arc<str>, result: Value) -> Value {
    let total = result_bytes(&result);
    if total <= budget.max_bytes() {
        return result;
    }
    if total > store.limit {
        return cut_answer(&result, budget, total, Err(NotKept::TooLarge(store.limit)));
    }
    let id = match tether_http::token::random_hex(16) {
        Ok(id) => id,
        Err(error) => {
            tracing::warn!("a cut result is not kept: {error}");
            return cut_answer(&result, budget, total, Err(NotKept::NoRandomness));
        }
    };
    // The answer is made before the whole is moved into the store.
    let answer = cut_answer(&result, budget, total, Ok(&id));
    store.keep(owner, id, result, total);
    answer
}

/// The contents `resources/read` of a kept result answers with: each content block in order —
/// text as text, images and audio as blobs (their base64 and MIME type unchanged), embedded
/// resources as they are, any other block as its JSON — then `structuredContent` as JSON.
pub(crate) fn contents_of(uri: &str, result: &Value) -> Vec<Value> {
    let mut contents: Vec<Value> = content_of(result)
        .iter()
        .map(|block| match block.get("type").and_then(Value::as_str) {
            Some("text") => json!({"uri": uri, "mimeType": "text/plain", "text": block.get("text").cloned().unwrap_or(Value::Null)}),
            Some("image" | "audio") => json!({
                "uri": uri,
                "mimeType": block.get("mimeType").cloned().unwrap_or(Value::Null),
                "blob": block.get("data").cloned().unwrap_or(Value::Null),
            }),
            Some("resource") if block.get("resource").is_some_and(Value::is_object) => {
                block.get("resource").cloned().unwrap_or(Value::Null)
            }
            _ => json!({"uri": uri, "mimeType": "application/json", "text": block.to_string()}),
        })
        .collect();
    if let Some(structured) = result.get("structuredContent") {
        contents.push(
            json!({"uri": uri, "mimeType": "application/json", "text": structured.to_string()}),
        );
    }
    contents
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    fn budget(tokens: usize) -> ResultBudget {
        ResultBudget {
            max_tokens: tokens,
            stored_bytes: 1 << 20,
        }
    }

    fn text(text: &str) -> Value {
        json!({"type": "text", "text": text})
    }

    fn owner(name: &str) -> Arc<str> {
        Arc::from(name)
    }

    #[test]
    fn sizes_count_text_base64_and_structured_json() {
        let result = json!({
            "content": [
                text("héllo"),
                {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "x:", "blob": "QUJD"}},
                {"type": "resource", "resource": {"uri": "x:", "text": "abc"}},
            ],
            "structuredContent": {"a": 1},
            "_meta": {"big": "not counted"},
            "isError": false
        });
        assert_eq!(result_bytes(&result), 6 + 4 + 4 + 3 + 7);
    }

    #[test]
    fn a_cut_prefers_a_newline_in_the_last_quarter_and_never_splits_a_character() {
        assert_eq!(cut_point("abcdef\nghij", 8), 7);
        // The newline is too early (not in the last quarter): cut at the limit.
        assert_eq!(cut_point("a\nbcdefghijkl", 12), 12);
        // "é" is two bytes: byte 2 is inside it.
        assert_eq!(cut_point("aéb", 2), 1);
        assert_eq!(cut_point("日本語", 4), 3);
        assert_eq!(cut_point("short", 10), 5);
        assert_eq!(cut_point("日", 2), 0);
    }

    #[test]
    fn a_small_result_goes_out_unchanged() {
        let store = ResultStore::new(1 << 20);
        let result = json!({"content": [text("small")]});
        let out = apply(&budget(256), &store, &owner("a"), result.clone());
        assert_eq!(out, result);
        assert_eq!(store.kept_bytes(), 0);
    }

    #[test]
    fn a_large_result_is_cut_within_budget_and_kept_whole() {
        let store = ResultStore::new(1 << 20);
        let line = "0123456789 é 0123456789 0123456789 0123456789 0123456789\n";
        let big = line.repeat(200);
        let result = json!({
            "content": [text("first"), text(&big), text("after"), {"type": "image", "data": "AAAA", "mimeType": "image/png"}],
            "isError": true,
            "_meta": {"k": 1}
        });
        let tokens = 1024;
        let me = owner("me");
        let answer = apply(&budget(tokens), &store, &me, result.clone());
        assert!(
            result_bytes(&answer) <= tokens * BYTES_PER_TOKEN,
            "{answer}"
        );
        assert_eq!(answer["isError"], json!(true));
        assert_eq!(answer["_meta"], json!({"k": 1}));
        let blocks = answer["content"].as_array().expect("content");
        assert_eq!(blocks[0], text("first"));
        let kept = blocks[1]["text"].as_str().expect("cut text");
        assert!(kept.ends_with('\n') && big.starts_with(kept), "{kept:?}");
        let notice = blocks[2]["text"].as_str().expect("notice");
        assert!(notice.contains("2 content block(s) left out"), "{notice}");
        assert!(notice.contains(&format!("of {} bytes kept", result_bytes(&result))));
        let uri = blocks[3]["uri"].as_str().expect("link");
        assert_eq!(blocks[3]["type"], json!("resource_link"));
        assert!(notice.contains(uri), "{notice}");
        let id = uri.strip_prefix(RESULTS_URI_PREFIX).expect("a results URI");
        assert_eq!(id.len(), 32);
        assert_eq!(*store.read("me", id).expect("kept"), result);
        // Another connection cannot tell it from an unknown id.
        assert_eq!(store.read("other", id), Err(ReadFailure::Unknown));
        assert_eq!(store.read("me", "nope"), Err(ReadFailure::Unknown));
        store.forget("me");
        assert_eq!(store.read("me", id), Err(ReadFailure::Unknown));
        assert_eq!(store.kept_bytes(), 0);
    }

    #[test]
    fn structured_content_is_kept_when_it_fits_and_left_out_when_it_does_not() {
        let store = ResultStore::new(1 << 20);
        let long = "x".repeat(5000);
        let fits = json!({"content": [text(&long)], "structuredContent": {"n": 1}});
        let answer = apply(&budget(256), &store, &owner("a"), fits);
        assert_eq!(answer["structuredContent"], json!({"n": 1}));
        let over = json!({"content": [text("short")], "structuredContent": {"s": long}});
        let answer = apply(&budget(256), &store, &owner("a"), over);
        assert_eq!(answer.get("structuredContent"), None);
        assert_eq!(answer["content"][0], text("short"));
        let notice = answer["content"][1]["text"].as_str().expect("notice");
        assert!(notice.contains("structuredContent left out"), "{notice}");
    }

    #[test]
    fn a_blob_that_does_not_fit_is_left_out_whole_and_read_back_unchanged() {
        let store = ResultStore::new(1 << 20);
        let blob = "QUJD".repeat(1000);
        let result = json!({"content": [
            text("caption"),
            {"type": "resource", "resource": {"uri": "file:///b", "mimeType": "application/octet-stream", "blob": blob}},
        ]});
        let answer = apply(&budget(256), &store, &owner("a"), result.clone());
        let blocks = answer["content"].as_array().expect("content");
        assert_eq!(blocks.len(), 3, "{answer}");
        assert_eq!(blocks[0], text("caption"));
        let uri = blocks[2]["uri"].as_str().expect("link");
        let id = uri.strip_prefix(RESULTS_URI_PREFIX).expect("results URI");
        let whole = store.read("a", id).expect("kept");
        let contents = contents_of(uri, &whole);
        assert_eq!(
            contents,
            [
                json!({"uri": uri, "mimeType": "text/plain", "text": "caption"}),
                json!({"uri": "file:///b", "mimeType": "application/octet-stream", "blob": blob}),
            ]
        );
    }

    #[test]
    fn the_oldest_results_are_dropped_first_and_a_read_says_so() {
        let store = ResultStore::new(10_000);
        let me = owner("me");
        let big = |c: &str| json!({"content": [text(&c.repeat(4000))]});
        let id = |answer: &Value| {
            let blocks = answer["content"].as_array().expect("content");
            let uri = blocks.last().expect("link")["uri"].as_str().expect("uri");
            uri.strip_prefix(RESULTS_URI_PREFIX).expect("id").to_owned()
        };
        let first = id(&apply(&budget(256), &store, &me, big("a")));
        let second = id(&apply(&budget(256), &store, &me, big("b")));
        let third = id(&apply(&budget(256), &store, &me, big("c")));
        assert_eq!(store.read("me", &first), Err(ReadFailure::Dropped));
        assert!(store.read("me", &second).is_ok());
        assert!(store.read("me", &third).is_ok());
        assert_eq!(store.kept_bytes(), 8000);
        // Another connection is told "unknown" for a dropped id too.
        assert_eq!(store.read("other", &first), Err(ReadFailure::Unknown));
    }

    #[test]
    fn a_result_larger_than_the_store_is_cut_without_a_link() {
        let store = ResultStore::new(1000);
        let result = json!({"content": [text(&"z".repeat(5000))]});
        let answer = apply(&budget(256), &store, &owner("a"), result);
        let blocks = answer["content"].as_array().expect("content");
        assert_eq!(blocks.len(), 2, "{answer}");
        let notice = blocks[1]["text"].as_str().expect("notice");
        assert!(notice.contains("so it was not kept"), "{notice}");
        assert!(!notice.contains(RESULTS_URI_PREFIX), "{notice}");
        assert_eq!(store.kept_bytes(), 0);
    }

    #[test]
    fn the_notice_and_link_fit_their_reserve_at_the_largest_numbers() {
        let store = ResultStore::new(usize::MAX);
        let huge = json!({"content": [
            text(&"y".repeat(9_999_999)), text("a"), text("b")
        ], "structuredContent": {"s": "w".repeat(1_000_000)}});
        let tokens = MIN_MAX_RESULT_TOKENS;
        let answer = apply(&budget(tokens), &store, &owner("a"), huge);
        let blocks = answer["content"].as_array().expect("content");
        let overhead: usize = blocks[blocks.len() - 2..].iter().map(block_bytes).sum();
        assert!(overhead <= NOTICE_RESERVE, "{overhead}: {answer}");
        assert!(result_bytes(&answer) <= tokens * BYTES_PER_TOKEN);
    }

    #[test]
    fn budgets_out_of_range_are_refused_with_the_range() {
        assert_eq!(parse_max_result_tokens("25000"), Ok(25_000));
        for bad in ["0", "255", "100000001", "-1", "lots", ""] {
            let error = parse_max_result_tokens(bad).expect_err(bad);
            assert!(error.contains("from 256 to 100000000"), "{error}");
        }
    }
}
