//! [`RetryPolicy`]: which failures are retried is decided by the caller of this module; how
//! long to wait before the next attempt is decided here.

use std::time::Duration;

use reqwest::header::{HeaderMap, RETRY_AFTER};

/// How often and how patiently a transient failure is retried.
///
/// Backoff is exponential with full jitter: before retry `n` (1-based) the client sleeps a
/// uniformly random time in `0..=min(max_delay, base_delay * 2^(n-1))`. A `Retry-After`
/// header in seconds replaces that draw, capped at `max_retry_after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in total, the first included (at least 1; 1 means never retry).
    pub max_attempts: u32,
    /// The backoff ceiling before the first retry.
    pub base_delay: Duration,
    /// The largest backoff ceiling.
    pub max_delay: Duration,
    /// The longest `Retry-After` honoured; longer values are cut to this.
    pub max_retry_after: Duration,
}

impl RetryPolicy {
    /// Default [`RetryPolicy::max_attempts`].
    pub const DEFAULT_MAX_ATTEMPTS: u32 = 6;
    /// Default [`RetryPolicy::base_delay`].
    pub const DEFAULT_BASE_DELAY: Duration = Duration::from_millis(100);
    /// Default [`RetryPolicy::max_delay`].
    pub const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(5);
    /// Default [`RetryPolicy::max_retry_after`].
    pub const DEFAULT_MAX_RETRY_AFTER: Duration = Duration::from_secs(10);

    /// The upper bound of the jittered wait before retry number `retry` (1-based).
    #[must_use]
    pub fn backoff_ceiling(&self, retry: u32) -> Duration {
        let factor = 1_u32
            .checked_shl(retry.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.base_delay
            .checked_mul(factor)
            .unwrap_or(self.max_delay)
            .min(self.max_delay)
    }

    /// The wait before retry number `retry`: the server's `Retry-After` (capped) when it gave
    /// one, a full-jitter draw otherwise.
    pub(crate) fn delay_before(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        if let Some(requested) = retry_after {
            return requested.min(self.max_retry_after);
        }
        let ceiling = u64::try_from(self.backoff_ceiling(retry).as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(fastrand::u64(0..=ceiling))
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: Self::DEFAULT_MAX_ATTEMPTS,
            base_delay: Self::DEFAULT_BASE_DELAY,
            max_delay: Self::DEFAULT_MAX_DELAY,
            max_retry_after: Self::DEFAULT_MAX_RETRY_AFTER,
        }
    }
}

/// `Retry-After` in whole seconds. The HTTP-date form is not honoured (backoff applies).
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let seconds = headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(Duration::from_secs(seconds))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};

    use super::{RetryPolicy, retry_after};

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 6,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(5),
            max_retry_after: Duration::from_secs(3),
        }
    }

    #[test]
    fn ceiling_doubles_then_caps() {
        let ceilings: Vec<u128> = (1..=9)
            .map(|retry| policy().backoff_ceiling(retry).as_millis())
            .collect();
        assert_eq!(ceilings, [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
        assert_eq!(policy().backoff_ceiling(200), Duration::from_secs(5));
    }

    #[test]
    fn jittered_delay_stays_within_the_ceiling() {
        for retry in 1..=8 {
            for _ in 0..50 {
                assert!(policy().delay_before(retry, None) <= policy().backoff_ceiling(retry));
            }
        }
    }

    #[test]
    fn retry_after_is_honoured_and_capped() {
        assert_eq!(
            policy().delay_before(1, Some(Duration::from_secs(2))),
            Duration::from_secs(2)
        );
        assert_eq!(
            policy().delay_before(1, Some(Duration::from_secs(3600))),
            Duration::from_secs(3)
        );
    }

    #[test]
    fn retry_after_header_parses_seconds_only() {
        let parse = |value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(RETRY_AFTER, HeaderValue::from_static(value));
            retry_after(&headers)
        };
        assert_eq!(parse("7"), Some(Duration::from_secs(7)));
        assert_eq!(parse(" 0 "), Some(Duration::ZERO));
        assert_eq!(parse("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(parse("-1"), None);
        assert_eq!(retry_after(&HeaderMap::new()), None);
    }
}
