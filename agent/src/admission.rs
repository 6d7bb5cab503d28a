//! Admission: how a new node gets its certificate and its place in the raft configuration.
//!
//! Two ways in, both answered by the leader only:
//! * **Formation** ([`Agent::admit`]): one of the discovery URL's first N registrants, proving the
//!   key it registered. Only while the initiator's formation is in progress.
//! * **Join token** ([`Agent::admit_with_token`]): anyone holding a valid token. The token check,
//!   the use it takes and the member record are one replicated command, so two joiners racing
//!   for the last use can never both win.
//!
//! Either way the node's key never leaves it: the leader signs a certificate for the key in the
//! node's CSR, then adds the node as a nonvoter; the reconciler promotes it later.

use muster_shared::tls::ClusterCa;
use serde::{Deserialize, Serialize};

use crate::api::types::kind;
use crate::discovery::DiscoveryClient;
use crate::raft::types::{Node, NodeRecord, Request};
use crate::service::{Agent, CERT_VALIDITY, OpError, now_ms};

/// A join request: a registrant of the discovery URL proving the key it registered.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JoinRequest {
    pub discovery_url: String,
    pub member_id: String,
    pub name: String,
    pub addr: String,
    pub csr_pem: String,
}

/// What an admitted node receives: everything it needs to start as a member.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JoinResponse {
    pub cluster_id: String,
    pub ca_cert_pem: String,
    pub cert_pem: String,
    pub node_id: String,
}

/// `POST /v1/join/token` from a joiner. It carries the token's secret, so it only ever travels
/// inside TLS to a server that proved the pinned CA, and is hashed on arrival.
#[derive(Clone, Serialize, Deserialize)]
pub struct TokenJoinRequest {
    pub token_id: String,
    pub secret: String,
    pub node_id: String,
    pub name: String,
    pub addr: String,
    /// SHA-256 of the node key's SubjectPublicKeyInfo; the CSR must carry this key.
    pub key_fingerprint: String,
    pub csr_pem: String,
}

impl std::fmt::Debug for TokenJoinRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenJoinRequest")
            .field("token_id", &self.token_id)
            .field("node_id", &self.node_id)
            .field("name", &self.name)
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// A token join as the leader handles it: the secret replaced by its hash.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokenJoin {
    pub token_id: String,
    pub secret_sha256: String,
    pub node_id: String,
    pub name: String,
    pub addr: String,
    pub key_fingerprint: String,
    pub csr_pem: String,
}

impl From<TokenJoinRequest> for TokenJoin {
    fn from(r: TokenJoinRequest) -> Self {
        Self {
            secret_sha256: muster_shared::token::hash_secret(&r.secret),
            token_id: r.token_id,
            node_id: r.node_id,
            name: r.name,
            addr: r.addr,
            key_fingerprint: r.key_fingerprint,
            csr_pem: r.csr_pem,
        }
    }
}

impl Agent {
    /// Admits a first-N registrant of this cluster's discovery URL (leader only).
    pub async fn admit(&self, req: JoinRequest) -> Result<JoinResponse, OpError> {
        let formation = self
            .formation
            .lock()
            .map_err(|_| OpError::new(kind::INTERNAL, 500, "lock poisoned"))?
            .clone();
        let Some(formation) = formation else {
            return Err(OpError::new(
                kind::UNAUTHORIZED,
                403,
                "this cluster is not admitting discovery registrants; use a join token",
            ));
        };
        if !self.raft.view().is_leader {
            return Err(OpError::new(
                kind::NO_LEADER,
                503,
                "this node is not the leader; retry",
            ));
        }
        if req.discovery_url.trim_end_matches('/') != formation.discovery_url.trim_end_matches('/')
        {
            return Err(OpError::new(
                kind::UNAUTHORIZED,
                403,
                "this cluster formed through another discovery URL",
            ));
        }
        let node_id = u64::from_str_radix(&req.member_id, 16)
            .map_err(|_| OpError::new(kind::INVALID_ARGUMENT, 400, "member id is not hex"))?;
        // Check the registration and the key it registered, straight from the discovery service.
        let discovery = DiscoveryClient::new(&formation.discovery_url)
            .map_err(|e| OpError::new(kind::INTERNAL, 500, e.to_string()))?;
        let listing = discovery
            .listing()
            .await
            .map_err(|e| OpError::new(kind::INTERNAL, 503, e.to_string()))?;
        let registered = listing
            .cohort()
            .iter()
            .find(|r| r.id == req.member_id)
            .ok_or_else(|| {
                OpError::new(
                    kind::UNAUTHORIZED,
                    403,
                    format!(
                        "member {} is not one of the first registrants of the discovery URL",
                        req.member_id
                    ),
                )
            })?;
        if registered.name != req.name || registered.addr != req.addr {
            return Err(OpError::new(
                kind::UNAUTHORIZED,
                403,
                format!(
                    "registration says {}@{}, request says {}@{}",
                    registered.name, registered.addr, req.name, req.addr
                ),
            ));
        }
        let meta = discovery
            .meta(&req.member_id)
            .await
            .map_err(|e| OpError::new(kind::INTERNAL, 503, e.to_string()))?
            .ok_or_else(|| {
                OpError::new(kind::UNAUTHORIZED, 403, "no key registered for this member")
            })?;
        let ca = self.cluster_ca()?;
        let host = crate::bootstrap::host_of(&req.addr);
        let cert_pem = ca
            .sign_node(
                &req.csr_pem,
                node_id,
                &self.cluster_id,
                &meta.key_fingerprint,
                host,
                CERT_VALIDITY,
            )
            .map_err(|e| {
                OpError::new(
                    kind::UNAUTHORIZED,
                    403,
                    format!("certificate request refused: {e}"),
                )
            })?;
        self.raft
            .write(Request::UpsertNode {
                id: node_id,
                node: NodeRecord {
                    name: req.name.clone(),
                    addr: req.addr.clone(),
                    key_fingerprint: meta.key_fingerprint.clone(),
                    joined_ms: now_ms(),
                    joined_with: None,
                },
            })
            .await?;
        self.raft
            .add_learner(
                node_id,
                Node {
                    name: req.name.clone(),
                    addr: req.addr.clone(),
                },
            )
            .await?;
        tracing::info!(node = %req.name, id = %req.member_id, "admitted registrant as nonvoter");
        Ok(JoinResponse {
            cluster_id: self.cluster_id.clone(),
            ca_cert_pem: ca.cert_pem().to_string(),
            cert_pem,
            node_id: req.member_id,
        })
    }

