//! Secrets by their shape (`--secret-scan`): the gateway looks for well-known credential
//! formats in tool arguments before they reach a server and in results before they reach the
//! client — values it never injected, which the masking of the run's own secrets cannot know
//! (a token a tool reads from a file, a key a model pastes into an argument).
//!
//! The rules are ours, written from the issuers' documented formats (no rule set is copied):
//!
//! | rule | shape |
//! |---|---|
//! | `aws-access-key-id` | `AKIA`/`ASIA`/`ABIA`/`ACCA` + 16 upper-case letters or digits |
//! | `github-token` | `ghp_`/`gho_`/`ghu_`/`ghs_`/`ghr_` + 36+ alphanumerics; `github_pat_` + 82 |
//! | `gitlab-token` | `glpat-` + 20+ of `[A-Za-z0-9_-]` |
//! | `slack-token` | `xoxb-`/`xoxa-`/`xoxp-`/`xoxo-`/`xoxs-`/`xoxr-` + 10+ of `[A-Za-z0-9-]` |
//! | `stripe-key` | `sk_live_`/`sk_test_`/`rk_live_`/`rk_test_` + 16+ alphanumerics |
//! | `openai-key` | `sk-` (optionally `proj-`, `svcacct-`, `admin-`) … `T3BlbkFJ` … (OpenAI's marker) |
//! | `anthropic-key` | `sk-ant-` + 32+ of `[A-Za-z0-9_-]` |
//! | `private-key` | a PEM `-----BEGIN … PRIVATE KEY-----` block through its `END` line |
//! | `jwt` | `eyJ…` `.` `eyJ…` `.` signature, each part 8+ base64url characters |
//! | `secret-assignment` | `api_key`/`apikey`/`secret`/`token`/`password`/`passwd`/`access_key`/`client_secret` then `=` or `:` and a value of 16+ characters whose Shannon entropy is at least 3.5 bits a character |
//!
//! Text that is not all ASCII is also matched folded (invisible characters removed, NFKC:
//! `tether_secret::Folded`), so a key with a zero-width space inside or in full-width letters
//! is found and masked as written.
//!
//! A finding is reported by its rule's name only, never its text. What it does depends on the
//! direction's [`SecretScan`]: `warn` logs it and records it in the audit line; `mask`
//! replaces each match with `[secret: RULE]` too; `block` refuses the call (arguments) or
//! replaces the result with a tool error (results).

use std::sync::LazyLock;

use regex::{Regex, RegexSet};
use serde_json::Value;

/// What the scan does with a finding in one direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretScan {
    /// No scan.
    Off,
    /// Log it (by rule name) and record it in the audit line; pass the value on.
    Warn,
    /// Also replace each match with `[secret: RULE]`.
    Mask,
    /// Refuse the call (arguments), or answer with a tool error instead of the result.
    Block,
}

impl std::str::FromStr for SecretScan {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "off" => Ok(Self::Off),
            "warn" => Ok(Self::Warn),
            "mask" => Ok(Self::Mask),
            "block" => Ok(Self::Block),
            other => Err(format!(
                "'{other}' is not a secret scan mode: use off, warn, mask or block"
            )),
        }
    }
}

/// The scan of both directions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SecretScanPolicy {
    /// Tool arguments, before they reach a server (default `warn`).
    pub arguments: SecretScan,
    /// Tool results, before they reach the client (default `mask`).
    pub results: SecretScan,
}

impl Default for SecretScanPolicy {
    fn default() -> Self {
        Self {
            arguments: SecretScan::Warn,
            results: SecretScan::Mask,
        }
    }
}

impl SecretScanPolicy {
    /// The same mode both ways (`--secret-scan MODE`).
    pub fn both(mode: SecretScan) -> Self {
        Self {
            arguments: mode,
            results: mode,
        }
    }

    /// `flag`'s mode both ways, else the setting `file` names (`secret_scan` in config.toml;
    /// its parse error), else the default.
    pub fn chosen(flag: Option<SecretScan>, file: Option<&str>) -> Result<Self, String> {
        match (flag, file) {
            (Some(mode), _) => Ok(Self::both(mode)),
            (None, Some(text)) => text.parse().map(Self::both),
            (None, None) => Ok(Self::default()),
        }
    }
}

/// Rule names in the order of [`RULES`].
const NAMES: [&str; 10] = [
    "aws-access-key-id",
    "github-token",
    "gitlab-token",
    "slack-token",
    "stripe-key",
    "openai-key",
    "anthropic-key",
    "private-key",
    "jwt",
    "secret-assignment",
];

