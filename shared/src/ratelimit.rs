//! Per-client token buckets: the discovery service limits `/new` with them (one client cannot
//! fill the disk with tokens), the agent its unauthenticated join routes.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

pub struct RateLimiter {
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<IpAddr, Bucket>>,
}

struct Bucket {
    tokens: f64,
    last: Instant,
}

/// Buckets kept before idle ones are swept.
const SWEEP_AT: usize = 10_000;

impl RateLimiter {
    /// `rate` per second with `burst` capacity; `rate == 0` disables limiting.
    pub fn new(rate: u32, burst: u32) -> Self {
        Self {
            rate: f64::from(rate),
            burst: f64::from(burst.max(1)),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one request from `ip`'s bucket. `Err(seconds)` says how long until one is available.
    pub fn check(&self, ip: IpAddr) -> Result<(), u64> {
        if self.rate <= 0.0 {
            return Ok(());
        }
        let now = Instant::now();
        let Ok(mut buckets) = self.buckets.lock() else {
            return Ok(());
        };
        if buckets.len() >= SWEEP_AT {
            let (rate, burst) = (self.rate, self.burst);
            buckets
                .retain(|_, b| b.tokens + now.duration_since(b.last).as_secs_f64() * rate < burst);
        }
        let bucket = buckets.entry(ip).or_insert(Bucket {
            tokens: self.burst,
            last: now,
        });
        let refill = now.duration_since(bucket.last).as_secs_f64() * self.rate;
        bucket.tokens = (bucket.tokens + refill).min(self.burst);
        bucket.last = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(((1.0 - bucket.tokens) / self.rate).ceil().max(1.0) as u64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_refuse_and_other_clients_unaffected() {
        let rl = RateLimiter::new(1, 3);
        let a: IpAddr = [10, 0, 0, 1].into();
        let b: IpAddr = [10, 0, 0, 2].into();
        assert!((0..3).all(|_| rl.check(a).is_ok()));
        assert_eq!(rl.check(a), Err(1));
        assert!(rl.check(b).is_ok());
    }

    #[test]
    fn zero_rate_is_unlimited() {
        let rl = RateLimiter::new(0, 0);
        let a: IpAddr = [10, 0, 0, 1].into();
        assert!((0..10_000).all(|_| rl.check(a).is_ok()));
    }
}
