//! The probe table of the plan: one row per member or machine the file wants, with what the
//! probes said about it. Separate because it only reports what was seen; no step depends on it.

use serde::Serialize;

use super::Observed;
use crate::apply::manifest::Manifest;

/// One row of the probe table: a member, a machine the file wants, or both.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProbeRow {
    pub name: String,
    pub address: String,
    /// Listed in the file.
    pub in_file: bool,
    /// `voter`, `standby`, `spare`, or `absent` (in the file, not a member).
    pub role: String,
    pub reachable: bool,
    /// Log entries it is behind the leader's commit index (members the leader replicates to).
    pub lag: Option<u64>,
    pub version: Option<String>,
    pub cert_expires_ms: Option<u64>,
    /// Its data dir is writable (as it reports it).
    pub data_dir_ok: Option<bool>,
    pub data_dir_bytes: Option<u64>,
    /// Whether it ever joined: true once it applied or was sent log entries, false for a
    /// machine the file adds (or a member that never received the log); none when it is not
    /// known (an unreachable member while no leader answers).
    pub joined: Option<bool>,
    /// Why it did not answer, or what is wrong with its data dir.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

pub(super) fn probe_rows(desired: &Manifest, observed: &Observed) -> Vec<ProbeRow> {
    let mut rows: Vec<ProbeRow> = observed
        .members
        .iter()
        .map(|m| {
            let report = m.report.as_ref();
            let applied = report.map(|r| r.applied_index).unwrap_or(0);
            ProbeRow {
                name: m.name.clone(),
                address: m.address.clone(),
                in_file: desired.members.iter().any(|d| d.name == m.name),
                role: m.role.clone(),
                reachable: m.reachable,
                lag: m
                    .match_index
                    .map(|i| observed.commit_index.saturating_sub(i)),
                version: report.map(|r| r.version.clone()),
                cert_expires_ms: report.and_then(|r| r.cert_expires_ms),
                data_dir_ok: report.map(|r| r.data_dir.ok),
                data_dir_bytes: report.map(|r| r.data_dir.bytes),
                joined: if applied > 0 || m.match_index.is_some_and(|i| i > 0) {
                    Some(true)
                } else if report.is_some() || (observed.leader.is_some() && m.role != "spare") {
                    Some(false)
                } else {
                    // A spare has no replication progress; unreachable, nothing is known.
                    None
                },
                problem: m
                    .error
                    .clone()
                    .or_else(|| report.and_then(|r| r.data_dir.problem.clone())),
            }
        })
        .collect();
    for d in &desired.members {
        if !observed.members.iter().any(|m| m.name == d.name) {
            rows.push(ProbeRow {
                name: d.name.clone(),
                address: d.address.clone(),
                in_file: true,
                role: "absent".into(),
                reachable: false,
                lag: None,
                version: None,
                cert_expires_ms: None,
                data_dir_ok: None,
                data_dir_bytes: None,
                joined: Some(false),
                problem: None,
            });
        }
    }
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    rows
}
