//! Time as a value the caller passes.
//!
//! Code that decides something by time — when a managed config is re-minted, how long a
//! crashed server waits before its restart, whether a proxy token has expired, when a
//! rate-limited key is served again — reads a [`Clock`] it was given instead of the system
//! clock. Programs pass [`SystemClock`]; tests pass a clock they move forward themselves
//! (`tether_testkit::ManualClock`), so no test waits seconds for time to pass.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use tether_clock::{Clock, SystemClock};
//!
//! # async fn demo() {
//! let clock: Arc<dyn Clock> = Arc::new(SystemClock);
//! let started = clock.now();
//! clock.sleep(Duration::from_millis(1)).await;
//! assert!(clock.now() >= started);
//! # }
//! ```
//!
//! **Invariant:** the clock only tells time and waits; it holds no schedule of its own.

#![deny(missing_docs)]

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use time::OffsetDateTime;

/// What [`Clock::sleep`] returns: a future that completes once the time has passed on that
/// clock.
pub type Sleep<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// A source of time: the wall clock, a monotonic clock, and waiting on it.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The wall-clock time now (for expiry times other programs wrote).
    fn now_utc(&self) -> OffsetDateTime;

    /// A monotonic instant now (for intervals: rests between attempts, uptime).
    fn now(&self) -> Instant;

    /// Waits until `duration` has passed on this clock.
    fn sleep(&self, duration: Duration) -> Sleep<'_>;

    /// Milliseconds since the Unix epoch, wall clock (saturating at `i64`'s range).
    fn unix_ms(&self) -> i64 {
        i64::try_from(self.now_utc().unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX)
    }
}

/// The system's clocks, and tokio's timer for waiting: what programs use.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_utc(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }

    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep(&self, duration: Duration) -> Sleep<'_> {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// [`SystemClock`], shared: the default wherever a clock can be passed.
pub fn system() -> Arc<dyn Clock> {
    Arc::new(SystemClock)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_ms_agrees_with_the_wall_clock() {
        let before = OffsetDateTime::now_utc().unix_timestamp() * 1000;
        let ms = SystemClock.unix_ms();
        let after = OffsetDateTime::now_utc().unix_timestamp() * 1000 + 1000;
        assert!(before <= ms && ms <= after, "{before} {ms} {after}");
    }
}
