//! `/metrics`: the node in Prometheus text format. [`gather`] copies what the agent knows into
//! a [`MetricsInput`]; [`render`] (`metrics/render.rs`) is a pure function of it.

mod render;

pub use render::{fleetlock_gauges, render};

use super::health::{ReadyInput, readiness};
use crate::agent::Here;
use crate::clock::now_ms;
use crate::datadir;
use crate::raft::StatsSnapshot;
use crate::state::fleetlock::FleetLock;

/// A peer as the leader sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerInput {
    pub name: String,
    pub role: String,
    /// Entries behind this node's last log index (the leader only).
    pub lag: Option<u64>,
    pub reachable: Option<bool>,
    /// Its failure zone, as its record says.
    pub zone: Option<String>,
}

/// Everything `/metrics` shows, copied at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricsInput {
    pub cluster_id: String,
    pub node: String,
    pub term: u64,
    pub is_leader: bool,
    pub has_leader: bool,
    pub last_log_index: u64,
    pub applied_index: u64,
    pub peers: Vec<PeerInput>,
    pub stats: StatsSnapshot,
    pub refused_rpcs: u64,
    pub over_limit: u64,
    pub cert_expires_ms: Option<u64>,
    pub ca_expires_ms: Option<u64>,
    pub now_ms: u64,
    pub data_dir_bytes: u64,
    pub fleetlock: FleetLock,
    pub leases_held: usize,
    pub ready: bool,
    pub quorum_lost: bool,
}

/// Copies the agent's counters and views (reads the data dir's size and certificate).
pub async fn gather(here: Here<'_>) -> MetricsInput {
    let view = here.raft().view();
    let status = crate::leader::local_status(here).ok();
    let last_log_index = view.last_log_index.unwrap_or(0);
    let peers = status
        .as_ref()
        .map(|s| {
            s.members
                .iter()
                .map(|m| PeerInput {
                    name: m.name.clone(),
                    role: m.role.clone(),
                    lag: m.match_index.map(|i| last_log_index.saturating_sub(i)),
                    reachable: m.reachable,
                    zone: m.zone.clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    let (fleetlock, leases_held) = here
        .raft()
        .read_local(|s| (s.fleetlock.clone(), s.leases.held_count()))
        .unwrap_or_default();
    let dir = here.me.data_dir.clone();
    let (cert_expires_ms, ca_expires_ms, data_dir_bytes) = tokio::task::spawn_blocking(move || {
        (
            datadir::cert_expires_ms(&dir),
            datadir::ca_expires_ms(&dir),
            datadir::size(&dir),
        )
    })
    .await
    .unwrap_or((None, None, 0));
    let ready = ReadyInput::of(here.group, here.me.node_id);
    MetricsInput {
        cluster_id: here.cluster_id().to_string(),
        node: here.me.name.clone(),
        term: view.term,
        is_leader: view.is_leader,
        // Raft remembers a leader that is gone (no election starts without a majority):
        // count only one this node hears from.
        has_leader: ready.sees_leader(),
        last_log_index,
        applied_index: view.last_applied.unwrap_or(0),
        peers,
        stats: here.raft().stats(),
        refused_rpcs: here.counters.refused_rpcs(),
        over_limit: here.counters.over_limit(),
        cert_expires_ms,
        ca_expires_ms,
        now_ms: now_ms(),
        data_dir_bytes,
        fleetlock,
        leases_held,
        ready: readiness(&ready).is_ok(),
        quorum_lost: here.raft().quorum_lost(),
    }
}
