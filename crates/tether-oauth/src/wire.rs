//! Reading what authorization servers answer so that a token or client secret is a
//! [`SecretValue`] from the moment it is parsed: the raw body is zeroed once parsed, and a
//! secret field is read straight into a `SecretValue` (never into a `serde_json::Value`).

use std::fmt;

use reqwest::StatusCode;
use serde::Deserialize;
use serde::de::{DeserializeOwned, IgnoredAny, MapAccess, SeqAccess, Visitor};
use tether_config::SecretValue;

/// A field that may hold a secret string: `Some` when it is a string, `None` when it is
/// absent or anything else (as a tolerant reader of `as_str` would see it).
#[derive(Default)]
pub(crate) struct MaybeSecret(pub(crate) Option<SecretValue>);

impl<'de> Deserialize<'de> for MaybeSecret {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(SecretVisitor)
    }
}

struct SecretVisitor;

impl<'de> Visitor<'de> for SecretVisitor {
    type Value = MaybeSecret;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E>(self, value: &str) -> Result<MaybeSecret, E> {
        Ok(MaybeSecret(Some(SecretValue::from(value))))
    }

    fn visit_string<E>(self, value: String) -> Result<MaybeSecret, E> {
        Ok(MaybeSecret(Some(SecretValue::new(value))))
    }

    fn visit_bool<E>(self, _: bool) -> Result<MaybeSecret, E> {
        Ok(MaybeSecret(None))
    }

    fn visit_i64<E>(self, _: i64) -> Result<MaybeSecret, E> {
        Ok(MaybeSecret(None))
    }

    fn visit_u64<E>(self, _: u64) -> Result<MaybeSecret, E> {
        Ok(MaybeSecret(None))
    }

    fn visit_f64<E>(self, _: f64) -> Result<MaybeSecret, E> {
        Ok(MaybeSecret(None))
    }

    fn visit_unit<E>(self) -> Result<MaybeSecret, E> {
        Ok(MaybeSecret(None))
    }

    fn visit_none<E>(self) -> Result<MaybeSecret, E> {
        Ok(MaybeSecret(None))
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<MaybeSecret, D::Error> {
        MaybeSecret::deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<MaybeSecret, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(MaybeSecret(None))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MaybeSecret, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(MaybeSecret(None))
    }
}

/// An answer's status and its body read as `T` (`T::default()` when it is not JSON of that
/// shape); the raw body, which may hold tokens or a client secret, is zeroed once parsed.
pub(crate) async fn answer<T: DeserializeOwned + Default>(
    response: reqwest::Response,
) -> (StatusCode, T) {
    let status = response.status();
    let bytes = zeroize::Zeroizing::new(
        response
            .bytes()
            .await
            .map(|b| b.to_vec())
            .unwrap_or_default(),
    );
    (status, parse(&bytes))
}

/// `bytes` read as `T`, or `T::default()`.
pub(crate) fn parse<T: DeserializeOwned + Default>(bytes: &[u8]) -> T {
    serde_json::from_slice(bytes).unwrap_or_default()
}

/// `text` as `application/x-www-form-urlencoded` appended to `out` (the WHATWG URL
/// serializer: alphanumerics and `*-._` as they are, a space as `+`, every other byte `%XX`).
pub(crate) fn form_encode_into(out: &mut String, text: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'*' | b'-' | b'.' | b'_' => {
                out.push(char::from(byte));
            }
            b' ' => out.push('+'),
            _ => {
                out.push('%');
                out.push(char::from(HEX[usize::from(byte >> 4)]));
                out.push(char::from(HEX[usize::from(byte & 0x0f)]));
            }
        }
    }
}

/// A form body from `pairs`, built in one buffer that becomes a secret (it holds a code, a
/// verifier, a refresh token or a client secret).
pub(crate) fn form_body(pairs: &[(&str, &str)]) -> SecretValue {
    let capacity = pairs
        .iter()
        .map(|(name, value)| name.len() + 3 * value.len() + 2)
        .sum();
    let mut body = String::with_capacity(capacity);
    for (index, (name, value)) in pairs.iter().enumerate() {
        if index > 0 {
            body.push('&');
        }
        form_encode_into(&mut body, name);
        body.push('=');
        form_encode_into(&mut body, value);
    }
    SecretValue::new(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default, Deserialize)]
    struct Answer {
        #[serde(default)]
        token: MaybeSecret,
        #[serde(default)]
        other: MaybeSecret,
    }

    #[test]
    fn secret_fields_are_strings_or_nothing() {
        let answer: Answer = parse(br#"{"token":"a\"b","other":{"x":[1,2]}}"#);
        assert_eq!(
            answer.token.0.as_ref().map(SecretValue::expose),
            Some("a\"b")
        );
        assert!(answer.other.0.is_none());
        let answer: Answer = parse(br#"{"token":12,"other":null}"#);
        assert!(answer.token.0.is_none() && answer.other.0.is_none());
        let answer: Answer = parse(b"<html>not json</html>");
        assert!(answer.token.0.is_none());
    }

    #[test]
    fn form_bodies_are_urlencoded() {
        let body = form_body(&[("a b", "x&y=z"), ("c", r#"$HOME %41 "q" \ {{x}}"#)]);
        assert_eq!(
            body.expose(),
            "a+b=x%26y%3Dz&c=%24HOME+%2541+%22q%22+%5C+%7B%7Bx%7D%7D"
        );
    }
}
