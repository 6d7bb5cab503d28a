//! The replicated cluster state and the commands that change it. These are Muster's own types;
//! openraft sees them only through [`super::TypeConfig`].

use std::collections::BTreeMap;

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
    },
    /// Records (or updates the address of) a member.
    UpsertNode {
        id: NodeId,
        node: NodeRecord,
    },
    /// Forgets a member.
    RemoveNode {
        id: NodeId,
    },
    KvPut {
        key: String,
        value: String,
    },
    KvDel {
        key: String,
    },
}

/// The answer to an applied [`Request`] (and the `R` for blank and membership entries).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    /// For `KvPut`/`KvDel`: the value the key held before.
    pub previous: Option<String>,
    /// Set when the command was refused by the state machine (e.g. a second `InitCluster`).
    pub refused: Option<String>,
}

/// Everything the state machine holds. Snapshots are this struct, serialized.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterState {
    pub cluster_id: Option<String>,
    pub ca: Option<CaMaterial>,
    pub nodes: BTreeMap<NodeId, NodeRecord>,
    pub kv: BTreeMap<String, String>,
}

impl ClusterState {
    /// Applies one command. Pure and deterministic: the same commands give the same state on
    /// every node.
    pub fn apply(&mut self, request: &Request) -> Response {
        match request {
            Request::InitCluster { cluster_id, ca } => {
                if self.cluster_id.is_some() {
                    return Response {
                        refused: Some("cluster already initialized".into()),
                        ..Default::default()
                    };
                }
                self.cluster_id = Some(cluster_id.clone());
                self.ca = Some(ca.clone());
                Response::default()
            }
            Request::UpsertNode { id, node } => {
                if let Some((other, _)) = self
                    .nodes
                    .iter()
                    .find(|(i, n)| **i != *id && n.name == node.name)
                {
                    return Response {
                        refused: Some(format!("name {} is taken by node {other:x}", node.name)),
                        ..Default::default()
                    };
                }
                self.nodes.insert(*id, node.clone());
                Response::default()
            }
            Request::RemoveNode { id } => {
                self.nodes.remove(id);
                Response::default()
            }
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

#[cfg(test)]
mod tests {
    use super::*;

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
        };
        assert_eq!(s.apply(&init).refused, None);
        assert!(s.apply(&init).refused.is_some());
        let node = |name: &str| NodeRecord {
            name: name.into(),
            addr: "127.0.0.1:7000".into(),
            key_fingerprint: "f".into(),
            joined_ms: 0,
        };
        assert_eq!(
            s.apply(&Request::UpsertNode {
                id: 1,
                node: node("a")
            })
            .refused,
            None
        );
        assert!(
            s.apply(&Request::UpsertNode {
                id: 2,
                node: node("a")
            })
            .refused
            .is_some()
        );
        assert_eq!(
            s.apply(&Request::UpsertNode {
                id: 1,
                node: node("a")
            })
            .refused,
            None,
            "same node may update"
        );
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
}
