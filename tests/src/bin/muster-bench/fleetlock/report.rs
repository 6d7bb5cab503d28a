//! Reporting for `muster-bench fleetlock`: from the round trips the measuring timed
//! ([`Measurements`]) to the figures ([`report`], pure, tested without a cluster) and those to
//! the text lines or the `--json` object ([`print`]). Apart from the measuring so that the
//! arithmetic and the printed shape, which scripts and docs/benchmarks.md read, stand alone.

use std::time::Duration;

use anyhow::Result;
use serde::Serialize;

use crate::summary::percentile_ms;

/// The goal for both the lock's and the unlock's p99.
const P99_GOAL_MS: f64 = 10.0;

/// What one run measured, unsummarised.
pub(super) struct Measurements {
    /// Lock and unlock latencies, one of each per round trip, in the order they were sent.
    pub(super) locks: Vec<Duration>,
    pub(super) unlocks: Vec<Duration>,
    /// Wall time of all the round trips.
    pub(super) seconds: f64,
    /// Through a follower (forwarded to the leader) or the leader itself.
    pub(super) through: &'static str,
}

#[derive(Debug, Serialize)]
pub(super) struct Report {
    round_trips: usize,
    seconds: f64,
    per_second: f64,
    lock_p50_ms: f64,
    lock_p99_ms: f64,
    unlock_p50_ms: f64,
    unlock_p99_ms: f64,
    /// Through a follower (forwarded to the leader) or the leader itself.
    through: &'static str,
}

pub(super) fn report(m: &Measurements) -> Report {
    let mut locks = m.locks.clone();
    locks.sort();
    let mut unlocks = m.unlocks.clone();
    unlocks.sort();
    Report {
        round_trips: locks.len(),
        seconds: m.seconds,
        per_second: locks.len() as f64 / m.seconds,
        lock_p50_ms: percentile_ms(&locks, 0.50),
        lock_p99_ms: percentile_ms(&locks, 0.99),
        unlock_p50_ms: percentile_ms(&unlocks, 0.50),
        unlock_p99_ms: percentile_ms(&unlocks, 0.99),
        through: m.through,
    }
}

impl Report {
    fn goal_met(&self) -> bool {
        self.lock_p99_ms.max(self.unlock_p99_ms) <= P99_GOAL_MS
    }
}

/// Prints the report on stdout: one pretty JSON object with `--json`, else three lines.
pub(super) fn print(report: &Report, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        println!(
            "muster-bench fleetlock: 3 voters on loopback, lock + unlock through {}'s endpoint, {:.0} s",
            report.through, report.seconds
        );
        println!(
            "  {} round trips, {:.1}/s; lock p50 {:.2} ms p99 {:.2} ms; unlock p50 {:.2} ms p99 {:.2} ms",
            report.round_trips,
            report.per_second,
            report.lock_p50_ms,
            report.lock_p99_ms,
            report.unlock_p50_ms,
            report.unlock_p99_ms
        );
        println!(
            "  goal p99 <= 10 ms: {}",
            if report.goal_met() { "met" } else { "NOT met" }
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_and_the_goal_from_unsorted_samples() {
        let ms = Duration::from_millis;
        let m = Measurements {
            locks: vec![ms(3), ms(1), ms(2), ms(4)],
            unlocks: vec![ms(1), ms(9), ms(2), ms(3)],
            seconds: 2.0,
            through: "a follower",
        };
        let r = report(&m);
        assert_eq!((r.round_trips, r.per_second), (4, 2.0));
        assert_eq!((r.lock_p50_ms, r.lock_p99_ms), (2.0, 4.0));
        assert_eq!((r.unlock_p50_ms, r.unlock_p99_ms), (2.0, 9.0));
        assert!(r.goal_met());
        let slow = Measurements {
            unlocks: vec![ms(11)],
            ..m
        };
        assert!(!report(&slow).goal_met());
    }
}
