//! What the listeners count for monitoring, and how often they say it in the log: requests
//! refused for want of a member's certificate, and connections shed for being over a limit.
//! Owned here (metrics and status read it), handed to the listeners by the agent.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use muster_shared::serve::LogEvery;

use crate::state::NodeId;

/// A flood must not flood the log: one over-limit line per this long.
const OVER_LIMIT_LOGGED_EVERY_MS: u64 = 10_000;

pub struct ListenerCounters {
    refused_rpcs: AtomicU64,
    /// Connections closed at once for being over a connection limit.
    over_limit: AtomicU64,
    /// When an over-limit refusal is logged.
    over_limit_logged: LogEvery,
    /// Callers already logged as refused, and why: a refused node retries for ever, and one
    /// line says it.
    refusals_logged: Mutex<HashSet<(NodeId, &'static str)>>,
}

impl Default for ListenerCounters {
    fn default() -> Self {
        Self {
            refused_rpcs: AtomicU64::default(),
            over_limit: AtomicU64::default(),
            over_limit_logged: LogEvery::new(OVER_LIMIT_LOGGED_EVERY_MS),
            refusals_logged: Mutex::default(),
        }
    }
}

impl ListenerCounters {
    /// Counts a request refused because the caller had no certificate of this cluster, or was
    /// not (or no longer) a member.
    pub fn count_refused(&self) {
        self.refused_rpcs.fetch_add(1, Ordering::Relaxed);
    }

    /// True the first time node `id` is refused for `why` (so it is logged once).
    pub fn first_refusal(&self, id: NodeId, why: &'static str) -> bool {
        self.refusals_logged
            .lock()
            .map(|mut seen| seen.insert((id, why)))
            .unwrap_or(false)
    }

    pub fn refused_rpcs(&self) -> u64 {
        self.refused_rpcs.load(Ordering::Relaxed)
    }

    /// Counts a connection closed for being over a limit at `now_ms`; true when it should be
    /// logged (the first in 10 s).
    pub fn count_over_limit(&self, now_ms: u64) -> bool {
        self.over_limit.fetch_add(1, Ordering::Relaxed);
        self.over_limit_logged.due(now_ms)
    }

    pub fn over_limit(&self) -> u64 {
        self.over_limit.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn over_limit_is_counted_every_time_and_logged_once_in_ten_seconds() {
        let c = ListenerCounters::default();
        let t = 1_000_000;
        let logged: Vec<bool> = [t, t + 1, t + 9_999, t + 10_000, t + 10_001]
            .into_iter()
            .map(|now| c.count_over_limit(now))
            .collect();
        assert_eq!(logged, [true, false, false, true, false]);
        assert_eq!(c.over_limit(), 5);
    }

    #[test]
    fn a_refused_node_is_logged_once_per_reason() {
        let c = ListenerCounters::default();
        assert!(c.first_refusal(7, "removed"));
        assert!(!c.first_refusal(7, "removed"));
        assert!(c.first_refusal(7, "not a member"));
        c.count_refused();
        c.count_refused();
        assert_eq!(c.refused_rpcs(), 2);
    }
}
