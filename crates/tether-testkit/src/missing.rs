//! What a test does when a part it needs (npm, a browser, a Secret Service, PostgreSQL, a
//! program) is not there: outside CI it skips, saying so; under `CI=true`, where `.ci/run`
//! installs every part, it fails. Every test that can lack a part goes through [`missing`], so
//! none passes by not running in CI.

use tether_env::EnvVars;

/// Whether the tests run under CI (`CI` set, as `.ci/run` and CI services do).
pub fn under_ci() -> bool {
    std::env::var_os(EnvVars::CI).is_some()
}

/// `part` is missing (`why`: what to install, or the error): panics under CI; otherwise says
/// that the test is skipped. The caller then returns.
///
/// The line goes straight to the process's stderr, not through `eprintln!`, which the test
/// harness captures and shows only for a test that fails: a test that skipped is reported as
/// passed, so its reason must be seen anyway (`SKIPPED test-name: …`, beside `ok`).
///
/// # Panics
/// Under CI, always.
pub fn missing(part: &str, why: &str) {
    assert!(
        !under_ci(),
        "{part} is required under CI (.ci/run installs it): {why}"
    );
    skipped(&format!("{part} is missing: {why}"));
}

/// Says that the running test is skipped, and `why` (a condition this machine does not meet
/// that no install gives, such as running as root): `SKIPPED test-name: why` on the process's
/// stderr, past the harness's capture (see [`missing`]). The caller then returns.
pub fn skipped(why: &str) {
    use std::io::Write as _;
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    let line = format!("SKIPPED {test}: {why}\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}
