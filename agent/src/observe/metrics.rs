//! `/metrics`: the node in Prometheus text format. [`gather`] copies what the agent knows into
//! a [`MetricsInput`]; [`render`] is a pure function of it (unit-tested below).

use std::collections::BTreeMap;
use std::fmt::Write;

use super::health::{ReadyInput, readiness};
use crate::agent::Agent;
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
pub async fn gather(agent: &Agent) -> MetricsInput {
    let view = agent.raft().view();
    let status = crate::leader::local_status(agent).ok();
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
                })
                .collect()
        })
        .unwrap_or_default();
    let (fleetlock, leases_held) = agent
        .raft()
        .read_local(|s| (s.fleetlock.clone(), s.leases.held_count()))
        .unwrap_or_default();
    let dir = agent.data_dir().to_path_buf();
    let (cert_expires_ms, ca_expires_ms, data_dir_bytes) = tokio::task::spawn_blocking(move || {
        (
            datadir::cert_expires_ms(&dir),
            datadir::ca_expires_ms(&dir),
            datadir::size(&dir),
        )
    })
    .await
    .unwrap_or((None, None, 0));
    let ready = ReadyInput::of(agent);
    MetricsInput {
        cluster_id: agent.cluster_id().to_string(),
        node: agent.name().to_string(),
        term: view.term,
        is_leader: view.is_leader,
        // Raft remembers a leader that is gone (no election starts without a majority):
        // count only one this node hears from.
        has_leader: ready.sees_leader(),
        last_log_index,
        applied_index: view.last_applied.unwrap_or(0),
        peers,
        stats: agent.raft().stats(),
        refused_rpcs: agent.counters().refused_rpcs(),
        over_limit: agent.counters().over_limit(),
        cert_expires_ms,
        ca_expires_ms,
        now_ms: now_ms(),
        data_dir_bytes,
        fleetlock,
        leases_held,
        ready: readiness(&ready).is_ok(),
        quorum_lost: agent.raft().quorum_lost(),
    }
}

/// One metric family: its HELP and TYPE lines, then `samples` (already formatted).
fn family(out: &mut String, name: &str, kind: &str, help: &str, samples: &[(String, String)]) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, value) in samples {
        let _ = writeln!(out, "{name}{labels} {value}");
    }
}

fn one(value: impl ToString) -> Vec<(String, String)> {
    vec![(String::new(), value.to_string())]
}

fn flag(b: bool) -> Vec<(String, String)> {
    one(u8::from(b))
}

/// A label value with `\`, `"` and newlines escaped, as the text format asks.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The Prometheus text of `m`.
pub fn render(m: &MetricsInput) -> String {
    let mut out = String::new();
    family(
        &mut out,
        "muster_raft_term",
        "gauge",
        "The raft term this node is in.",
        &one(m.term),
    );
    family(
        &mut out,
        "muster_is_leader",
        "gauge",
        "1 if this node leads.",
        &flag(m.is_leader),
    );
    family(
        &mut out,
        "muster_has_leader",
        "gauge",
        "1 if this node knows a leader.",
        &flag(m.has_leader),
    );
    family(
        &mut out,
        "muster_leader_changes_total",
        "counter",
        "Changes of the leader this node saw (an election counts).",
        &one(m.stats.leader_changes),
    );
    family(
        &mut out,
        "muster_raft_last_log_index",
        "gauge",
        "The last index in this node's raft log.",
        &one(m.last_log_index),
    );
    family(
        &mut out,
        "muster_raft_applied_index",
        "gauge",
        "The last index this node applied.",
        &one(m.applied_index),
    );
    family(
        &mut out,
        "muster_raft_apply_lag",
        "gauge",
        "Log entries this node holds but has not applied yet.",
        &one(m.last_log_index.saturating_sub(m.applied_index)),
    );
    family(
        &mut out,
        "muster_quorum_lost",
        "gauge",
        "1 if this node leads but a majority of the voters has not answered lately.",
        &flag(m.quorum_lost),
    );
    family(
        &mut out,
        "muster_ready",
        "gauge",
        "1 if /readyz answers 200.",
        &flag(m.ready),
    );
    let mut roles: BTreeMap<&str, usize> = ["voter", "standby", "spare"]
        .iter()
        .map(|r| (*r, 0))
        .collect();
    for p in &m.peers {
        *roles.entry(p.role.as_str()).or_default() += 1;
    }
    let by_role: Vec<(String, String)> = roles
        .iter()
        .map(|(role, n)| (format!("{{role=\"{}\"}}", label(role)), n.to_string()))
        .collect();
    family(
        &mut out,
        "muster_members",
        "gauge",
        "Members by role, as this node knows them.",
        &by_role,
    );
    let lag: Vec<(String, String)> = m
        .peers
        .iter()
        .filter_map(|p| p.lag.map(|l| (peer_labels(p), l.to_string())))
        .collect();
    family(
        &mut out,
        "muster_peer_replication_lag",
        "gauge",
        "Entries a member is behind the leader's log (reported by the leader).",
        &lag,
    );
    let reachable: Vec<(String, String)> = m
        .peers
        .iter()
        .filter_map(|p| {
            p.reachable
                .map(|r| (peer_labels(p), u8::from(r).to_string()))
        })
        .collect();
    family(
        &mut out,
        "muster_peer_reachable",
        "gauge",
        "1 if the leader heard from the member lately (reported by the leader).",
        &reachable,
    );
    let mut histogram: Vec<(String, String)> = m
        .stats
        .buckets
        .iter()
        .map(|(bound, n)| (format!("_bucket{{le=\"{bound}\"}}"), n.to_string()))
        .collect();
    histogram.push(("_bucket{le=\"+Inf\"}".into(), m.stats.count.to_string()));
    histogram.push(("_sum".into(), format!("{}", m.stats.sum_seconds)));
    histogram.push(("_count".into(), m.stats.count.to_string()));
    family(
        &mut out,
        "muster_proposal_duration_seconds",
        "histogram",
        "Time from proposing a write on this node (the leader) to its being applied.",
        &histogram,
    );
    family(
        &mut out,
        "muster_proposals_failed_total",
        "counter",
        "Proposals that did not commit or were refused by the state machine.",
        &one(m.stats.failed),
    );
    family(
        &mut out,
        "muster_refused_total",
        "counter",
        "Refused on the node port: failed TLS handshakes and requests without this cluster's member certificate (handshake_or_identity); connections over a limit, here or on the metrics listener (connection_limit).",
        &[
            (
                "{reason=\"handshake_or_identity\"}".into(),
                m.refused_rpcs.to_string(),
            ),
            (
                "{reason=\"connection_limit\"}".into(),
                m.over_limit.to_string(),
            ),
        ],
    );
    if let Some(at) = m.cert_expires_ms {
        let seconds = i128::from(at) / 1000 - i128::from(m.now_ms) / 1000;
        family(
            &mut out,
            "muster_cert_expiry_seconds",
            "gauge",
            "Seconds until this node's certificate expires (negative: expired).",
            &one(seconds),
        );
    }
    family(
        &mut out,
        "muster_data_dir_bytes",
        "gauge",
        "Bytes in this node's data dir.",
        &one(m.data_dir_bytes),
    );
    fleetlock_gauges(&mut out, &m.fleetlock, m.now_ms);
    family(
        &mut out,
        "muster_leases",
        "gauge",
        "Leases held, as of the lease clock's latest reading.",
        &one(m.leases_held),
    );
    out
}

