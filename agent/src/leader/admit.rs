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
//! node's CSR, then adds the node as a nonvoter; the reconciler promotes it later.

use muster_shared::tls::ClusterCa;
use serde::{Deserialize, Serialize};

use crate::api::join::{JoinRequest, JoinResponse, SecretHello, SecretProof, TokenJoinRequest};
use crate::api::{ApiError, ErrorKind};
use crate::clock::now_ms;
use crate::config;
use crate::discovery::{DiscoveryClient, Registration};
use crate::leading::{Leader, Replica};
use crate::state::{
    FormationRecord, Node, NodeId, NodeRecord, Request, member_id, parse_member_id,
};

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
}

/// Signs the candidate's certificate, records it and adds it as a nonvoter.
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
    if !leader.replica.view().nodes.contains_key(&candidate.id) {
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
    let in_configuration = leader.replica.view().nodes;
    let revoked_ids = leader
        .replica
        .read_local(|s| s.removed.clone())?
        .into_iter()
        .filter(|id| !in_configuration.contains_key(id))
        .map(member_id)
        .collect();
    Ok(JoinResponse {
        cluster_id: leader.settings().cluster_id.clone(),
        ca_cert_pem: trusted,
        cert_pem,
        node_id: member_id(candidate.id),
        revoked_ids,
    })
}

/// Where the leader checks a registrant's registration: the discovery URL the cluster formed
/// through. A small interface so that the admission rules are tested without a discovery
/// service (`leader/tests.rs`); [`DiscoveryRegistrations`] asks the real one.
pub trait Registrations: Sync {
    /// The URL's first-N registrations, the members of the cohort.
    fn cohort(&self, url: &str)
    -> impl Future<Output = Result<Vec<Registration>, ApiError>> + Send;
}

/// The discovery service itself, over HTTP(S).
pub struct DiscoveryRegistrations;

impl Registrations for DiscoveryRegistrations {
    async fn cohort(&self, url: &str) -> Result<Vec<Registration>, ApiError> {
        let unavailable = |e: crate::discovery::DiscoveryError| {
            ApiError::new(ErrorKind::Unavailable, e.to_string())
        };
        let discovery = DiscoveryClient::new(url).map_err(unavailable)?;
        let listing = discovery.listing().await.map_err(unavailable)?;
        Ok(listing.cohort().to_vec())
    }
}

/// Admits a first-N registrant of this cluster's discovery URL (on the leader).
pub async fn admit_registrant(
    leader: Leader<'_, impl Replica>,
    req: JoinRequest,
) -> Result<JoinResponse, ApiError> {
    admit_registrant_from(leader, &DiscoveryRegistrations, req).await
}

/// Admits a registrant whose registration `registrations` confirms: its key gives its member
/// id; a member of the cohort asking again gets its certificate again; anyone else must be one
/// of the URL's first registrants, with the name and address it registered, while the
/// formation through that URL is in progress.
pub async fn admit_registrant_from(
    leader: Leader<'_, impl Replica>,
    registrations: &impl Registrations,
    req: JoinRequest,
) -> Result<JoinResponse, ApiError> {
    let (id, key_fingerprint) = registrant_key(&req)?;
    // A member of the cohort whose answer was lost asks again, perhaps after the formation
    // ended: its key proves it is that member, so it gets its certificate again.
    let existing = leader.replica.read(|s| s.nodes.get(&id).cloned()).await?;
    let node = match existing {
        Some(existing) => {
            if existing.key_fingerprint != key_fingerprint
                || existing.name != req.name
                || existing.addr != req.addr
            {
                return Err(ApiError::new(
                    ErrorKind::Unauthorized,
                    format!(
                        "member {} is already in this cluster with another key, name or address",
                        req.member_id
                    ),
                ));
            }
            tracing::info!(node = %req.name, id = %req.member_id, "a member of the cohort asked again; re-issuing its certificate");
            existing
        }
        None => {
            let formation_url = formation_url(leader, &req)?;
            let cohort = registrations.cohort(&formation_url).await?;
            check_registration(&cohort, &req)?;
            NodeRecord {
                name: req.name.clone(),
                addr: req.addr.clone(),
                key_fingerprint: key_fingerprint.clone(),
                joined_ms: now_ms(),
                joined_with: None,
            }
        }
    };
    let response = admit_node(
        leader,
        Candidate {
            id,
            name: req.name.clone(),
            addr: req.addr.clone(),
            key_fingerprint,
            csr_pem: req.csr_pem,
            record: Request::UpsertNode { id, node },
        },
    )
    .await?;
    tracing::info!(node = %req.name, id = %req.member_id, "admitted registrant as a standby");
    Ok(response)
}

