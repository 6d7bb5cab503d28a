//! A gate for log lines of events that come in floods (connections over a limit, failed
//! accepts while out of descriptors): the first line is written, then at most one per period.
//! Lock-free, so the accept loop never waits on it.

use std::sync::atomic::{AtomicU64, Ordering};

/// At most one line per `period_ms`; the caller gives the time, so the rule is tested without
/// a clock.
#[derive(Debug)]
pub struct LogEvery {
    period_ms: u64,
    /// When a line was last let through, in ms since the epoch (0: never).
    last_ms: AtomicU64,
}

impl LogEvery {
    pub const fn new(period_ms: u64) -> Self {
        Self {
            period_ms,
            last_ms: AtomicU64::new(0),
        }
    }

    /// True when a line may be written at `now_ms`: none has been in the last period. Of two
    /// callers at once, one wins.
    pub fn due(&self, now_ms: u64) -> bool {
        let last = self.last_ms.load(Ordering::Relaxed);
        now_ms.saturating_sub(last) >= self.period_ms
            && self
                .last_ms
                .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_line_passes_then_one_per_period() {
        // (now, let through)
        let gate = LogEvery::new(10_000);
        let t = 1_000_000;
        for (now, want) in [
            (t, true),
            (t + 1, false),
            (t + 9_999, false),
            (t + 10_000, true),
            (t + 10_001, false),
            // A clock that steps back lets nothing through until it passes the last line.
            (t, false),
            (t + 20_000, true),
        ] {
            assert_eq!(gate.due(now), want, "at {now}");
        }
    }
}
