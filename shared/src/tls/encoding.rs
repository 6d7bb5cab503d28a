//! PEM and DER in and out: certificate bundles, private keys, and the one X.509 parser every
//! other part reads certificates with.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use x509_parser::certificate::X509Certificate;

use super::{Result, parse_error};

pub(super) fn parse_cert(der: &[u8]) -> Result<X509Certificate<'_>> {
    x509_parser::parse_x509_certificate(der)
        .map(|(_, cert)| cert)
        .map_err(|e| parse_error("certificate", e))
}

/// All CERTIFICATE blocks in `pem`; at least one.
pub(super) fn certs(pem: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| parse_error("certificate PEM", e))?;
    if certs.is_empty() {
        return Err(parse_error("certificate PEM", "no CERTIFICATE block"));
    }
    Ok(certs)
}

/// The first certificate in `pem`, as DER.
pub fn first_cert_der(pem: &str) -> Result<CertificateDer<'static>> {
    first_cert(pem)
}

pub(super) fn first_cert(pem: &str) -> Result<CertificateDer<'static>> {
    CertificateDer::from_pem_slice(pem.as_bytes()).map_err(|e| parse_error("certificate PEM", e))
}

pub(super) fn private_key(pem: &str) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|e| parse_error("private key PEM", e))
}

pub(super) fn der_to_pem(der: &[u8]) -> String {
    pem::encode_config(
        &pem::Pem::new("CERTIFICATE", der.to_vec()),
        pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
    )
}
