//! JSON shapes of the agent's operator API (the unix socket, and the TLS port with an operator
//! token).
//! These are a public contract: fields may be added, never renamed.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Shortest and longest join-token lifetime.
pub const JOIN_TOKEN_MIN_TTL: Duration = Duration::from_secs(1);
pub const JOIN_TOKEN_MAX_TTL: Duration = Duration::from_secs(365 * 24 * 3600);
/// Most nodes one join token may admit.
pub const JOIN_TOKEN_MAX_USES: u32 = 10_000;

/// `muster status --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub cluster_id: String,
    /// This node's name.
    #[serde(rename = "self")]
    pub self_name: String,
    /// The leader's name: only a leader that answers and hears from a majority of the voters.
    /// `None` during an election and after the quorum is lost (raft may still remember a
    /// leader that is dead).
    pub leader: Option<String>,
    pub term: u64,
    pub commit_index: u64,
    pub members: Vec<Member>,
    /// Raft/forwarding requests this node refused because the caller had no certificate from
    /// this cluster's CA (since the agent started).
    #[serde(default)]
    pub refused_rpcs: u64,
    /// Removed members whose certificates this node refuses at the TLS handshake.
    #[serde(default)]
    pub revoked_certificates: usize,
    /// True when no majority of the voters answers: this node leads but has not heard from a
    /// majority for the quorum window (its writes fail with `quorum_lost` at once), or no leader
    /// answers and this node reaches no majority of the voters either.
    #[serde(default)]
    pub quorum_lost: bool,
    /// How many voters answer (the node counting included): as the leader hears them, or, with
    /// no leader answering, as this node found by asking each one. `None` from older agents.
    #[serde(default)]
    pub voters_reachable: Option<usize>,
    /// The latest membership changes the leader made (oldest first), with their causes.
    #[serde(default)]
    pub membership_events: Vec<MembershipEvent>,
    /// What the leader's automatic membership repairs wait for, as sentences.
    #[serde(default)]
    pub membership_waiting: Vec<String>,
    /// The members by failure zone and role; empty when no member has a zone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<ZoneCoverage>,
    /// The cluster's last `muster recover`, if it went through one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered: Option<Recovered>,
}

/// A `muster recover`, for `muster status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recovered {
    /// 1 for the cluster's first recovery, then 2, …
    pub epoch: u64,
    /// When, on the survivor's clock (milliseconds since the Unix epoch).
    pub at_ms: u64,
    /// The survivor that ran it.
    pub by: String,
    /// The members it removed as lost.
    pub lost: Vec<String>,
    /// The survivor kept its log through this index.
    pub kept_through_index: u64,
}

/// One membership change, for `muster status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipEvent {
    /// When, in milliseconds since the Unix epoch (the leader's clock).
    pub at_ms: u64,
    /// What changed, e.g. `demoted n3 to nonvoter`.
    pub change: String,
    /// Why, e.g. `unreachable for 31s (--replace-after 30s)`.
    pub cause: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub name: String,
    /// Node id in hex.
    pub id: String,
    pub address: String,
    /// `voter` or `nonvoter` (a spare is a nonvoter outside the raft configuration).
    pub suffrage: String,
    /// `voter`, `standby` (a nonvoter that replicates, promoted first) or `spare` (a member
    /// outside the raft configuration, which does not replicate). Empty from older agents.
    #[serde(default)]
    pub role: String,
    /// Known only on the leader (from replication progress); `true` for the leader itself.
    pub reachable: Option<bool>,
    /// Milliseconds since the leader last heard from this node (leader only).
    pub last_seen_ms: Option<u64>,
    /// Highest log index known to be replicated to this node (leader only).
    pub match_index: Option<u64>,
    /// Its failure zone (`--zone`), as it reported it; `None`: not said, or an older agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// The agent version it reported; `None`: older than the report, or not reported yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// One failure zone's members by role, for `muster status` (only when some member has a zone).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZoneCoverage {
    /// The zone's name; `""` for the members that said none.
    pub zone: String,
    pub voters: usize,
    pub standbys: usize,
    pub spares: usize,
    /// Members of the zone the leader hears from (`None` when not known: not the leader's
    /// answer).
    #[serde(default)]
    pub reachable: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvEntry {
    pub key: String,
    pub value: String,
    /// The revision that created the key, and the one that last changed it.
    #[serde(default)]
    pub create_revision: u64,
    #[serde(default)]
    pub mod_revision: u64,
}

