//! `parse_secret_args` against `tests/vectors/secret_args.json`: what both binaries accept and
//! refuse for `--secret NAME=SOURCE`, with their exact messages.

#![allow(clippy::expect_used, reason = "test helpers fail loudly")]

use pretty_assertions::assert_eq;
use serde::Deserialize;
use tether_config::{SecretSource, parse_secret_args};

#[derive(Deserialize)]
struct Vectors {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    args: Vec<String>,
    parsed: Option<Vec<[String; 3]>>,
    error: Option<String>,
}

const VECTORS: &str = include_str!("vectors/secret_args.json");

/// The source's kind and argument (a command's words joined with `|`).
fn source_parts(source: &SecretSource) -> (&'static str, String) {
    match source {
        SecretSource::Env(var) => ("env", var.clone()),
        SecretSource::File(path) => ("file", path.clone()),
        SecretSource::Command(words) => ("cmd", words.join("|")),
        SecretSource::Stdin => ("stdin", String::new()),
        SecretSource::Prompt => ("prompt", String::new()),
    }
}

#[test]
fn secret_arg_vectors() {
    let vectors: Vectors = serde_json::from_str(VECTORS).expect("the vectors are valid JSON");
    assert!(vectors.cases.len() >= 10, "the vectors were read");
    for case in vectors.cases {
        let result = parse_secret_args(&case.args);
        match (case.parsed, case.error) {
            (Some(expected), None) => {
                let parsed = result.unwrap_or_else(|e| panic!("{}: refused: {e}", case.name));
                let got: Vec<[String; 3]> = parsed
                    .iter()
                    .map(|arg| {
                        let (kind, value) = source_parts(&arg.source);
                        [arg.name.clone(), kind.to_owned(), value]
                    })
                    .collect();
                assert_eq!(got, expected, "{}", case.name);
            }
            (None, Some(expected)) => {
                let error = match result {
                    Err(error) => error.to_string(),
                    Ok(parsed) => panic!("{}: accepted: {parsed:?}", case.name),
                };
                assert_eq!(error, expected, "{}", case.name);
                assert!(!error.contains("SENTINEL"), "{}: {error}", case.name);
            }
            _ => panic!("{}: a case has either parsed or error", case.name),
        }
    }
}
