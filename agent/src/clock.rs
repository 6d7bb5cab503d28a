//! Wall-clock time in the one unit the replicated state uses, and the per-term clock a leader
//! judges leases and token expiry on.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A leader's clock for one raft term: it starts from a committed reading (or more) when the
/// term's first operation needs it and then advances by this node's monotonic clock, so that a
/// step of the wall clock while the node leads (NTP, an operator, a VM resumed) neither ages
/// nor freezes what is judged on it. Leases and join-token expiry each keep one.
#[derive(Default)]
pub struct TermClock {
    epoch: Mutex<Option<(u64, u64, Instant)>>,
}

impl TermClock {
    /// The clock now, if it was started in `term`.
    pub fn reading(&self, term: u64) -> Option<u64> {
        let epoch = self.epoch.lock().ok()?;
        let (t, base, started) = (*epoch)?;
        (t == term).then(|| base.saturating_add(millis(started.elapsed())))
    }

    /// Starts the clock for `term` at `base` (kept if another caller started it first in the
    /// same term); returns its reading.
    pub fn start(&self, term: u64, base: u64) -> u64 {
        let Ok(mut epoch) = self.epoch.lock() else {
            return base;
        };
        match *epoch {
            Some((t, b, started)) if t == term => b.saturating_add(millis(started.elapsed())),
            _ => {
                *epoch = Some((term, base, Instant::now()));
                base
            }
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_term_clock_counts_from_its_base_and_starts_again_in_a_new_term() {
        let clock = TermClock::default();
        assert_eq!(clock.reading(1), None, "not started");
        assert_eq!(clock.start(1, 1_000), 1_000);
        assert!(
            clock.start(1, 5_000) < 5_000,
            "a second start in the term keeps the first"
        );
        let read = clock.reading(1).expect("started");
        assert!((1_000..1_000 + 60_000).contains(&read));
        assert_eq!(clock.reading(2), None, "another term");
        assert_eq!(clock.start(2, 9_000), 9_000);
    }
}
