//! A discovery registrant's admission: its key gives its member id, and the discovery URL the
//! cluster is forming through must list it among the first N with the name and address it
//! asks for. Apart from the token path because it is the one admission that asks a service
//! outside the cluster ([`Registrations`]).

use super::{Candidate, admit_node};
use crate::api::join::{JoinRequest, JoinResponse};
use crate::api::{ApiError, ErrorKind};
use crate::clock::now_ms;
use crate::discovery::{DiscoveryClient, Registration};
use crate::leading::{Leader, Replica};
use crate::state::{FormationRecord, NodeId, NodeRecord, Request, parse_member_id};

/// Where the leader checks a registrant's registration: the discovery URL the cluster formed
/// through. A small interface so that the admission rules are tested without a discovery
/// service (`admit/tests.rs`); [`DiscoveryRegistrations`] asks the real one.
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
    let asked_again = existing.is_some();
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
                zone: None,
                version: None,
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
            // The formation's cohort is voted in together: it must replicate.
            can_start_as_spare: false,
        },
    )
    .await?;
    if !asked_again {
        tracing::info!(node = %req.name, id = %req.member_id, "admitted registrant as a standby");
    }
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
