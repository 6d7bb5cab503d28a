//! Counters raft's facade keeps for `/metrics`: how long proposals take to commit and apply
//! (a histogram), how many failed, how often the leader changed, as this node saw it, and how
//! many log entries the writes took (group commit).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the proposal-latency buckets: 1 ms to 5 s, the range between a
/// loopback commit and the write timeout.
pub const PROPOSAL_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

#[derive(Default)]
pub struct RaftStats {
    buckets: [AtomicU64; PROPOSAL_BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
    failed: AtomicU64,
    leader_changes: AtomicU64,
    write_entries: AtomicU64,
    batched_writes: AtomicU64,
}

/// A copy of the counters at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatsSnapshot {
    /// `(upper bound in seconds, proposals that took at most that long)`, cumulative.
    pub buckets: Vec<(f64, u64)>,
    pub count: u64,
    pub sum_seconds: f64,
    pub failed: u64,
    pub leader_changes: u64,
    /// Log entries of client writes this node wrote as leader (a batch is one).
    pub write_entries: u64,
    /// Writes that went into the log in a batch of several.
    pub batched_writes: u64,
}

impl RaftStats {
    /// A proposal that ended after `took`, committed or not (a timeout is the slowest case
    /// there is, and must show). The count goes first and a snapshot reads it last, so a
    /// scrape never sees a bucket above the total.
    pub fn proposal_done(&self, took: Duration) {
        self.count.fetch_add(1, Ordering::SeqCst);
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.sum_micros.fetch_add(micros, Ordering::SeqCst);
        let seconds = took.as_secs_f64();
        for (bound, bucket) in PROPOSAL_BUCKETS.iter().zip(&self.buckets) {
            if seconds <= *bound {
                bucket.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    /// A proposal that did not commit (no quorum, timeout, not the leader) or was refused;
    /// counted besides its duration.
    pub fn proposal_failed(&self) {
        self.failed.fetch_add(1, Ordering::SeqCst);
    }

    /// A log entry of `writes` client writes (one, or a batch) went to raft.
    pub fn write_entry(&self, writes: usize) {
        self.write_entries.fetch_add(1, Ordering::Relaxed);
        if writes > 1 {
            self.batched_writes
                .fetch_add(writes as u64, Ordering::Relaxed);
        }
    }

    pub fn leader_changed(&self) {
        self.leader_changes.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        let buckets = PROPOSAL_BUCKETS
            .iter()
            .zip(&self.buckets)
            .map(|(bound, n)| (*bound, n.load(Ordering::SeqCst)))
            .collect();
        StatsSnapshot {
            buckets,
            sum_seconds: self.sum_micros.load(Ordering::SeqCst) as f64 / 1e6,
            count: self.count.load(Ordering::SeqCst),
            failed: self.failed.load(Ordering::SeqCst),
            leader_changes: self.leader_changes.load(Ordering::SeqCst),
            write_entries: self.write_entries.load(Ordering::Relaxed),
            batched_writes: self.batched_writes.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative() {
        let stats = RaftStats::default();
        stats.proposal_done(Duration::from_micros(800));
        stats.proposal_done(Duration::from_millis(30));
        stats.proposal_done(Duration::from_secs(9));
        stats.proposal_failed();
        let s = stats.snapshot();
        assert_eq!(s.count, 3);
        assert!(s.buckets.windows(2).all(|w| w[0].1 <= w[1].1), "cumulative");
        assert_eq!(s.failed, 1);
        let at = |bound: f64| s.buckets.iter().find(|(b, _)| *b == bound).map(|(_, n)| *n);
        assert_eq!(at(0.001), Some(1));
        assert_eq!(at(0.025), Some(1));
        assert_eq!(at(0.05), Some(2));
        assert_eq!(at(5.0), Some(2), "9 s is only in +Inf (the count)");
        assert!((s.sum_seconds - 9.0308).abs() < 1e-6);
    }

    #[test]
    fn a_batch_is_one_entry_of_several_writes() {
        let stats = RaftStats::default();
        stats.write_entry(1);
        stats.write_entry(5);
        stats.write_entry(1);
        let s = stats.snapshot();
        assert_eq!((s.write_entries, s.batched_writes), (3, 5));
    }
}
