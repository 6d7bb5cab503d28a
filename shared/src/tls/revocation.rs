//! Refusing removed members at the handshake: the set of revoked node ids a listener's verifier
//! consults, and how the removed side recognises that refusal.

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};

use rustls::CertificateError;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};

use super::verifier::{ClientCheck, Verifier};
use super::{causes, peer_identity};

/// Node ids whose certificates a node's listener refuses at the TLS handshake (members that
/// were removed and have left the configuration): shared between the listener's verifier and
/// the task that keeps it up to date from the replicated state.
#[derive(Debug, Clone, Default)]
pub struct RevokedIds(Arc<RwLock<BTreeSet<u64>>>);

impl RevokedIds {
    pub fn replace(&self, ids: BTreeSet<u64>) {
        if let Ok(mut set) = self.0.write() {
            *set = ids;
        }
    }

    pub fn contains(&self, id: u64) -> bool {
        self.0.read().map(|set| set.contains(&id)).unwrap_or(false)
    }

    pub fn len(&self) -> usize {
        self.0.read().map(|set| set.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The CA's verifier, then a refusal of revoked node ids: a removed member's certificate is
/// still signed by the CA and unexpired, so the chain alone does not tell.
#[derive(Debug)]
struct RevokingCheck {
    inner: Arc<dyn ClientCertVerifier>,
    revoked: RevokedIds,
    /// Only this cluster's ids are refused: a restored cluster keeps the CA but tombstones the
    /// old cluster's members, who must not read that as their own removal.
    cluster_id: String,
}

/// `inner` (the CA's verifier) followed by the refusal of `cluster_id`'s ids in `revoked`.
pub(super) fn revoking_verifier(
    inner: Arc<dyn ClientCertVerifier>,
    revoked: RevokedIds,
    cluster_id: &str,
) -> Arc<dyn ClientCertVerifier> {
    Verifier::new(RevokingCheck {
        inner,
        revoked,
        cluster_id: cluster_id.to_string(),
    })
}

impl ClientCheck for RevokingCheck {
    fn check_client(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        if let Ok(identity) = peer_identity(end_entity.as_ref())
            && identity.cluster_id == self.cluster_id
            && self.revoked.contains(identity.node_id)
        {
            return Err(rustls::Error::InvalidCertificate(CertificateError::Revoked));
        }
        Ok(verified)
    }
}

/// True if `err` (or what caused it) is a TLS alert saying this side's certificate was revoked:
/// how a removed member learns it when its former peers refuse it at the handshake.
pub fn is_certificate_revoked(err: &(dyn std::error::Error + 'static)) -> bool {
    causes(err).any(|e| {
        matches!(
            e.downcast_ref::<rustls::Error>(),
            Some(rustls::Error::AlertReceived(
                rustls::AlertDescription::CertificateRevoked
            ))
        )
    })
}