/// The registrant's member id and the fingerprint of the key in its CSR, which must give that
/// id. The registration is bound to a key: whoever sends a CSR for this id must hold that key,
/// so nobody who merely read the URL can be admitted under someone else's registration.
fn registrant_key(req: &JoinRequest) -> Result<(NodeId, String), ApiError> {
    let id = parse_member_id(&req.member_id)
        .ok_or_else(|| ApiError::invalid("member id is not lowercase hex without leading zeros"))?;
    let key_fingerprint = muster_shared::tls::csr_key_fingerprint(&req.csr_pem).map_err(|e| {
        ApiError::new(
            ErrorKind::Unauthorized,
            format!("certificate request refused: {e}"),
        )
    })?;
    if muster_shared::tls::member_id_of_key(&key_fingerprint) != Some(id) {
        return Err(ApiError::new(
            ErrorKind::Unauthorized,
            format!(
                "member {} is registered for another key: a registrant's member id is derived \
                 from its key, and the key in this request does not give that id",
                req.member_id
            ),
        ));
    }
    Ok((id, key_fingerprint))
}

/// The discovery URL of the formation in progress, which must be the one the registrant used.
fn formation_url(leader: Leader<'_, impl Replica>, req: &JoinRequest) -> Result<String, ApiError> {
    let Some(FormationRecord::Discovery {
        url: formation_url, ..
    }) = leader.replica.read_local(|s| s.formation.clone())?
    else {
        return Err(ApiError::new(
            ErrorKind::Unauthorized,
            "this cluster is not admitting discovery registrants; use a join token",
        ));
    };
    if req.discovery_url.trim_end_matches('/') != formation_url.trim_end_matches('/') {
        return Err(ApiError::new(
            ErrorKind::Unauthorized,
            "this cluster formed through another discovery URL",
        ));
    }
    Ok(formation_url)
}

/// The registrant is one of the cohort, registered with the name and address it asks for.
fn check_registration(cohort: &[Registration], req: &JoinRequest) -> Result<(), ApiError> {
    let registered = cohort
        .iter()
        .find(|r| r.id == req.member_id)
        .ok_or_else(|| {
            ApiError::new(
                ErrorKind::Unauthorized,
                format!(
                    "member {} is not one of the first registrants of the discovery URL",
                    req.member_id
                ),
            )
        })?;
    if registered.name != req.name || registered.addr != req.addr {
        return Err(ApiError::new(
            ErrorKind::Unauthorized,
            format!(
                "registration says {}@{}, request says {}@{}",
                registered.name, registered.addr, req.name, req.addr
            ),
        ));
    }
    Ok(())
}

/// Proves to a machine holding the join secret `hello.secret_id` names that this member knows
/// it (an HMAC keyed with the secret's hash over the machine's nonce and this cluster's CA pin
/// and id), from this member's applied state: the machine can then pin this cluster's CA.
pub fn prove_secret(
    leader: Leader<'_, impl Replica>,
    hello: &SecretHello,
) -> Result<SecretProof, ApiError> {
    let hex = |s: &str, range: std::ops::RangeInclusive<usize>| {
        range.contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit())
    };
    if !hex(&hello.secret_id, 16..=16) || !hex(&hello.nonce, 32..=128) {
        return Err(ApiError::invalid(
            "a hello carries the join secret's 16-hex id and a nonce of 32 to 128 hex digits",
        ));
    }
    let now = leader.cluster_now()?;
    let (initialized, record) = leader.replica.read_local(|s| {
        (
            s.ca.is_some(),
            s.join_tokens
                .get(&hello.secret_id)
                .filter(|t| t.unlimited())
                .cloned(),
        )
    })?;
    let record = match (initialized, record) {
        (false, _) => {
            return Err(ApiError::new(
                ErrorKind::ClusterUninitialized,
                "this member is still creating its cluster; ask again in a moment",
            ));
        }
        (true, None) => {
            return Err(ApiError::new(
                ErrorKind::NotFound,
                "this cluster does not know this join secret: is it the secret the cluster was \
                 formed with (`muster token list` on a member shows its id)?",
            ));
        }
        (true, Some(record)) => record,
    };
    match record.state(now) {
        "revoked" => {
            return Err(ApiError::new(
                ErrorKind::TokenRevoked,
                "the join secret was revoked on this cluster; start machines with a new one",
            ));
        }
        "expired" => {
            return Err(ApiError::new(
                ErrorKind::TokenExpired,
                "the join secret has expired on this cluster (--join-secret-ttl); use a join token",
            ));
        }
        _ => {}
    }
    let hash = record.secret_sha256;
    let ca_pin = leader.ca_pin();
    Ok(SecretProof {
        cluster_id: leader.settings().cluster_id.clone(),
        proof: muster_shared::token::secret_proof(
            &hash,
            &hello.nonce,
            &ca_pin,
            leader.settings().cluster_id.as_str(),
        ),
        ca_pin,
    })
}

