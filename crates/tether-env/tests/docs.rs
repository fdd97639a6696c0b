//! The environment-variable table of `docs/configuration.md` lists exactly the variables of
//! `EnvVars::ALL` that a user can meet — every one whose reader is not [`Reader::Tests`] — each
//! once, with its reader; and no user document names a variable only the tests read.

#![allow(
    clippy::expect_used,
    reason = "a test binary: helpers outside #[test] functions panic on setup failure too"
)]

use std::path::{Path, PathBuf};

use tether_env::{EnvVarDoc, EnvVars, Reader};

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The file the table lives in, and its section heading.
const TABLE_FILE: &str = "docs/configuration.md";
const TABLE_SECTION: &str = "\n## Environment variables\n";

/// Documents for developers of tether, where the tests' own variables belong.
const DEVELOPER_DOCS: &[&str] = &["docs/development.md"];

fn read(relative: &str) -> String {
    std::fs::read_to_string(root().join(relative))
        .unwrap_or_else(|error| panic!("reading {relative}: {error}"))
}

/// The (variable, read-by) cells of the rows of the table: the first cell in backticks, the
/// second as written.
fn table_rows() -> Vec<(String, String)> {
    let text = read(TABLE_FILE);
    let section = text
        .split(TABLE_SECTION)
        .nth(1)
        .unwrap_or_else(|| panic!("{TABLE_FILE} has a `## Environment variables` section"));
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| {
            let (name, rest) = rest.split_once('`')?;
            let reader = rest.trim_start_matches(' ').strip_prefix('|')?;
            let reader = reader.split('|').next()?.trim();
            Some((name.to_owned(), reader.to_owned()))
        })
        .collect()
}

/// What the table's "read by" column says for `reader`.
fn reader_cell(reader: Reader) -> Option<&'static str> {
    match reader {
        Reader::Tether => Some("tether"),
        Reader::Server => Some("tether-server"),
        Reader::Harness => Some("harness hand-off"),
        Reader::Tests => None,
    }
}

fn user_facing(var: &EnvVarDoc) -> bool {
    reader_cell(var.reader).is_some()
}

/// README.md and every `docs/*.md` but the developer documents.
fn user_docs() -> Vec<String> {
    let mut docs = vec!["README.md".to_owned()];
    let dir = std::fs::read_dir(root().join("docs")).expect("reading docs/");
    for entry in dir {
        let name = entry.expect("a docs/ entry").file_name();
        let name = name.to_string_lossy();
        let relative = format!("docs/{name}");
        if name.ends_with(".md") && !DEVELOPER_DOCS.contains(&relative.as_str()) {
            docs.push(relative);
        }
    }
    docs.sort();
    docs
}

/// Whether `text` names `name` in backticks: `` `NAME` ``, `` `NAME=… `` and the like (the
/// name not followed by another character of a variable name).
fn names_in_code(text: &str, name: &str) -> bool {
    let needle = format!("`{name}");
    text.match_indices(&needle).any(|(at, _)| {
        text[at + needle.len()..]
            .chars()
            .next()
            .is_none_or(|next| !(next.is_ascii_alphanumeric() || next == '_'))
    })
}

#[test]
fn configuration_table_lists_every_user_facing_variable_once_with_its_reader() {
    let rows = table_rows();
    for var in EnvVars::ALL.iter().filter(|var| user_facing(var)) {
        let found: Vec<&(String, String)> =
            rows.iter().filter(|(name, _)| name == var.name).collect();
        assert_eq!(
            found.len(),
            1,
            "{TABLE_FILE}'s environment table should list {} once (found {})",
            var.name,
            found.len()
        );
        assert_eq!(
            Some(found[0].1.as_str()),
            reader_cell(var.reader),
            "{TABLE_FILE}: the reader of {}",
            var.name
        );
    }
    for (name, _) in &rows {
        let var = EnvVars::ALL.iter().find(|var| var.name == name);
        assert!(
            var.is_some(),
            "{TABLE_FILE}'s environment table lists {name}, which tether_env::EnvVars does not declare"
        );
        assert!(
            var.is_some_and(user_facing),
            "{TABLE_FILE}'s environment table lists {name}, which only the tests read"
        );
    }
}

#[test]
fn no_user_document_names_a_variable_only_the_tests_read() {
    let docs = user_docs();
    assert!(docs.iter().any(|doc| doc == TABLE_FILE), "{docs:?}");
    for doc in &docs {
        let text = read(doc);
        for var in EnvVars::ALL.iter().filter(|var| !user_facing(var)) {
            assert!(
                !names_in_code(&text, var.name),
                "{doc} names `{}`, which only the tests read: it belongs in {DEVELOPER_DOCS:?}",
                var.name
            );
        }
    }
}

#[test]
fn names_in_code_matches_whole_names_only() {
    assert!(names_in_code("set `CI` to", "CI"));
    assert!(names_in_code("under `CI=true`", "CI"));
    assert!(!names_in_code("`CIRCLE` and CI", "CI"));
    assert!(!names_in_code("`TETHER_HOME_X`", "TETHER_HOME"));
}
