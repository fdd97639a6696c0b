//! Namespaced names: `server__tool`, in the character set and length common clients accept.
//!
//! Rules (specs/gateway/TECH.md §2):
//! 1. `SERVER__NAME`, each part with every character outside `[A-Za-z0-9_-]` replaced by `_`;
//! 2. longer than [`MAX_NAME_LEN`]: cut, and `_` plus the first 8 hex digits of the SHA-256 of
//!    the unsanitized `server\0name` appended, so two long names that share a prefix differ;
//! 3. a name taken already (two servers sanitize alike, `a__b`+`c` against `a`+`b__c`): the
//!    later entry (spec order, then the server's own order) gets `_2`, `_3`, … (cut to fit),
//!    and the collision is reported.
//!
//! The result depends only on the servers' names, their entries' names and their order, so a
//! client sees the same names every run.

use std::collections::HashMap;

use sha2::{Digest as _, Sha256};

/// The longest name a gateway offers (the limit common clients enforce on tool names).
pub const MAX_NAME_LEN: usize = 64;

/// Between the server's part and the entry's part.
pub const SEPARATOR: &str = "__";

/// Where a namespaced name leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The server's name in the run.
    pub server: String,
    /// The entry's own name on that server.
    pub name: String,
}

/// Two entries whose names came out the same; the later one was renamed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collision {
    /// The name both wanted.
    pub wanted: String,
    /// Who kept it.
    pub kept_by: Route,
    /// Who was renamed, and to what.
    pub renamed: Route,
    /// The name the later one got instead.
    pub renamed_to: String,
}

/// Namespaced names for a list of entries, in order, with the routes back.
#[derive(Debug, Default, Clone)]
pub struct Namespace {
    routes: HashMap<String, Route>,
    /// The namespaced names, in the order the entries were given.
    order: Vec<String>,
    collisions: Vec<Collision>,
}

impl Namespace {
    /// Names every `(server, name)` pair of `entries`, in order.
    pub fn build<'a>(entries: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut namespace = Self::default();
        for (server, name) in entries {
            namespace.add(server, name);
        }
        namespace
    }

    /// Names one more entry and returns its namespaced name.
    pub fn add(&mut self, server: &str, name: &str) -> String {
        let wanted = namespaced(server, name);
        let route = Route {
            server: server.to_owned(),
            name: name.to_owned(),
        };
        let chosen = if self.routes.contains_key(&wanted) {
            let mut counter = 2usize;
            let chosen = loop {
                let suffix = format!("_{counter}");
                let candidate = format!("{}{suffix}", cut(&wanted, MAX_NAME_LEN - suffix.len()));
                if !self.routes.contains_key(&candidate) {
                    break candidate;
                }
                counter += 1;
            };
            self.collisions.push(Collision {
                wanted: wanted.clone(),
                kept_by: self.routes[&wanted].clone(),
                renamed: route.clone(),
                renamed_to: chosen.clone(),
            });
            chosen
        } else {
            wanted
        };
        self.routes.insert(chosen.clone(), route);
        self.order.push(chosen.clone());
        chosen
    }

    /// Where `namespaced` leads, if it is one of these names.
    pub fn route(&self, namespaced: &str) -> Option<&Route> {
        self.routes.get(namespaced)
    }

    /// The namespaced names, in the order the entries were given.
    pub fn names(&self) -> &[String] {
        &self.order
    }

    /// Every collision, in the order they happened.
    pub fn collisions(&self) -> &[Collision] {
        &self.collisions
    }
}

/// Which namespaced tools a gateway offers (`--include-tools`, `--exclude-tools`): patterns
/// over `SERVER__TOOL` names where `*` stands for any run of characters (`github__*`,
/// `*__delete_*`). A name is offered when no exclude pattern matches it and, if include
/// patterns are given, one of them does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolFilter {
    /// Offer only names matching one of these (all when empty).
    pub include: Vec<String>,
    /// Never offer names matching one of these.
    pub exclude: Vec<String>,
}

impl ToolFilter {
    /// Whether `namespaced` is offered.
    pub fn allows(&self, namespaced: &str) -> bool {
        !self.exclude.iter().any(|p| glob_match(p, namespaced))
            && (self.include.is_empty() || self.include.iter().any(|p| glob_match(p, namespaced)))
    }
}

