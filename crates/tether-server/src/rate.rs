//! Per-API-key rate limits: a token bucket per key id, in this process's memory.
//!
//! Each key may make `burst` requests at once and `per_sec` a second after that; an empty
//! bucket answers how long until a request would be allowed (the handler sends 429 with
//! `Retry-After`). A request that resolves several things at once (a GraphQL document with
//! aliased fields) costs one token per resolution ([`RateLimiter::charge`]). Buckets are per replica: N replicas allow up to N times the rate in sum.
//! A bucket idle long enough to be full again is the same as no bucket, so idle ones are
//! dropped and memory stays bounded by the keys active in the last minutes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tether_clock::Clock;

/// Default requests per second per API key (per replica).
pub const DEFAULT_RATE_PER_SEC: u32 = 50;
/// Default bucket size: requests an API key may make at once.
pub const DEFAULT_BURST: u32 = 100;

/// How often idle buckets are swept.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// The rate limit settings (`serve --rate-limit`, `--rate-burst`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateSettings {
    /// Requests per second per key; 0 turns limiting off.
    pub per_sec: u32,
    /// The bucket's size (at least 1).
    pub burst: u32,
}

impl Default for RateSettings {
    fn default() -> Self {
        Self {
            per_sec: DEFAULT_RATE_PER_SEC,
            burst: DEFAULT_BURST,
        }
    }
}

struct Bucket {
    tokens: f64,
    updated: Instant,
}

struct Buckets {
    by_key: HashMap<String, Bucket>,
    swept: Instant,
}

/// The buckets of every API key seen recently.
pub(crate) struct RateLimiter {
    settings: RateSettings,
    buckets: Mutex<Buckets>,
    /// What refills are measured on.
    clock: Arc<dyn Clock>,
}

impl RateLimiter {
    pub(crate) fn new(settings: RateSettings, clock: Arc<dyn Clock>) -> Self {
        Self {
            settings,
            buckets: Mutex::new(Buckets {
                by_key: HashMap::new(),
                swept: clock.now(),
            }),
            clock,
        }
    }

    /// Takes a token from `key`'s bucket, or says how long until one is back.
    pub(crate) fn check(&self, key: &str) -> Result<(), Duration> {
        self.check_at(key, self.clock.now())
    }

    /// Takes `cost` tokens from `key`'s bucket at once, or none and says how long until they
    /// are back. A cost above the bucket's size never fits; callers refuse it first
    /// ([`RateLimiter::largest_cost`]).
    pub(crate) fn charge(&self, key: &str, cost: u32) -> Result<(), Duration> {
        self.charge_at(key, cost, self.clock.now())
    }

    /// The largest cost one request may have: the bucket's size, or `None` when limiting
    /// is off.
    pub(crate) fn largest_cost(&self) -> Option<u32> {
        (self.settings.per_sec != 0).then_some(self.settings.burst.max(1))
    }

    fn check_at(&self, key: &str, now: Instant) -> Result<(), Duration> {
        self.charge_at(key, 1, now)
    }

    fn charge_at(&self, key: &str, cost: u32, now: Instant) -> Result<(), Duration> {
        let RateSettings { per_sec, burst } = self.settings;
        if per_sec == 0 || cost == 0 {
            return Ok(());
        }
        let cost = f64::from(cost);
        let rate = f64::from(per_sec);
        let burst = f64::from(burst.max(1));
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        if now.duration_since(buckets.swept) >= SWEEP_EVERY {
            // A bucket idle for burst / rate seconds is full: dropping it changes nothing.
            let full_after = Duration::from_secs_f64(burst / rate);
            buckets
                .by_key
                .retain(|_, bucket| now.duration_since(bucket.updated) < full_after);
            buckets.swept = now;
        }
        let bucket = buckets.by_key.entry(key.to_owned()).or_insert(Bucket {
            tokens: burst,
            updated: now,
        });
        let elapsed = now.duration_since(bucket.updated).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate).min(burst);
        bucket.updated = now;
        if bucket.tokens >= cost {
            bucket.tokens -= cost;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((cost - bucket.tokens) / rate))
        }
    }
}

/// `Retry-After` in whole seconds: rounded up, at least 1.
pub(crate) fn retry_after_secs(wait: Duration) -> u64 {
    wait.as_secs() + u64::from(wait.subsec_nanos() > 0).max(u64::from(wait.as_secs() == 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_allows_its_burst_then_the_rate() {
        let limiter = RateLimiter::new(
            RateSettings {
                per_sec: 2,
                burst: 3,
            },
            tether_clock::system(),
        );
        let start = Instant::now();
        for _ in 0..3 {
            assert_eq!(limiter.check_at("k", start), Ok(()));
        }
        let wait = limiter.check_at("k", start).unwrap_err();
        assert_eq!(wait, Duration::from_millis(500));
        // Another key has its own bucket.
        assert_eq!(limiter.check_at("other", start), Ok(()));
        // Half a second later one token is back, and only one.
        let later = start + Duration::from_millis(500);
        assert_eq!(limiter.check_at("k", later), Ok(()));
        assert!(limiter.check_at("k", later).is_err());
    }

    #[test]
    fn a_cost_takes_that_many_tokens_or_none() {
        let limiter = RateLimiter::new(
            RateSettings {
                per_sec: 2,
                burst: 5,
            },
            tether_clock::system(),
        );
        let start = Instant::now();
        assert_eq!(limiter.charge_at("k", 4, start), Ok(()));
        // Two more do not fit in the one left: nothing is taken.
        assert_eq!(
            limiter.charge_at("k", 2, start),
            Err(Duration::from_millis(500))
        );
        assert_eq!(limiter.check_at("k", start), Ok(()));
        assert!(limiter.check_at("k", start).is_err());
        assert_eq!(limiter.largest_cost(), Some(5));
    }

    #[test]
    fn zero_turns_limiting_off() {
        let limiter = RateLimiter::new(
            RateSettings {
                per_sec: 0,
                burst: 1,
            },
            tether_clock::system(),
        );
        let now = Instant::now();
        for _ in 0..1000 {
            assert_eq!(limiter.check_at("k", now), Ok(()));
        }
    }

    #[test]
    fn idle_buckets_are_dropped() {
        let limiter = RateLimiter::new(
            RateSettings {
                per_sec: 10,
                burst: 10,
            },
            tether_clock::system(),
        );
        let start = Instant::now();
        limiter.check_at("a", start).unwrap();
        limiter.check_at("b", start + SWEEP_EVERY).unwrap();
        let buckets = limiter.buckets.lock().unwrap();
        assert_eq!(buckets.by_key.len(), 1);
        assert!(buckets.by_key.contains_key("b"));
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_secs(2)), 2);
        assert_eq!(retry_after_secs(Duration::from_millis(2001)), 3);
    }
}
