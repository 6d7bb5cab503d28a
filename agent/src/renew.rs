//! Keeps this node's certificate valid and matching its address, without a restart: when two
//! thirds of its lifetime have passed, or when the address recorded for this member differs
//! from the one the certificate names (after `muster node set-address`), the node sends the
//! leader a CSR for its own key, stores the answer durably, and swaps it into the credentials
//! its listener and clients read at every handshake. A moved member's `cluster.json` follows
//! its recorded address too, so that its next start expects the new `--advertise`. During a CA
//! rotation (`state/ca_rotation.rs`) the node also takes the cluster's CAs into use as they
//! change (`renew/trust.rs`), renews from the new CA once it signs, and reports each step to
//! the leader.
//!
//! [`decide`] is the policy (pure); [`renewal_loop`] carries it out.

use std::time::Duration;

use muster_shared::tls::{self, NodeKey};

use crate::agent::Here;
use crate::api::ApiError;
use crate::clock::now_ms;
use crate::datadir::{self, ClusterFile};
use crate::leader::{self, Authority};
use crate::state::member_id;

mod trust;

use trust::follow_trust;

/// The longest the loop sleeps between looks (an address change is noticed this fast).
const LOOK_EVERY: Duration = Duration::from_secs(2);
/// Retries of a failed renewal back off up to this.
const RETRY_MAX: Duration = Duration::from_secs(30);

/// What the certificate on disk says, and what the cluster records for this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFacts {
    pub issued_ms: u64,
    pub expires_ms: u64,
    /// The advertise host(s) the certificate names.
    pub hosts: Vec<String>,
    /// Whether the CA that signs members' certificates now issued it (false during a CA
    /// rotation until this member has renewed).
    pub from_signing_ca: bool,
    /// The host of the address the cluster records for this member, spelled as a certificate
    /// names it (`tls::advertise_san`); `None` if unknown or if no certificate names it.
    pub recorded_host: Option<String>,
}

/// Whether to renew now, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Not yet: look again at `due_ms` (or sooner).
    Wait { due_ms: u64 },
    /// Two thirds of the lifetime have passed.
    Aging,
    /// The member's recorded address moved; the certificate names the old host.
    AddressMoved { to: String },
    /// A CA rotation: another CA signs now.
    NewCa,
}

/// The renewal policy.
pub fn decide(now_ms: u64, facts: &CertFacts) -> Decision {
    if let Some(host) = &facts.recorded_host
        && !facts.hosts.contains(host)
    {
        return Decision::AddressMoved { to: host.clone() };
    }
    if !facts.from_signing_ca {
        return Decision::NewCa;
    }
    let due_ms = tls::renewal_due_ms(facts.issued_ms, facts.expires_ms);
    if now_ms >= due_ms {
        Decision::Aging
    } else {
        Decision::Wait { due_ms }
    }
}

