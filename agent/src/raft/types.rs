//! The replicated cluster state and the commands that change it. These are Muster's own types;
//! openraft sees them only through [`super::TypeConfig`].

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// A node id: random per data-dir incarnation, never reused.
pub type NodeId = u64;

/// What raft needs to reach a node.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Node {
    /// The agent's `--name`, unique in the cluster.
    pub name: String,
    /// `host:port` of the node's HTTPS (mutual TLS) listener.
    pub addr: String,
}

impl std::fmt::Display for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.name, self.addr)
    }
}

/// The cluster CA, replicated so that any leader can sign node certificates.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaMaterial {
    pub cert_pem: String,
    pub key_pem: String,
}

/// Never prints the private key (this type ends up in `Debug` output of commands and state).
impl std::fmt::Debug for CaMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaMaterial")
            .field("cert_pem", &format_args!("<{} bytes>", self.cert_pem.len()))
            .field("key_pem", &format_args!("<redacted>"))
            .finish()
    }
}

/// A member as the cluster records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub name: String,
    pub addr: String,
    /// SHA-256 (hex) of the node key's SubjectPublicKeyInfo: the node's cert must carry this key.
    pub key_fingerprint: String,
    pub joined_ms: u64,
    /// The id of the join token this node was admitted with (none for formation members).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joined_with: Option<String>,
}

/// A join token as the cluster stores it: never the secret, only its SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinTokenRecord {
    pub secret_sha256: String,
    #[serde(default)]
    pub description: String,
    pub created_ms: u64,
    pub expires_ms: u64,
    pub uses_total: u32,
    pub uses_left: u32,
    /// When the last use was taken.
    #[serde(default)]
    pub consumed_ms: Option<u64>,
    #[serde(default)]
    pub revoked_ms: Option<u64>,
    /// Name of the node that used it last.
    #[serde(default)]
    pub last_used_by: Option<String>,
}

impl JoinTokenRecord {
    /// `active`, `expired`, `consumed` or `revoked` at `now_ms` (revocation wins, then
    /// consumption, then expiry).
    pub fn state(&self, now_ms: u64) -> &'static str {
        if self.revoked_ms.is_some() {
            "revoked"
        } else if self.uses_left == 0 {
            "consumed"
        } else if now_ms >= self.expires_ms {
            "expired"
        } else {
            "active"
        }
    }

    /// The moment after which the token can never admit anyone again.
    fn dead_since(&self) -> u64 {
        self.revoked_ms
            .or(self.consumed_ms.filter(|_| self.uses_left == 0))
            .unwrap_or(self.expires_ms)
            .min(self.expires_ms)
    }
}

/// An operator token as the cluster stores it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorTokenRecord {
    pub secret_sha256: String,
    #[serde(default)]
    pub description: String,
    pub created_ms: u64,
    #[serde(default)]
    pub revoked_ms: Option<u64>,
}

/// A change to the replicated state. Every variant is deterministic: no clocks or randomness
/// are read while applying; callers put them into the command.
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
    },
    /// Written once, by `muster restore`, as the first command of a restored cluster.
    RestoreState {
        state: Box<ClusterState>,
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
    KvPut {
        key: String,
        value: String,
    },
    KvDel {
        key: String,
    },
}

/// Why the state machine refused a command: a stable error kind and a message for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub kind: String,
    pub message: String,
}

