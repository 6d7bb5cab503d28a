//! The replicated domain: [`ClusterState`] and the commands ([`Request`]) that change it.
//!
//! Plain data and pure functions: nothing here knows openraft or HTTP. `raft/` persists and
//! replicates these types; the leader's operations (`leader/`) build the commands.
//!
//! [`ClusterState::apply`] hands each command to its family: the cluster's life, its members
//! and its tokens are carried out in `lifecycle.rs`, `membership.rs` and `tokens.rs`; the
//! domains with rules of their own (`kv.rs`, `lease.rs`, `fleetlock.rs`, `settings.rs`,
//! `ca_rotation.rs`) judge theirs.

mod admission;
pub mod ca_rotation;
pub mod fleetlock;
pub mod fleetlock_quorum;
pub mod fleetlock_trail;
pub mod fleetlock_window;
pub mod kv;
pub mod lease;
mod lifecycle;
mod membership;
mod records;
mod request;
pub mod scope;
pub mod settings;
#[cfg(test)]
mod tests;
pub mod token_retirement;
mod tokens;
mod version;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

pub use admission::Admission;
pub use records::{
    CaMaterial, DEAD_TOKEN_RETENTION_MS, JoinTokenRecord, Node, NodeRecord, OperatorTokenRecord,
    valid_zone,
};
pub use request::{Refusal, Request, Response, SecretReplacement};

use crate::api::ErrorKind;

/// A node id: random per data-dir incarnation, never reused.
pub type NodeId = u64;

/// The spelling of a node id in registrations, certificates' peers lists and output: hex.
pub fn member_id(id: NodeId) -> String {
    format!("{id:x}")
}

/// Reads a member id; `None` unless it is non-zero hex.
/// Reads a member id in its one spelling ([`member_id`]): lowercase hex without leading zeros.
/// `0abc` and `abc` would otherwise name the same node in two ways.
pub fn parse_member_id(text: &str) -> Option<NodeId> {
    u64::from_str_radix(text, 16)
        .ok()
        .filter(|id| *id != 0 && member_id(*id) == text)
}

/// Everything the state machine holds. Snapshots are this struct, serialized.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterState {
    pub cluster_id: Option<String>,
    pub ca: Option<CaMaterial>,
    #[serde(deserialize_with = "id_keyed_map")]
    pub nodes: BTreeMap<NodeId, NodeRecord>,
    /// The key-value space (a plain map in states written before revisions; read either way).
    pub kv: kv::Kv,
    #[serde(default)]
    pub join_tokens: BTreeMap<String, JoinTokenRecord>,
    #[serde(default)]
    pub operator_tokens: BTreeMap<String, OperatorTokenRecord>,
    /// Ids of removed nodes. Never reused and never admitted again.
    #[serde(default)]
    pub removed: BTreeSet<NodeId>,
    /// The removed ids whose removal was forced (a subset of `removed`).
    #[serde(default)]
    pub forced_removals: BTreeSet<NodeId>,
    /// The discovery formation in progress, until its cohort has joined.
    #[serde(default)]
    pub formation: Option<FormationRecord>,
    /// FleetLock's reboot semaphores.
    #[serde(default)]
    pub fleetlock: fleetlock::FleetLock,
    /// Leases and the clock they are judged on.
    #[serde(default)]
    pub leases: lease::Leases,
    /// The latest leader wall-clock reading any applied entry carried (token times). Token
    /// expiry is judged on `max(the entry's reading, this)`, so a new leader whose clock lags
    /// cannot bring an expired token back once a later reading has been committed.
    #[serde(default)]
    pub wall_clock_ms: u64,
    /// The membership repairs' settings written by `muster apply` (none: each leader's flags).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<settings::MembershipSettings>,
    /// A CA rotation in progress (`muster ca rotate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_next: Option<ca_rotation::CaRotation>,
    /// Every `muster recover` this cluster went through, oldest first; the last one's epoch is
    /// the cluster's epoch (0: never recovered).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recoveries: Vec<RecoveryRecord>,
}