fn peer_labels(p: &PeerInput) -> String {
    format!(
        "{{peer=\"{}\",role=\"{}\"}}",
        label(&p.name),
        label(&p.role)
    )
}

/// FleetLock's per-group gauges (slots, holders, the oldest holder's age).
pub fn fleetlock_gauges(out: &mut String, fleetlock: &FleetLock, now_ms: u64) {
    for (name, help) in [
        ("slots", "Reboot slots per group."),
        ("holders", "Machines holding a reboot slot, per group."),
        (
            "oldest_holder_seconds",
            "Age of the oldest slot held, per group.",
        ),
    ] {
        let samples: Vec<(String, String)> = fleetlock
            .groups
            .iter()
            .map(|(group, g)| {
                let value = match name {
                    "slots" => u64::from(g.slots),
                    "holders" => g.holders.len() as u64,
                    _ => g
                        .holders
                        .values()
                        .map(|h| now_ms.saturating_sub(h.since_ms) / 1000)
                        .max()
                        .unwrap_or(0),
                };
                (format!("{{group=\"{}\"}}", label(group)), value.to_string())
            })
            .collect();
        family(
            out,
            &format!("muster_fleetlock_{name}"),
            "gauge",
            help,
            &samples,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_has_help_and_type_and_labels_are_escaped() {
        let m = MetricsInput {
            term: 7,
            is_leader: true,
            has_leader: true,
            last_log_index: 40,
            applied_index: 38,
            peers: vec![
                PeerInput {
                    name: "n\"1".into(),
                    role: "voter".into(),
                    lag: Some(3),
                    reachable: Some(true),
                },
                PeerInput {
                    name: "s1".into(),
                    role: "spare".into(),
                    lag: None,
                    reachable: Some(false),
                },
            ],
            cert_expires_ms: Some(10_000),
            now_ms: 4_000,
            ..Default::default()
        };
        let text = render(&m);
        assert!(text.contains("muster_raft_term 7\n"), "{text}");
        assert!(text.contains("muster_raft_apply_lag 2\n"), "{text}");
        assert!(
            text.contains("muster_members{role=\"voter\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("muster_members{role=\"standby\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("muster_peer_replication_lag{peer=\"n\\\"1\",role=\"voter\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("muster_peer_reachable{peer=\"s1\",role=\"spare\"} 0\n"),
            "{text}"
        );
        assert!(text.contains("muster_cert_expiry_seconds 6\n"), "{text}");
        assert_eq!(label("a\\b\nc\"d"), "a\\\\b\\nc\\\"d");
        assert!(
            text.contains("muster_proposal_duration_seconds_bucket{le=\"+Inf\"} 0\n"),
            "{text}"
        );
        let names: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split(['{', ' ']).next())
            .collect();
        for name in names {
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(name);
            assert!(
                text.contains(&format!("# TYPE {family} ")),
                "{name} has no TYPE"
            );
        }
    }
}
