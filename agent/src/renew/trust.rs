//! Following a CA rotation on this node: the CAs it trusts are kept in step with the
//! cluster's (a rotation adds the new one, its end drops the old), and the leader is told how
//! far this member is. Apart from the certificate's own renewal in `renew.rs` because it
//! changes what this node trusts, not what it presents.

use muster_shared::tls;

use crate::agent::Here;
use crate::datadir::{self, TlsFiles};
use crate::leader::{self, Authority, LeaderOp};
use crate::state::ca_rotation::CaStage;
use crate::state::member_id;

/// Where the cluster's next CA stands for this member, as the applied state says.
struct NextCa {
    pin: String,
    cert_pem: String,
    /// This member reported trusting it.
    trusts: bool,
    /// This member reported a certificate it issued.
    reissued: bool,
}

/// Keeps the CAs this node trusts in step with the cluster's (a CA rotation adds the new one,
/// its end drops the old), and tells the leader how far this member is in a rotation.
pub(super) async fn follow_trust(
    here: Here<'_>,
    credentials: &tls::NodeCredentials,
    key_pem: &str,
) {
    let me = here.me.node_id;
    let Ok((trusted, next)) = here.raft().read_local(|s| {
        (
            s.trusted_ca_pems(),
            s.ca_next.as_ref().map(|n| NextCa {
                pin: n.pin.clone(),
                cert_pem: n.ca.cert_pem.clone(),
                trusts: n.trusted_by.contains(&me),
                reissued: n.reissued_by.contains(&me),
            }),
        )
    }) else {
        return;
    };
    let Ok(files) = datadir::read_tls(here.me.data_dir.as_path()) else {
        return;
    };
    let bundle = trusted.concat();
    if !bundle.is_empty() && files.ca_pem != bundle {
        match take_into_use(
            credentials,
            here.me.data_dir.as_path(),
            key_pem,
            &files,
            &bundle,
        ) {
            Ok(()) => tracing::info!(
                trusted_cas = trusted.len(),
                "the cluster's CAs changed; this node now trusts {}",
                if trusted.len() > 1 {
                    "the old and the new CA"
                } else {
                    "the current CA only"
                }
            ),
            Err(e) => {
                tracing::warn!(error = %e, "cannot take the cluster's CAs into use");
                return;
            }
        }
    }
    let Some(next) = next else {
        return;
    };
    let issued_by_next = || tls::issued_by(&files.cert_pem, &next.cert_pem);
    let Some(stage) = rotation_stage(next.trusts, next.reissued, issued_by_next) else {
        return;
    };
    let op = LeaderOp::CaAck {
        node_id: member_id(me),
        pin: next.pin,
        stage,
    };
    if let Err(e) = leader::run(here, &Authority::Node, op).await {
        tracing::info!(error = %e, ?stage, "cannot report this member's CA rotation progress yet");
    }
}

/// Swaps `bundle` in as the CAs this node trusts. Checked before it is written; written before
/// it is used. CAs dropped (a finished rotation) are remembered, so that an old token in this
/// machine's settings reads as this cluster's on the next start, not as another cluster's.
fn take_into_use(
    credentials: &tls::NodeCredentials,
    data_dir: &std::path::Path,
    key_pem: &str,
    files: &TlsFiles,
    bundle: &str,
) -> Result<(), TrustError> {
    datadir::retire_pins(data_dir, &dropped_pins(&files.ca_pem, bundle))?;
    tls::NodeCredentials::new(bundle, &files.cert_pem, key_pem)?;
    datadir::write_trust(data_dir, bundle)?;
    Ok(credentials.replace(bundle, &files.cert_pem, key_pem)?)
}

/// Why the cluster's CAs could not be taken into use (logged; the next round tries again).
#[derive(Debug, thiserror::Error)]
enum TrustError {
    #[error(transparent)]
    DataDir(#[from] crate::datadir::DataDirError),
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
}

/// The pins of the CAs in `old` that `new` no longer holds (pure).
fn dropped_pins(old: &str, new: &str) -> Vec<String> {
    let now = tls::bundle_pins(new).unwrap_or_default();
    tls::bundle_pins(old)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| !now.contains(p))
        .collect()
}

/// The rotation step this member has newly reached, to report to the leader (pure): a
/// certificate from the next CA, else trusting it; `None` once both are reported.
/// `issued_by_next` is asked only when it matters (it parses certificates).
fn rotation_stage(
    trusts: bool,
    reissued: bool,
    issued_by_next: impl FnOnce() -> bool,
) -> Option<CaStage> {
    if !reissued && issued_by_next() {
        Some(CaStage::Reissued)
    } else if !trusts {
        Some(CaStage::Trusted)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::rotation_stage;
    use crate::state::ca_rotation::CaStage;

    #[test]
    fn a_member_reports_trust_then_its_reissued_certificate() {
        assert_eq!(
            rotation_stage(false, false, || false),
            Some(CaStage::Trusted)
        );
        assert_eq!(
            rotation_stage(false, false, || true),
            Some(CaStage::Reissued)
        );
        assert_eq!(
            rotation_stage(true, false, || true),
            Some(CaStage::Reissued)
        );
        assert_eq!(rotation_stage(true, false, || false), None);
        assert_eq!(
            rotation_stage(true, true, || panic!("not asked once reported")),
            None
        );
        // Reissued but its trust not reported (an older leader): trust is reported.
        assert_eq!(rotation_stage(false, true, || true), Some(CaStage::Trusted));
    }
}
