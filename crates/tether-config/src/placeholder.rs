//! The `{{NAME}}` placeholder grammar.
//!
//! A placeholder is exactly `{{NAME}}`: NAME starts with a Unicode letter, `_` or `-`, and goes
//! on with letters, digits, `_` or `-`. Nothing else is one: `{{ NAME }}`, `{{a.b}}`,
//! `{{.Name}}`, `{{json .}}`, `{{1X}}` and `${VAR}` are plain text. A run of three or more
//! braces (`{{{X}}}`) is an escape: no placeholder starts or ends inside it, so it stays
//! verbatim. This scanner is hand-written because template engines (handlebars and its kin)
//! treat many of these forms as syntax and escape HTML by default; see
//! `specs/config-and-templating/TECH.md`.

use std::collections::HashSet;

/// One piece of a scanned string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment<'a> {
    /// Text to keep byte for byte.
    Literal(&'a str),
    /// A `{{NAME}}` placeholder; the value is NAME.
    Placeholder(&'a str),
}

/// Whether `name` is a valid placeholder name.
pub fn is_valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    match chars.next() {
        Some(first) if is_name_start(first) => chars.all(is_name_continue),
        _ => false,
    }
}

fn is_name_start(c: char) -> bool {
    c.is_alphabetic() || c == '_' || c == '-'
}

fn is_name_continue(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '-'
}

/// Splits `text` into literal text and placeholders, in order. Concatenating the segments
/// (with placeholders written back as `{{NAME}}`) gives `text` again. Lazy: nothing is
/// allocated, so scanning each of many short strings costs no allocation per string.
pub fn segments(text: &str) -> Segments<'_> {
    Segments {
        text,
        literal_start: 0,
        at: 0,
        pending: None,
    }
}

/// The iterator [`segments`] returns.
pub struct Segments<'a> {
    text: &'a str,
    /// Where the literal text not yet returned starts.
    literal_start: usize,
    /// Where to look for the next `{{`.
    at: usize,
    /// A placeholder found right after a literal that was returned first.
    pending: Option<Segment<'a>>,
}

impl<'a> Iterator for Segments<'a> {
    type Item = Segment<'a>;

    fn next(&mut self) -> Option<Segment<'a>> {
        if let Some(pending) = self.pending.take() {
            return Some(pending);
        }
        let text = self.text;
        let bytes = text.as_bytes();
        while let Some(open) = find_double_brace(bytes, self.at) {
            // Measure the whole run of opening braces: only a run of exactly two opens a
            // placeholder.
            let mut run_end = open;
            while run_end < bytes.len() && bytes[run_end] == b'{' {
                run_end += 1;
            }
            if run_end - open != 2 {
                self.at = run_end;
                continue;
            }
            match placeholder_at(text, run_end) {
                Some((name, close_end)) => {
                    let literal = &text[self.literal_start..open];
                    self.literal_start = close_end;
                    self.at = close_end;
                    if literal.is_empty() {
                        return Some(Segment::Placeholder(name));
                    }
                    self.pending = Some(Segment::Placeholder(name));
                    return Some(Segment::Literal(literal));
                }
                None => self.at = run_end,
            }
        }
        let rest = &text[self.literal_start..];
        self.literal_start = text.len();
        self.at = text.len();
        (!rest.is_empty()).then_some(Segment::Literal(rest))
    }
}

/// The index of the first `{{` at or after `from`. A byte search for `{` (memchr) and a look at
/// the next byte: no substring searcher is built per call.
fn find_double_brace(bytes: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    while let Some(offset) = bytes.get(at..)?.iter().position(|&b| b == b'{') {
        let brace = at + offset;
        if bytes.get(brace + 1) == Some(&b'{') {
            return Some(brace);
        }
        at = brace + 1;
    }
    None
}

/// With `start` just past `{{`, returns the name and the index just past the closing `}}`
/// when a valid name is closed by exactly two braces.
fn placeholder_at(text: &str, start: usize) -> Option<(&str, usize)> {
    let rest = &text[start..];
    let mut chars = rest.char_indices();
    let (_, first) = chars.next()?;
    if !is_name_start(first) {
        return None;
    }
    let name_len = chars
        .find(|&(_, c)| !is_name_continue(c))
        .map_or(rest.len(), |(idx, _)| idx);
    let after = &rest[name_len..];
    let closes = after.starts_with("}}") && !after[2..].starts_with('}');
    closes.then(|| (&rest[..name_len], start + name_len + 2))
}

