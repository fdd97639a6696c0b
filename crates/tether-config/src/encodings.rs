//! The forms a secret value takes when other code prints it: a URL's percent-encoding, a host
//! name's lower case, JSON and Rust `Debug` escaping. Masking by known value must look for
//! each of them, because libraries (rmcp, reqwest, url, serde) print values in these forms —
//! a secret in a query string comes back as `%20`/`%22`, one in a host comes back lowercased.
//!
//! Written by hand: each form is a few lines, and the percent-encode sets must match what the
//! `url` crate does for each URL component (its sets are listed in the WHATWG URL standard).

use unicode_normalization::UnicodeNormalization as _;
use zeroize::Zeroizing;

use crate::secret::SecretValue;

/// Bytes the `url` crate leaves alone in a component, besides ASCII alphanumerics.
struct EncodeSet {
    /// Printable ASCII punctuation that is *encoded* in this component.
    encoded: &'static [u8],
}

/// Every byte but the unreserved ones (`A-Za-z0-9-._~`): what most hand-written encoders do.
const FULL: &[u8] = b" !\"#$%&'()*+,/:;<=>?@[\\]^`{|}";
/// The WHATWG query set (what `url` uses for a query string).
const QUERY: &[u8] = b" \"#<>";
/// The WHATWG special-query set (query of http/https URLs).
const SPECIAL_QUERY: &[u8] = b" \"#<>'";
/// The WHATWG fragment set.
const FRAGMENT: &[u8] = b" \"<>`";
/// The WHATWG path set.
const PATH: &[u8] = b" \"#<>?`{}";
/// The WHATWG userinfo set.
const USERINFO: &[u8] = b" \"#<>?`{}/:;=@[\\]^|";
/// `application/x-www-form-urlencoded` keeps only `*-._` (and writes space as `+`).
const FORM: &[u8] = b" !\"#$%&'()+,/:;<=>?@[\\]^`{|}~";

const SETS: [EncodeSet; 6] = [
    EncodeSet { encoded: FULL },
    EncodeSet { encoded: QUERY },
    EncodeSet {
        encoded: SPECIAL_QUERY,
    },
    EncodeSet { encoded: FRAGMENT },
    EncodeSet { encoded: PATH },
    EncodeSet { encoded: USERINFO },
];

/// `value` and every other form it may be printed in, each once, none empty. The first entry
/// is the value itself.
///
/// Forms: percent-encoded with each URL component's set (upper- and lower-case hex), form
/// encoding (`+` for space), lower and upper case (host names, hex digests), Unicode NFC and
/// NFD (a server that normalises what it prints), HTML escaping (text and attribute styles),
/// shell quoting (single-quoted and backslash-escaped), JSON string escaping (also with every
/// non-ASCII character as `\uXXXX`, as Python's `json.dumps` writes it, and with `<>&` as
/// `\u003c`…, as Go's `encoding/json` does), and Rust `Debug` escaping (how `{:?}` prints a
/// string or a URL). The JSON and `Debug` forms are also escaped once more: JSON text inside a
/// JSON string, or inside a `Debug`-printed one (a log line at `-vvv`). A value long enough
/// also has base64 forms: what base64 text holding it holds at each alignment
/// ([`base64_cores`]).
#[must_use]
pub fn printed_forms(value: &SecretValue) -> Vec<SecretValue> {
    let raw = value.expose();
    let mut forms: Vec<String> = vec![raw.to_owned()];
    for set in &SETS {
        let upper = percent_encode(raw, set.encoded, false);
        push_new(&mut forms, upper.to_ascii_lowercase_hex());
        push_new(&mut forms, upper.0);
    }
    push_new(&mut forms, percent_encode(raw, FORM, true).0);
    push_new(&mut forms, raw.to_lowercase());
    push_new(&mut forms, raw.to_uppercase());
    push_new(&mut forms, raw.nfc().collect());
    push_new(&mut forms, raw.nfd().collect());
    for style in &HTML_STYLES {
        push_new(&mut forms, html_escape(raw, style));
    }
    push_new(&mut forms, shell_single_quoted(raw, "'\\''"));
    push_new(&mut forms, shell_single_quoted(raw, "'\"'\"'"));
    push_new(&mut forms, shell_backslashed(raw));
    // Escaped forms of every form so far: a URL printed with `{:?}` is a percent-encoded
    // form with its backslashes doubled.
    let unescaped = forms.len();
    for index in 0..unescaped {
        // Temporaries hold the value too: zeroed when dropped.
        let form = Zeroizing::new(forms[index].clone());
        push_new(&mut forms, json_escape(&form, JsonStyle::Plain));
        push_new(&mut forms, debug_escape(&form));
    }
    // The value's JSON forms (every encoder's style) and its `Debug` form, each also escaped
    // once more: JSON text in a JSON string, JSON text in a `Debug`-printed string.
    let mut once: Vec<Zeroizing<String>> = [
        JsonStyle::Plain,
        JsonStyle::AsciiLower,
        JsonStyle::AsciiUpper,
        JsonStyle::HtmlSafe,
    ]
    .into_iter()
    .map(|style| Zeroizing::new(json_escape(raw, style)))
    .collect();
    once.push(Zeroizing::new(debug_escape(raw)));
    for form in &once {
        push_new(&mut forms, form.to_string());
        push_new(&mut forms, json_escape(form, JsonStyle::Plain));
        push_new(&mut forms, debug_escape(form));
    }
    for core in base64_cores(raw) {
        push_new(&mut forms, core);
    }
    forms.into_iter().map(SecretValue::new).collect()
}

