//! The data `muster-bench discovery --protocol v3` collects: the workloads, one measurement's
//! [`Stats`] and every round's of them ([`Measurements`]). Kept apart from both the measuring
//! (`discovery_v3.rs`) and the reporting ([`super::report`]) so that each of those depends on
//! this plain data and neither on the other.

use serde::Serialize;

/// Members per formation and per token.
pub(super) const SIZE: usize = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Workload {
    TokenCreation,
    MemberRegistration,
    MemberListing,
    Formation,
}

pub(super) const WORKLOADS: [Workload; 4] = [
    Workload::TokenCreation,
    Workload::MemberRegistration,
    Workload::MemberListing,
    Workload::Formation,
];

impl Workload {
    pub(super) fn label(self) -> &'static str {
        match self {
            Workload::TokenCreation => "token creation (Put size)",
            Workload::MemberRegistration => "member registration (Put)",
            Workload::MemberListing => "member listing (Range)",
            Workload::Formation => "join, 3 members (formation)",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub(super) struct Stats {
    pub(super) ops: u64,
    pub(super) failed: u64,
    pub(super) ops_per_sec: f64,
    pub(super) p50_ms: f64,
    pub(super) p99_ms: f64,
    /// CPU (user + system) of the server process per successful operation.
    pub(super) server_cpu_us_per_op: f64,
    /// CPU of the load generator (this process, the same client for both systems) per
    /// operation: on a 2-core machine it competes with the server for the same cores.
    pub(super) client_cpu_us_per_op: f64,
}

/// Everything one run measured, before any summary.
pub(super) struct Measurements {
    /// The systems' names, in the order of `rounds`' inner index (muster first, then etcd).
    pub(super) systems: Vec<String>,
    /// `rounds[workload][system]`: one [`Stats`] per round, in the order they ran.
    pub(super) rounds: Vec<Vec<Vec<Stats>>>,
}