/// Renews this node's certificate whenever [`decide`] says so, for as long as the node runs.
pub async fn renewal_loop(here: Here<'_>, credentials: &tls::NodeCredentials, key_pem: String) {
    let key = match NodeKey::from_pem(&key_pem) {
        Ok(key) => key,
        Err(e) => {
            tracing::error!(error = %e, "cannot load this node's key; certificates will not be renewed");
            return;
        }
    };
    let mut retry = Duration::from_secs(1);
    // A move is renewed for once: should the new certificate still not name the recorded host
    // (a leader that spells it otherwise), asking again would only repeat the answer.
    let mut renewed_for: Option<String> = None;
    loop {
        follow_recorded_address(here);
        follow_trust(here, credentials, &key_pem).await;
        let Some(facts) = facts(here) else {
            tokio::time::sleep(LOOK_EVERY).await;
            continue;
        };
        let now = now_ms();
        let decision = match decide(now, &facts) {
            Decision::AddressMoved { to } if renewed_for.as_ref() == Some(&to) => Decision::Wait {
                due_ms: tls::renewal_due_ms(facts.issued_ms, facts.expires_ms),
            },
            other => other,
        };
        let why = match &decision {
            Decision::Wait { due_ms } => {
                let wait = Duration::from_millis(due_ms.saturating_sub(now)).min(LOOK_EVERY);
                tokio::time::sleep(wait.max(Duration::from_millis(100))).await;
                continue;
            }
            Decision::Aging => "two thirds of its lifetime have passed".to_string(),
            Decision::AddressMoved { to } => format!("this member's address is now {to}"),
            Decision::NewCa => "the cluster's CA is being rotated".to_string(),
        };
        match renew_once(here, credentials, &key).await {
            Ok(expires_ms) => {
                retry = Duration::from_secs(1);
                if let Decision::AddressMoved { to } = decision {
                    renewed_for = Some(to);
                }
                tracing::info!(
                    reason = %why,
                    expires_in_s = expires_ms.saturating_sub(now_ms()) / 1000,
                    "renewed this node's certificate"
                );
                // Never twice in a row without a pause, whatever the next look says.
                tokio::time::sleep(LOOK_EVERY).await;
            }
            Err(e) => {
                tracing::warn!(reason = %why, error = %e, retry_in = ?retry, "could not renew this node's certificate");
                tokio::time::sleep(retry).await;
                retry = (retry * 2).min(RETRY_MAX);
            }
        }
    }
}

/// Keeps `cluster.json`'s address in step with the one the cluster records for this member,
/// once a move (`node set-address`) has been applied here.
fn follow_recorded_address(here: Here<'_>) {
    let recorded = here
        .raft()
        .read_local(|s| s.nodes.get(&here.me.node_id).map(|n| n.addr.clone()))
        .ok()
        .flatten();
    let Some(addr) = recorded else {
        return;
    };
    match ClusterFile::record_advertise(here.me.data_dir.as_path(), &addr) {
        Ok(true) => tracing::warn!(
            address = %addr,
            "the cluster records this member at a new address; restart it with --advertise {addr}"
        ),
        Ok(false) => {}
        Err(e) => {
            tracing::warn!(error = %e, "cannot record this member's new address in cluster.json")
        }
    }
}

/// The facts [`decide`] needs, from the data dir and the applied state.
fn facts(here: Here<'_>) -> Option<CertFacts> {
    let files = datadir::read_tls(here.me.data_dir.as_path()).ok()?;
    let (issued_ms, expires_ms) = tls::cert_lifetime_ms(&files.cert_pem).ok()?;
    let hosts = tls::cert_hosts(&files.cert_pem).ok()?;
    let signing = here
        .raft()
        .read_local(|s| s.signing_ca().map(|ca| ca.cert_pem.clone()))
        .ok()
        .flatten();
    let from_signing_ca = signing.is_none_or(|ca| tls::issued_by(&files.cert_pem, &ca));
    let recorded_host = here
        .raft()
        .read_local(|s| s.nodes.get(&here.me.node_id).map(|n| n.addr.clone()))
        .ok()
        .flatten()
        .and_then(|addr| {
            tls::advertise_san(crate::config::host_of(&addr))
                .ok()
                .flatten()
        });
    Some(CertFacts {
        issued_ms,
        expires_ms,
        hosts,
        from_signing_ca,
        recorded_host,
    })
}