/// The patterns, in the order of [`NAMES`]. `secret-assignment`'s value is its group 1.
const PATTERNS: [&str; 10] = [
    r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b",
    r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{82})\b",
    r"\bglpat-[A-Za-z0-9_\-]{20,}",
    r"\bxox[abposr]-[A-Za-z0-9\-]{10,}",
    r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}\b",
    r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{8,}T3BlbkFJ[A-Za-z0-9_\-]{8,}",
    r"\bsk-ant-[A-Za-z0-9_\-]{32,}",
    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----",
    r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",
    r#"(?i)\b(?:api[_\-]?key|client[_\-]?secret|secret|token|password|passwd|access[_\-]?key)["']?\s*[:=]\s*["']?([A-Za-z0-9/+_\-.=]{16,})"#,
];

/// The index of `secret-assignment`, whose match is checked for entropy.
const ASSIGNMENT: usize = 9;

/// Bits a character an assigned value needs to count as a secret (a word or a repeated
/// character has fewer; a random key about 4.5–6).
const MIN_ENTROPY: f64 = 3.5;

struct Rules {
    any: RegexSet,
    each: Vec<Regex>,
}

static RULES: LazyLock<Rules> = LazyLock::new(|| Rules {
    // The patterns are constants tested below: they compile.
    any: RegexSet::new(PATTERNS).unwrap_or_else(|_| RegexSet::empty()),
    each: PATTERNS.iter().filter_map(|p| Regex::new(p).ok()).collect(),
});

/// Scans every string of `value` (and every object key) and, with [`SecretScan::Mask`],
/// replaces each match in the strings with `[secret: RULE]`. Returns the rules found, once
/// each, in rule order.
pub fn scan(value: &mut Value, mode: SecretScan) -> Vec<&'static str> {
    let mut found = [false; NAMES.len()];
    if mode != SecretScan::Off {
        walk(value, mode == SecretScan::Mask, &mut found);
    }
    NAMES
        .iter()
        .zip(found)
        .filter_map(|(name, hit)| hit.then_some(*name))
        .collect()
}

