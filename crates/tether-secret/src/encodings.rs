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
/// ([`base64_core`]), and (from [`MIN_ENCODED_BYTES`] bytes) its bytes in hex and with every
/// byte percent-encoded (`%74%6F…`, as a hand-written encoder may write them). A value with
/// compatibility characters also has its NFKC form; text is folded the same way (and rid of
/// invisible characters) before a second search: see [`crate::mask`].
#[must_use]
pub fn printed_forms(value: &SecretValue) -> Vec<SecretValue> {
    let raw = value.expose();
    let mut forms: Vec<String> = Vec::with_capacity(RECIPES.len());
    for recipe in RECIPES.iter() {
        if let Some(form) = recipe.apply(raw) {
            push_new(&mut forms, form);
        }
    }
    forms.into_iter().map(SecretValue::new).collect()
}

/// How a form's text is made before any escaping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Base {
    /// The value as it is.
    Raw,
    /// Percent-encoded with one of [`SETS`], upper- or lower-case hex.
    Percent {
        set: usize,
        lower: bool,
    },
    /// `application/x-www-form-urlencoded`.
    FormEncoded,
    Lower,
    Upper,
    Nfc,
    Nfd,
    Nfkc,
    /// Every byte as two hex digits (lower case; matching ignores case).
    Hex,
    /// Every byte percent-encoded, upper-case hex (matching ignores case).
    PercentAll,
    /// HTML-escaped in one of [`HTML_STYLES`].
    Html(usize),
    /// Shell single-quoted, `'` written as `'\''` (`false`) or `'"'"'` (`true`).
    ShellQuoted(bool),
    ShellBackslashed,
    /// A base64 core (see [`base64_core`]): alignment, and the URL-safe alphabet or not.
    Base64 {
        offset: usize,
        url_safe: bool,
    },
}

/// An escape applied to a form: a JSON string's inside in a style, or `Debug`'s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layer {
    Json(JsonStyle),
    Debug,
}

/// One printed form: a base, then up to two escapes, in order.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Recipe {
    base: Base,
    layers: [Option<Layer>; 2],
}

impl Recipe {
    const fn new(base: Base, layers: [Option<Layer>; 2]) -> Self {
        Self { base, layers }
    }

    /// The form of `raw`, if this recipe gives one (a base64 core needs a long enough value).
    pub(crate) fn apply(&self, raw: &str) -> Option<String> {
        let base = Zeroizing::new(match self.base {
            Base::Raw => raw.to_owned(),
            Base::Percent { set, lower } => {
                let upper = percent_encode(raw, SETS[set].encoded, false);
                if lower {
                    upper.to_ascii_lowercase_hex()
                } else {
                    upper.0
                }
            }
            Base::FormEncoded => percent_encode(raw, FORM, true).0,
            Base::Lower => raw.to_lowercase(),
            Base::Upper => raw.to_uppercase(),
            Base::Nfc => raw.nfc().collect(),
            Base::Nfd => raw.nfd().collect(),
            Base::Nfkc => raw.nfkc().collect(),
            Base::Hex | Base::PercentAll if raw.len() < MIN_ENCODED_BYTES => return None,
            Base::Hex => hex(raw, ""),
            Base::PercentAll => hex(raw, "%").to_ascii_uppercase(),
            Base::Html(style) => html_escape(raw, &HTML_STYLES[style]),
            Base::ShellQuoted(double) => {
                shell_single_quoted(raw, if double { "'\"'\"'" } else { "'\\''" })
            }
            Base::ShellBackslashed => shell_backslashed(raw),
            Base::Base64 { offset, url_safe } => base64_core(raw, offset, url_safe)?,
        });
        let form = self.apply_layers(&base);
        (!form.is_empty()).then_some(form)
    }

    /// This recipe's escapes applied to `base`, its base form of some value.
    fn apply_layers(&self, base: &str) -> String {
        let mut form = Zeroizing::new(base.to_owned());
        for layer in self.layers.iter().flatten() {
            form = Zeroizing::new(match layer {
                Layer::Json(style) => json_escape(&form, *style),
                Layer::Debug => debug_escape(&form),
            });
        }
        std::mem::take(&mut *form)
    }