/// The shortest base64 core that is a form of its own (see [`base64_cores`]): a shorter one
/// would be found in unrelated base64 text.
const MIN_BASE64_CORE: usize = 12;

/// What base64 text holding `text` (in the standard and the URL-safe alphabets) always holds,
/// wherever `text` starts in the encoded bytes: for each of the three alignments, the encoding
/// without the characters that also depend on the bytes before and after it. A payload (an
/// image's `data`, a `Basic` credential, a blob in a `-vvv` protocol dump) that holds the value
/// holds one of these.
fn base64_cores(text: &str) -> Vec<String> {
    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
    let mut cores = Vec::new();
    for offset in 0..3_usize {
        let mut bytes = Zeroizing::new(vec![0_u8; offset]);
        bytes.extend_from_slice(text.as_bytes());
        // Drop the group the padding bytes share with the value, and a partial last group.
        let whole = bytes.len() / 3 * 3;
        let start = if offset == 0 { 0 } else { 3 };
        if whole <= start {
            continue;
        }
        let middle = &bytes[start..whole];
        for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
            let core = engine.encode(middle);
            if core.len() >= MIN_BASE64_CORE {
                cores.push(core);
            }
        }
    }
    cores
}

/// How a JSON encoder writes a string's characters.
#[derive(Clone, Copy)]
enum JsonStyle {
    /// Only what JSON requires (`"`, `\\`, controls): serde_json and most encoders.
    Plain,
    /// Also every non-ASCII character as `\uxxxx` (lower-case hex, UTF-16 surrogate pairs):
    /// Python's `json.dumps` by default.
    AsciiLower,
    /// The same with upper-case hex.
    AsciiUpper,
    /// Also `<`, `>`, `&`, U+2028 and U+2029 as `\u003c`…: Go's `encoding/json`.
    HtmlSafe,
}

/// The inside of the JSON string literal of `text`, written in `style`.
fn json_escape(text: &str, style: JsonStyle) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(text.len() + 2);
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' if matches!(style, JsonStyle::HtmlSafe) => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c if !c.is_ascii()
                && matches!(style, JsonStyle::AsciiLower | JsonStyle::AsciiUpper) =>
            {
                let mut units = [0_u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = if matches!(style, JsonStyle::AsciiUpper) {
                        write!(out, "\\u{unit:04X}")
                    } else {
                        write!(out, "\\u{unit:04x}")
                    };
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// The inside of `{:?}` of `text`.
fn debug_escape(text: &str) -> String {
    strip_quotes(&Zeroizing::new(format!("{text:?}")))
}

/// How an HTML escaper writes `"` and `'` (all of them write `&amp;`, `&lt;`, `&gt;`).
struct HtmlStyle {
    quote: Option<&'static str>,
    apostrophe: Option<&'static str>,
}

const HTML_STYLES: [HtmlStyle; 3] = [
    // Python's `html.escape`.
    HtmlStyle {
        quote: Some("&quot;"),
        apostrophe: Some("&#x27;"),
    },
    // Go's `html.EscapeString`, Rust's askama/maud style.
    HtmlStyle {
        quote: Some("&#34;"),
        apostrophe: Some("&#39;"),
    },
    // Text-node escaping: quotes left as they are.
    HtmlStyle {
        quote: None,
        apostrophe: None,
    },
];

fn html_escape(text: &str, style: &HtmlStyle) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' if style.quote.is_some() => out.push_str(style.quote.unwrap_or_default()),
            '\'' if style.apostrophe.is_some() => {
                out.push_str(style.apostrophe.unwrap_or_default());
            }
            c => out.push(c),
        }
    }
    out
}

/// The inside of a shell single-quoted word holding `text`: each `'` written as `quote`
/// (`'\''` or `'"'"'`).
fn shell_single_quoted(text: &str, quote: &str) -> String {
    text.replace('\'', quote)
}

