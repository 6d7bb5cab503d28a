//! The replicated domain: [`ClusterState`] and the commands ([`Request`]) that change it.
//!
//! Plain data and pure functions: nothing here knows openraft or HTTP. `raft/` persists and
//! replicates these types; the leader's operations (`leader/`) build the commands.

mod admission;
mod records;
mod request;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

pub use admission::Admission;
pub use records::{
    CaMaterial, DEAD_TOKEN_RETENTION_MS, JoinTokenRecord, Node, NodeRecord, OperatorTokenRecord,
};
pub use request::{Refusal, Request, Response};

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
    pub nodes: BTreeMap<NodeId, NodeRecord>,
    pub kv: BTreeMap<String, String>,
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
}

/// A formation through a discovery URL: its first `size` registrants are admitted and made
/// voters together. The URL is a credential; it lives in the replicated state (which holds the
/// CA key as well) only until the formation ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FormationRecord {
    pub discovery_url: String,
    pub size: usize,
}

impl ClusterState {
    /// Applies one command. Pure and deterministic: the same commands give the same state on
    /// every node.
    pub fn apply(&mut self, request: &Request) -> Response {
        match request {
            Request::InitCluster {
                cluster_id,
                ca,
                operator_token,
                formation,
            } => {
                if self.cluster_id.is_some() {
                    return Response::refused(
                        ErrorKind::InvalidArgument,
                        "cluster already initialized",
                    );
                }
                self.cluster_id = Some(cluster_id.clone());
                self.ca = Some(ca.clone());
                self.formation = formation.clone();
                if let Some((id, token)) = operator_token {
                    self.operator_tokens.insert(id.clone(), token.clone());
                }
                Response::default()
            }
            Request::EndFormation => {
                self.formation = None;
                Response::default()
            }
            Request::RestoreState { state } => {
                if self.cluster_id.is_some() {
                    return Response::refused(
                        ErrorKind::InvalidArgument,
                        "cluster already initialized",
                    );
                }
                *self = (**state).clone();
                Response::default()
            }
            Request::UpsertNode { id, node } => {
                if let Err(refused) = self.check_node(*id, node) {
                    return Response {
                        previous: None,
                        refused: Some(refused),
                    };
                }
                self.nodes.insert(*id, node.clone());
                Response::default()
            }
            Request::RemoveNode { id, force } => {
                self.nodes.remove(id);
                self.removed.insert(*id);
                if *force {
                    self.forced_removals.insert(*id);
                }
                Response::default()
            }
            Request::AdmitWithToken {
                token_id,
                secret_sha256,
                now_ms,
                id,
                node,
            } => match self.check_admission(token_id, secret_sha256, *now_ms, *id, node) {
                Err(refused) => Response {
                    previous: None,
                    refused: Some(refused),
                },
                Ok(Admission::AlreadyMember) => Response::default(),
                Ok(Admission::New) => {
                    if let Some(token) = self.join_tokens.get_mut(token_id) {
                        token.uses_left -= 1;
                        token.consumed_ms = Some(*now_ms);
                        token.last_used_by = Some(node.name.clone());
                    }
                    self.nodes.insert(*id, node.clone());
                    Response::default()
                }
            },
            Request::CreateJoinToken { id, token } => {
                if self.join_tokens.contains_key(id) {
                    return Response::refused(
                        ErrorKind::InvalidArgument,
                        format!("token {id} exists"),
                    );
                }
                let now = token.created_ms;
                self.join_tokens
                    .retain(|_, t| t.dead_since().saturating_add(DEAD_TOKEN_RETENTION_MS) > now);
                self.join_tokens.insert(id.clone(), token.clone());
                Response::default()
            }
            Request::RevokeJoinToken { id, now_ms } => match self.join_tokens.get_mut(id) {
                Some(token) => {
                    token.revoked_ms.get_or_insert(*now_ms);
                    Response::default()
                }
                None => {
                    Response::refused(ErrorKind::NotFound, format!("no join token with id {id}"))
                }
            },
            Request::CreateOperatorToken { id, token } => {
                if self.operator_tokens.contains_key(id) {
                    return Response::refused(
                        ErrorKind::InvalidArgument,
                        format!("token {id} exists"),
                    );
                }
                self.operator_tokens.insert(id.clone(), token.clone());
                Response::default()
            }
            Request::RevokeOperatorToken { id, now_ms } => match self.operator_tokens.get_mut(id) {
                Some(token) => {
                    token.revoked_ms.get_or_insert(*now_ms);
                    Response::default()
                }
                None => Response::refused(
                    ErrorKind::NotFound,
                    format!("no operator token with id {id}"),
                ),
            },
            Request::KvPut { key, value } => Response {
                previous: self.kv.insert(key.clone(), value.clone()),
                refused: None,
            },
            Request::KvDel { key } => Response {
                previous: self.kv.remove(key),
                refused: None,
            },
        }
    }
}