/// One `muster recover`: a survivor made itself the cluster's only voter after a majority of
/// the voters was lost for good.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryRecord {
    /// 1 for the cluster's first recovery, then 2, …: set when applied, whatever was written.
    #[serde(default)]
    pub epoch: u64,
    /// The operator's clock on the survivor when `muster recover` ran.
    pub at_ms: u64,
    /// The survivor that ran it.
    pub by: String,
    /// The members named lost, removed for good.
    pub lost: Vec<LostMember>,
    /// The last raft log index the survivor held: every entry up to it was kept.
    pub kept_through_index: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LostMember {
    pub id: NodeId,
    pub name: String,
}

/// Reads a map keyed by node id whose keys arrive as numbers or as strings. JSON keys are
/// strings; serde turns them back into numbers, except inside an internally tagged enum (a
/// `Request::RestoreState` entry), where they stay strings and a plain map would refuse them.
pub(crate) fn id_keyed_map<'de, D, V>(d: D) -> Result<BTreeMap<NodeId, V>, D::Error>
where
    D: serde::Deserializer<'de>,
    V: Deserialize<'de>,
{
    #[derive(Deserialize, PartialEq, Eq, PartialOrd, Ord)]
    #[serde(untagged)]
    enum Key {
        Number(NodeId),
        Text(String),
    }
    let raw: BTreeMap<Key, V> = BTreeMap::deserialize(d)?;
    raw.into_iter()
        .map(|(k, v)| match k {
            Key::Number(id) => Ok((id, v)),
            Key::Text(text) => text
                .parse::<NodeId>()
                .map(|id| (id, v))
                .map_err(|_| serde::de::Error::custom(format!("{text:?} is not a node id"))),
        })
        .collect()
}

/// A formation in progress: a cohort that is admitted and made voters together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "through", rename_all = "snake_case")]
pub enum FormationRecord {
    /// Through a discovery URL: its first `size` registrants. The URL is a credential; it lives
    /// in the replicated state (which holds the CA key as well) only until the formation ends.
    Discovery { url: String, size: usize },
    /// Static bootstrap (`--initial-cluster`): the members with these names.
    Static { names: Vec<String> },
}

impl FormationRecord {
    /// How many members the cohort has.
    pub fn size(&self) -> usize {
        match self {
            FormationRecord::Discovery { size, .. } => *size,
            FormationRecord::Static { names } => names.len(),
        }
    }
}

impl ClusterState {
    /// The cluster's time for an entry carrying this leader reading: never behind a reading
    /// committed before.
    fn wall_clock_at(&self, reading: u64) -> u64 {
        self.wall_clock_ms.max(reading)
    }

    /// Moves the replicated wall clock forward to `reading` (never back); called by entries
    /// that change the state (a refusal changes nothing, the clock included).
    fn observe_wall_clock(&mut self, reading: u64) -> u64 {
        self.wall_clock_ms = self.wall_clock_at(reading);
        self.wall_clock_ms
    }

    /// Applies one command. Pure and deterministic: the same commands give the same state on
    /// every node.
    pub fn apply(&mut self, request: &Request) -> Response {
        let response = self.apply_command(request);
        // Any command may complete a CA rotation's trust step: an acknowledgement, but also
        // the removal of the last member that had not given one.
        self.settle_ca_rotation();
        response
    }

    /// Each command of a batch in order, each answered on its own. A batch inside a batch is
    /// never written (the leader batches single commands); it is refused, not unrolled.
    fn apply_batch(&mut self, requests: &[Request]) -> Response {
        let batch = requests
            .iter()
            .map(|request| match request {
                Request::Batch { .. } => Response::refusal(Refusal::new(
                    ErrorKind::InvalidArgument,
                    "a batch inside a batch is not applied",
                )),
                request => self.apply(request),
            })
            .collect();
        Response {
            batch,
            ..Response::default()
        }
    }