/// `PUT /v1/kv?key=K`: the value, and an optional condition (compare-and-set).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvPut {
    pub value: String,
    /// Write only if the key was last changed at this revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub if_revision: Option<u64>,
    /// Write only if the key does not exist.
    #[serde(default)]
    pub if_absent: bool,
}

/// A held lease, as `muster lease get|list` and a claim show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseInfo {
    pub name: String,
    pub holder: String,
    /// The fencing token of this grant: larger than every token granted before it.
    pub token: u64,
    /// How long it still runs on the lease clock unless renewed.
    pub remaining_ms: u64,
    /// How long ago it was granted to this holder (lease clock).
    pub held_for_ms: u64,
    /// A claim: whether the holder already held it (a renewal).
    #[serde(default)]
    pub renewed: bool,
    /// A new grant: its lease key, shown to the claimant only, once. Renewing and releasing
    /// need it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// `POST /v1/leases/NAME`: claim, or renew with the grant's key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseClaim {
    pub holder: String,
    pub ttl_ms: u64,
    #[serde(default)]
    pub key: Option<String>,
}

/// `DELETE /v1/leases/NAME`: release, with the grant's key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRelease {
    pub holder: String,
    pub key: String,
}

/// `muster token create --json` and `muster operator-token create --json`: the only time the
/// token's text (with its secret) is shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCreated {
    pub token: String,
    pub id: String,
    /// Join tokens only: when it stops working (milliseconds since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_ms: Option<u64>,
    /// Join tokens only: how many nodes it admits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uses: Option<u32>,
    pub description: String,
}

/// One row of `muster token list --json`. Never holds a secret or its hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinTokenInfo {
    pub id: String,
    pub description: String,
    /// `active`, `expired`, `consumed` or `revoked`.
    pub state: String,
    pub created_ms: u64,
    pub expires_ms: u64,
    pub uses_total: u32,
    pub uses_left: u32,
    pub consumed_ms: Option<u64>,
    pub revoked_ms: Option<u64>,
    pub last_used_by: Option<String>,
}

/// One row of `muster operator-token list --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorTokenInfo {
    pub id: String,
    pub description: String,
    /// `active` or `revoked`.
    pub state: String,
    pub created_ms: u64,
    pub revoked_ms: Option<u64>,
    /// `admin`, `kv:PREFIX`, `kv:PREFIX:ro`, `lease:NAME`, `fleetlock`.
    #[serde(default)]
    pub scopes: Vec<String>,
}

/// `muster node remove --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRemoved {
    pub name: String,
    pub id: String,
    /// Whether it was a voter when removal started.
    pub was_voter: bool,
    /// True once the node is out of the raft configuration; false if the leader is still
    /// finishing (it always does: the removal is recorded in the replicated state).
    pub complete: bool,
    pub message: String,
}

/// The answer to a member's check-in (`GET /raft/member`): it is a member, and who leads, and
/// every member's address, as the answering node knows them. A spare (outside the raft
/// configuration, so never contacted by the leader) finds the leader this way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberCheck {
    pub member: bool,
    #[serde(default)]
    pub leader: Option<PeerAddress>,
    #[serde(default)]
    pub members: Vec<PeerAddress>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerAddress {
    /// Node id in hex.
    pub id: String,
    pub name: String,
    pub addr: String,
}

/// What `set-address` did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AddressChange {
    pub name: String,
    pub id: String,
    pub from: String,
    pub to: String,
    /// False when the member was already recorded at that address.
    pub changed: bool,
}

/// `muster ca status`: the cluster CA and the rotation in progress, if any.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaStatus {
    pub pin: String,
    pub expires_ms: u64,
    /// `none`, `trusting`, `reissuing` or `ready` (to finish).
    pub phase: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_pin: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_expires_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_ms: Option<u64>,
    /// The members the phase waits for, by name.
    #[serde(default)]
    pub waiting_for: Vec<String>,
    /// After `--finish`: the ids of the join and operator tokens it revoked (made under the
    /// old CA), and of the join secret that stopped working.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retired_join_tokens: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retired_operator_tokens: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_join_secret: Option<String>,
    /// After `--finish`, when a join secret was live: the secret that replaces it (`JS1.…`),
    /// shown here once and stored nowhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join_secret: Option<String>,
}

/// `POST /v1/leader/transfer`: who led, who leads now, and for how long writes were refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderTransfer {
    pub from: String,
    pub to: String,
    pub pause_ms: u64,
}