/// A cheap check of a join token against this node's applied state, before anything costs a
/// quorum read or a forward to the leader: a token this node knows, presented with the wrong
/// secret, is refused here (secrets never change). A token it does not know yet may be new,
/// so it goes on to the leader, which decides.
pub fn precheck_token(
    leader: Leader<'_, impl Replica>,
    token_id: &str,
    secret_sha256: &str,
) -> Result<(), ApiError> {
    let known_with_other_secret = leader.replica.read_local(|s| {
        s.join_tokens.get(token_id).is_some_and(|t| {
            !muster_shared::token::secret_hashes_match(&t.secret_sha256, secret_sha256)
        })
    })?;
    if known_with_other_secret {
        return Err(ApiError::new(
            ErrorKind::Unauthorized,
            "the join token is not valid for this cluster; create one with `muster token create` on a member",
        ));
    }
    Ok(())
}

/// Admits a node holding a join token. Checks run on the leader's state first so that a
/// refused joiner costs no signature and no raft write; the replicated command checks again,
/// and that check is the one that counts.
pub async fn admit_with_token(
    leader: Leader<'_, impl Replica>,
    join: TokenJoin,
) -> Result<JoinResponse, ApiError> {
    config::validate_name(&join.name).map_err(|e| ApiError::invalid(e.to_string()))?;
    config::validate_host_port("advertise", &join.addr)
        .map_err(|e| ApiError::invalid(e.to_string()))?;
    let id = parse_member_id(&join.node_id)
        .ok_or_else(|| ApiError::invalid("node id is not non-zero hex"))?;
    let join = with_signed_secret(leader, join).await?;
    precheck_token(leader, &join.token_id, &join.secret_sha256)?;
    let now = leader.cluster_now()?;
    let record = NodeRecord {
        name: join.name.clone(),
        addr: join.addr.clone(),
        key_fingerprint: join.key_fingerprint.clone(),
        joined_ms: now,
        joined_with: Some(join.token_id.clone()),
    };
    // Linearizable: a leader elected a moment ago may not have applied the token's creation
    // yet, and a refusal here is final for the joiner.
    leader
        .replica
        .read(|s| s.check_admission(&join.token_id, &join.secret_sha256, now, id, &record))
        .await?
        .map_err(|r| ApiError::new(r.kind, r.message))?;
    let response = admit_node(
        leader,
        Candidate {
            id,
            name: join.name.clone(),
            addr: join.addr.clone(),
            key_fingerprint: join.key_fingerprint.clone(),
            csr_pem: join.csr_pem,
            record: Request::AdmitWithToken {
                token_id: join.token_id.clone(),
                secret_sha256: join.secret_sha256,
                now_ms: now,
                id,
                node: record,
            },
        },
    )
    .await?;
    tracing::info!(node = %join.name, id = %join.node_id, token = %join.token_id, "admitted a node with a join token as a standby");
    Ok(response)
}

/// A join with the pre-shared secret's signature, checked against the secret's verify key in
/// the committed state and given the secret's hash for the replicated admission; any other
/// join as it came.
async fn with_signed_secret(
    leader: Leader<'_, impl Replica>,
    mut join: TokenJoin,
) -> Result<TokenJoin, ApiError> {
    let Some(signature) = &join.secret_signature else {
        return Ok(join);
    };
    let record = leader
        .replica
        .read(|s| s.join_tokens.get(&join.token_id).cloned())
        .await?
        .filter(|r| r.unlimited());
    let refused = |m: &str| ApiError::new(ErrorKind::Unauthorized, m.to_string());
    let record = record.ok_or_else(|| {
        refused("this cluster does not know this join secret; `muster token list` on a member shows its id")
    })?;
    let Some(verify_key) = &record.verify_key else {
        return Err(refused(
            "this cluster recorded its join secret before joins were signed (an older muster): \
             join with a token (`muster token create`), or finish a CA rotation, which records \
             a new secret",
        ));
    };
    let claim = muster_shared::token::SecretJoinClaim {
        node_id: &join.node_id,
        name: &join.name,
        addr: &join.addr,
        key_fingerprint: &join.key_fingerprint,
    };
    if !claim.verify(verify_key, signature) {
        return Err(refused(
            "the join secret's signature does not check out: is it the secret this cluster was \
             formed with?",
        ));
    }
    join.secret_sha256 = record.secret_sha256;
    Ok(join)
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