fn walk(value: &mut Value, mask: bool, found: &mut [bool; NAMES.len()]) {
    match value {
        Value::String(text) => {
            if let Some(masked) = scan_text(text, mask, found) {
                *text = masked;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| walk(item, mask, found)),
        Value::Object(map) => {
            for (key, item) in map.iter_mut() {
                // A key is not rewritten (the server's schema names it); it is reported.
                scan_text(key, false, found);
                walk(item, mask, found);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// The rules that match `text` (marked in `found`), and with `mask` the text with each match
/// replaced, if any was.
fn scan_text(text: &str, mask: bool, found: &mut [bool; NAMES.len()]) -> Option<String> {
    // Spans to replace: (start, end, rule).
    let mut spans = matches(text, found);
    if let Some(folded) = tether_secret::Folded::of(text) {
        spans.extend(
            matches(folded.text(), found)
                .into_iter()
                .map(|(start, end, rule)| {
                    let span = folded.original(start..end);
                    (span.start, span.end, rule)
                }),
        );
    }
    if !mask || spans.is_empty() {
        return None;
    }
    spans.sort_unstable();
    let mut masked = String::with_capacity(text.len());
    let mut at = 0;
    for (start, end, rule) in spans {
        if start < at {
            // Inside a span replaced already (a JWT inside an assignment, or the same match
            // found in the folded text).
            at = at.max(end);
            continue;
        }
        masked.push_str(&text[at..start]);
        masked.push_str("[secret: ");
        masked.push_str(NAMES[rule]);
        masked.push(']');
        at = end;
    }
    masked.push_str(&text[at..]);
    Some(masked)
}

/// Where the rules match `text`, as (start, end, rule), each rule marked in `found`.
fn matches(text: &str, found: &mut [bool; NAMES.len()]) -> Vec<(usize, usize, usize)> {
    let rules = &*RULES;
    let hits = rules.any.matches(text);
    let mut spans: Vec<(usize, usize, usize)> = Vec::new();
    for rule in hits.iter() {
        let Some(regex) = rules.each.get(rule) else {
            continue;
        };
        for captures in regex.captures_iter(text) {
            let span = if rule == ASSIGNMENT {
                match captures.get(1) {
                    Some(value) if entropy(value.as_str()) >= MIN_ENTROPY => value.range(),
                    _ => continue,
                }
            } else {
                match captures.get(0) {
                    Some(whole) => whole.range(),
                    None => continue,
                }
            };
            found[rule] = true;
            spans.push((span.start, span.end, rule));
        }
    }
    spans
}

/// Shannon entropy of `text`'s characters, in bits a character.
fn entropy(text: &str) -> f64 {
    let mut counts = std::collections::HashMap::new();
    let mut total = 0usize;
    for c in text.chars() {
        *counts.entry(c).or_insert(0usize) += 1;
        total += 1;
    }
    if total == 0 {
        return 0.0;
    }
    counts
        .values()
        .map(|&n| {
            let p = n as f64 / total as f64;
            -p * p.log2()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_pattern_compiles() {
        for pattern in PATTERNS {
            assert!(Regex::new(pattern).is_ok(), "{pattern}");
        }
        assert_eq!(RULES.each.len(), NAMES.len());
        assert_eq!(RULES.any.len(), NAMES.len());
    }

    /// One sample of each shape, made up here (none is a real credential).
    fn samples() -> Vec<(&'static str, String)> {
        let alnum = "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5bC7dE9";
        vec![
            ("aws-access-key-id", "AKIAQ3EXAMPLE7ZZ2WXY".to_owned()),
            ("github-token", format!("ghp_{}", &alnum[..36])),
            ("gitlab-token", "glpat-x9Y8w7V6u5T4s3R2q1P0".to_owned()),
            ("slack-token", "xoxb-1234567890-abcdefghij".to_owned()),
            ("stripe-key", "sk_live_4eC39HqLyjWDarjtT1zdp7dc".to_owned()),
            ("openai-key", "sk-proj-abcdEFGH1234T3BlbkFJwxyz9876ABCD".to_owned()),
            ("anthropic-key", format!("sk-ant-api03-{}", &alnum[..36])),
            (
                "private-key",
                "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA\n-----END OPENSSH PRIVATE KEY-----".to_owned(),
            ),
            (
                "jwt",
                "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U".to_owned(),
            ),
            ("secret-assignment", "api_key = \"Zq8#mW2vXp4Lr9Tn\"".replace('#', "k")),
        ]
    }

    #[test]
    fn each_shape_is_found_and_masked_by_its_rule_name() {
        for (rule, sample) in samples() {
            let mut value = json!({"text": format!("here: {sample} (end)")});
            assert_eq!(scan(&mut value, SecretScan::Mask), [rule], "{sample}");
            let text = value["text"].as_str().unwrap_or_default();
            assert!(text.contains(&format!("[secret: {rule}]")), "{text}");
            assert!(
                text.starts_with("here: ") && text.ends_with(" (end)"),
                "{text}"
            );
            if rule != "secret-assignment" {
                assert!(!text.contains(&sample), "{text}");
            }
        }
    }

    #[test]
    fn warn_finds_without_changing() {
        let (_, sample) = &samples()[0];
        let mut value = json!([{"k": sample}]);
        let before = value.clone();
        assert_eq!(scan(&mut value, SecretScan::Warn), ["aws-access-key-id"]);
        assert_eq!(value, before);
        assert!(scan(&mut value, SecretScan::Off).is_empty());
    }

    /// A key with invisible characters inside it, in full-width letters, or behind a bidi
    /// isolate is found and masked as written.
    #[test]
    fn invisible_and_full_width_forms_are_found_and_masked() {
        for (rule, sample) in samples() {
            if rule == "private-key" {
                continue;
            }
            let full_width: String = sample
                .chars()
                .map(|c| match c {
                    '!'..='~' => char::from_u32(u32::from(c) + 0xFEE0).unwrap_or(c),
                    other => other,
                })
                .collect();
            let mut chars = sample.chars();
            let first: String = chars.by_ref().take(4).collect();
            let zero_width = format!("{first}\u{200B}{}", chars.as_str());
            for form in [zero_width, full_width, format!("\u{2066}{sample}\u{2069}")] {
                let mut value = json!({"text": format!("here: {form} (end)")});
                assert_eq!(scan(&mut value, SecretScan::Mask), [rule], "{form}");
                let text = value["text"].as_str().unwrap_or_default();
                assert!(text.contains(&format!("[secret: {rule}]")), "{text}");
                assert!(
                    text.starts_with("here: ") && text.ends_with(" (end)"),
                    "{text}"
                );
                assert!(!text.contains(&form), "{text}");
            }
        }
    }

    /// Ordinary text is no finding: words after `password:`, hashes, UUIDs, base64 of little
    /// entropy, a `token` parameter's description.
    #[test]
    fn ordinary_text_is_not_a_secret() {
        for text in [
            "password: correcthorsebattery",
            "token: aaaaaaaaaaaaaaaaaaaaaaaa",
            "The token to authenticate with, from the settings page.",
            "commit 3f786850e387550fdab836ed7e6dc881de23001b",
            "id 123e4567-e89b-12d3-a456-426614174000",
            "sk-not-a-key and ghp_short and AKIA1234",
        ] {
            let mut value = json!(text);
            assert!(scan(&mut value, SecretScan::Mask).is_empty(), "{text}");
            assert_eq!(value, json!(text));
        }
    }
}
