//! The kill-test hook: compiled only with the `test-hooks` feature, which tests enable and no
//! shipped build does (`cargo build`/`cargo install` of `tether-cli` leave it off).
//!
//! With the feature, `TETHER_TEST_STORE_PAUSE=STEP:PATH` makes an install stop at STEP
//! (`pending`, `values`, `committed`): it creates the file PATH and waits until the test
//! removes it (or kills the process, which is what the tests do), at most
//! [`LONGEST_PAUSE`]. Without the feature [`pause_point`] is empty and the variable is not read.

#[cfg(feature = "test-hooks")]
use std::time::{Duration, Instant};

/// The longest an install waits at a pause point for the test to remove the marker file.
#[cfg(feature = "test-hooks")]
pub(crate) const LONGEST_PAUSE: Duration = Duration::from_secs(60);

/// How often the marker file is looked at while paused.
#[cfg(feature = "test-hooks")]
const LOOK_EVERY: Duration = Duration::from_millis(10);

/// Pauses the install at `step` when `TETHER_TEST_STORE_PAUSE` names it (see the module docs).
#[cfg(feature = "test-hooks")]
pub(crate) fn pause_point(step: &str) {
    let Ok(setting) = std::env::var(tether_env::EnvVars::TETHER_TEST_STORE_PAUSE) else {
        return;
    };
    let Some((wanted, marker)) = setting.split_once(':') else {
        return;
    };
    if wanted != step || std::fs::write(marker, step).is_err() {
        return;
    }
    let paused = Instant::now();
    while std::path::Path::new(marker).exists() && paused.elapsed() < LONGEST_PAUSE {
        std::thread::sleep(LOOK_EVERY);
    }
}

/// Without the `test-hooks` feature: nothing.
#[cfg(not(feature = "test-hooks"))]
pub(crate) fn pause_point(_step: &str) {}
