//! FleetLock's wire shapes: the protocol's request body (what Zincati sends) and answers, and
//! the operator API's view of the semaphores.

use serde::{Deserialize, Serialize};

/// `POST {base}/v1/pre-reboot` and `/v1/steady-state`: `{"client_params":{"id":…,"group":…}}`.
#[derive(Debug, Clone, Deserialize)]
pub struct ProtocolRequest {
    pub client_params: ClientParams,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ClientParams {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub group: String,
}

/// Every FleetLock answer, success or error: `{"kind":…,"value":…}` (the protocol's error shape;
/// on success a small body that clients ignore).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProtocolAnswer {
    pub kind: String,
    pub value: String,
}

/// `muster fleetlock status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetLockStatus {
    /// `create` or `reject`.
    pub unknown_groups: String,
    pub groups: Vec<GroupStatus>,
    /// The newest events of the audit trail, oldest first (absent from older servers).
    #[serde(default)]
    pub recent: Vec<EventStatus>,
    /// The members whose machines' FleetLock ids are known (learned from requests each member
    /// marked as its own machine's), voters first (absent from older servers).
    #[serde(default)]
    pub machines: Vec<MachineStatus>,
    /// The quorum gate as the leader sees it now (absent from older servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum_gate: Option<QuorumGateStatus>,
}

/// A member and the Zincati id its machine uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineStatus {
    pub member: String,
    pub id: String,
    pub voter: bool,
}

/// The quorum gate: its floor, and each voter as the gate counts it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuorumGateStatus {
    /// False: `--fleetlock-min-tolerance off` on the leader.
    pub on: bool,
    /// Voters kept to spare once a voter reboots (`--fleetlock-min-tolerance`).
    pub min_tolerance: u32,
    pub voters: Vec<VoterStatus>,
}

/// A voter as the quorum gate counts it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VoterStatus {
    pub name: String,
    /// `up`, `unreachable` or `holds a reboot slot`.
    pub state: String,
    /// Its machine's FleetLock id, once learned: until then its Zincati's locks are gated only
    /// when they come through its own agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_id: Option<String>,
}

/// `muster fleetlock history`: the audit trail, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetLockHistory {
    /// How many events the cluster keeps (the oldest go beyond that).
    pub kept: usize,
    pub events: Vec<EventStatus>,
}

/// One event of the audit trail: a slot taken or given back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventStatus {
    /// Its place in the replicated order: later events have larger numbers.
    pub seq: u64,
    /// `lock`, `unlock`, `force_release` or `auto_release`.
    pub kind: String,
    pub group: String,
    pub id: String,
    /// The member the request came through (its name, or id if it is gone; the removed member
    /// for `auto_release`).
    pub via: String,
    /// The leader's wall clock when it wrote the command (ms since the Unix epoch; 0 when the
    /// command predates the trail).
    pub at_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupStatus {
    pub name: String,
    pub slots: u32,
    /// False for `default` (and groups created on first use) until someone sets its slots.
    pub configured: bool,
    pub holders: Vec<HolderStatus>,
    /// Its maintenance windows (`Sat 02:00-06:00 UTC`); none: always open. Absent from older
    /// servers, as are the two below.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<String>,
    /// Whether a lock may take a slot now (the leader's clock): inside a window, or none set.
    #[serde(default = "always_open")]
    pub open: bool,
    /// When closed: when the next window opens (ms since the epoch, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_open_ms: Option<u64>,
    /// Its health gates, as the leader that answered knows them; none: no gate. Absent from
    /// older servers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<GateStatus>,
}

/// One health gate of a group, on the leader that answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateStatus {
    pub name: String,
    /// What it checks on this leader (`prometheus URL`, `command PATH`); absent when this
    /// leader does not define it (a lock is then refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<String>,
    /// Its last result on this leader; absent when it has not run here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<GateResultStatus>,
}

/// A gate's last verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateResultStatus {
    pub passed: bool,
    /// Why it refused (empty when it passed).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// When (the leader's clock, ms since the epoch).
    pub at_ms: u64,
}

fn always_open() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderStatus {
    pub id: String,
    pub since_ms: u64,
    /// The member whose endpoint the lock came through (its name, or id if it is gone).
    pub via: String,
    /// Held longer than the stale threshold (1 h): a machine that never came back?
    pub stale: bool,
}