/// Whether `text` holds at least one placeholder.
pub fn has_placeholders(text: &str) -> bool {
    segments(text).any(|s| matches!(s, Segment::Placeholder(_)))
}

/// The placeholder names in `text`, in order of first appearance, without repeats. Linear in
/// the length of `text` (a set of the names seen, no rescans).
pub fn placeholder_names(text: &str) -> Vec<&str> {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut names: Vec<&str> = Vec::new();
    for segment in segments(text) {
        if let Segment::Placeholder(name) = segment
            && seen.insert(name)
        {
            names.push(name);
        }
    }
    names
}

/// `{{NAME}}` for `name`.
pub fn placeholder(name: &str) -> String {
    let mut text = String::with_capacity(name.len() + 4);
    text.push_str("{{");
    text.push_str(name);
    text.push_str("}}");
    text
}

/// Whether `text` is exactly `{{NAME}}` for `name` (whatever characters `name` holds), without
/// building that string.
pub fn is_placeholder_of(text: &str, name: &str) -> bool {
    text.strip_prefix("{{")
        .and_then(|rest| rest.strip_suffix("}}"))
        .is_some_and(|inner| inner == name)
}

#[cfg(test)]
mod tests {
    use super::Segment::{Literal, Placeholder};
    use super::*;
    use pretty_assertions::assert_eq;

    fn check(text: &str, expect: &[Segment<'_>]) {
        assert_eq!(
            segments(text).collect::<Vec<_>>(),
            expect,
            "scanning {text:?}"
        );
    }

    #[test]
    fn placeholder_of_a_name() {
        assert_eq!(placeholder("A.B"), "{{A.B}}");
        assert!(is_placeholder_of("{{A.B}}", "A.B"));
        assert!(is_placeholder_of("{{}}", ""));
        assert!(!is_placeholder_of("{{A}}", "B"));
        assert!(!is_placeholder_of("{{A}", "A"));
        assert!(!is_placeholder_of("x{{A}}", "A"));
        assert!(!is_placeholder_of("{", ""));
    }

    #[test]
    fn plain_placeholders() {
        check("{{A}}", &[Placeholder("A")]);
        check(
            "--token={{API_TOKEN}}",
            &[Literal("--token="), Placeholder("API_TOKEN")],
        );
        check(
            "{{a}}{{b}}x",
            &[Placeholder("a"), Placeholder("b"), Literal("x")],
        );
        check("{{-x_1}}", &[Placeholder("-x_1")]);
        check("{{_}}", &[Placeholder("_")]);
        check("{{clé}}", &[Placeholder("clé")]);
        check("{{ключ2}}", &[Placeholder("ключ2")]);
    }

    #[test]
    fn things_that_are_not_placeholders() {
        for text in [
            "{{ NAME }}",
            "{{a.b}}",
            "{{.Name}}",
            "{{json .}}",
            "{{1X}}",
            "${VAR}",
            "{{}}",
            "{{A",
            "{{A}",
            "{A}}",
            "{{{X}}}",
            "{{{{X}}}}",
            "{{X}}}",
            "{{!x}}",
            "{{~x}}",
            "{{A B}}",
            "",
        ] {
            if text.is_empty() {
                check(text, &[]);
            } else {
                check(text, &[Literal(text)]);
            }
        }
    }

    #[test]
    fn escapes_and_placeholders_mix() {
        check("{{{X}}} {{Y}}", &[Literal("{{{X}}} "), Placeholder("Y")]);
        check(
            "--format '{{json .}}' {{T}}",
            &[Literal("--format '{{json .}}' "), Placeholder("T")],
        );
        check("{{{{A}}", &[Literal("{{{{A}}")]);
        check("{ {{A}}", &[Literal("{ "), Placeholder("A")]);
    }

    #[test]
    fn names() {
        assert!(is_valid_name("API_TOKEN"));
        assert!(is_valid_name("-a"));
        assert!(is_valid_name("é1"));
        assert!(!is_valid_name("1KEY"));
        assert!(!is_valid_name("A.B"));
        assert!(!is_valid_name(""));
        assert_eq!(placeholder_names("{{A}}{{B}}{{A}}"), vec!["A", "B"]);
        assert_eq!(placeholder("K"), "{{K}}");
    }
}
