//! The forms a secret value takes when other code prints it: a URL's percent-encoding, a host
//! name's lower case, JSON and Rust `Debug` escaping. Masking by known value must look for
//! each of them, because libraries (rmcp, reqwest, url, serde) print values in these forms —
//! a secret in a query string comes back as `%20`/`%22`, one in a host comes back lowercased.
//!
//! Written by hand: each form is a few lines, and the percent-encode sets must match what the
//! `url` crate does for each URL component (its sets are listed in the WHATWG URL standard).

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
/// encoding (`+` for space), lower case (host names), JSON string escaping, and Rust `Debug`
/// escaping (how `{:?}` prints a string or a URL).
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
    // Escaped forms of every form so far: a URL printed with `{:?}` is a percent-encoded
    // form with its backslashes doubled.
    for index in 0..forms.len() {
        // Temporaries hold the value too: zeroed when dropped.
        let form = Zeroizing::new(forms[index].clone());
        if let Ok(json) = serde_json::to_string(form.as_str()) {
            push_new(&mut forms, strip_quotes(&Zeroizing::new(json)));
        }
        push_new(
            &mut forms,
            strip_quotes(&Zeroizing::new(format!("{:?}", form.as_str()))),
        );
    }
    forms.into_iter().map(SecretValue::new).collect()
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
    fn a_plain_token_has_only_its_own_form_and_lower_case() {
        assert_eq!(forms("abc123"), ["abc123"]);
        assert_eq!(forms("AbC"), ["AbC", "abc"]);
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
