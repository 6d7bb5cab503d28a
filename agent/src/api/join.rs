//! What a joining node sends and what it gets back, on both ways in (a discovery registrant of
//! the first N, or a node holding a join token).

use serde::{Deserialize, Serialize};

use super::types::PeerAddress;

/// `POST /v1/join`: a registrant of the discovery URL asking the initiator to admit it. The
/// CSR's key must be the one its member id was derived from.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JoinRequest {
    pub discovery_url: String,
    pub member_id: String,
    pub name: String,
    pub addr: String,
    pub csr_pem: String,
}

/// `POST /v1/join/token`. It carries the token's secret, so it only ever travels inside TLS to
/// a server that proved the pinned CA, and is hashed on arrival. A machine joining with the
/// pre-shared join secret sends no secret (`secret` is empty) but `secret_signature`, the
/// secret's signature over its node id, name, address and key (`SecretJoinClaim`).
#[derive(Clone, Serialize, Deserialize)]
pub struct TokenJoinRequest {
    pub token_id: String,
    #[serde(default)]
    pub secret: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_signature: Option<String>,
    pub node_id: String,
    pub name: String,
    pub addr: String,
    /// SHA-256 of the node key's SubjectPublicKeyInfo; the CSR must carry this key.
    pub key_fingerprint: String,
    pub csr_pem: String,
    /// The joiner's failure zone (`--zone`) and agent version, recorded with its admission so
    /// that the leader places it by zone at once (older joiners report them after starting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The joiner can start as a spare (outside the raft configuration): it reads the members
    /// from the answer and checks in with the leader. Older joiners wait for the log, so the
    /// leader adds them to the configuration.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub can_start_as_spare: bool,
}

/// Never prints the secret.
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

/// What an admitted node receives: everything it needs to start as a member.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JoinResponse {
    pub cluster_id: String,
    /// The CAs to trust: the cluster's, and during a CA rotation the new one too.
    pub ca_cert_pem: String,
    pub cert_pem: String,
    pub node_id: String,
    /// Members removed from the cluster (ids, hex): the new node refuses their certificates
    /// from its first handshake, before it has the replicated state.
    #[serde(default)]
    pub revoked_ids: Vec<String>,
    /// `standby` (added to the raft configuration as a nonvoter) or `spare` (left outside it;
    /// it replicates nothing and checks in with `leader`). Absent from older leaders: standby.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// The leader that admitted it, and every member with its address: where a spare checks in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<PeerAddress>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<PeerAddress>,
}

/// `POST /v1/join/hello`: a machine that holds the pre-shared join secret but no CA pin yet
/// asks a member to prove that it knows the secret. `nonce` is fresh random hex, so a proof
/// cannot be replayed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SecretHello {
    pub secret_id: String,
    pub nonce: String,
}

/// The answer: the cluster this member belongs to, its CA pin, and
/// `muster_shared::token::secret_proof(hash of the secret, nonce, ca_pin, cluster_id)`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SecretProof {
    pub cluster_id: String,
    pub ca_pin: String,
    pub proof: String,
}