impl Refusal {
    pub fn new(kind: &str, message: impl Into<String>) -> Self {
        Self {
            kind: kind.to_string(),
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
}

impl Response {
    fn refused(kind: &str, message: impl Into<String>) -> Self {
        Self {
            previous: None,
            refused: Some(Refusal::new(kind, message)),
        }
    }
}

/// Join, expired, consumed and revoked tokens are kept this long after they stopped working
/// (for `muster token list`), then dropped when the next token is created.
pub const DEAD_TOKEN_RETENTION_MS: u64 = 7 * 24 * 3600 * 1000;

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
}

/// The refusal kinds the state machine answers with: the API's stable error kinds, so a refusal
/// reaches the client unchanged.
pub mod refusal {
    pub use crate::api::types::kind::{
        INVALID_ARGUMENT, NAME_TAKEN, NOT_FOUND, TOKEN_CONSUMED, TOKEN_EXPIRED, TOKEN_REVOKED,
        UNAUTHORIZED,
    };
}

impl ClusterState {
    /// Applies one command. Pure and deterministic: the same commands give the same state on
    /// every node.
    pub fn apply(&mut self, request: &Request) -> Response {
        use refusal::*;
        match request {
            Request::InitCluster {
                cluster_id,
                ca,
                operator_token,
            } => {
                if self.cluster_id.is_some() {
                    return Response::refused(INVALID_ARGUMENT, "cluster already initialized");
                }
                self.cluster_id = Some(cluster_id.clone());
                self.ca = Some(ca.clone());
                if let Some((id, token)) = operator_token {
                    self.operator_tokens.insert(id.clone(), token.clone());
                }
                Response::default()
            }
            Request::RestoreState { state } => {
                if self.cluster_id.is_some() {
                    return Response::refused(INVALID_ARGUMENT, "cluster already initialized");
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
                    return Response::refused(INVALID_ARGUMENT, format!("token {id} exists"));
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
                None => Response::refused(NOT_FOUND, format!("no join token with id {id}")),
            },
            Request::CreateOperatorToken { id, token } => {
                if self.operator_tokens.contains_key(id) {
                    return Response::refused(INVALID_ARGUMENT, format!("token {id} exists"));
                }
                self.operator_tokens.insert(id.clone(), token.clone());
                Response::default()
            }
            Request::RevokeOperatorToken { id, now_ms } => match self.operator_tokens.get_mut(id) {
                Some(token) => {
                    token.revoked_ms.get_or_insert(*now_ms);
                    Response::default()
                }
                None => Response::refused(NOT_FOUND, format!("no operator token with id {id}")),
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

    /// May node `id` be recorded as `node`? Its id must never have been removed, and its name
    /// must be free (the same node may update its own record).
    pub fn check_node(&self, id: NodeId, node: &NodeRecord) -> Result<(), Refusal> {
        if self.removed.contains(&id) {
            return Err(Refusal::new(
                refusal::UNAUTHORIZED,
                format!(
                    "node id {id:x} was removed from this cluster and is never admitted again; \
                     wipe that machine's data dir and join it as a new node"
                ),
            ));
        }
        // A member's key is its identity: an update may change its address, never its key.
        if let Some(existing) = self.nodes.get(&id)
            && existing.key_fingerprint != node.key_fingerprint
        {
            return Err(Refusal::new(
                refusal::UNAUTHORIZED,
                format!("node id {id:x} belongs to another member (its key differs)"),
            ));
        }
        if let Some((other, _)) = self
            .nodes
            .iter()
            .find(|(i, n)| **i != id && n.name == node.name)
        {
            return Err(Refusal::new(
                refusal::NAME_TAKEN,
                format!(
                    "name {} is taken by member {other:x}; pick another --name, or remove that member first (muster node remove {})",
                    node.name, node.name
                ),
            ));
        }
        Ok(())
    }

    /// Decides a token admission without changing anything; [`Request::AdmitWithToken`] applies
    /// it, and the leader runs it first to refuse early (before it signs a certificate).
    pub fn check_admission(
        &self,
        token_id: &str,
        secret_sha256: &str,
        now_ms: u64,
        id: NodeId,
        node: &NodeRecord,
    ) -> Result<Admission, Refusal> {
        use refusal::*;
        // The secret first: without it, nothing about the token (not even its state) is told.
        let token = self
            .join_tokens
            .get(token_id)
            .filter(|t| muster_shared::token::secret_hashes_match(&t.secret_sha256, secret_sha256))
            .ok_or_else(|| {
                Refusal::new(
                    UNAUTHORIZED,
                    "the join token is not valid for this cluster; create one with `muster token create` on a member",
                )
            })?;
        // A retry by a node already admitted (its answer was lost), perhaps with a new token:
        // admit it again without taking a use. Its key proves it is the same node (the leader
        // signs only a CSR made with that key).
        if let Some(existing) = self.nodes.get(&id) {
            if existing.key_fingerprint == node.key_fingerprint {
                return Ok(Admission::AlreadyMember);
            }
            return Err(Refusal::new(
                UNAUTHORIZED,
                format!(
                    "node id {id:x} belongs to another member; this machine's data dir was copied \
                     from a member: wipe it and join again"
                ),
            ));
        }
        if let Some(revoked) = token.revoked_ms {
            return Err(Refusal::new(
                TOKEN_REVOKED,
                format!(
                    "join token {token_id} was revoked ({} ago); create a new one with `muster token create`",
                    ago(now_ms, revoked)
                ),
            ));
        }
        if token.uses_left == 0 {
            return Err(Refusal::new(
                TOKEN_CONSUMED,
                format!(
                    "join token {token_id} has been used up ({} of {} uses, last by {}); create a new one with `muster token create`",
                    token.uses_total,
                    token.uses_total,
                    token.last_used_by.as_deref().unwrap_or("?")
                ),
            ));
        }
        if now_ms >= token.expires_ms {
            return Err(Refusal::new(
                TOKEN_EXPIRED,
                format!(
                    "join token {token_id} expired {} ago; create a new one with `muster token create --ttl …`",
                    ago(now_ms, token.expires_ms)
                ),
            ));
        }
        self.check_node(id, node)?;
        Ok(Admission::New)
    }
}

/// The outcome of [`ClusterState::check_admission`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// A new member: one use of the token is taken.
    New,
    /// The same node, admitted before with this token.
    AlreadyMember,
}

fn ago(now_ms: u64, then_ms: u64) -> String {
    let secs = now_ms.saturating_sub(then_ms) / 1000;
    muster_shared::duration::format_duration(std::time::Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_shared::token::hash_secret;

    fn node(name: &str, key: &str) -> NodeRecord {
        NodeRecord {
            name: name.into(),
            addr: "127.0.0.1:7000".into(),
            key_fingerprint: key.into(),
            joined_ms: 0,
            joined_with: None,
        }
    }

    fn token(uses: u32, expires_ms: u64) -> JoinTokenRecord {
        JoinTokenRecord {
            secret_sha256: hash_secret("s3cret"),
            description: String::new(),
            created_ms: 0,
            expires_ms,
            uses_total: uses,
            uses_left: uses,
            consumed_ms: None,
            revoked_ms: None,
            last_used_by: None,
        }
    }

    fn admit(id: NodeId, name: &str, key: &str, secret: &str, now_ms: u64) -> Request {
        Request::AdmitWithToken {
            token_id: "t".into(),
            secret_sha256: hash_secret(secret),
            now_ms,
            id,
            node: NodeRecord {
                joined_with: Some("t".into()),
                ..node(name, key)
            },
        }
    }

    fn refused_kind(r: Response) -> Option<String> {
        r.refused.map(|r| r.kind)
    }

    #[test]
    fn init_is_once_and_names_are_unique() {
        let mut s = ClusterState::default();
        let ca = CaMaterial {
            cert_pem: "c".into(),
            key_pem: "k".into(),
        };
        let init = Request::InitCluster {
            cluster_id: "abc".into(),
            ca: ca.clone(),
            operator_token: None,
        };
        assert_eq!(s.apply(&init).refused, None);
        assert!(s.apply(&init).refused.is_some());
        let upsert = |id, name| Request::UpsertNode {
            id,
            node: node(name, "f"),
        };
        assert_eq!(s.apply(&upsert(1, "a")).refused, None);
        assert_eq!(
            refused_kind(s.apply(&upsert(2, "a"))).as_deref(),
            Some(refusal::NAME_TAKEN)
        );
        assert_eq!(
            s.apply(&upsert(1, "a")).refused,
            None,
            "same node may update"
        );
        let impostor = s.apply(&Request::UpsertNode {
            id: 1,
            node: node("a", "another key"),
        });
        assert_eq!(
            refused_kind(impostor).as_deref(),
            Some(refusal::UNAUTHORIZED),
            "an id never changes hands"
        );
        assert_eq!(s.nodes[&1].key_fingerprint, "f");
        let put = s.apply(&Request::KvPut {
            key: "k".into(),
            value: "v1".into(),
        });
        assert_eq!(put.previous, None);
        let put = s.apply(&Request::KvPut {
            key: "k".into(),
            value: "v2".into(),
        });
        assert_eq!(put.previous.as_deref(), Some("v1"));
    }

    #[test]
    fn a_single_use_token_admits_exactly_one_node() {
        let mut s = ClusterState::default();
        s.join_tokens.insert("t".into(), token(1, 1_000));
        assert_eq!(s.apply(&admit(1, "a", "ka", "s3cret", 10)).refused, None);
        let t = &s.join_tokens["t"];
        assert_eq!((t.uses_left, t.consumed_ms), (0, Some(10)));
        assert_eq!(t.last_used_by.as_deref(), Some("a"));
        assert_eq!(t.state(10), "consumed");
        let before = s.clone();
        assert_eq!(
            refused_kind(s.apply(&admit(2, "b", "kb", "s3cret", 11))).as_deref(),
            Some(refusal::TOKEN_CONSUMED)
        );
        assert_eq!(s, before, "a refused admission changes nothing");
        // The admitted node retrying (its answer was lost) is admitted again without a use.
        assert_eq!(s.apply(&admit(1, "a", "ka", "s3cret", 12)).refused, None);
        assert_eq!(s, before);
        // … and so is a retry with another valid token, which keeps its uses.
        s.join_tokens.insert("t2".into(), token(1, 1_000));
        let mut with_t2 = admit(1, "a", "ka", "s3cret", 12);
        if let Request::AdmitWithToken { token_id, .. } = &mut with_t2 {
            *token_id = "t2".into();
        }
        assert_eq!(s.apply(&with_t2).refused, None);
        assert_eq!(s.join_tokens["t2"].uses_left, 1);
        // … but another key under its id is not.
        assert_eq!(
            refused_kind(s.apply(&admit(1, "a", "other", "s3cret", 12))).as_deref(),
            Some(refusal::UNAUTHORIZED)
        );
    }

    #[test]
    fn wrong_expired_and_revoked_tokens_are_refused_with_their_kinds() {
        let mut s = ClusterState::default();
        s.join_tokens.insert("t".into(), token(5, 1_000));
        let before = s.clone();
        assert_eq!(
            refused_kind(s.apply(&admit(1, "a", "k", "guess", 10))).as_deref(),
            Some(refusal::UNAUTHORIZED),
            "a wrong secret tells nothing about the token"
        );
        assert_eq!(
            refused_kind(s.apply(&admit(1, "a", "k", "s3cret", 1_000))).as_deref(),
            Some(refusal::TOKEN_EXPIRED)
        );
        assert_eq!(s, before);
        s.apply(&Request::RevokeJoinToken {
            id: "t".into(),
            now_ms: 20,
        });
        assert_eq!(
            refused_kind(s.apply(&admit(1, "a", "k", "s3cret", 30))).as_deref(),
            Some(refusal::TOKEN_REVOKED)
        );
        assert_eq!(
            refused_kind(s.apply(&Request::RevokeJoinToken {
                id: "nope".into(),
                now_ms: 20,
            }))
            .as_deref(),
            Some(refusal::NOT_FOUND)
        );
    }

    #[test]
    fn removed_ids_never_come_back_and_free_their_name() {
        let mut s = ClusterState::default();
        s.join_tokens.insert("t".into(), token(5, 1_000));
        s.apply(&Request::UpsertNode {
            id: 1,
            node: node("a", "k1"),
        });
        assert_eq!(
            refused_kind(s.apply(&admit(2, "a", "k2", "s3cret", 10))).as_deref(),
            Some(refusal::NAME_TAKEN)
        );
        s.apply(&Request::RemoveNode {
            id: 1,
            force: false,
        });
        assert!(s.nodes.is_empty() && s.removed.contains(&1));
        assert_eq!(
            refused_kind(s.apply(&admit(1, "a", "k1", "s3cret", 10))).as_deref(),
            Some(refusal::UNAUTHORIZED),
            "a removed id is never admitted again"
        );
        assert_eq!(
            s.apply(&admit(2, "a", "k2", "s3cret", 10)).refused,
            None,
            "the name is free for a new node"
        );
    }

    #[test]
    fn dead_tokens_are_dropped_a_week_after_they_stopped_working() {
        let mut s = ClusterState::default();
        s.join_tokens.insert("old".into(), token(1, 1_000));
        s.join_tokens.insert("live".into(), token(1, u64::MAX));
        let create = |created_ms| Request::CreateJoinToken {
            id: format!("n{created_ms}"),
            token: JoinTokenRecord {
                created_ms,
                ..token(1, u64::MAX)
            },
        };
        s.apply(&create(1_000 + DEAD_TOKEN_RETENTION_MS - 1));
        assert!(s.join_tokens.contains_key("old"));
        s.apply(&create(1_000 + DEAD_TOKEN_RETENTION_MS));
        assert!(!s.join_tokens.contains_key("old"));
        assert!(s.join_tokens.contains_key("live"));
    }
}
