//! A node's own key pair and the CSRs it sends: the private key never leaves the node; the CA
//! learns the key from the CSR, whose signature proves the sender holds it.

use rcgen::{CertificateParams, KeyPair, PublicKeyData};
use rustls::pki_types::CertificateSigningRequestDer;
use rustls::pki_types::pem::PemObject;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::prelude::FromDer;

use super::{Result, TlsError, common_name, host_san, member_id_of_key, parse_error};
use crate::token::sha256_hex;

/// The SubjectPublicKeyInfo fingerprint (as [`NodeKey::fingerprint`]) of the key in a CSR, once
/// the CSR's signature shows that its sender holds that key.
pub fn csr_key_fingerprint(csr_pem: &str) -> Result<String> {
    let csr_der = CertificateSigningRequestDer::from_pem_slice(csr_pem.as_bytes())
        .map_err(|e| parse_error("certificate signing request PEM", e))?;
    let (_, csr) = X509CertificationRequest::from_der(csr_der.as_ref())
        .map_err(|e| parse_error("certificate signing request", e))?;
    csr.verify_signature().map_err(|_| TlsError::CsrSignature)?;
    Ok(sha256_hex(csr.certification_request_info.subject_pki.raw))
}

/// A node's own key pair (Ed25519). Generated on the node; only its public half and CSRs leave it.
pub struct NodeKey {
    key: KeyPair,
}

impl NodeKey {
    /// A fresh Ed25519 key pair.
    pub fn generate() -> Result<Self> {
        Ok(Self {
            key: KeyPair::generate_for(&rcgen::PKCS_ED25519)?,
        })
    }

    /// Loads a key saved with [`NodeKey::to_pem`] (PKCS#8 PEM).
    pub fn from_pem(pem: &str) -> Result<Self> {
        Ok(Self {
            key: KeyPair::from_pem(pem)?,
        })
    }

    /// The private key as PKCS#8 PEM. Secret: store it with owner-only permissions.
    pub fn to_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// Lowercase hex SHA-256 of the public key's SubjectPublicKeyInfo DER. Equal to
    /// [`spki_pin`] of any certificate issued for this key.
    pub fn fingerprint(&self) -> String {
        sha256_hex(&self.key.subject_public_key_info())
    }

    /// The member id bound to this key ([`member_id_of_key`]).
    pub fn member_id(&self) -> u64 {
        // A SHA-256 whose first 128 bits are all zero does not occur; 1 keeps the type total.
        member_id_of_key(&self.fingerprint()).unwrap_or(1)
    }

    /// A PEM CSR for this key with subject CN `name` and the advertise host as SAN (an IP SAN if
    /// it parses as an IP address, else a DNS SAN). The CA decides the final names regardless.
    pub fn csr_pem(&self, name: &str, advertise_host: &str) -> Result<String> {
        let mut params = CertificateParams::default();
        params.distinguished_name = common_name(name);
        params.subject_alt_names = vec![host_san(advertise_host)?];
        Ok(params.serialize_request(&self.key)?.pem()?)
    }
}

impl std::fmt::Debug for NodeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeKey")
            .field("fingerprint", &self.fingerprint())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_ids_are_bound_to_keys() {
        let key = NodeKey::generate().expect("key");
        let fp = key.fingerprint();
        assert_eq!(
            key.member_id(),
            u64::from_str_radix(&fp[..16], 16).expect("hex")
        );
        // The id is what the key's CSR proves, and no other key gives it.
        let csr = key.csr_pem("n1", "10.0.0.1").expect("csr");
        assert_eq!(csr_key_fingerprint(&csr).expect("fingerprint"), fp);
        let other = NodeKey::generate().expect("key");
        assert_ne!(other.member_id(), key.member_id());
        let zeros = "0".repeat(16);
        let cases = [
            (
                format!("{zeros}{}", "ab".repeat(24)),
                Some(0xabab_abab_abab_abab),
            ),
            ("1".repeat(64), Some(0x1111_1111_1111_1111)),
            ("zz".repeat(32), None),
            ("ab".repeat(31), None),
        ];
        for (fingerprint, want) in cases {
            assert_eq!(member_id_of_key(&fingerprint), want, "{fingerprint}");
        }
    }
}
