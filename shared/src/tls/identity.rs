//! Who a node is in a certificate: the `node-<id hex>.<cluster id>.muster` identity name, the
//! member id bound to a key, and the advertise host a certificate may name besides it.

use std::net::IpAddr;

use rcgen::SanType;
use rustls::pki_types::ServerName;
use serde::{Deserialize, Serialize};
use x509_parser::extensions::GeneralName;

use super::{IDENTITY_SUFFIX, Result, TlsError, parse_cert, parse_error};

/// Who the peer of a mutually-authenticated connection is, read from its (verified) certificate.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PeerIdentity {
    pub node_id: u64,
    pub cluster_id: String,
}

/// The identity DNS name of a node: `node-<id in lowercase hex>.<cluster_id>.muster`. Connect to
/// a peer with this as the TLS server name to make sure the certificate belongs to that node.
pub fn node_dns_name(node_id: u64, cluster_id: &str) -> String {
    format!("node-{node_id:x}.{cluster_id}.{IDENTITY_SUFFIX}")
}

/// The member id bound to a public key: the first 64 bits of its SubjectPublicKeyInfo SHA-256
/// fingerprint (the next 64 bits should those be zero, which openraft reserves). A node that
/// registers under this id with a discovery URL can only ever be admitted with that key: the
/// initiator recomputes the id from the key in the node's CSR. `None` for a malformed
/// fingerprint.
pub fn member_id_of_key(fingerprint: &str) -> Option<u64> {
    if fingerprint.len() != 64 || !fingerprint.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    [&fingerprint[..16], &fingerprint[16..32]]
        .into_iter()
        .filter_map(|half| u64::from_str_radix(half, 16).ok())
        .find(|id| *id != 0)
}

/// The node identity in a certificate that the cluster CA issued: its single
/// `node-<hex>.<cluster>.muster` DNS SAN. Only meaningful for a certificate that rustls has
/// verified against the cluster CA (e.g. `peer_certificates()[0]` of an established connection).
pub fn peer_identity(cert_der: &[u8]) -> Result<PeerIdentity> {
    let cert = parse_cert(cert_der)?;
    let san = cert
        .subject_alternative_name()
        .map_err(|e| parse_error("certificate subjectAltName", e))?;
    let mut found: Option<PeerIdentity> = None;
    for name in san.iter().flat_map(|ext| ext.value.general_names.iter()) {
        let GeneralName::DNSName(dns) = name else {
            continue;
        };
        let Some(identity) = parse_identity_name(dns) else {
            continue;
        };
        match &found {
            Some(existing) if *existing != identity => return Err(TlsError::AmbiguousIdentity),
            _ => found = Some(identity),
        }
    }
    found.ok_or(TlsError::NoIdentity)
}

/// The advertise host as a node certificate names it ([`cert_hosts`] spelling): an IP address
/// in its canonical text, a DNS name lowercase without a trailing dot; `None` for the node's
/// own identity name (the certificate then carries no extra SAN). Errors for a host no
/// certificate can name (a reserved `.muster` name, not a DNS name).
pub fn advertise_san(advertise_host: &str) -> Result<Option<String>> {
    Ok(match host_san(advertise_host)? {
        SanType::IpAddress(ip) => Some(ip.to_string()),
        SanType::DnsName(name) if parse_identity_name(name.as_str()).is_some() => None,
        SanType::DnsName(name) if is_reserved_name(name.as_str()) => {
            return Err(TlsError::InvalidHost {
                host: advertise_host.to_owned(),
                reason: "names under .muster are reserved for node identities",
            });
        }
        SanType::DnsName(name) => Some(name.as_str().to_owned()),
        _ => None,
    })
}

/// The SAN for an advertise host: an IP SAN if it parses as an IP address (brackets around an
/// IPv6 address are allowed), else a DNS SAN, which must be a syntactically valid DNS name.
pub(super) fn host_san(host: &str) -> Result<SanType> {
    let invalid = |reason| TlsError::InvalidHost {
        host: host.to_owned(),
        reason,
    };
    let trimmed = host.trim();
    let bare = trimmed
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(trimmed);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(SanType::IpAddress(ip));
    }
    if bare.is_empty() {
        return Err(invalid("empty"));
    }
    let name = bare.trim_end_matches('.').to_ascii_lowercase();
    match ServerName::try_from(name.as_str()) {
        Ok(ServerName::DnsName(_)) => Ok(SanType::DnsName(
            name.try_into().map_err(|_| invalid("not ASCII"))?,
        )),
        _ => Err(invalid("neither an IP address nor a valid DNS name")),
    }
}

pub(super) fn is_reserved_name(name: &str) -> bool {
    name == IDENTITY_SUFFIX || name.ends_with(&format!(".{IDENTITY_SUFFIX}"))
}

fn is_dns_label(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

pub(super) fn check_cluster_id(cluster_id: &str) -> Result<()> {
    if is_dns_label(cluster_id) {
        Ok(())
    } else {
        Err(TlsError::InvalidClusterId(cluster_id.to_owned()))
    }
}

/// Parses `node-<hex>.<cluster>.muster` (the exact form [`node_dns_name`] writes).
pub(super) fn parse_identity_name(name: &str) -> Option<PeerIdentity> {
    let rest = name.strip_suffix(IDENTITY_SUFFIX)?.strip_suffix('.')?;
    let (node, cluster_id) = rest.split_once('.')?;
    let hex = node.strip_prefix("node-")?;
    let node_id = u64::from_str_radix(hex, 16).ok()?;
    if format!("{node_id:x}") != hex || !is_dns_label(cluster_id) {
        return None;
    }
    Some(PeerIdentity {
        node_id,
        cluster_id: cluster_id.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_names_round_trip_and_reject_near_misses() {
        let name = node_dns_name(0xabc, "c0ffee");
        assert_eq!(name, "node-abc.c0ffee.muster");
        assert_eq!(
            parse_identity_name(&name),
            Some(PeerIdentity {
                node_id: 0xabc,
                cluster_id: "c0ffee".into()
            })
        );
        for bad in [
            "node-0abc.c0ffee.muster",
            "node-ABC.c0ffee.muster",
            "node-abc.c0ffee.muster.evil",
            "node-abc.a.b.muster",
            "node-.c0ffee.muster",
            "node-abc.-x.muster",
            "node-10000000000000000.c.muster",
            "host-abc.c0ffee.muster",
        ] {
            assert_eq!(parse_identity_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn host_sans_pick_ip_or_dns() {
        assert!(matches!(host_san("10.0.0.7"), Ok(SanType::IpAddress(_))));
        assert!(matches!(host_san("[::1]"), Ok(SanType::IpAddress(_))));
        assert!(
            matches!(host_san("Node1.Example.internal."), Ok(SanType::DnsName(n)) if n.as_str() == "node1.example.internal")
        );
        assert!(host_san("").is_err());
        assert!(host_san("bad host").is_err());
        assert!(host_san("10.0.0.7:7000").is_err());
    }

    #[test]
    fn cluster_ids_must_be_dns_labels() {
        assert!(check_cluster_id("0123456789abcdef").is_ok());
        assert!(check_cluster_id(&"a".repeat(63)).is_ok());
        assert!(check_cluster_id(&"a".repeat(64)).is_err());
        assert!(check_cluster_id("Abc").is_err());
        assert!(check_cluster_id("a.b").is_err());
        assert!(check_cluster_id("").is_err());
    }
}
