//! Whether a URI is one a URI template (RFC 6570) can expand to: how `resources/read` of a
//! URI nobody listed finds the server whose template made it.
//!
//! Each expression `{…}` matches what its operator can produce: the expansion's leading
//! character (`#`, `.`, `/`, `;`, `?`, `&`) and then only the characters that operator leaves
//! unencoded — unreserved characters and `%XX`, plus the reserved set for `{+…}` and `{#…}`,
//! plus the operator's own separators (`,`, `.`, `/`, `;`, `=`, `&`). A simple `{id}`
//! therefore never matches a `/`: `mem://{id}` does not fit `mem://a/b`, which only a
//! template with a literal `/` there (or a `{+id}`) can make. Undefined variables expand to
//! nothing, so every expression may match the empty string too. Literal text matches itself.

/// The longest URI matched against templates; a longer one fits none.
const MAX_URI_LEN: usize = 8 * 1024;

/// The most literal runs and expressions a template may have; a longer one fits nothing.
const MAX_PARTS: usize = 256;

/// Whether expanding `template` can give `uri`. Linear in the URI's length for each part of
/// the template.
pub fn fits(template: &str, uri: &str) -> bool {
    if uri.len() > MAX_URI_LEN {
        return false;
    }
    let Some(parts) = parse(template).filter(|parts| parts.len() <= MAX_PARTS) else {
        return false;
    };
    let uri = uri.as_bytes();
    let len = uri.len();
    // after[pos]: whether the parts after the current one match `uri[pos..]` (the last row:
    // only the end matches nothing), computed from the last part back to the first.
    let mut after: Vec<bool> = (0..=len).map(|pos| pos == len).collect();
    for part in parts.iter().rev() {
        let here: Vec<bool> = match part {
            Part::Literal(text) => (0..=len)
                .map(|pos| {
                    uri[pos..].starts_with(text) && after.get(pos + text.len()) == Some(&true)
                })
                .collect(),
            Part::Expression(operator) => {
                // run_end[pos]: where the run of characters the operator allows from pos ends;
                // next[pos]: the first position from pos where the rest matches.
                let mut run_end = vec![len; len + 1];
                let mut next = vec![usize::MAX; len + 2];
                for pos in (0..len).rev() {
                    run_end[pos] = if operator.allows(uri[pos]) {
                        run_end[pos + 1]
                    } else {
                        pos
                    };
                }
                for pos in (0..=len).rev() {
                    next[pos] = if after[pos] { pos } else { next[pos + 1] };
                }
                (0..=len)
                    .map(|pos| {
                        // Undefined (nothing) or defined: the lead, then allowed characters.
                        let body = match operator.lead() {
                            None => Some(pos),
                            Some(lead) if uri.get(pos) == Some(&lead) => Some(pos + 1),
                            Some(_) => None,
                        };
                        after[pos] || body.is_some_and(|start| next[start] <= run_end[start])
                    })
                    .collect()
            }
        };
        after = here;
    }
    after[0]
}

#[derive(Debug, PartialEq, Eq)]
enum Part {
    Literal(Vec<u8>),
    Expression(Operator),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operator {
    Simple,
    Reserved,
    Fragment,
    Label,
    Path,
    PathParameter,
    Query,
    QueryContinuation,
}

impl Operator {
    /// The character an expansion starts with when any variable is defined.
    fn lead(self) -> Option<u8> {
        match self {
            Self::Simple | Self::Reserved => None,
            Self::Fragment => Some(b'#'),
            Self::Label => Some(b'.'),
            Self::Path => Some(b'/'),
            Self::PathParameter => Some(b';'),
            Self::Query => Some(b'?'),
            Self::QueryContinuation => Some(b'&'),
        }
    }

    /// Whether `byte` can appear in an expansion after the lead character.
    fn allows(self, byte: u8) -> bool {
        let unreserved = byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~');
        let encoded = byte == b'%';
        let reserved = b":/?#[]@!$&'()*+,;=".contains(&byte);
        unreserved
            || encoded
            || match self {
                Self::Reserved | Self::Fragment => reserved,
                Self::Simple => byte == b',',
                Self::Label => byte == b',',
                Self::Path => matches!(byte, b'/' | b','),
                Self::PathParameter => matches!(byte, b';' | b'=' | b','),
                Self::Query | Self::QueryContinuation => matches!(byte, b'&' | b'=' | b','),
            }
    }
}

/// The template's literal runs and expressions; `None` when a `{` is not closed.
fn parse(template: &str) -> Option<Vec<Part>> {
    let mut parts = Vec::new();
    let mut rest = template;
    while !rest.is_empty() {
        match rest.find('{') {
            Some(0) => {
                let end = rest.find('}')?;
                let operator = match rest.as_bytes().get(1) {
                    Some(b'+') => Operator::Reserved,
                    Some(b'#') => Operator::Fragment,
                    Some(b'.') => Operator::Label,
                    Some(b'/') => Operator::Path,
                    Some(b';') => Operator::PathParameter,
                    Some(b'?') => Operator::Query,
                    Some(b'&') => Operator::QueryContinuation,
                    _ => Operator::Simple,
                };
                parts.push(Part::Expression(operator));
                rest = &rest[end + 1..];
            }
            Some(at) => {
                parts.push(Part::Literal(rest.as_bytes()[..at].to_vec()));
                rest = &rest[at..];
            }
            None => {
                parts.push(Part::Literal(rest.as_bytes().to_vec()));
                rest = "";
            }
        }
    }
    Some(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expressions_match_what_their_operator_can_expand_to() {
        for (template, uri, expected) in [
            ("mem://{id}", "mem://abc", true),
            ("mem://{id}", "mem://a%2Fb", true),
            ("mem://{id}", "mem://a/b", false),
            ("mem://{+id}", "mem://a/b", true),
            ("mem://a/{id}", "mem://a/b", true),
            ("mem://a/{id}", "mem://b/b", false),
            ("file:///{path}", "file:///x/y", false),
            ("file:///{+path}", "file:///x/y", true),
            (
                "users/{id}/posts{?page,limit}",
                "users/7/posts?page=2&limit=3",
                true,
            ),
            ("users/{id}/posts{?page}", "users/7/posts#x", false),
            ("a{/segments*}", "a/b/c", true),
            ("a{.ext}", "a.json", true),
            ("a{.ext}", "a/json", false),
            ("a{;p}", "a;p=1", true),
            ("x{#frag}", "x#a/b", true),
            ("exact", "exact", true),
            ("exact", "exactly", false),
            ("{a}{b}{c}{d}", "abcd", true),
            ("broken{", "broken{", false),
            ("ünï://{id}", "ünï://é", false),
        ] {
            assert_eq!(fits(template, uri), expected, "{template} {uri}");
        }
    }

    #[test]
    fn overlapping_expressions_stay_fast() {
        let template = "{a}{b}{c}{d}{e}{f}{g}{h}!";
        let uri = "x".repeat(MAX_URI_LEN - 1);
        let started = std::time::Instant::now();
        assert!(!fits(template, &uri));
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }
}
