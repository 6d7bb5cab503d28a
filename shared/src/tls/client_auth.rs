//! Client certificates from an operator's own CA on a plain listener (FleetLock over TLS): the
//! verifier that checks them, and the names a verified one carries, which the listener binds
//! to the ids that client may act for.
//!
//! A certificate is asked for, not demanded: a client without one completes the handshake and
//! is refused by the HTTP layer with a JSON answer that says what is missing (a handshake alert
//! tells an operator nothing). A certificate the CA did not sign is refused at the handshake.

use std::sync::Arc;

use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use x509_parser::extensions::GeneralName;

use super::{Result, TlsError, certs, parse_cert, parse_error, ring_provider};

/// The verifier of client certificates issued by the CA certificates in `ca_pem`.
pub fn verifier(ca_pem: &str) -> Result<Arc<dyn ClientCertVerifier>> {
    let mut roots = RootCertStore::empty();
    let cas = certs(ca_pem)?;
    if cas.is_empty() {
        return Err(TlsError::Parse {
            what: "client CA PEM",
            detail: "no certificate in it".into(),
        });
    }
    for ca in cas {
        roots.add(ca)?;
    }
    Ok(
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), ring_provider())
            .allow_unauthenticated()
            .build()?,
    )
}

/// The names a client certificate carries: its subject's common names, then its DNS SANs, as
/// written (ids are compared exactly: a machine id differing in case is another id).
pub fn client_names(cert_der: &[u8]) -> Result<Vec<String>> {
    let cert = parse_cert(cert_der)?;
    let mut names: Vec<String> = cert
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok().map(String::from))
        .collect();
    let san = cert
        .subject_alternative_name()
        .map_err(|e| parse_error("certificate subjectAltName", e))?;
    for name in san.iter().flat_map(|ext| ext.value.general_names.iter()) {
        if let GeneralName::DNSName(dns) = name {
            names.push((*dns).to_string());
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_common_name_and_the_dns_sans() {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params =
            rcgen::CertificateParams::new(vec!["m2.example".to_string(), "127.0.0.1".to_string()])
                .expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "machine-1");
        let cert = params.self_signed(&key).expect("cert");
        assert_eq!(
            client_names(cert.der()).expect("names"),
            ["machine-1", "m2.example"]
        );
    }

    #[test]
    fn a_client_ca_without_a_certificate_is_refused() {
        assert!(verifier("not a pem").is_err());
    }
}
