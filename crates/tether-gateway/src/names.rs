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
//! Names are given once ([`Ledger`]): an entry keeps the name it was first given for the whole
//! run, and a name once given leads to that entry only, even after the entry left its server's
//! list. A server whose list changes can therefore neither take another server's name (calls
//! would reroute) nor push another server's entry onto a suffixed name (a filter written for
//! the name would miss it).
//!
//! At start the result depends only on the servers' names, their entries' names and their
//! order, so a client sees the same names every run.

use std::collections::HashMap;

use sha2::{Digest as _, Sha256};

/// The longest name a gateway offers (the limit common clients enforce on tool names).
pub const MAX_NAME_LEN: usize = 64;

/// Between the server's part and the entry's part.
pub const SEPARATOR: &str = "__";

/// Where a namespaced name leads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
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

/// The most names one [`Ledger`] gives in a run; an entry beyond it is not offered (a
/// server that renames its tools on every list change cannot grow the gateway without end).
pub const MAX_NAMES: usize = 65_536;

/// Every name given in a run, and to whom: once given, a name never moves.
#[derive(Debug, Default, Clone)]
pub struct Ledger {
    given: HashMap<Route, String>,
    holders: HashMap<String, Route>,
    /// Entries keep their own names (rules 1–3 without the `SERVER__` part).
    bare: bool,
}

/// What [`Ledger::name`] gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Given {
    /// The entry's name (given now or before), and the collision if it was given now under
    /// a suffix.
    Name(String, Option<Collision>),
    /// The ledger holds [`MAX_NAMES`] names already; this new entry gets none.
    Full,
}

impl Ledger {
    /// A ledger that gives entries their own names ([`ToolFilter::bare`]) or namespaced ones.
    pub fn new(bare: bool) -> Self {
        Self {
            bare,
            ..Self::default()
        }
    }

    /// The name of `server`'s entry `name`: the one it was given before, else a new one
    /// (rules 1–3 against every name given so far).
    pub fn name(&mut self, server: &str, name: &str) -> Given {
        let route = Route {
            server: server.to_owned(),
            name: name.to_owned(),
        };
        if let Some(given) = self.given.get(&route) {
            return Given::Name(given.clone(), None);
        }
        if self.given.len() >= MAX_NAMES {
            return Given::Full;
        }
        let wanted = offered_name(server, name, self.bare);
        let (chosen, collision) = if let Some(holder) = self.holders.get(&wanted) {
            let mut counter = 2usize;
            let chosen = loop {
                let suffix = format!("_{counter}");
                let candidate = format!("{}{suffix}", cut(&wanted, MAX_NAME_LEN - suffix.len()));
                if !self.holders.contains_key(&candidate) {
                    break candidate;
                }
                counter += 1;
            };
            let collision = Collision {
                wanted: wanted.clone(),
                kept_by: holder.clone(),
                renamed: route.clone(),
                renamed_to: chosen.clone(),
            };
            (chosen, Some(collision))
        } else {
            (wanted, None)
        };
        self.holders.insert(chosen.clone(), route.clone());
        self.given.insert(route, chosen.clone());
        Given::Name(chosen, collision)
    }
}

/// The namespaced names offered now, with the routes back: one build of the union, its names
/// from a [`Ledger`].
#[derive(Debug, Default, Clone)]
pub struct Namespace {
    routes: HashMap<String, Route>,
    /// The namespaced names, in the order the entries were given.
    order: Vec<String>,
    /// The collisions of names given during this build.
    collisions: Vec<Collision>,
}

impl Namespace {
    /// Names every `(server, name)` pair of `entries`, in order, from a fresh ledger.
    pub fn build<'a>(entries: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut ledger = Ledger::default();
        let mut namespace = Self::default();
        for (server, name) in entries {
            namespace.add(&mut ledger, server, name);
        }
        namespace
    }

    /// Adds one entry under its name from `ledger`. `None` when it gets no name (the ledger
    /// is full) or is a repeat of an entry added already (a server that lists a name twice).
    pub fn add(&mut self, ledger: &mut Ledger, server: &str, name: &str) -> Option<String> {
        let Given::Name(chosen, collision) = ledger.name(server, name) else {
            return None;
        };
        if self.routes.contains_key(&chosen) {
            return None;
        }
        self.collisions.extend(collision);
        self.routes.insert(
            chosen.clone(),
            Route {
                server: server.to_owned(),
                name: name.to_owned(),
            },
        );
        self.order.push(chosen.clone());
        Some(chosen)
    }

    /// Where `namespaced` leads, if it is one of these names.
    pub fn route(&self, namespaced: &str) -> Option<&Route> {
        self.routes.get(namespaced)
    }

    /// The namespaced names, in the order the entries were given.
    pub fn names(&self) -> &[String] {
        &self.order
    }

    /// The collisions of the names given while this was built, in order.
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
    /// Offer tools and prompts under their own names, without the `SERVER__` part
    /// (`--bare-names`): for a gateway in front of one server whose clients expect its names.
    /// Two servers' entries of the same name are told apart by rule 3's suffix.
    pub bare: bool,
}