    /// One command, handed to the step of its family: the cluster's life (`lifecycle.rs`), its
    /// members (`membership.rs`), its tokens (`tokens.rs`), and the domains that judge their
    /// own commands (the key-value space, leases, FleetLock, settings, the CA rotation).
    fn apply_command(&mut self, request: &Request) -> Response {
        match request {
            Request::InitCluster {
                cluster_id,
                ca,
                operator_token,
                formation,
                join_secret,
            } => self.init_cluster(cluster_id, ca, operator_token, formation, join_secret),
            Request::EndFormation => self.end_formation(),
            Request::RestoreState { state } => self.restore_state(state),
            Request::Recovered { record } => self.recovered(record),
            Request::UpsertNode { id, node } => self.upsert_node(*id, node),
            Request::RemoveNode { id, force, now_ms } => self.remove_node(*id, *force, *now_ms),
            Request::AdmitWithToken {
                token_id,
                secret_sha256,
                now_ms,
                id,
                node,
            } => self.admit_with_token(token_id, secret_sha256, *now_ms, *id, node),
            Request::CreateJoinToken { id, token } => self.create_join_token(id, token),
            Request::RevokeJoinToken { id, now_ms } => self.revoke_join_token(id, *now_ms),
            Request::CreateOperatorToken { id, token } => self.create_operator_token(id, token),
            Request::RevokeOperatorToken { id, now_ms } => self.revoke_operator_token(id, *now_ms),
            Request::KvPut { key, value, expect } => kv_answer(self.kv.put(key, value, *expect)),
            Request::KvDel { key, expect } => kv_answer(self.kv.del(key, *expect)),
            Request::Batch { requests } => self.apply_batch(requests),
            Request::KvUpgrade => {
                self.kv.upgrade();
                Response::default()
            }
            Request::Lease(command) => answer(self.leases.apply(command), |outcome| Response {
                lease: Some(outcome),
                ..Response::default()
            }),
            Request::FleetLock(command) => {
                answer(self.fleetlock.apply(command), |outcome| Response {
                    fleetlock: Some(outcome),
                    ..Response::default()
                })
            }
            Request::SetSettings { settings } => self.set_settings(settings),
            Request::BeginCaRotation {
                ca,
                pin,
                cross_pems,
                now_ms,
            } => answer(self.begin_ca_rotation(ca, pin, cross_pems, *now_ms), |()| {
                Response::default()
            }),
            Request::AckCaRotation { id, pin, stage } => {
                answer(self.ack_ca_rotation(*id, pin, *stage), |()| {
                    Response::default()
                })
            }
            Request::FinishCaRotation {
                pin,
                force,
                now_ms,
                new_join_secret,
            } => self.finish_ca_rotation_now(pin, *force, *now_ms, new_join_secret.as_ref()),
        }
    }

    /// The settings, checked before they are written.
    fn set_settings(&mut self, settings: &settings::MembershipSettings) -> Response {
        match settings.check() {
            Ok(()) => {
                self.settings = Some(*settings);
                Response::default()
            }
            Err(e) => Response::refused(ErrorKind::InvalidArgument, e.to_string()),
        }
    }

    /// Ends a CA rotation and retires the tokens the old CA's members held.
    fn finish_ca_rotation_now(
        &mut self,
        pin: &str,
        force: bool,
        now_ms: u64,
        new_join_secret: Option<&SecretReplacement>,
    ) -> Response {
        match self.finish_ca_rotation(pin, force) {
            Ok(()) => {
                let now = self.observe_wall_clock(now_ms);
                Response {
                    retired: Some(self.retire_tokens(pin, now, new_join_secret)),
                    ..Response::default()
                }
            }
            Err(refused) => Response::refusal(refused),
        }
    }
}

/// The answer to a command a domain judged: `fill` puts its outcome in, or the refusal.
fn answer<T>(result: Result<T, Refusal>, fill: impl FnOnce(T) -> Response) -> Response {
    match result {
        Ok(outcome) => fill(outcome),
        Err(refused) => Response::refusal(refused),
    }
}

/// The answer to a key-value write: the value it replaced and the new revision.
fn kv_answer(result: Result<(Option<String>, u64), Refusal>) -> Response {
    answer(result, |(previous, revision)| Response {
        previous,
        revision: Some(revision),
        ..Response::default()
    })
}