    /// Admits a node holding a join token (leader only). Checks run on the leader's state first
    /// so that a refused joiner costs no signature and no raft write; the replicated command
    /// checks again, and that check is the one that counts.
    pub async fn admit_with_token(&self, join: TokenJoin) -> Result<JoinResponse, OpError> {
        let invalid =
            |e: crate::config::ConfigError| OpError::of_kind(kind::INVALID_ARGUMENT, e.to_string());
        crate::config::validate_name(&join.name).map_err(invalid)?;
        crate::config::validate_host_port("advertise", &join.addr).map_err(invalid)?;
        let node_id = u64::from_str_radix(&join.node_id, 16)
            .ok()
            .filter(|id| *id != 0)
            .ok_or_else(|| {
                OpError::of_kind(kind::INVALID_ARGUMENT, "node id is not non-zero hex")
            })?;
        let now = now_ms();
        let record = NodeRecord {
            name: join.name.clone(),
            addr: join.addr.clone(),
            key_fingerprint: join.key_fingerprint.clone(),
            joined_ms: now,
            joined_with: Some(join.token_id.clone()),
        };
        // Linearizable: a leader elected a moment ago may not have applied the token's creation
        // yet, and a refusal here is final for the joiner.
        self.raft
            .read_linearizable(|s| {
                s.check_admission(&join.token_id, &join.secret_sha256, now, node_id, &record)
            })
            .await?
            .map_err(|r| OpError::of_kind(&r.kind, r.message))?;
        let ca = self.cluster_ca()?;
        let cert_pem = ca
            .sign_node(
                &join.csr_pem,
                node_id,
                &self.cluster_id,
                &join.key_fingerprint,
                crate::bootstrap::host_of(&join.addr),
                CERT_VALIDITY,
            )
            .map_err(|e| {
                OpError::of_kind(
                    kind::INVALID_ARGUMENT,
                    format!("certificate request refused: {e}"),
                )
            })?;
        self.raft
            .write(Request::AdmitWithToken {
                token_id: join.token_id.clone(),
                secret_sha256: join.secret_sha256,
                now_ms: now,
                id: node_id,
                node: record,
            })
            .await?;
        self.raft
            .add_learner(
                node_id,
                Node {
                    name: join.name.clone(),
                    addr: join.addr.clone(),
                },
            )
            .await?;
        tracing::info!(node = %join.name, id = %join.node_id, token = %join.token_id, "admitted a node with a join token as nonvoter");
        Ok(JoinResponse {
            cluster_id: self.cluster_id.clone(),
            ca_cert_pem: ca.cert_pem().to_string(),
            cert_pem,
            node_id: join.node_id,
        })
    }

    /// The cluster CA, with its key, from the replicated state.
    fn cluster_ca(&self) -> Result<ClusterCa, OpError> {
        let ca = self.raft.read_local(|s| s.ca.clone())?.ok_or_else(|| {
            OpError::of_kind(kind::CLUSTER_UNINITIALIZED, "cluster CA not yet replicated")
        })?;
        ClusterCa::from_pem(&ca.cert_pem, &ca.key_pem).map_err(|e| OpError::internal(e.to_string()))
    }
}
