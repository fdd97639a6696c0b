//! What a test does when a part it needs (npm, a browser, a Secret Service, PostgreSQL, a
//! program) is not there: outside CI it skips, saying so; under `CI=true`, where `.ci/run`
//! installs every part, it fails. Every test that can lack a part goes through [`missing`], so
//! none passes by not running in CI.

use tether_env::EnvVars;

/// Whether the tests run under CI (`CI` set, as `.ci/run` and CI services do).
pub fn under_ci() -> bool {
    std::env::var_os(EnvVars::CI).is_some()
}

/// `part` is missing (`why`: what to install, or the error): panics under CI; otherwise prints
/// that the test is skipped. The caller then returns.
///
/// # Panics
/// Under CI, always.
pub fn missing(part: &str, why: &str) {
    assert!(
        !under_ci(),
        "{part} is required under CI (.ci/run installs it): {why}"
    );
    eprintln!("skipped: {part} is missing: {why}");
}
