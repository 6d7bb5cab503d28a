//! The cluster certificate authority: creating and loading it, cross-signing another CA during
//! a rotation, and issuing node certificates from CSRs.

use std::time::Duration;

use rand::RngCore;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PublicKeyData, SanType, SerialNumber,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateSigningRequestDer};
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::prelude::FromDer;

use super::{
    CA_VALIDITY, CLOCK_SKEW, Result, TlsError, check_cluster_id, der_to_pem, first_cert, host_san,
    is_reserved_name, node_dns_name, parse_cert, parse_error, spki_pin_der,
};
use crate::token::sha256_hex;

/// The cluster certificate authority: a self-signed Ed25519 CA created once at formation and
/// replicated (cert and key) in the cluster state.
pub struct ClusterCa {
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    pin: String,
    issuer: Issuer<'static, KeyPair>,
}

impl ClusterCa {
    /// A new CA for `cluster_id` (which must be a valid DNS label, because node names embed it):
    /// CN `muster cluster <id>`, path length 0, valid from now − [`CLOCK_SKEW`] for
    /// [`CA_VALIDITY`].
    pub fn generate(cluster_id: &str) -> Result<Self> {
        check_cluster_id(cluster_id)?;
        let key = KeyPair::generate_for(&rcgen::PKCS_ED25519)?;
        let params = ca_params(cluster_id)?;
        let cert = params.self_signed(&key)?;
        let cert_der = cert.der().clone();
        Ok(Self {
            cert_pem: cert.pem(),
            pin: spki_pin_der(&cert_der)?,
            cert_der,
            issuer: Issuer::new(params, key),
        })
    }

    /// Loads a CA from its certificate and PKCS#8 key PEM. Refuses a certificate that is not a
    /// CA or a key that does not belong to it.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self> {
        let cert_der = first_cert(cert_pem)?;
        let key = KeyPair::from_pem(key_pem)?;
        let cert = parse_cert(&cert_der)?;
        if !cert.is_ca() {
            return Err(TlsError::NotCa);
        }
        if cert.tbs_certificate.subject_pki.raw != key.subject_public_key_info().as_slice() {
            return Err(TlsError::CaKeyMismatch);
        }
        let pin = sha256_hex(cert.tbs_certificate.subject_pki.raw);
        let issuer = Issuer::from_ca_cert_der(&cert_der, key)?;
        Ok(Self {
            cert_pem: der_to_pem(&cert_der),
            pin,
            cert_der,
            issuer,
        })
    }

    /// A cross-certificate: `other`'s key and name, certified by this CA (PEM). During a CA
    /// rotation members present both cross-certificates, so that a client pinning either CA
    /// verifies a member certificate from either (leaf → cross-certificate → pinned CA).
    pub fn cross_sign(&self, other: &ClusterCa, cluster_id: &str) -> Result<String> {
        check_cluster_id(cluster_id)?;
        let other_cert = parse_cert(other.cert_der())?;
        let public_key =
            rcgen::SubjectPublicKeyInfo::from_der(other_cert.tbs_certificate.subject_pki.raw)?;
        let params = ca_params(cluster_id)?;
        Ok(params.signed_by(&public_key, &self.issuer)?.pem())
    }

    /// The CA certificate as PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA certificate as DER.
    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    /// The CA private key as PKCS#8 PEM. Secret.
    pub fn key_pem(&self) -> String {
        self.issuer.key().serialize_pem()
    }

    /// The CA pin: lowercase hex SHA-256 of the CA certificate's SubjectPublicKeyInfo.
    pub fn pin(&self) -> &str {
        &self.pin
    }

    /// Issues a node certificate (PEM) from `csr_pem`.
    ///
    /// The CSR must verify with its own key (proof of possession) and that key's fingerprint
    /// must equal `expected_fingerprint` (the fingerprint the node registered), else
    /// [`TlsError::KeyMismatch`]. Nothing else in the CSR is used: the certificate gets subject
    /// CN `node-<id hex>`, SANs `advertise_host` (IP or DNS) and [`node_dns_name`], EKU server
    /// and client auth, no CA rights, a random serial, and validity from now − [`CLOCK_SKEW`] to
    /// now + `validity`.
    pub fn sign_node(
        &self,
        csr_pem: &str,
        node_id: u64,
        cluster_id: &str,
        expected_fingerprint: &str,
        advertise_host: &str,
        validity: Duration,
    ) -> Result<String> {
        check_cluster_id(cluster_id)?;
        let csr_der = CertificateSigningRequestDer::from_pem_slice(csr_pem.as_bytes())
            .map_err(|e| parse_error("certificate signing request PEM", e))?;
        let (_, csr) = X509CertificationRequest::from_der(csr_der.as_ref())
            .map_err(|e| parse_error("certificate signing request", e))?;
        csr.verify_signature().map_err(|_| TlsError::CsrSignature)?;
        let spki_der = csr.certification_request_info.subject_pki.raw;
        let actual = sha256_hex(spki_der);
        let expected = expected_fingerprint.trim().to_ascii_lowercase();
        if actual != expected {
            return Err(TlsError::KeyMismatch { expected, actual });
        }
        let public_key = rcgen::SubjectPublicKeyInfo::from_der(spki_der)?;

        let identity = node_dns_name(node_id, cluster_id);
        let host = host_san(advertise_host)?;
        let mut sans = Vec::with_capacity(2);
        match &host {
            SanType::DnsName(name) if name.as_str() == identity => {}
            SanType::DnsName(name) if is_reserved_name(name.as_str()) => {
                return Err(TlsError::InvalidHost {
                    host: advertise_host.to_owned(),
                    reason: "names under .muster are reserved for node identities",
                });
            }
            _ => sans.push(host),
        }
        sans.push(SanType::DnsName(identity.try_into()?));

        let mut params = CertificateParams::default();
        params.distinguished_name = common_name(&format!("node-{node_id:x}"));
        params.subject_alt_names = sans;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.use_authority_key_identifier_extension = true;
        params.serial_number = Some(random_serial());
        set_validity(&mut params, validity)?;
        Ok(params.signed_by(&public_key, &self.issuer)?.pem())
    }
}

impl std::fmt::Debug for ClusterCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterCa")
            .field("pin", &self.pin)
            .finish_non_exhaustive()
    }
}

/// What every cluster CA certificate says (a new CA, or a cross-certificate for one).
fn ca_params(cluster_id: &str) -> Result<CertificateParams> {
    let mut params = CertificateParams::default();
    params.distinguished_name = common_name(&format!("muster cluster {cluster_id}"));
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.serial_number = Some(random_serial());
    set_validity(&mut params, CA_VALIDITY)?;
    Ok(params)
}

pub(super) fn common_name(cn: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    dn
}

/// 127 random bits, positive, never zero-length.
fn random_serial() -> SerialNumber {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    bytes[0] = (bytes[0] & 0x7f) | 0x01;
    SerialNumber::from_slice(&bytes)
}

fn set_validity(params: &mut CertificateParams, validity: Duration) -> Result<()> {
    let invalid = || TlsError::InvalidValidity(validity);
    if validity.is_zero() {
        return Err(invalid());
    }
    let now = time::OffsetDateTime::now_utc();
    let skew = time::Duration::try_from(CLOCK_SKEW).map_err(|_| invalid())?;
    let life = time::Duration::try_from(validity).map_err(|_| invalid())?;
    params.not_before = now.checked_sub(skew).ok_or_else(invalid)?;
    params.not_after = now.checked_add(life).ok_or_else(invalid)?;
    Ok(())
}