impl ToolFilter {
    /// Whether `namespaced` is offered.
    pub fn allows(&self, namespaced: &str) -> bool {
        !self.exclude.iter().any(|p| glob_match(p, namespaced))
            && (self.include.is_empty() || self.include.iter().any(|p| glob_match(p, namespaced)))
    }

    /// Whether `server`'s tool `own`, offered as `given`, is offered: [`ToolFilter::allows`]
    /// of `given`, and no exclude pattern matches its unsuffixed name either (`SERVER__TOOL`
    /// before a collision suffix), so an exclusion holds however the tool came to be named.
    pub fn allows_entry(&self, given: &str, server: &str, own: &str) -> bool {
        let unsuffixed = namespaced(server, own);
        self.allows(given) && !self.exclude.iter().any(|p| glob_match(p, &unsuffixed))
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
    offered_name(server, name, false)
}

/// [`namespaced`], or with `bare` the entry's own name under the same rules (sanitized, cut
/// with a hash when too long).
fn offered_name(server: &str, name: &str, bare: bool) -> String {
    let joined = if bare {
        sanitize(name)
    } else {
        format!("{}{SEPARATOR}{}", sanitize(server), sanitize(name))
    };
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
            ..ToolFilter::default()
        };
        assert!(filter.allows("fs__read_file"));
        assert!(filter.allows("web__fetch"));
        assert!(!filter.allows("fs__delete_file"));
        assert!(!filter.allows("web__post"));
        assert!(ToolFilter::default().allows("anything__at_all"));
    }

    #[test]
    fn a_renamed_name_of_full_length_still_fits() {
        // Both sanitize to the same 64 characters: the later is cut to make room for `_2`.
        let first = (format!("{}__b", "a".repeat(29)), "c".repeat(30));
        let second = ("a".repeat(29), format!("b__{}", "c".repeat(30)));
        let namespace = Namespace::build([
            (first.0.as_str(), first.1.as_str()),
            (second.0.as_str(), second.1.as_str()),
        ]);
        assert_eq!(namespace.names()[0].len(), MAX_NAME_LEN);
        for name in namespace.names() {
            assert!(allowed(name), "{name}");
        }
        assert_ne!(namespace.names()[0], namespace.names()[1]);
        assert!(
            namespace.names()[1].ends_with("_2"),
            "{:?}",
            namespace.names()
        );
    }

    #[test]
    fn a_name_once_given_never_moves() {
        let mut ledger = Ledger::default();
        let mut first = Namespace::default();
        assert_eq!(
            first.add(&mut ledger, "a__b", "c").as_deref(),
            Some("a__b__c")
        );
        // Server `a` (earlier in spec order) now lists `b__c`, which sanitizes alike; it gets
        // the suffix, and `a__b`'s tool keeps its name.
        let mut second = Namespace::default();
        assert_eq!(
            second.add(&mut ledger, "a", "b__c").as_deref(),
            Some("a__b__c_2")
        );
        assert_eq!(
            second.add(&mut ledger, "a__b", "c").as_deref(),
            Some("a__b__c")
        );
        assert_eq!(second.collisions().len(), 1);
        // Gone from its list and back, an entry has its old name; nobody else took it.
        let mut third = Namespace::default();
        assert_eq!(
            third.add(&mut ledger, "a", "b__c").as_deref(),
            Some("a__b__c_2")
        );
        assert_eq!(third.route("a__b__c"), None);
        assert!(third.collisions().is_empty());
        // A repeat within one list is listed once.
        assert_eq!(third.add(&mut ledger, "a", "b__c"), None);
    }

    #[test]
    fn an_exclusion_holds_for_a_suffixed_name() {
        let filter = ToolFilter {
            include: Vec::new(),
            exclude: vec!["gh__a_b".into()],
            ..ToolFilter::default()
        };
        assert!(!filter.allows_entry("gh__a_b_2", "gh", "a.b"));
        assert!(filter.allows_entry("gh__c", "gh", "c"));
    }

    #[test]
    fn bare_names_are_the_entries_own_and_a_clash_gets_a_suffix() {
        let mut ledger = Ledger::new(true);
        assert_eq!(
            ledger.name("one", "test_simple_text"),
            Given::Name("test_simple_text".to_owned(), None)
        );
        let Given::Name(second, Some(collision)) = ledger.name("two", "test_simple_text") else {
            panic!("the second server's entry of the same name must be renamed");
        };
        assert_eq!(second, "test_simple_text_2");
        assert_eq!(collision.kept_by.server, "one");
        assert_eq!(
            ledger.name("one", "has space"),
            Given::Name("has_space".to_owned(), None)
        );
    }
}
