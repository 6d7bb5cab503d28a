//! Admission: how a new node gets its certificate and its place in the raft configuration.
//!
//! Two credentials, one procedure ([`admit_node`]), answered by the leader only:
//! * **Registrant**: one of the discovery URL's first N registrants, while the initiator's
//!   formation is in progress.
//! * **Join token**: anyone holding a valid token. The token check, the use it takes and the
//!   member record are one replicated command, so two joiners racing for the last use can
//!   never both win.
//!
//! Either way the node's key never leaves it: the leader signs a certificate for the key in the
//! node's CSR, then adds the node as a nonvoter; the reconciler promotes it later. A token
//! joiner the role rules would make a spare at once (the voters and standbys are complete)
//! starts as one instead, outside the configuration, and never replicates.
//!
//! This file holds the procedure; `admit/registrant.rs` checks a registrant and
//! `admit/token.rs` a join token or the pre-shared join secret.

mod registrant;
mod token;

pub use registrant::admit_registrant;
#[cfg(test)]
use registrant::{Registrations, admit_registrant_from};
pub use token::{admit_with_token, precheck_token, prove_secret};

use std::collections::BTreeSet;

use muster_shared::tls::ClusterCa;
use serde::{Deserialize, Serialize};

use crate::api::join::{JoinResponse, TokenJoinRequest};
use crate::api::types::PeerAddress;
use crate::api::{ApiError, ErrorKind};
use crate::leading::{Leader, Replica};
use crate::policy::{self, Placement};
use crate::state::{Node, NodeId, Request, member_id};

/// A token join as the leader handles it: the secret replaced by its hash (a join with the
/// pre-shared secret carries its signature instead, and no hash).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokenJoin {
    pub token_id: String,
    pub secret_sha256: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_signature: Option<String>,
    pub node_id: String,
    pub name: String,
    pub addr: String,
    pub key_fingerprint: String,
    pub csr_pem: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub can_start_as_spare: bool,
}

impl From<TokenJoinRequest> for TokenJoin {
    fn from(r: TokenJoinRequest) -> Self {
        Self {
            secret_sha256: match r.secret_signature {
                Some(_) => String::new(),
                None => muster_shared::token::hash_secret(&r.secret),
            },
            secret_signature: r.secret_signature,
            token_id: r.token_id,
            node_id: r.node_id,
            name: r.name,
            addr: r.addr,
            key_fingerprint: r.key_fingerprint,
            csr_pem: r.csr_pem,
            zone: r.zone,
            version: r.version,
            can_start_as_spare: r.can_start_as_spare,
        }
    }
}

/// A node asking to be admitted, once its credential has been checked.
struct Candidate {
    id: NodeId,
    name: String,
    addr: String,
    /// The key the certificate is issued for: the CSR must carry it.
    key_fingerprint: String,
    csr_pem: String,
    /// The replicated command that records it (and, for a token, takes a use).
    record: Request,
    /// It can start outside the configuration, as a spare (a token joiner that says so).
    can_start_as_spare: bool,
}

/// Signs the candidate's certificate, records it, and adds it as a nonvoter unless the role
/// rules would make it a spare at once (`policy::placement`): then it stays outside the
/// configuration and the answer tells it where the members are.
async fn admit_node(
    leader: Leader<'_, impl Replica>,
    candidate: Candidate,
) -> Result<JoinResponse, ApiError> {
    let (ca, trusted) = signing_ca(leader)?;
    let cert_pem = sign_member(
        leader,
        &ca,
        &candidate.csr_pem,
        candidate.id,
        &candidate.key_fingerprint,
        &candidate.addr,
    )?;
    leader.replica.write(candidate.record).await?;
    // A member asking again may be in the configuration already (as a voter, even).
    let placement = if leader.replica.view().nodes.contains_key(&candidate.id) {
        Placement::Configuration
    } else {
        let placement = match candidate.can_start_as_spare {
            true => placement_of(leader, candidate.id)?,
            false => Placement::Configuration,
        };
        if placement == Placement::Configuration {
            leader
                .replica
                .add_learner(
                    candidate.id,
                    Node {
                        name: candidate.name.clone(),
                        addr: candidate.addr.clone(),
                    },
                )
                .await?;
        }
        placement
    };
    let in_configuration = leader.replica.view().nodes;
    let (revoked, members) = leader.replica.read_local(|s| {
        let members: Vec<PeerAddress> = s
            .nodes
            .iter()
            .map(|(id, n)| PeerAddress {
                id: member_id(*id),
                name: n.name.clone(),
                addr: n.addr.clone(),
            })
            .collect();
        (s.removed.clone(), members)
    })?;
    let revoked_ids = revoked
        .into_iter()
        .filter(|id| !in_configuration.contains_key(id))
        .map(member_id)
        .collect();
    let me = leader.replica.id();
    Ok(JoinResponse {
        cluster_id: leader.settings().cluster_id.clone(),
        ca_cert_pem: trusted,
        cert_pem,
        node_id: member_id(candidate.id),
        revoked_ids,
        role: Some(
            match placement {
                Placement::Configuration => "standby",
                Placement::Spare => "spare",
            }
            .into(),
        ),
        leader: members.iter().find(|m| m.id == member_id(me)).cloned(),
        members,
    })
}

/// Where the role rules place a newly recorded member (the plan's own answer; during a
/// formation, always in the configuration).
fn placement_of(leader: Leader<'_, impl Replica>, id: NodeId) -> Result<Placement, ApiError> {
    let now = leader.cluster_now()?;
    let window = policy::REACHABLE_WITHIN.as_millis() as u64;
    let (forming, recent) = leader.replica.read_local(|s| {
        let recent: BTreeSet<NodeId> = s
            .nodes
            .iter()
            .filter(|(_, r)| now.saturating_sub(r.joined_ms) < window)
            .map(|(id, _)| *id)
            .collect();
        (s.formation.is_some(), recent)
    })?;
    if forming {
        return Ok(Placement::Configuration);
    }
    let raft = leader.replica.view();
    let view = super::cluster_view(leader, &raft, &super::Sightings::default())?;
    Ok(policy::placement(&view, id, &recent))
}

/// Signs a certificate for member `id` at `addr` from `csr_pem`, which must carry the key with
/// `key_fingerprint`, valid for this leader's `--cert-validity`.
pub fn sign_member(
    leader: Leader<'_, impl Replica>,
    ca: &ClusterCa,
    csr_pem: &str,
    id: NodeId,
    key_fingerprint: &str,
    addr: &str,
) -> Result<String, ApiError> {
    ca.sign_node(
        csr_pem,
        id,
        leader.settings().cluster_id.as_str(),
        key_fingerprint,
        crate::config::host_of(addr),
        leader.settings().cert_validity,
    )
    .map_err(|e| {
        ApiError::new(
            ErrorKind::Unauthorized,
            format!("certificate request refused: {e}"),
        )
    })
}

/// The CA that signs members' certificates now (during a CA rotation, the new one once every
/// member trusts it), with its key, and the CAs members trust (one, or two), as one PEM.
pub fn signing_ca(leader: Leader<'_, impl Replica>) -> Result<(ClusterCa, String), ApiError> {
    let (signing, trusted) = leader
        .replica
        .read_local(|s| (s.signing_ca().cloned(), s.trusted_ca_pems().concat()))?;
    let signing = signing.ok_or_else(|| {
        ApiError::new(
            ErrorKind::ClusterUninitialized,
            "cluster CA not yet replicated",
        )
    })?;
    let ca = ClusterCa::from_pem(&signing.cert_pem, &signing.key_pem)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok((ca, trusted))
}

#[cfg(test)]
mod tests;