/// Asks the leader for a new certificate, stores it, and puts it in use. Returns its expiry.
async fn renew_once(
    here: Here<'_>,
    credentials: &tls::NodeCredentials,
    key: &NodeKey,
) -> Result<u64, ApiError> {
    let csr_pem = key
        .csr_pem(here.me.name.as_str(), "localhost")
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let renew = leader::ask::renew_certificate(member_id(here.me.node_id), csr_pem);
    let renewed = leader::ask(here, &Authority::Node, renew).await?;
    // The answer is checked before it replaces anything: it must be for this node and this
    // key (the credentials refuse a certificate that does not match the key) and trust a CA
    // this node already trusts.
    let identity = tls::peer_identity(
        &tls::first_cert_der(&renewed.cert_pem).map_err(|e| ApiError::internal(e.to_string()))?,
    )
    .map_err(|e| ApiError::internal(e.to_string()))?;
    if identity.node_id != here.me.node_id || identity.cluster_id != here.cluster_id() {
        return Err(ApiError::internal(
            "the leader issued a certificate for another node; keeping the current one",
        ));
    }
    let ca_pin =
        tls::spki_pin(&renewed.ca_cert_pem).map_err(|e| ApiError::internal(e.to_string()))?;
    if !here.leader().trusts_ca_pin(&ca_pin)
        || !tls::issued_by(&renewed.cert_pem, &renewed.ca_cert_pem)
    {
        return Err(ApiError::internal(
            "the leader's answer is not from a CA this cluster trusts; keeping the current certificate",
        ));
    }
    let expires_ms =
        tls::cert_expires_ms(&renewed.cert_pem).map_err(|e| ApiError::internal(e.to_string()))?;
    let key_pem = key.to_pem();
    let trust = datadir::read_tls(here.me.data_dir.as_path())
        .map_err(|e| ApiError::internal(e.to_string()))?
        .ca_pem;
    // Build first (proves the key matches), write durably, then swap.
    tls::NodeCredentials::new(&trust, &renewed.cert_pem, &key_pem)
        .map_err(|e| ApiError::internal(format!("the renewed certificate is unusable: {e}")))?;
    datadir::write_cert(here.me.data_dir.as_path(), &renewed.cert_pem)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    credentials
        .replace(&trust, &renewed.cert_pem, &key_pem)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(expires_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(issued: u64, expires: u64, hosts: &[&str], recorded: Option<&str>) -> CertFacts {
        CertFacts {
            issued_ms: issued,
            expires_ms: expires,
            from_signing_ca: true,
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            recorded_host: recorded.map(str::to_string),
        }
    }

    #[test]
    fn renews_at_two_thirds_of_the_lifetime_or_when_the_address_moved() {
        let year = 365 * 24 * 3600 * 1000u64;
        let cases: &[(&str, u64, CertFacts, Decision)] = &[
            (
                "fresh",
                1_000,
                facts(0, 30_000, &["10.0.0.1"], Some("10.0.0.1")),
                Decision::Wait { due_ms: 20_000 },
            ),
            (
                "just before two thirds",
                19_999,
                facts(0, 30_000, &["10.0.0.1"], Some("10.0.0.1")),
                Decision::Wait { due_ms: 20_000 },
            ),
            (
                "at two thirds",
                20_000,
                facts(0, 30_000, &["10.0.0.1"], Some("10.0.0.1")),
                Decision::Aging,
            ),
            (
                "expired",
                40_000,
                facts(0, 30_000, &["10.0.0.1"], None),
                Decision::Aging,
            ),
            (
                "a year, eight months in",
                year / 12 * 8 + 1,
                facts(0, year, &["n1.example"], Some("n1.example")),
                Decision::Aging,
            ),
            (
                "address moved",
                1_000,
                facts(0, year, &["10.0.0.1"], Some("10.0.0.9")),
                Decision::AddressMoved {
                    to: "10.0.0.9".into(),
                },
            ),
            (
                "another CA signs now",
                1_000,
                CertFacts {
                    from_signing_ca: false,
                    ..facts(0, year, &["10.0.0.1"], Some("10.0.0.1"))
                },
                Decision::NewCa,
            ),
            (
                "record not applied yet",
                1_000,
                facts(0, year, &["10.0.0.1"], None),
                Decision::Wait {
                    due_ms: year / 3 * 2,
                },
            ),
        ];
        for (name, now, facts, want) in cases {
            assert_eq!(&decide(*now, facts), want, "{name}");
        }
    }
}