/// `text` with each character a POSIX shell treats specially preceded by `\` (as bash's
/// `printf %q` writes a word without control characters).
fn shell_backslashed(text: &str) -> String {
    const SPECIAL: &str = " \t!\"#$&'()*,;<=>?[\\]^`{|}~";
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if SPECIAL.contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn push_new(forms: &mut Vec<String>, form: String) {
    if form.is_empty() || forms.contains(&form) {
        drop(Zeroizing::new(form));
    } else {
        forms.push(form);
    }
}

fn strip_quotes(text: &str) -> String {
    text.strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text)
        .to_owned()
}

/// Percent-encoded text with upper-case hex digits.
struct Encoded(String);

impl Encoded {
    /// The same with lower-case hex digits (some encoders write `%2f`).
    fn to_ascii_lowercase_hex(&self) -> String {
        let mut out = String::with_capacity(self.0.len());
        let mut rest = self.0.as_str();
        while let Some(at) = rest.find('%') {
            out.push_str(&rest[..at]);
            let escape = rest.get(at..at + 3).unwrap_or(&rest[at..]);
            out.push_str(&escape.to_ascii_lowercase());
            rest = &rest[at + escape.len()..];
        }
        out.push_str(rest);
        out
    }
}

/// Encodes controls, non-ASCII bytes (as UTF-8) and the ASCII bytes in `encoded`.
fn percent_encode(text: &str, encoded: &[u8], space_as_plus: bool) -> Encoded {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(text.len());
    for &byte in text.as_bytes() {
        if byte == b' ' && space_as_plus {
            out.push('+');
        } else if !(0x20..0x7f).contains(&byte) || encoded.contains(&byte) {
            out.push('%');
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0x0f)]));
        } else {
            out.push(char::from(byte));
        }
    }
    Encoded(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forms(value: &str) -> Vec<String> {
        printed_forms(&SecretValue::from(value))
            .iter()
            .map(|f| f.expose().to_owned())
            .collect()
    }

    #[test]
    fn a_plain_token_has_only_its_own_form_and_its_cases() {
        assert_eq!(forms("abc123"), ["abc123", "ABC123"]);
        assert_eq!(forms("AbC"), ["AbC", "abc", "ABC"]);
    }

    #[test]
    fn escaped_normalised_and_quoted_forms() {
        let all = forms("a\"b'<é>&\\");
        for expected in [
            // Upper case, NFD.
            "A\"B'<É>&\\",
            "a\"b'<e\u{301}>&\\",
            // JSON with \u escapes: Python (lower hex), upper hex, Go (`<>&`).
            "a\\\"b'<\\u00e9>&\\\\",
            "a\\\"b'<\\u00E9>&\\\\",
            "a\\\"b'\\u003cé\\u003e\\u0026\\\\",
            // HTML: Python's, Go's, text nodes.
            "a&quot;b&#x27;&lt;é&gt;&amp;\\",
            "a&#34;b&#39;&lt;é&gt;&amp;\\",
            "a\"b'&lt;é&gt;&amp;\\",
            // Shell: single-quoted (two styles), backslash-escaped.
            "a\"b'\\''<é>&\\",
            "a\"b'\"'\"'<é>&\\",
            "a\\\"b\\'\\<é\\>\\&\\\\",
            // The JSON form in a JSON string, and in a `Debug` string.
            "a\\\\\\\"b'<é>&\\\\\\\\",
        ] {
            assert!(
                all.iter().any(|f| f == expected),
                "{expected:?} missing from {all:?}"
            );
        }
    }

    #[test]
    fn url_json_and_debug_forms() {
        let all = forms("SENT inel\"<x>/é\n");
        for expected in [
            "SENT inel\"<x>/é\n",
            // FULL set, upper and lower hex.
            "SENT%20inel%22%3Cx%3E%2F%C3%A9%0A",
            "SENT%20inel%22%3cx%3e%2f%c3%a9%0a",
            // QUERY set: `/` stays.
            "SENT%20inel%22%3Cx%3E/%C3%A9%0A",
            // Form encoding.
            "SENT+inel%22%3Cx%3E%2F%C3%A9%0A",
            // Lower case (a host name).
            "sent inel\"<x>/é\n",
            // JSON and Debug escaping.
            "SENT inel\\\"<x>/é\\n",
        ] {
            assert!(
                all.iter().any(|f| f == expected),
                "{expected:?} missing from {all:?}"
            );
        }
        assert!(!all.iter().any(String::is_empty));
        let mut unique = all.clone();
        unique.dedup();
        assert_eq!(unique.len(), all.len());
    }
}
