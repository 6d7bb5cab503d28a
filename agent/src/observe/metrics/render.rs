//! The pure half of `/metrics`: the Prometheus text of a [`MetricsInput`], family by family.
//! Separate from the gathering (`metrics.rs`), which reads the agent and the disk, so that the
//! text is a function of its input and tested without an agent.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::{MetricsInput, PeerInput};
use crate::state::fleetlock::FleetLock;

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

/// The Prometheus text of `m`: each group of families in turn, in the order scrapes have
/// always seen.
pub fn render(m: &MetricsInput) -> String {
    let mut out = String::new();
    raft_families(&mut out, m);
    log_families(&mut out, m);
    health_families(&mut out, m);
    member_families(&mut out, m);
    proposal_families(&mut out, m);
    node_families(&mut out, m);
    fleetlock_gauges(&mut out, &m.fleetlock, m.now_ms);
    lease_families(&mut out, m);
    out
}

/// The raft term, and who leads.
fn raft_families(out: &mut String, m: &MetricsInput) {
    family(
        out,
        "muster_raft_term",
        "gauge",
        "The raft term this node is in.",
        &one(m.term),
    );
    family(
        out,
        "muster_is_leader",
        "gauge",
        "1 if this node leads.",
        &flag(m.is_leader),
    );
    family(
        out,
        "muster_has_leader",
        "gauge",
        "1 if this node knows a leader.",
        &flag(m.has_leader),
    );
    family(
        out,
        "muster_leader_changes_total",
        "counter",
        "Changes of the leader this node saw (an election counts).",
        &one(m.stats.leader_changes),
    );
    family(
        out,
        "muster_raft_write_entries_total",
        "counter",
        "Log entries of client writes this node wrote as leader (a batch of writes is one).",
        &one(m.stats.write_entries),
    );
    family(
        out,
        "muster_raft_batched_writes_total",
        "counter",
        "Client writes that went into the log in a batch of several (group commit).",
        &one(m.stats.batched_writes),
    );
}

/// This node's raft log: how far it reaches and how much of it is applied.
fn log_families(out: &mut String, m: &MetricsInput) {
    family(
        out,
        "muster_raft_last_log_index",
        "gauge",
        "The last index in this node's raft log.",
        &one(m.last_log_index),
    );
    family(
        out,
        "muster_raft_applied_index",
        "gauge",
        "The last index this node applied.",
        &one(m.applied_index),
    );
    family(
        out,
        "muster_raft_apply_lag",
        "gauge",
        "Log entries this node holds but has not applied yet.",
        &one(m.last_log_index.saturating_sub(m.applied_index)),
    );
}

/// The quorum and readiness, as `/readyz` judges them.
fn health_families(out: &mut String, m: &MetricsInput) {
    family(
        out,
        "muster_quorum_lost",
        "gauge",
        "1 if this node leads but a majority of the voters has not answered lately.",
        &flag(m.quorum_lost),
    );
    family(
        out,
        "muster_ready",
        "gauge",
        "1 if /readyz answers 200.",
        &flag(m.ready),
    );
}

/// Members by role, and the leader's view of each peer.
fn member_families(out: &mut String, m: &MetricsInput) {
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
        out,
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
        out,
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
        out,
        "muster_peer_reachable",
        "gauge",
        "1 if the leader heard from the member lately (reported by the leader).",
        &reachable,
    );
    zone_family(out, m);
}

/// Members by failure zone and role (every role of every zone a member is in, 0 included, so
/// that `muster_zone_members{role="voter"} == 0` can alert); nothing when no member has a zone.
fn zone_family(out: &mut String, m: &MetricsInput) {
    if m.peers.iter().all(|p| p.zone.is_none()) {
        return;
    }
    let mut counts: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for p in &m.peers {
        let zone = p.zone.as_deref().unwrap_or("");
        for role in ["voter", "standby", "spare"] {
            counts.entry((zone, role)).or_default();
        }
        *counts.entry((zone, p.role.as_str())).or_default() += 1;
    }
    let samples: Vec<(String, String)> = counts
        .iter()
        .map(|((zone, role), n)| {
            (
                format!("{{zone=\"{}\",role=\"{}\"}}", label(zone), label(role)),
                n.to_string(),
            )
        })
        .collect();
    family(
        out,
        "muster_zone_members",
        "gauge",
        "Members by failure zone (--zone; empty for none) and role, as this node knows them.",
        &samples,
    );
}

/// Writes proposed on this node: how long they took, and how many failed.
fn proposal_families(out: &mut String, m: &MetricsInput) {
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
        out,
        "muster_proposal_duration_seconds",
        "histogram",
        "Time from proposing a write on this node (the leader) to its being applied.",
        &histogram,
    );
    family(
        out,
        "muster_proposals_failed_total",
        "counter",
        "Proposals that did not commit or were refused by the state machine.",
        &one(m.stats.failed),
    );
}

/// This node's own: refused connections, its certificate, its data dir.
fn node_families(out: &mut String, m: &MetricsInput) {
    family(
        out,
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
            out,
            "muster_cert_expiry_seconds",
            "gauge",
            "Seconds until this node's certificate expires (negative: expired).",
            &one(seconds),
        );
    }
    family(
        out,
        "muster_data_dir_bytes",
        "gauge",
        "Bytes in this node's data dir.",
        &one(m.data_dir_bytes),
    );
}

/// The leases held.
fn lease_families(out: &mut String, m: &MetricsInput) {
    family(
        out,
        "muster_leases",
        "gauge",
        "Leases held, as of the lease clock's latest reading.",
        &one(m.leases_held),
    );
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
                    zone: Some("rack-1".into()),
                },
                PeerInput {
                    name: "s1".into(),
                    role: "spare".into(),
                    lag: None,
                    reachable: Some(false),
                    zone: None,
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
        assert!(
            text.contains("muster_zone_members{zone=\"rack-1\",role=\"voter\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("muster_zone_members{zone=\"rack-1\",role=\"spare\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("muster_zone_members{zone=\"\",role=\"spare\"} 1\n"),
            "{text}"
        );
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