    /// Whether the form can hold the value's line breaks as they are (no escape or encoding
    /// rewrites them): only those forms have lines to mask one by one.
    pub(crate) fn keeps_line_breaks(&self) -> bool {
        self.layers[0].is_none()
            && !matches!(
                self.base,
                Base::Percent { .. }
                    | Base::FormEncoded
                    | Base::Base64 { .. }
                    | Base::Hex
                    | Base::PercentAll
            )
    }
}

/// A form of a long value that is made only when a text holds its first bytes.
pub(crate) struct LazyForm {
    /// The form's first bytes (made from a prefix of the value).
    pub(crate) start: Zeroizing<Vec<u8>>,
    recipe: Recipe,
    /// The value, or (with `layers_only`) the base form of it the recipe's escapes apply to.
    source: SecretValue,
    layers_only: bool,
}

impl LazyForm {
    /// The whole form.
    pub(crate) fn make(&self) -> Option<String> {
        if self.layers_only {
            Some(self.recipe.apply_layers(self.source.expose()))
        } else {
            self.recipe.apply(self.source.expose())
        }
    }
}

/// A long value's printed forms, split into those made now and those made lazily.
///
/// Made now: the forms that can hold the value's line breaks (their lines are masked one by
/// one), each once, in [`printed_forms`]'s order, the value first. Made lazily: every other
/// form whose first `start_bytes` bytes `prefix` (a prefix of the value that every form of it
/// begins with the form of, but for the form's last bytes) gives, with at least as many bytes
/// to spare; a form of a base that equals an earlier base is left out (its forms are that
/// base's), and one of a base made now is made from it. A form `prefix` gives too little of is
/// made now.
pub(crate) fn split_forms(
    value: &SecretValue,
    prefix: &str,
    start_bytes: usize,
) -> (Vec<SecretValue>, Vec<LazyForm>) {
    let raw = value.expose();
    let mut now: Vec<String> = Vec::new();
    let mut lazy = Vec::new();
    // The base forms made now, by base, with whether an earlier base gave the same text.
    let mut bases: Vec<(Base, SecretValue, bool)> = Vec::new();
    for recipe in RECIPES.iter() {
        if recipe.keeps_line_breaks() {
            let Some(form) = recipe.apply(raw) else {
                continue;
            };
            let form = SecretValue::new(form);
            let repeated = bases
                .iter()
                .any(|(_, earlier, _)| earlier.expose() == form.expose());
            push_new(&mut now, form.expose().to_owned());
            bases.push((recipe.base, form, repeated));
            continue;
        }
        let base = bases.iter().find(|(base, _, _)| *base == recipe.base);
        if base.is_some_and(|(_, _, repeated)| *repeated) {
            continue;
        }
        let start = Zeroizing::new(recipe.apply(prefix).unwrap_or_default().into_bytes());
        if start.len() >= 2 * start_bytes {
            lazy.push(LazyForm {
                start: Zeroizing::new(start[..start_bytes].to_vec()),
                recipe: *recipe,
                source: base.map_or_else(|| value.clone(), |(_, form, _)| form.clone()),
                layers_only: base.is_some(),
            });
        } else if let Some(form) = recipe.apply(raw) {
            push_new(&mut now, form);
        }
    }
    (now.into_iter().map(SecretValue::new).collect(), lazy)
}

