//! Where the time comes from: every decision about a token's expiry (when a token answer's
//! `expires_in` ends, whether a stored token is near its end) reads the workspace's
//! [`tether_clock::Clock`] the caller passes, so tests move time instead of waiting for it.

pub use tether_clock::{Clock, SystemClock};

/// Seconds since the Unix epoch on `clock`.
pub(crate) fn now_unix(clock: &dyn Clock) -> i64 {
    clock.now_utc().unix_timestamp()
}

#[cfg(test)]
pub(crate) use manual::ManualClock;

#[cfg(test)]
mod manual {
    //! A clock set to a Unix second, for this crate's unit tests (expiry is all they need;
    //! tether-testkit's `ManualClock` also drives sleeps, and starts at the real time).

    use std::sync::atomic::{AtomicI64, Ordering};
    use std::time::{Duration, Instant};

    use tether_clock::{Clock, Sleep};
    use time::OffsetDateTime;

    /// A clock that shows what it was set to: time moves only when told.
    #[derive(Debug)]
    pub(crate) struct ManualClock {
        now: AtomicI64,
        base: Instant,
    }

    impl ManualClock {
        /// A clock showing `now` (Unix seconds).
        pub(crate) fn at(now: i64) -> Self {
            Self {
                now: AtomicI64::new(now),
                base: Instant::now(),
            }
        }

        /// Shows `now` from here on.
        pub(crate) fn set(&self, now: i64) {
            self.now.store(now, Ordering::SeqCst);
        }

        /// Moves the clock `by` forward.
        pub(crate) fn advance(&self, by: Duration) {
            let by = i64::try_from(by.as_secs()).unwrap_or(i64::MAX);
            self.now.fetch_add(by, Ordering::SeqCst);
        }
    }

    impl Clock for ManualClock {
        fn now_utc(&self) -> OffsetDateTime {
            OffsetDateTime::from_unix_timestamp(self.now.load(Ordering::SeqCst))
                .unwrap_or(OffsetDateTime::UNIX_EPOCH)
        }

        fn now(&self) -> Instant {
            let seconds = u64::try_from(self.now.load(Ordering::SeqCst)).unwrap_or(0);
            self.base + Duration::from_secs(seconds)
        }

        fn sleep(&self, _duration: Duration) -> Sleep<'_> {
            Box::pin(std::future::ready(()))
        }
    }

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let clock = ManualClock::at(1_000);
        assert_eq!(super::now_unix(&clock), 1_000);
        clock.advance(Duration::from_secs(61));
        assert_eq!(super::now_unix(&clock), 1_061);
        clock.set(5);
        assert_eq!(super::now_unix(&clock), 5);
    }
}
