//! Runs every case of the config vectors every implementation must pass: the copy vendored in
//! `tests/vectors/config_cases.json`, or the file `TETHER_VECTORS` names. A missing vectors
//! file fails the test: it is never skipped. The vendored copy is also checked, byte for byte,
//! against the shared original `../shared/vectors/config_cases.json` (next to the repository)
//! when that file exists.
//!
//! `tests/vectors/dialect_cases.json` holds tether's own dialect cases (the config dialects users
//! paste: JSONC, other tools' variable syntaxes, `disabled`, tool filters, masking), in the same
//! form plus `env` (the environment `${VAR}` reads) and `cwd` (the working directory). Its
//! `replaces` list names shared cases whose expectation the dialect rules changed, with the reason; those
//! are skipped in the shared file (each must exist there) until the shared file follows.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use pretty_assertions::assert_eq;
use serde::Deserialize;
use serde_json::{Map, Value};
use tether_config::{EnvLookup, Exposure, Origin, Secrets, parse_config};
use tether_env::EnvVars;

#[derive(Deserialize)]
struct Vectors {
    cases: Vec<Case>,
    #[serde(default)]
    replaces: Vec<Replaced>,
}

/// A shared case whose expectation a later issue changed.
#[derive(Deserialize)]
struct Replaced {
    name: String,
    why: String,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    path: String,
    config: String,
    #[serde(default)]
    secrets: Map<String, Value>,
    expect: Option<Map<String, Value>>,
    /// The rendered map as printed masked (`Exposure::Masked`), when the case checks it.
    expect_masked: Option<Map<String, Value>>,
    error_contains: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<String>,
}

/// A case's environment: its `env` map and its working directory.
struct CaseEnv<'a> {
    vars: &'a BTreeMap<String, String>,
    cwd: Option<&'a str>,
}

impl EnvLookup for CaseEnv<'_> {
    fn get(&self, name: &str) -> Option<String> {
        self.vars.get(name).cloned()
    }

    fn working_dir(&self) -> Option<String> {
        self.cwd.map(str::to_owned)
    }
}

/// The copy of the shared vectors kept in this crate (what a fresh clone tests).
const VENDORED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/vectors/config_cases.json"
);

/// The dialect cases (tether's own, not shared yet).
const DIALECTS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/vectors/dialect_cases.json"
);

/// The shared original, next to the repository (`<repo>/../shared/vectors/`): absent in a
/// fresh clone.
const SHARED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/vectors/config_cases.json"
);

/// The vectors to run: `$TETHER_VECTORS`, else the vendored copy.
fn vectors_path() -> PathBuf {
    std::env::var_os(EnvVars::TETHER_VECTORS).map_or_else(|| PathBuf::from(VENDORED), PathBuf::from)
}

#[test]
fn vendored_vectors_equal_the_shared_original() {
    let shared = Path::new(SHARED);
    if !shared.is_file() {
        eprintln!(
            "skipped: no shared original at {} to compare the vendored vectors with",
            shared.display()
        );
        return;
    }
    let vendored = std::fs::read(VENDORED).expect("reading the vendored vectors");
    let original = std::fs::read(shared).expect("reading the shared original vectors");
    assert!(
        vendored == original,
        "{VENDORED} differs from {}: copy the shared file over the vendored one",
        shared.display()
    );
    eprintln!("the vendored vectors equal {}", shared.display());
}

/// Parses, applies secrets and renders `case`, returning the rendered map or the error text.
fn run(case: &Case) -> Result<Map<String, Value>, String> {
    run_as(case, Exposure::Real)
}

/// [`run`] with the values shown as `exposure` asks.
fn run_as(case: &Case, exposure: Exposure) -> Result<Map<String, Value>, String> {
    let origin = match case.path.as_str() {
        "user" => Origin::User,
        "managed" => Origin::Managed,
        other => panic!("case '{}': unknown path '{other}'", case.name),
    };
    let secrets: Secrets = case
        .secrets
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
        .collect();
    let parsed = parse_config(&case.config, origin).map_err(|e| e.to_string())?;
    Ok(parsed
        .servers
        .into_iter()
        .map(|server| {
            let env = CaseEnv {
                vars: &case.env,
                cwd: case.cwd.as_deref(),
            };
            let rendered = server.into_installation().render(&secrets, &env);
            (rendered.name.clone(), rendered.to_json(exposure))
        })
        .collect())
}

