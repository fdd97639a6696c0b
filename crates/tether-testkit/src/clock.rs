//! [`ManualClock`]: a [`Clock`] that moves only when the test says so.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tether_clock::{Clock, Sleep};
use time::OffsetDateTime;
use tokio::sync::watch;

/// A clock that starts at the real time and moves only by [`ManualClock::advance`]: code
/// given it decides "is it due yet" and waits in [`Clock::sleep`] as it would on the system
/// clock, while the test decides when time passes.
#[derive(Debug)]
pub struct ManualClock {
    start_utc: OffsetDateTime,
    start: Instant,
    /// How far the clock has been moved.
    elapsed: watch::Sender<Duration>,
    /// How many [`Clock::sleep`]s are waiting.
    sleepers: watch::Sender<usize>,
}

impl ManualClock {
    /// A clock at the real time now, shared (pass a clone to the code under test).
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            start_utc: OffsetDateTime::now_utc(),
            start: Instant::now(),
            elapsed: watch::Sender::new(Duration::ZERO),
            sleepers: watch::Sender::new(0),
        })
    }

    /// Moves the clock forward by `by`, waking every sleep whose time has come.
    pub fn advance(&self, by: Duration) {
        self.elapsed.send_modify(|elapsed| *elapsed += by);
    }

    /// How far the clock has been moved since it was made.
    pub fn elapsed(&self) -> Duration {
        *self.elapsed.borrow()
    }

    /// Waits (at most `limit`, then panics) until at least `count` sleeps are waiting on this
    /// clock: after it, an [`advance`](Self::advance) is seen by them (each one's wake-up time
    /// was fixed when it started).
    pub async fn sleeping(&self, count: usize, limit: Duration) {
        let mut sleepers = self.sleepers.subscribe();
        let waited = tokio::time::timeout(limit, sleepers.wait_for(|n| *n >= count)).await;
        assert!(
            matches!(waited, Ok(Ok(_))),
            "fewer than {count} sleeps waited on the clock within {limit:?}"
        );
    }
}

/// Counts a sleep as waiting until it is dropped (done or cancelled).
struct Sleeping<'a>(&'a watch::Sender<usize>);

impl Drop for Sleeping<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl Clock for ManualClock {
    fn now_utc(&self) -> OffsetDateTime {
        self.start_utc + self.elapsed()
    }

    fn now(&self) -> Instant {
        self.start + self.elapsed()
    }

    fn sleep(&self, duration: Duration) -> Sleep<'_> {
        let wake_at = self.elapsed() + duration;
        let mut elapsed = self.elapsed.subscribe();
        self.sleepers.send_modify(|n| *n += 1);
        let counted = Sleeping(&self.sleepers);
        Box::pin(async move {
            let _counted = counted;
            let _ = elapsed.wait_for(|now| *now >= wake_at).await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_sleep_ends_when_the_clock_is_advanced_past_it() {
        let clock = ManualClock::new();
        let before = clock.now_utc();
        let sleeper = {
            let clock = Arc::clone(&clock);
            tokio::spawn(async move { clock.sleep(Duration::from_secs(10)).await })
        };
        clock.sleeping(1, Duration::from_secs(10)).await;
        clock.advance(Duration::from_secs(9));
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished(), "woke before its time");
        clock.advance(Duration::from_secs(1));
        tokio::time::timeout(Duration::from_secs(10), sleeper)
            .await
            .expect("the sleep ended")
            .expect("the task ran");
        assert_eq!(clock.now_utc() - before, time::Duration::seconds(10));
        clock.sleeping(0, Duration::from_secs(10)).await;
    }
}
