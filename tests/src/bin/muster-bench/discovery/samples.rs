//! The figures `muster-bench discovery` collects: the workloads, one workload's [`Stats`] on one
//! system, a round's [`SystemResults`], and every round of every system ([`Measurements`]).
//! Plain data kept apart from both the measuring and the reporting, so that each of those
//! depends on it and neither on the other.

use std::time::Duration;

use serde::Serialize;

#[derive(Debug, Clone, Copy)]
pub(super) enum Workload {
    Create,
    Register,
    Read,
}

impl Workload {
    pub(super) const ALL: [Workload; 3] = [Workload::Create, Workload::Register, Workload::Read];

    pub(super) fn title(self) -> &'static str {
        match self {
            Workload::Create => "token creation",
            Workload::Register => "member registration",
            Workload::Read => "directory read",
        }
    }
}

/// What the report shows for one workload on one system.
#[derive(Debug, Clone, Copy, Serialize)]
pub(super) struct Stats {
    pub(super) ops: u64,
    pub(super) ops_per_sec: f64,
    pub(super) p50_ms: f64,
    pub(super) p99_ms: f64,
    pub(super) errors: u64,
    pub(super) elapsed_secs: f64,
    /// CPU time (user + system) of the system's server processes per successful operation.
    pub(super) server_cpu_us_per_op: f64,
}

impl Stats {
    /// The figures of successful requests' latencies (µs, any order) and failed requests'
    /// count over `elapsed`; the servers' CPU is added by [`Stats::with_cpu`].
    pub(super) fn from_latencies(
        mut latencies_us: Vec<u64>,
        errors: u64,
        elapsed: Duration,
    ) -> Self {
        latencies_us.sort_unstable();
        let ops = latencies_us.len() as u64;
        let secs = elapsed.as_secs_f64();
        Stats {
            ops,
            ops_per_sec: if secs > 0.0 { ops as f64 / secs } else { 0.0 },
            p50_ms: percentile_us(&latencies_us, 0.50) as f64 / 1000.0,
            p99_ms: percentile_us(&latencies_us, 0.99) as f64 / 1000.0,
            errors,
            elapsed_secs: secs,
            server_cpu_us_per_op: 0.0,
        }
    }

    /// Adds the servers' CPU time spent on the workload (`cpu_us`) per operation.
    pub(super) fn with_cpu(mut self, cpu_us: f64) -> Self {
        if self.ops > 0 {
            self.server_cpu_us_per_op = cpu_us / self.ops as f64;
        }
        self
    }
}

/// Nearest-rank percentile of sorted samples (0 when there are none).
fn percentile_us(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Results of the three workloads on one system.
#[derive(Debug, Clone, Copy, Serialize)]
pub(super) struct SystemResults {
    pub(super) token_creation: Stats,
    pub(super) member_registration: Stats,
    pub(super) directory_read: Stats,
}

impl SystemResults {
    pub(super) fn get(&self, workload: Workload) -> &Stats {
        match workload {
            Workload::Create => &self.token_creation,
            Workload::Register => &self.member_registration,
            Workload::Read => &self.directory_read,
        }
    }
}

/// Everything one run measured, before any summary.
pub(super) struct Measurements {
    /// Per system, per round: muster-discovery first, then `--store etcd` with 1, 2, …
    /// replicas, then etcd when it ran.
    pub(super) per_system: Vec<Vec<SystemResults>>,
    /// Whether the last of `per_system` is etcd.
    pub(super) with_etcd: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_is_nearest_rank() {
        let samples: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile_us(&samples, 0.50), 50);
        assert_eq!(percentile_us(&samples, 0.99), 99);
        assert_eq!(percentile_us(&[7], 0.99), 7);
        assert_eq!(percentile_us(&[], 0.5), 0);
    }
}
