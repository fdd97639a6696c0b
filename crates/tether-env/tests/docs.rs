//! README's configuration table lists exactly the variables of `EnvVars::ALL`, each once.

#![allow(
    clippy::expect_used,
    reason = "a test binary: helpers outside #[test] functions panic on setup failure too"
)]

use tether_env::EnvVars;

/// The variable names of the rows of README's `## Configuration` table (first cell, in
/// backticks).
fn readme_variables() -> Vec<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("reading README.md");
    let section = readme
        .split("\n## Configuration\n")
        .nth(1)
        .expect("README has a `## Configuration` section");
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once('`'))
        .map(|(name, _)| name.to_owned())
        .collect()
}

#[test]
fn readme_configuration_table_matches_the_registry() {
    let listed = readme_variables();
    for var in EnvVars::ALL {
        let count = listed.iter().filter(|name| *name == var.name).count();
        assert_eq!(
            count, 1,
            "README's configuration table should list {} once (found {count})",
            var.name
        );
    }
    for name in &listed {
        assert!(
            EnvVars::ALL.iter().any(|var| var.name == name),
            "README's configuration table lists {name}, which tether_env::EnvVars does not declare"
        );
    }
}