/// Keeps only the keys the vector names: our model may carry more (e.g. `type`).
fn restrict(actual: &Map<String, Value>, expect: &Map<String, Value>) -> Map<String, Value> {
    actual
        .iter()
        .map(|(name, server)| {
            let wanted = expect.get(name).and_then(Value::as_object);
            let kept: Map<String, Value> = match (server.as_object(), wanted) {
                (Some(fields), Some(wanted)) => fields
                    .iter()
                    .filter(|(k, _)| wanted.contains_key(*k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                _ => server.as_object().cloned().unwrap_or_default(),
            };
            (name.clone(), Value::Object(kept))
        })
        .collect()
}

fn read_vectors(path: &Path) -> Vectors {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read the vectors at {}: {e}", path.display()));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("the vectors at {} are not valid: {e}", path.display()))
}

/// A failure line when `actual`, restricted to the keys `expect` names, differs from it.
fn mismatch(
    name: &str,
    expect: &Map<String, Value>,
    actual: &Map<String, Value>,
) -> Option<String> {
    let actual = restrict(actual, expect);
    (&actual != expect).then(|| {
        format!(
            "{name}: expected {}\n  got {}",
            Value::Object(expect.clone()),
            Value::Object(actual)
        )
    })
}

/// Runs `cases`, returning one line per failure.
fn failures<'a>(cases: impl IntoIterator<Item = &'a Case>) -> Vec<String> {
    let mut failures = Vec::new();
    for case in cases {
        if let Some(expect) = &case.expect_masked {
            match run_as(case, Exposure::Masked) {
                Ok(actual) => failures.extend(mismatch(
                    &format!("{} (masked)", case.name),
                    expect,
                    &actual,
                )),
                Err(message) => failures.push(format!(
                    "{} (masked): unexpected error {message}",
                    case.name
                )),
            }
        }
        let outcome = run(case);
        let secret_values: Vec<&str> = case.secrets.values().filter_map(Value::as_str).collect();
        match (&case.expect, &case.error_contains, outcome) {
            (Some(expect), _, Ok(actual)) => failures.extend(mismatch(&case.name, expect, &actual)),
            (None, Some(needle), Err(message)) => {
                if !message.contains(needle.as_str()) {
                    failures.push(format!("{}: error {message:?} lacks {needle:?}", case.name));
                }
                if let Some(leak) = secret_values
                    .iter()
                    .find(|v| v.len() > 2 && message.contains(**v))
                {
                    failures.push(format!("{}: error shows the secret {leak:?}", case.name));
                }
            }
            (_, _, Err(message)) => {
                failures.push(format!("{}: unexpected error {message}", case.name))
            }
            (_, _, Ok(actual)) => failures.push(format!(
                "{}: expected an error, got {}",
                case.name,
                Value::Object(actual)
            )),
        }
    }
    failures
}

#[test]
fn every_shared_vector_passes() {
    let vectors = read_vectors(&vectors_path());
    assert!(!vectors.cases.is_empty(), "the vectors file holds no case");
    let replaced = read_vectors(Path::new(DIALECTS)).replaces;
    for replaced in &replaced {
        assert!(
            vectors.cases.iter().any(|case| case.name == replaced.name),
            "dialect_cases.json replaces '{}', which the shared vectors do not hold: drop it from `replaces`",
            replaced.name
        );
        eprintln!(
            "replaced by dialect_cases.json: '{}' ({})",
            replaced.name, replaced.why
        );
    }
    let kept: Vec<&Case> = vectors
        .cases
        .iter()
        .filter(|case| !replaced.iter().any(|r| r.name == case.name))
        .collect();
    let failures = failures(kept.iter().copied());
    assert_eq!(
        failures,
        Vec::<String>::new(),
        "{} of {} vectors failed",
        failures.len(),
        kept.len()
    );
    eprintln!("{} config vectors passed", kept.len());
}

#[test]
fn every_dialect_vector_passes() {
    let vectors = read_vectors(Path::new(DIALECTS));
    assert!(
        !vectors.cases.is_empty(),
        "the dialect vectors hold no case"
    );
    let failures = failures(&vectors.cases);
    assert_eq!(
        failures,
        Vec::<String>::new(),
        "{} of {} dialect vectors failed",
        failures.len(),
        vectors.cases.len()
    );
    eprintln!("{} dialect vectors passed", vectors.cases.len());
}
