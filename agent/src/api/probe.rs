//! JSON shapes of what `muster plan`/`apply` and `muster config export` read: the membership
//! settings in force and every member's own report of itself. A public contract: fields may be
//! added, never renamed.

use serde::{Deserialize, Serialize};

use super::types::Status;

/// `PUT /v1/settings`: the membership repairs' settings (`0` ms turns a repair off).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettingsUpdate {
    pub replace_after_ms: u64,
    pub cleanup_dead_after_ms: u64,
    pub min_voters: u32,
    pub standbys: u32,
}

/// `GET /v1/settings`: the settings the leader uses now, and where they come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettingsInfo {
    #[serde(flatten)]
    pub settings: SettingsUpdate,
    /// `cluster` (written by `muster apply`, the same on every leader) or `leader_flags` (the
    /// current leader's `--replace-after`, … flags: nothing was written yet).
    pub source: String,
}

/// What a member reports about itself (`GET /raft/probe` between members).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeProbe {
    pub name: String,
    /// The agent's version (`muster --version`).
    pub version: String,
    /// When its node certificate expires, in ms since the Unix epoch.
    pub cert_expires_ms: Option<u64>,
    /// When the cluster CA it trusts expires.
    #[serde(default)]
    pub ca_expires_ms: Option<u64>,
    /// The last log index it applied.
    pub applied_index: u64,
    /// The leader it hears from, if any.
    pub leader: Option<String>,
    pub data_dir: DataDirHealth,
    /// Its `--data-dir` (absolute), for the commands `plan` and `apply` print for it and for
    /// `config export`. `None` from older agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_dir_path: Option<String>,
}

/// The data dir as the node finds it: writable (a small file written and fsync'd) and its size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataDirHealth {
    pub ok: bool,
    pub bytes: u64,
    /// What is wrong, when not ok.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// One member as the probing node reached it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberProbe {
    pub name: String,
    pub address: String,
    /// Its report, when it answered.
    pub report: Option<NodeProbe>,
    /// It answered (with a report, or an older agent without the probe endpoint).
    #[serde(default)]
    pub answered: bool,
    /// Why it did not answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `GET /v1/probe`: the cluster's status (the leader's view of the members when there is a
/// leader) and every member's own report, gathered by the member asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeReport {
    pub status: Status,
    pub probes: Vec<MemberProbe>,
}
