//! Where the time comes from: every decision about a token's expiry (when a token answer's
//! `expires_in` ends, whether a stored token is near its end) reads a [`Clock`] the caller
//! passes, so tests move time instead of waiting for it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// The current time, in seconds since the Unix epoch.
pub trait Clock: Send + Sync {
    /// Seconds since the Unix epoch, now.
    fn now_unix(&self) -> i64;
}

/// The system's wall clock: what a program uses.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_unix(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
    }
}

/// A clock that shows what it was set to, for tests: time moves only when told.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicI64,
}

impl ManualClock {
    /// A clock showing `now` (Unix seconds).
    pub fn at(now: i64) -> Self {
        Self {
            now: AtomicI64::new(now),
        }
    }

    /// Shows `now` from here on.
    pub fn set(&self, now: i64) {
        self.now.store(now, Ordering::SeqCst);
    }

    /// Moves the clock `by` forward.
    pub fn advance(&self, by: Duration) {
        let by = i64::try_from(by.as_secs()).unwrap_or(i64::MAX);
        self.now
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                Some(now.saturating_add(by))
            })
            .ok();
    }
}

impl Clock for ManualClock {
    fn now_unix(&self) -> i64 {
        self.now.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let clock = ManualClock::at(1_000);
        assert_eq!(clock.now_unix(), 1_000);
        clock.advance(Duration::from_secs(61));
        assert_eq!(clock.now_unix(), 1_061);
        clock.set(5);
        assert_eq!(clock.now_unix(), 5);
    }

    #[test]
    fn the_system_clock_is_after_2020() {
        assert!(SystemClock.now_unix() > 1_577_836_800);
    }
}
