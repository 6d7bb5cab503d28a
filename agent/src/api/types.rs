//! JSON shapes of the agent's operator API (unix socket and, later, TCP with a bearer token).
//! These are a public contract: fields may be added, never renamed.

use serde::{Deserialize, Serialize};

/// `muster status --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub cluster_id: String,
    /// This node's name.
    #[serde(rename = "self")]
    pub self_name: String,
    /// The leader's name, if one is known.
    pub leader: Option<String>,
    pub term: u64,
    pub commit_index: u64,
    pub members: Vec<Member>,
    /// Raft/forwarding requests this node refused because the caller had no certificate from
    /// this cluster's CA (since the agent started).
    #[serde(default)]
    pub refused_rpcs: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub name: String,
    /// Node id in hex.
    pub id: String,
    pub address: String,
    /// `voter` or `nonvoter`.
    pub suffrage: String,
    /// Known only on the leader (from replication progress); `true` for the leader itself.
    pub reachable: Option<bool>,
    /// Milliseconds since the leader last heard from this node (leader only).
    pub last_seen_ms: Option<u64>,
    /// Highest log index known to be replicated to this node (leader only).
    pub match_index: Option<u64>,
}

/// `{kind, message}` error with the agent's stable kinds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiError {
    pub kind: String,
    pub message: String,
}

pub mod kind {
    pub const CLUSTER_UNINITIALIZED: &str = "cluster_uninitialized";
    pub const NO_LEADER: &str = "no_leader";
    pub const QUORUM_LOST: &str = "quorum_lost";
    pub const UNAUTHORIZED: &str = "unauthorized";
    pub const NOT_FOUND: &str = "not_found";
    pub const INVALID_ARGUMENT: &str = "invalid_argument";
    pub const CA_PIN_MISMATCH: &str = "ca_pin_mismatch";
    pub const INTERNAL: &str = "internal";
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvEntry {
    pub key: String,
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvPut {
    pub value: String,
}
