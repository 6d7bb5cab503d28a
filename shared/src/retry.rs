//! The one way to wait and try again: a [`RetryPolicy`] value (first delay, cap, growth, jitter,
//! and how long or how often), the [`Backoff`] that walks it, [`retry`] for an operation whose
//! errors may be transient, and [`poll_until`] for a condition that becomes true.
//!
//! Time is tokio's, so tests that pause the clock see these waits advance with it.

use std::future::Future;
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

/// When to stop trying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// Never: the caller ends the loop (a watch that reconnects for the life of the process).
    Forever,
    /// Once this long has passed since the first attempt. The last delay is cut short at it.
    Deadline(Duration),
    /// After this many attempts in all (the first one included).
    Attempts(u32),
}

/// How to wait between attempts. Pure data: [`RetryPolicy::delay`] says what the n-th wait is,
/// [`RetryPolicy::start`] begins a [`Backoff`] that counts the waits and the deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The first delay.
    pub initial: Duration,
    /// No delay is longer than this.
    pub max: Duration,
    /// Each delay is the one before times this (1: constant).
    pub multiplier: u32,
    /// Up to this share (percent, 0 to 100) is taken off each delay at random, so that many
    /// clients failing together do not retry together.
    pub jitter_percent: u8,
    /// When to stop.
    pub limit: Limit,
}

impl RetryPolicy {
    /// The same pause every time, forever until limited.
    pub const fn constant(pause: Duration) -> Self {
        Self {
            initial: pause,
            max: pause,
            multiplier: 1,
            jitter_percent: 0,
            limit: Limit::Forever,
        }
    }

    /// `initial`, doubling after each attempt up to `max`, forever until limited.
    pub const fn exponential(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            multiplier: 2,
            jitter_percent: 0,
            limit: Limit::Forever,
        }
    }

    /// Stops trying `within` after the first attempt.
    pub const fn within(mut self, within: Duration) -> Self {
        self.limit = Limit::Deadline(within);
        self
    }

    /// Stops after `attempts` attempts in all.
    pub const fn attempts(mut self, attempts: u32) -> Self {
        self.limit = Limit::Attempts(attempts);
        self
    }

    /// Takes up to `percent` (capped at 100) off each delay at random.
    pub const fn with_jitter(mut self, percent: u8) -> Self {
        self.jitter_percent = if percent > 100 { 100 } else { percent };
        self
    }

    /// The wait after the `retry`-th failed attempt (0 for the first), before jitter and the
    /// deadline: `initial × multiplier^retry`, at most `max`.
    pub fn delay(&self, retry: u32) -> Duration {
        let growth = self
            .multiplier
            .max(1)
            .checked_pow(retry)
            .unwrap_or(u32::MAX);
        self.initial
            .checked_mul(growth)
            .unwrap_or(Duration::MAX)
            .min(self.max)
    }

    /// `delay` with the share `cut` (0.0 to 1.0) of the jitter taken off: jitter is drawn once
    /// per wait, and this keeps the arithmetic testable without a random source.
    pub fn jittered(&self, delay: Duration, cut: f64) -> Duration {
        // Per mille, in integers, so that whole shares give whole durations.
        let share = (f64::from(self.jitter_percent) * 10.0 * cut.clamp(0.0, 1.0)).round() as u128;
        let nanos = delay.as_nanos() * (1000 - share.min(1000)) / 1000;
        u64::try_from(nanos).map_or(delay, Duration::from_nanos)
    }

    /// Begins counting attempts and time under this policy.
    pub fn start(&self) -> Backoff {
        Backoff {
            policy: *self,
            retries: 0,
            started: Instant::now(),
        }
    }
}

/// One run of a [`RetryPolicy`]: how many waits so far and since when.
#[derive(Debug, Clone)]
pub struct Backoff {
    policy: RetryPolicy,
    retries: u32,
    started: Instant,
}

impl Backoff {
    /// True once the policy allows no further attempt.
    pub fn expired(&self) -> bool {
        self.expired_at(Instant::now())
    }

    /// Time left before the deadline, if the policy has one.
    pub fn remaining(&self) -> Option<Duration> {
        self.remaining_at(Instant::now())
    }

    /// The delay before the next attempt (jittered, cut at the deadline), counting it.
    pub fn next_delay(&mut self) -> Duration {
        self.next_delay_at(Instant::now())
    }

    /// Sleeps before the next attempt; false (at once) if the policy allows none.
    pub async fn wait(&mut self) -> bool {
        if self.expired() {
            return false;
        }
        tokio::time::sleep(self.next_delay()).await;
        true
    }

    // The clock is a parameter below so that the tests can say when "now" is.

    fn expired_at(&self, now: Instant) -> bool {
        match self.policy.limit {
            Limit::Forever => false,
            Limit::Deadline(within) => now.saturating_duration_since(self.started) >= within,
            Limit::Attempts(n) => self.retries.saturating_add(1) >= n,
        }
    }

    fn remaining_at(&self, now: Instant) -> Option<Duration> {
        match self.policy.limit {
            Limit::Deadline(within) => {
                Some(within.saturating_sub(now.saturating_duration_since(self.started)))
            }
            Limit::Forever | Limit::Attempts(_) => None,
        }
    }

    fn next_delay_at(&mut self, now: Instant) -> Duration {
        let delay = self.policy.delay(self.retries);
        self.retries = self.retries.saturating_add(1);
        let delay = if self.policy.jitter_percent == 0 {
            delay
        } else {
            self.policy.jittered(delay, rand::rng().random::<f64>())
        };
        match self.remaining_at(now) {
            Some(left) => delay.min(left),
            None => delay,
        }
    }
}

/// Runs `op` until it succeeds, fails with an error `is_transient` calls permanent, or the
/// policy allows no further attempt; then returns its last result.
pub async fn retry<T, E, F, Fut>(
    policy: &RetryPolicy,
    is_transient: impl Fn(&E) -> bool,
    mut op: F,
) -> Result<T, E>
where
    E: std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut backoff = policy.start();
    loop {
        match op().await {
            Err(e) if is_transient(&e) && !backoff.expired() => {
                tracing::debug!(error = %e, "transient failure; retrying");
                backoff.wait().await;
            }
            done => return done,
        }
    }
}

/// A [`poll_until`] that ran out of attempts or time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("timed out after {waited:?}")]
pub struct TimedOut {
    /// How long the poll ran.
    pub waited: Duration,
    /// How long the last check had been running when the deadline cut it, if it was cut (a
    /// check that hangs, not a condition that stays false).
    pub cut_check: Option<Duration>,
}

/// Runs `check` until it returns `Some`, waiting between checks as `policy` says. The deadline
/// also bounds each check: one still running when it falls is abandoned.
pub async fn poll_until<T, F, Fut>(policy: &RetryPolicy, mut check: F) -> Result<T, TimedOut>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let mut backoff = policy.start();
    let first = backoff.started;
    let timed_out = |cut_check| TimedOut {
        waited: first.elapsed(),
        cut_check,
    };
    loop {
        let started = Instant::now();
        let outcome = match backoff.remaining() {
            Some(left) => tokio::time::timeout(left, check()).await.ok(),
            None => Some(check().await),
        };
        match outcome {
            Some(Some(v)) => return Ok(v),
            Some(None) => {}
            None => return Err(timed_out(Some(started.elapsed()))),
        }
        if !backoff.wait().await {
            return Err(timed_out(None));
        }
    }
}

#[cfg(test)]
mod tests;
