//! The commands that change the replicated state, and the state machine's answers.

use serde::{Deserialize, Serialize};

use super::FormationRecord;
use super::records::{CaMaterial, JoinTokenRecord, NodeRecord, OperatorTokenRecord};
use super::{ClusterState, NodeId};
use crate::api::ErrorKind;

/// A change to the replicated state. Every variant is deterministic: no clocks or randomness
/// are read while applying; callers put them into the command.
// One command is built per write and serialized into the log at once: its size in memory does
// not matter, and boxing the big variant would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Written once, by the initiator, as the first command of a new cluster.
    InitCluster {
        cluster_id: String,
        ca: CaMaterial,
        /// The operator token printed at formation (its hash).
        #[serde(default)]
        operator_token: Option<(String, OperatorTokenRecord)>,
        /// The formation through a discovery URL that starts with this command, so that
        /// whichever node leads can admit the cohort and finish it.
        #[serde(default)]
        formation: Option<FormationRecord>,
        /// The pre-shared join secret's credential (its id and hash), if the cluster has one.
        #[serde(default)]
        join_secret: Option<(String, JoinTokenRecord)>,
    },
    /// The cohort has joined: the formation is over (whoever leads writes it).
    EndFormation,
    /// Written once, by `muster restore`, as the first command of a restored cluster.
    RestoreState {
        state: Box<ClusterState>,
    },
    /// Written by `muster recover` into a survivor's log (never proposed by a leader): the
    /// members named lost are removed for good and the recovery is recorded, so the survivors'
    /// status says what happened and the lost members are refused if they come back.
    Recovered {
        record: super::RecoveryRecord,
    },
    /// Records (or updates the address of) a member.
    UpsertNode {
        id: NodeId,
        node: NodeRecord,
    },
    /// Removes a member for good: its record goes and its id is tombstoned, so it can never come
    /// back. Taking it out of the raft configuration follows (the leader's reconciler).
    RemoveNode {
        id: NodeId,
        /// The operator overrode the quorum check (`--force`): the reconciler then demotes the
        /// node even while the voters left lack a reachable majority.
        #[serde(default)]
        force: bool,
        /// The leader's clock when it wrote the removal: the time of the FleetLock slots it
        /// releases, in FleetLock's trail (0 in removals written before the field).
        #[serde(default)]
        now_ms: u64,
    },
    /// Admits a node with a join token: checks the token, takes one use and records the node, in
    /// one step, so two joiners can never both win the last use.
    AdmitWithToken {
        token_id: String,
        /// SHA-256 of the secret the joiner presented (the secret itself never enters the log).
        secret_sha256: String,
        now_ms: u64,
        id: NodeId,
        node: NodeRecord,
    },
    CreateJoinToken {
        id: String,
        token: JoinTokenRecord,
    },
    RevokeJoinToken {
        id: String,
        now_ms: u64,
    },
    CreateOperatorToken {
        id: String,
        token: OperatorTokenRecord,
    },
    RevokeOperatorToken {
        id: String,
        now_ms: u64,
    },
    /// Sets a key; with `expect`, only if the key's revision is as expected (compare-and-set).
    KvPut {
        key: String,
        value: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expect: Option<super::kv::Expect>,
    },
    KvDel {
        key: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expect: Option<super::kv::Expect>,
    },
    /// Gives a key-value space read from a state that predates revisions its revisions, at the
    /// same log index on every node (see `state/kv.rs`). Written by a leader; a no-op after.
    KvUpgrade,
    /// A lease claim or release, with the leader's reading of the lease clock.
    Lease(super::lease::Command),
    /// The membership repairs' settings, from `muster apply` (see `state/settings.rs`).
    SetSettings {
        settings: super::settings::MembershipSettings,
    },
    /// A FleetLock decision (lock, unlock) or setting.
    FleetLock(super::fleetlock::Command),
    /// Starts a CA rotation: the new CA is trusted next to the current one (see
    /// `state/ca_rotation.rs`).
    BeginCaRotation {
        ca: CaMaterial,
        pin: String,
        #[serde(default)]
        cross_pems: Vec<String>,
        now_ms: u64,
    },
    /// A member reports that it trusts the new CA, or holds a certificate from it.
    AckCaRotation {
        id: NodeId,
        pin: String,
        stage: super::ca_rotation::CaStage,
    },
    /// Ends a rotation: the new CA becomes the cluster's CA and the old one is dropped. Every
    /// join and operator token not pinned to the new CA is revoked with it, and a live join
    /// secret is replaced by `new_join_secret` (revoked if none is given).
    FinishCaRotation {
        pin: String,
        force: bool,
        #[serde(default)]
        now_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        new_join_secret: Option<SecretReplacement>,
    },
    /// Several commands in one entry, applied in order and answered one by one (in
    /// `Response::batch`): the leader's group commit (`raft/node/batch.rs`). Written only
    /// while every member's agent reads it (see [`super::version::reads_batches`]); a batch
    /// inside a batch is refused.
    Batch {
        requests: Vec<Request>,
    },
}

impl Request {
    /// At most about how many bytes the command takes in the log: its key and value for
    /// key-value writes as JSON escapes them at worst (a control character becomes `\u00XX`,
    /// six bytes), a generous constant for the rest. For bounding a batch, not exact.
    pub fn approx_bytes(&self) -> usize {
        const OVERHEAD: usize = 128;
        const WORST_ESCAPE: usize = 6;
        match self {
            Request::KvPut { key, value, .. } => {
                OVERHEAD + WORST_ESCAPE * (key.len() + value.len())
            }
            Request::KvDel { key, .. } => OVERHEAD + WORST_ESCAPE * key.len(),
            Request::Batch { requests } => requests.iter().map(Request::approx_bytes).sum(),
            _ => 4 * OVERHEAD,
        }
    }
}

/// A join secret that replaces the cluster's at the end of a CA rotation: its public id and the
/// SHA-256 of the secret (the secret itself is shown once to the operator, stored nowhere).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretReplacement {
    pub id: String,
    pub secret_sha256: String,
    /// The new secret's verify key (see `JoinTokenRecord::verify_key`).
    #[serde(default)]
    pub verify_key: String,
}

/// Why the state machine refused a command: a stable error kind and a message for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub kind: ErrorKind,
    pub message: String,
}

impl From<Refusal> for crate::api::ApiError {
    fn from(r: Refusal) -> Self {
        crate::api::ApiError::new(r.kind, r.message)
    }
}

impl Refusal {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

/// The answer to an applied [`Request`] (and the `R` for blank and membership entries).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    /// For `KvPut`/`KvDel`: the value the key held before.
    pub previous: Option<String>,
    /// Set when the command was refused by the state machine (e.g. a second `InitCluster`).
    pub refused: Option<Refusal>,
    /// For `FleetLock`: what the lock or unlock came to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleetlock: Option<super::fleetlock::Outcome>,
    /// For `KvPut`/`KvDel`: the key-value space's revision after the command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
    /// For `Lease`: the lease after the command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<super::lease::Outcome>,
    /// For `FinishCaRotation`: what the end of the rotation retired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired: Option<super::token_retirement::Retired>,
    /// For `Batch`: each command's answer, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub batch: Vec<Response>,
}

impl Response {
    pub(super) fn refusal(refused: Refusal) -> Self {
        Self {
            refused: Some(refused),
            ..Self::default()
        }
    }

    pub(super) fn refused(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            refused: Some(Refusal::new(kind, message)),
            ..Self::default()
        }
    }
}
