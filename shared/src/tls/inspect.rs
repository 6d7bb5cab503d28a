//! Facts read from certificates: pins (SHA-256 of the SubjectPublicKeyInfo), lifetimes and
//! when to renew, the hosts a node certificate names, and who issued it.

use std::net::IpAddr;

use x509_parser::extensions::GeneralName;

use super::{CLOCK_SKEW, Result, certs, first_cert, parse_cert, parse_error, parse_identity_name};
use crate::token::sha256_hex;

/// The CA pin of a PEM certificate (the first one in `cert_pem`): lowercase hex SHA-256 of its
/// SubjectPublicKeyInfo DER. Independent of the PEM's line wrapping or line endings.
pub fn spki_pin(cert_pem: &str) -> Result<String> {
    if let Some(pin) = known_pins().get(cert_pem) {
        return Ok(pin.clone());
    }
    let pin = spki_pin_der(&first_cert(cert_pem)?)?;
    let mut known = known_pins();
    if known.len() >= KNOWN_PINS {
        known.clear();
    }
    known.insert(cert_pem.to_string(), pin.clone());
    Ok(pin)
}

/// How many certificates' pins [`spki_pin`] remembers: a cluster's CAs (two during a rotation)
/// are asked for on every operator request that checks a token, and decoding and parsing the
/// certificate each time was a visible share of a leader's CPU under load.
const KNOWN_PINS: usize = 32;

fn known_pins() -> std::sync::MutexGuard<'static, std::collections::HashMap<String, String>> {
    static KNOWN: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<String, String>>> =
        std::sync::OnceLock::new();
    KNOWN
        .get_or_init(Default::default)
        .lock()
        // A map of pure results: a panic elsewhere leaves it usable.
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The pins of every certificate in `pem` (a trust bundle: two CAs during a CA rotation).
pub fn bundle_pins(pem: &str) -> Result<Vec<String>> {
    certs(pem)?
        .iter()
        .map(|der| spki_pin_der(der.as_ref()))
        .collect()
}

/// The pin of the last self-signed CA in a trust bundle: during a CA rotation the bundle is
/// the current CA, the new one and cross-certificates, and the new one is what a cluster that
/// has finished the rotation presents.
pub fn newest_ca_pin(pem: &str) -> Result<String> {
    let newest = certs(pem)?
        .into_iter()
        .rev()
        .find(|der| parse_cert(der).is_ok_and(|c| c.verify_signature(None).is_ok()))
        .ok_or_else(|| parse_error("CA bundle", "no self-signed CA certificate"))?;
    spki_pin_der(newest.as_ref())
}

/// [`spki_pin`] for a DER certificate.
pub fn spki_pin_der(cert_der: &[u8]) -> Result<String> {
    Ok(sha256_hex(
        parse_cert(cert_der)?.tbs_certificate.subject_pki.raw,
    ))
}

/// When the first certificate in `cert_pem` stops being valid, in ms since the Unix epoch.
pub fn cert_expires_ms(cert_pem: &str) -> Result<u64> {
    let der = first_cert(cert_pem)?;
    let cert = parse_cert(&der)?;
    let seconds = cert.validity().not_after.timestamp();
    Ok(u64::try_from(seconds).unwrap_or(0).saturating_mul(1000))
}

/// When the first certificate in `cert_pem` was issued and when it expires, in ms since the
/// Unix epoch. "Issued" is its `not_before` plus [`CLOCK_SKEW`] (never after expiry): the CA
/// backdates every certificate by that much.
pub fn cert_lifetime_ms(cert_pem: &str) -> Result<(u64, u64)> {
    let der = first_cert(cert_pem)?;
    let cert = parse_cert(&der)?;
    let ms = |seconds: i64| u64::try_from(seconds).unwrap_or(0).saturating_mul(1000);
    let not_after = ms(cert.validity().not_after.timestamp());
    let skew = u64::try_from(CLOCK_SKEW.as_millis()).unwrap_or(u64::MAX);
    let issued = ms(cert.validity().not_before.timestamp())
        .saturating_add(skew)
        .min(not_after);
    Ok((issued, not_after))
}

/// The hosts a node certificate was issued for besides its identity name: its advertise host
/// (IP addresses as text, DNS names lowercase).
pub fn cert_hosts(cert_pem: &str) -> Result<Vec<String>> {
    let der = first_cert(cert_pem)?;
    let cert = parse_cert(&der)?;
    let san = cert
        .subject_alternative_name()
        .map_err(|e| parse_error("certificate subjectAltName", e))?;
    let mut hosts = Vec::new();
    for name in san.iter().flat_map(|ext| ext.value.general_names.iter()) {
        match name {
            GeneralName::DNSName(dns) if parse_identity_name(dns).is_none() => {
                hosts.push(dns.to_ascii_lowercase());
            }
            GeneralName::IPAddress(bytes) => {
                let ip = match bytes.len() {
                    4 => <[u8; 4]>::try_from(*bytes).map(IpAddr::from).ok(),
                    16 => <[u8; 16]>::try_from(*bytes).map(IpAddr::from).ok(),
                    _ => None,
                };
                hosts.extend(ip.map(|ip| ip.to_string()));
            }
            _ => {}
        }
    }
    Ok(hosts)
}

/// True if the first certificate in `cert_pem` carries a valid signature of the CA in `ca_pem`.
pub fn issued_by(cert_pem: &str, ca_pem: &str) -> bool {
    let (Ok(cert_der), Ok(ca_der)) = (first_cert(cert_pem), first_cert(ca_pem)) else {
        return false;
    };
    let (Ok(cert), Ok(ca)) = (parse_cert(&cert_der), parse_cert(&ca_der)) else {
        return false;
    };
    cert.verify_signature(Some(ca.public_key())).is_ok()
}

/// When a certificate issued at `issued_ms` and expiring at `expires_ms` is due for renewal:
/// once two thirds of its lifetime have passed, leaving a third to reach a leader in.
pub fn renewal_due_ms(issued_ms: u64, expires_ms: u64) -> u64 {
    let life = expires_ms.saturating_sub(issued_ms);
    issued_ms.saturating_add(life / 3 * 2)
}