/// Whether `text` matches `pattern`, where `*` matches any run of characters (none included)
/// and every other character itself.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// `SERVER__NAME`, sanitized and no longer than [`MAX_NAME_LEN`] (rules 1 and 2).
pub fn namespaced(server: &str, name: &str) -> String {
    let joined = format!("{}{SEPARATOR}{}", sanitize(server), sanitize(name));
    if joined.len() <= MAX_NAME_LEN {
        return joined;
    }
    let mut hasher = Sha256::new();
    hasher.update(server.as_bytes());
    hasher.update([0]);
    hasher.update(name.as_bytes());
    let digest = hasher.finalize();
    let tag: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    format!("{}_{tag}", cut(&joined, MAX_NAME_LEN - 1 - tag.len()))
}

/// Every character outside `[A-Za-z0-9_-]` as `_`; an empty part as `_`.
pub fn sanitize(part: &str) -> String {
    if part.is_empty() {
        return "_".to_owned();
    }
    part.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The first `len` bytes of an ASCII `text` (sanitized names are ASCII).
fn cut(text: &str, len: usize) -> &str {
    text.get(..len.min(text.len())).unwrap_or(text)
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    fn allowed(name: &str) -> bool {
        name.len() <= MAX_NAME_LEN
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    }

    #[test]
    fn names_are_server_then_tool() {
        for (server, tool, expected) in [
            ("everything", "echo", "everything__echo"),
            ("my server", "get.item", "my_server__get_item"),
            ("gh", "list-issues", "gh__list-issues"),
            ("ünï", "tool/x", "_n___tool_x"),
            ("", "", "____"),
        ] {
            let got = namespaced(server, tool);
            assert_eq!(got, expected, "{server} {tool}");
            assert!(allowed(&got), "{got}");
        }
    }

    #[test]
    fn long_names_are_cut_with_a_hash_that_tells_them_apart() {
        let server = "s".repeat(40);
        let first = namespaced(&server, &format!("{}_one", "t".repeat(40)));
        let second = namespaced(&server, &format!("{}_two", "t".repeat(40)));
        assert_eq!(first.len(), MAX_NAME_LEN);
        assert_eq!(second.len(), MAX_NAME_LEN);
        assert_ne!(first, second);
        assert!(allowed(&first) && allowed(&second));
        // The same input gives the same name, every run.
        assert_eq!(
            first,
            namespaced(&server, &format!("{}_one", "t".repeat(40)))
        );
    }

    #[test]
    fn collisions_rename_the_later_entry_and_are_reported() {
        let namespace = Namespace::build([("a__b", "c"), ("a", "b__c"), ("a.b", "c"), ("x", "y")]);
        assert_eq!(
            namespace.names(),
            ["a__b__c", "a__b__c_2", "a_b__c", "x__y"]
        );
        assert_eq!(
            namespace.route("a__b__c_2"),
            Some(&Route {
                server: "a".into(),
                name: "b__c".into()
            })
        );
        assert_eq!(namespace.collisions().len(), 1);
        let collision = &namespace.collisions()[0];
        assert_eq!(collision.kept_by.server, "a__b");
        assert_eq!(collision.renamed_to, "a__b__c_2");
    }

    #[test]
    fn globs_match_runs_and_filters_combine() {
        for (pattern, text, expected) in [
            ("github__*", "github__create_issue", true),
            ("github__*", "gitlab__create_issue", false),
            ("*__delete_*", "fs__delete_file", true),
            ("*__delete_*", "fs__undelete", false),
            ("exact__name", "exact__name", true),
            ("exact__name", "exact__names", false),
            ("*", "", true),
            ("a*b*c", "abc", true),
            ("a*b*c", "acb", false),
            ("ab*ba", "aba", false),
        ] {
            assert_eq!(glob_match(pattern, text), expected, "{pattern} {text}");
        }
        let filter = ToolFilter {
            include: vec!["fs__*".into(), "web__fetch".into()],
            exclude: vec!["*__delete_*".into()],
        };
        assert!(filter.allows("fs__read_file"));
        assert!(filter.allows("web__fetch"));
        assert!(!filter.allows("fs__delete_file"));
        assert!(!filter.allows("web__post"));
        assert!(ToolFilter::default().allows("anything__at_all"));
    }

    #[test]
    fn a_renamed_long_name_still_fits() {
        let server = "s".repeat(70);
        let namespace = Namespace::build([(server.as_str(), "t"), (server.as_str(), "t")]);
        for name in namespace.names() {
            assert!(allowed(name), "{name}");
        }
        assert_ne!(namespace.names()[0], namespace.names()[1]);
    }
}
