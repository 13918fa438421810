//! Request rate limits: a token bucket per principal on each node.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A request rate: `per_second` requests a second on average, and up to `burst`
/// at once after a quiet spell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    /// Requests a second; 0 for no limit.
    pub per_second: u32,
    /// The bucket's size (at least 1).
    pub burst: u32,
}

impl RateLimit {
    /// No limit.
    pub const UNLIMITED: RateLimit = RateLimit {
        per_second: 0,
        burst: 0,
    };
}

struct Bucket {
    tokens: f64,
    filled_at: Instant,
}

/// The buckets of every principal that sent a request to this node. Each node
/// limits on its own: a client spreading its requests over three nodes gets
/// three times the rate (documented in SECURITY.md).
#[derive(Default)]
pub struct RateLimiter {
    // One mutex: a bucket update is a few arithmetic operations, and the number
    // of keys is the number of principals.
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl RateLimiter {
    /// Takes one request's token from `who`'s bucket at `now`; when the bucket
    /// is empty, `Err` with how long until the next token.
    pub fn take(&self, who: &str, rate: RateLimit, now: Instant) -> Result<(), Duration> {
        if rate.per_second == 0 {
            return Ok(());
        }
        let per_second = f64::from(rate.per_second);
        let burst = f64::from(rate.burst.max(1));
        let mut buckets = match self.buckets.lock() {
            Ok(buckets) => buckets,
            Err(poisoned) => poisoned.into_inner(),
        };
        // Look up before inserting: no key allocation per request.
        if !buckets.contains_key(who) {
            buckets.insert(
                who.to_owned(),
                Bucket {
                    tokens: burst,
                    filled_at: now,
                },
            );
        }
        let Some(bucket) = buckets.get_mut(who) else {
            return Ok(());
        };
        let elapsed = now
            .saturating_duration_since(bucket.filled_at)
            .as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * per_second).min(burst);
        bucket.filled_at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        Err(Duration::from_secs_f64((1.0 - bucket.tokens) / per_second))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEN_A_SECOND: RateLimit = RateLimit {
        per_second: 10,
        burst: 3,
    };

    #[test]
    fn a_burst_passes_then_one_request_per_interval() {
        let limiter = RateLimiter::default();
        let start = Instant::now();
        for _ in 0..3 {
            assert_eq!(limiter.take("a", TEN_A_SECOND, start), Ok(()));
        }
        let wait = limiter
            .take("a", TEN_A_SECOND, start)
            .expect_err("the bucket is empty");
        assert_eq!(wait, Duration::from_millis(100));
        // Another principal has its own bucket.
        assert_eq!(limiter.take("b", TEN_A_SECOND, start), Ok(()));
        // 100 ms later one token is back, and only one.
        let later = start + Duration::from_millis(100);
        assert_eq!(limiter.take("a", TEN_A_SECOND, later), Ok(()));
        assert!(limiter.take("a", TEN_A_SECOND, later).is_err());
        // A long quiet spell refills the bucket to its size, not beyond.
        let much_later = later + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(limiter.take("a", TEN_A_SECOND, much_later), Ok(()));
        }
        assert!(limiter.take("a", TEN_A_SECOND, much_later).is_err());
    }

    #[test]
    fn no_limit_takes_nothing() {
        let limiter = RateLimiter::default();
        let now = Instant::now();
        for _ in 0..10_000 {
            assert_eq!(limiter.take("a", RateLimit::UNLIMITED, now), Ok(()));
        }
    }
}