/// Every printed form, in the order [`printed_forms`] lists them (the value itself first).
static RECIPES: std::sync::LazyLock<Vec<Recipe>> = std::sync::LazyLock::new(|| {
    let mut bases = vec![Base::Raw];
    for set in 0..SETS.len() {
        bases.push(Base::Percent { set, lower: true });
        bases.push(Base::Percent { set, lower: false });
    }
    bases.extend([
        Base::FormEncoded,
        Base::Lower,
        Base::Upper,
        Base::Nfc,
        Base::Nfd,
        Base::Nfkc,
    ]);
    bases.extend((0..HTML_STYLES.len()).map(Base::Html));
    bases.extend([
        Base::ShellQuoted(false),
        Base::ShellQuoted(true),
        Base::ShellBackslashed,
    ]);
    let mut recipes: Vec<Recipe> = bases
        .iter()
        .map(|&base| Recipe::new(base, [None, None]))
        .collect();
    // Escaped forms of each of those: a URL printed with `{:?}` is a percent-encoded form with
    // its backslashes doubled.
    for &base in &bases {
        for layer in [Layer::Json(JsonStyle::Plain), Layer::Debug] {
            recipes.push(Recipe::new(base, [Some(layer), None]));
        }
    }
    // The value's JSON forms (every encoder's style) and its `Debug` form, each also escaped
    // once more: JSON text in a JSON string, JSON text in a `Debug`-printed string.
    let once = [
        Layer::Json(JsonStyle::Plain),
        Layer::Json(JsonStyle::AsciiLower),
        Layer::Json(JsonStyle::AsciiUpper),
        Layer::Json(JsonStyle::HtmlSafe),
        Layer::Debug,
    ];
    for first in once {
        for second in [
            None,
            Some(Layer::Json(JsonStyle::Plain)),
            Some(Layer::Debug),
        ] {
            // The plain JSON and `Debug` forms of the value itself are listed above already.
            if second.is_none() && matches!(first, Layer::Json(JsonStyle::Plain) | Layer::Debug) {
                continue;
            }
            recipes.push(Recipe::new(Base::Raw, [Some(first), second]));
        }
    }
    for offset in 0..3 {
        for url_safe in [false, true] {
            recipes.push(Recipe::new(Base::Base64 { offset, url_safe }, [None, None]));
        }
    }
    recipes.push(Recipe::new(Base::Hex, [None, None]));
    recipes.push(Recipe::new(Base::PercentAll, [None, None]));
    recipes
});

/// The shortest value that has hex and every-byte percent forms: a shorter one's hex (12
/// digits for 6 bytes) would be found in unrelated digests and ids.
const MIN_ENCODED_BYTES: usize = 8;

/// `text`'s bytes as lower-case hex, each pair after `before`.
fn hex(text: &str, before: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(text.len() * (2 + before.len()));
    for byte in text.bytes() {
        let _ = write!(out, "{before}{byte:02x}");
    }
    out
}

/// The shortest base64 core that is a form of its own (see [`base64_core`]): a shorter one
/// would be found in unrelated base64 text.
const MIN_BASE64_CORE: usize = 12;

/// What base64 text holding `text` always holds, wherever `text` starts in the encoded bytes:
/// for the alignment `offset` (0 to 2 bytes before it in its group), the encoding without the
/// characters that also depend on the bytes before and after it, in the standard or the
/// URL-safe alphabet; `None` when that is shorter than [`MIN_BASE64_CORE`]. A payload (an
/// image's `data`, a `Basic` credential, a blob in a `-vvv` protocol dump) that holds the value
/// holds one of the six.
fn base64_core(text: &str, offset: usize, url_safe: bool) -> Option<String> {
    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
    let mut bytes = Zeroizing::new(vec![0_u8; offset]);
    bytes.extend_from_slice(text.as_bytes());
    // Drop the group the padding bytes share with the value, and a partial last group.
    let whole = bytes.len() / 3 * 3;
    let start = if offset == 0 { 0 } else { 3 };
    if whole <= start {
        return None;
    }
    let middle = &bytes[start..whole];
    let engine = if url_safe {
        &URL_SAFE_NO_PAD
    } else {
        &STANDARD_NO_PAD
    };
    let core = engine.encode(middle);
    (core.len() >= MIN_BASE64_CORE).then_some(core)
}

/// How a JSON encoder writes a string's characters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

    fn assert_has(all: &[String], expected: &str) {
        assert!(
            all.iter().any(|f| f == expected),
            "{expected:?} missing from {all:?}"
        );
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
            assert_has(&all, expected);
        }
    }

    #[test]
    fn hex_every_byte_percent_and_nfkc_forms() {
        let all = forms("tok-Ab9\u{FF5A}");
        for expected in [
            "746f6b2d416239efbd9a",
            "%74%6F%6B%2D%41%62%39%EF%BD%9A",
            // NFKC: the full-width z is a z.
            "tok-Ab9z",
        ] {
            assert_has(&all, expected);
        }
        // Too short for hex: its digits would be found in any digest.
        assert!(!forms("tok-Ab9").iter().any(|f| f == "746f6b2d416239"));
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
            assert_has(&all, expected);
        }
        assert!(!all.iter().any(String::is_empty));
        let mut unique = all.clone();
        unique.dedup();
        assert_eq!(unique.len(), all.len());
    }
}
