//! Certificate renewal, on the leader: a member sends a CSR for the key it joined with and
//! gets a fresh certificate for its recorded name and address, from the CA that signs now (the
//! new one during a CA rotation, once every member trusts it), valid for this leader's
//! `--cert-validity`. Nothing is written to the replicated state: a certificate
//! is a signature, and the member record it is issued from does not change.

use serde::{Deserialize, Serialize};

use crate::api::{ApiError, ErrorKind};
use crate::leading::{Leader, Replica};
use crate::state::{NodeId, member_id};

/// What a renewing member gets back.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RenewedCertificate {
    pub cert_pem: String,
    /// The CA that issued it.
    pub ca_cert_pem: String,
}

/// Issues member `id` a new certificate for the key in `csr_pem`, which must be the key the
/// member record holds (a removed member, or anyone else's key, is refused).
pub async fn renew(
    leader: Leader<'_, impl Replica>,
    id: NodeId,
    csr_pem: &str,
) -> Result<RenewedCertificate, ApiError> {
    // Linearizable: a removal committed by an earlier leader counts even if this one has not
    // applied it yet.
    let (record, removed) = leader
        .replica
        .read(|s| (s.nodes.get(&id).cloned(), s.removed.contains(&id)))
        .await?;
    let record = match (record, removed) {
        (_, true) => {
            return Err(ApiError::new(
                ErrorKind::Removed,
                format!(
                    "node {} was removed from this cluster; its certificate is not renewed",
                    member_id(id)
                ),
            ));
        }
        (None, false) => {
            return Err(ApiError::new(
                ErrorKind::Unauthorized,
                format!("node {} is not a member of this cluster", member_id(id)),
            ));
        }
        (Some(record), false) => record,
    };
    // During a CA rotation, the new CA once every member trusts it (state/ca_rotation.rs).
    let (ca, _) = super::admit::signing_ca(leader)?;
    let cert_pem = super::admit::sign_member(
        leader,
        &ca,
        csr_pem,
        id,
        &record.key_fingerprint,
        &record.addr,
    )?;
    tracing::info!(node = %record.name, id = %member_id(id), "renewed a member's certificate");
    Ok(RenewedCertificate {
        cert_pem,
        ca_cert_pem: ca.cert_pem().to_string(),
    })
}
