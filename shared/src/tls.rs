//! The cluster CA and the mutual-TLS configuration nodes talk with.
//!
//! * Every node generates its own Ed25519 key ([`NodeKey`]); the private key never leaves it. It
//!   sends a CSR and the fingerprint of its key; the CA ([`ClusterCa::sign_node`]) refuses the CSR
//!   unless the key in it has that fingerprint, throws away everything the CSR asked for and issues
//!   a certificate that names the node as `node-<id hex>.<cluster id>.muster` (plus its advertise
//!   host), usable both as a TLS server and as a TLS client.
//! * The "CA pin" is the lowercase hex SHA-256 of the CA certificate's SubjectPublicKeyInfo
//!   ([`spki_pin`]). It travels in the discovery record and in join tokens, and lets a node that
//!   has nothing else ([`pinned_client_config`]) recognise the cluster and learn its CA.
//! * [`server_config`] asks for a client certificate but does not demand one: the join endpoint is
//!   called by nodes that have no certificate yet, so the HTTP layer must itself require a
//!   [`PeerIdentity`] on raft and operator routes. A client that does present a certificate is
//!   rejected at the handshake unless the cluster CA signed it.
//!
//! Every rustls config is built with the ring provider explicitly; nothing here depends on a
//! process-wide default provider.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::RngCore;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PublicKeyData, SanType, SerialNumber,
};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{
    CertificateDer, CertificateSigningRequestDer, PrivateKeyDer, ServerName, UnixTime,
};
use rustls::server::ParsedCertificate;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, OtherError, RootCertStore, ServerConfig,
    SignatureScheme,
};
use serde::{Deserialize, Serialize};
use x509_parser::certificate::X509Certificate;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer;

use crate::token::sha256_hex;

mod credentials;

pub use credentials::NodeCredentials;

/// DNS suffix of the per-node identity names. Advertise hosts may not use it.
pub const IDENTITY_SUFFIX: &str = "muster";

/// How far back `not_before` is set on every certificate, to absorb clock skew between nodes.
pub const CLOCK_SKEW: Duration = Duration::from_secs(5 * 60);

/// Lifetime of a cluster CA certificate.
pub const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 60 * 60);

/// The only ALPN protocol nodes speak.
const ALPN_HTTP1: &[u8] = b"http/1.1";

/// Errors from key, certificate and TLS-config handling.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// rcgen failed to generate, parse or sign something.
    #[error("certificate handling failed: {0}")]
    Rcgen(#[from] rcgen::Error),
    /// rustls refused a certificate, key or configuration.
    #[error("TLS configuration failed: {0}")]
    Rustls(#[from] rustls::Error),
    /// The client-certificate verifier could not be built.
    #[error("client certificate verifier: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    /// Input that should have held PEM (or DER) of the given kind did not.
    #[error("invalid {what}: {detail}")]
    Parse { what: &'static str, detail: String },
    /// The CSR's signature does not verify with the key it carries (no proof of possession).
    #[error("certificate signing request signature is invalid")]
    CsrSignature,
    /// The CSR carries a different key than the one the node registered.
    #[error("CSR key fingerprint {actual} does not match the expected {expected}")]
    KeyMismatch { expected: String, actual: String },
    /// The CA private key does not belong to the CA certificate.
    #[error("the CA key does not match the CA certificate")]
    CaKeyMismatch,
    /// The certificate given as the cluster CA is not a CA certificate.
    #[error("the certificate is not a CA certificate")]
    NotCa,
    /// A server chain did not contain a CA with the pinned SubjectPublicKeyInfo.
    #[error(transparent)]
    CaPinMismatch(#[from] CaPinMismatch),
    /// A CA pin that is not 64 lowercase hex characters.
    #[error(
        "invalid CA pin {0:?}: expected 64 hex characters (SHA-256 of the CA's SubjectPublicKeyInfo)"
    )]
    InvalidPin(String),
    /// An advertise host that is neither an IP address nor a valid DNS name, or that uses the
    /// reserved identity suffix.
    #[error("invalid advertise host {host:?}: {reason}")]
    InvalidHost { host: String, reason: &'static str },
    /// A cluster id that cannot be a DNS label.
    #[error(
        "invalid cluster id {0:?}: must be 1-63 characters of a-z, 0-9 and '-', not starting or ending with '-'"
    )]
    InvalidClusterId(String),
    /// A certificate validity that is zero or too large to represent.
    #[error("invalid certificate validity {0:?}")]
    InvalidValidity(Duration),
    /// The certificate carries no `node-<id>.<cluster>.muster` name.
    #[error("the certificate names no muster node")]
    NoIdentity,
    /// The certificate carries more than one node identity name.
    #[error("the certificate names more than one muster node")]
    AmbiguousIdentity,
}

/// A server chain that holds no CA certificate with the pinned SubjectPublicKeyInfo. Inside a
/// failed pinned handshake it sits in `rustls::Error::InvalidCertificate(CertificateError::Other)`;
/// its `Debug` is its message, so the rustls error text reads "... CA pin mismatch: ...".
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[error("CA pin mismatch: expected {expected}, the server's chain offered [{}]", offered.join(", "))]
pub struct CaPinMismatch {
    /// The pin we were given.
    pub expected: String,
    /// The pins of the certificates the server sent besides its own (normally just its CA).
    pub offered: Vec<String>,
}

impl std::fmt::Debug for CaPinMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// Result alias for this module.
pub type Result<T, E = TlsError> = std::result::Result<T, E>;

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

/// The CA pin of a PEM certificate (the first one in `cert_pem`): lowercase hex SHA-256 of its
/// SubjectPublicKeyInfo DER. Independent of the PEM's line wrapping or line endings.
pub fn spki_pin(cert_pem: &str) -> Result<String> {
    spki_pin_der(&first_cert(cert_pem)?)
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

/// Node ids whose certificates a node's listener refuses at the TLS handshake (members that
/// were removed and have left the configuration): shared between the listener's verifier and
/// the task that keeps it up to date from the replicated state.
#[derive(Debug, Clone, Default)]
pub struct RevokedIds(Arc<std::sync::RwLock<std::collections::BTreeSet<u64>>>);

impl RevokedIds {
    pub fn replace(&self, ids: std::collections::BTreeSet<u64>) {
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
struct RevokingVerifier {
    inner: Arc<dyn rustls::server::danger::ClientCertVerifier>,
    revoked: RevokedIds,
    /// Only this cluster's ids are refused: a restored cluster keeps the CA but tombstones the
    /// old cluster's members, who must not read that as their own removal.
    cluster_id: String,
}

impl rustls::server::danger::ClientCertVerifier for RevokingVerifier {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> std::result::Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
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

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// True if `err` (or what caused it) is a TLS alert saying this side's certificate was revoked:
/// how a removed member learns it when its former peers refuse it at the handshake.
pub fn is_certificate_revoked(err: &(dyn std::error::Error + 'static)) -> bool {
    let revoked = |e: &(dyn std::error::Error + 'static)| {
        matches!(
            e.downcast_ref::<rustls::Error>(),
            Some(rustls::Error::AlertReceived(
                rustls::AlertDescription::CertificateRevoked
            ))
        )
    };
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cause {
        if revoked(e) {
            return true;
        }
        // An io::Error's `source()` skips the error it wraps (tokio-rustls puts rustls's
        // error there): look inside it.
        if let Some(inner) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            && revoked(inner)
        {
            return true;
        }
        cause = e.source();
    }
    false
}

/// The rustls config for a node's listener: presents `cert_pem` (plus the CA certificate, so
/// that pinned clients can find the CA), requests a client certificate and verifies it against
/// the CA in `ca_pem`, but also accepts clients without one (see the module docs). ALPN
/// `http/1.1`.
pub fn server_config(ca_pem: &str, cert_pem: &str, key_pem: &str) -> Result<Arc<ServerConfig>> {
    let credentials = NodeCredentials::new(ca_pem, cert_pem, key_pem)?;
    server_config_for(&credentials, RevokedIds::default(), "")
}

/// The listener's config over replaceable [`NodeCredentials`]: every handshake presents the
/// current certificate and verifies clients against the current trust, then refuses
/// `cluster_id`'s node ids in `revoked`. Sessions are never resumed (a resumed handshake would
/// skip both checks).
pub fn server_config_for(
    credentials: &NodeCredentials,
    revoked: RevokedIds,
    cluster_id: &str,
) -> Result<Arc<ServerConfig>> {
    let verifier = Arc::new(RevokingVerifier {
        inner: credentials.client_verifier(),
        revoked,
        cluster_id: cluster_id.to_string(),
    });
    let mut config = ServerConfig::builder_with_provider(ring_provider())
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(credentials.server_cert());
    // Every handshake checks the client certificate again (a revoked one included).
    config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    config.send_tls13_tickets = 0;
    config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    Ok(Arc::new(config))
}

/// The rustls config for a listener with an operator's own certificate (FleetLock for Zincati on
/// other machines): presents `cert_pem`'s chain with `key_pem`, asks no client certificate.
/// ALPN `http/1.1`.
pub fn plain_server_config(cert_pem: &str, key_pem: &str) -> Result<Arc<ServerConfig>> {
    let mut config = ServerConfig::builder_with_provider(ring_provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs(cert_pem)?, private_key(key_pem)?)?;
    config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    Ok(Arc::new(config))
}

/// The rustls config for node-to-node requests: trusts only the CA in `ca_pem` and presents
/// `cert_pem` / `key_pem` as the client certificate. Use [`node_dns_name`] (or the peer's
/// advertise IP/host) as the server name. ALPN `http/1.1`.
pub fn client_config(ca_pem: &str, cert_pem: &str, key_pem: &str) -> Result<Arc<ClientConfig>> {
    client_config_for(&NodeCredentials::new(ca_pem, cert_pem, key_pem)?)
}

/// The node-to-node client config over replaceable [`NodeCredentials`]: every new connection
/// presents the current certificate and trusts the current CAs.
pub fn client_config_for(credentials: &NodeCredentials) -> Result<Arc<ClientConfig>> {
    let mut config = ClientConfig::builder_with_provider(ring_provider())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(credentials.server_verifier())
        .with_client_cert_resolver(credentials.client_cert());
    config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    Ok(Arc::new(config))
}

/// The rustls config for a node that knows only the CA pin (from a join token or the discovery
/// record). It presents no client certificate. A server is accepted only if its chain contains
/// a self-signed CA certificate whose [`spki_pin`] equals `ca_pin` and the server's certificate
/// verifies against that CA (signature, validity, server-auth EKU); otherwise the handshake
/// fails with a [`CaPinMismatch`] inside the rustls error (see [`is_ca_pin_mismatch`]).
///
/// The server name is *not* checked: the pin identifies the cluster, and any member may answer
/// the join endpoint, whatever address the joiner was given for it.
pub fn pinned_client_config(ca_pin: &str) -> Result<Arc<ClientConfig>> {
    Ok(pinned_client_config_capturing(ca_pin)?.0)
}

/// [`pinned_client_config`] that also returns a [`PinnedCa`] slot where the verifier stores the
/// CA certificate it matched, so a joiner can persist the CA it pinned.
pub fn pinned_client_config_capturing(ca_pin: &str) -> Result<(Arc<ClientConfig>, PinnedCa)> {
    let pin = check_pin(ca_pin)?;
    let provider = ring_provider();
    let captured = PinnedCa::default();
    let verifier = PinnedCaVerifier {
        pin,
        provider: provider.clone(),
        captured: captured.clone(),
    };
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    Ok((Arc::new(config), captured))
}

/// The CA certificate a pinned client matched, shared with its verifier. Read it only after a
/// request over that config has succeeded: the verifier stores the CA before the handshake is
/// complete.
#[derive(Clone, Debug, Default)]
pub struct PinnedCa(Arc<Mutex<Option<CertificateDer<'static>>>>);

impl PinnedCa {
    /// The matched CA certificate as DER, if a server has been verified.
    pub fn cert_der(&self) -> Option<CertificateDer<'static>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The matched CA certificate as PEM, if a server has been verified.
    pub fn cert_pem(&self) -> Option<String> {
        self.cert_der().map(|der| der_to_pem(&der))
    }

    fn store(&self, der: CertificateDer<'static>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(der);
    }
}

/// Finds in `chain` (e.g. a server's `peer_certificates()`) the self-signed CA certificate whose
/// [`spki_pin`] is `ca_pin`. Note that this alone does not prove the leaf was issued by that CA;
/// [`pinned_client_config`] checks that too.
pub fn ca_from_chain(
    chain: &[CertificateDer<'_>],
    ca_pin: &str,
) -> Result<CertificateDer<'static>> {
    let pin = check_pin(ca_pin)?;
    Ok(find_pinned_ca(chain, &pin)?)
}

/// Whether `err` (or anything in its source chain, looking inside `std::io::Error`s) is the CA
/// pin mismatch of a [`pinned_client_config`] handshake, so callers can answer `ca_pin_mismatch`.
pub fn is_ca_pin_mismatch(err: &(dyn std::error::Error + 'static)) -> bool {
    ca_pin_mismatch(err).is_some()
}

/// The CA pin mismatch inside `err` (see [`is_ca_pin_mismatch`]): what was expected and what the
/// server's chain offered, so a caller can name both clusters' CAs.
pub fn ca_pin_mismatch(err: &(dyn std::error::Error + 'static)) -> Option<CaPinMismatch> {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(found) = e.downcast_ref::<CaPinMismatch>() {
            return Some(found.clone());
        }
        if let Some(TlsError::CaPinMismatch(found)) = e.downcast_ref() {
            return Some(found.clone());
        }
        if let Some(rustls::Error::InvalidCertificate(CertificateError::Other(other))) =
            e.downcast_ref::<rustls::Error>()
            && let Some(found) = other.0.downcast_ref::<CaPinMismatch>()
        {
            return Some(found.clone());
        }
        next = match e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    None
}

/// A client config that accepts any server certificate (the handshake's own signatures are
/// still checked). For one purpose only: asking a server to *prove* it knows a join secret
/// ([`crate::token::secret_proof`]), when the asker has no CA pin yet. The proof, not the
/// channel, authenticates that answer; nothing secret is sent over such a connection, and the
/// pin it yields is then used for a properly pinned connection.
pub fn unverified_client_config() -> Result<Arc<ClientConfig>> {
    let provider = ring_provider();
    let mut config = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServer { provider }))
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    Ok(Arc::new(config))
}

#[derive(Debug)]
struct AnyServer {
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Verifies a server chain against the CA whose pin it was given (see [`pinned_client_config`]).
#[derive(Debug)]
struct PinnedCaVerifier {
    pin: String,
    provider: Arc<CryptoProvider>,
    captured: PinnedCa,
}

impl ServerCertVerifier for PinnedCaVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let ca = find_pinned_ca(intermediates, &self.pin).map_err(|e| {
            rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(e))))
        })?;
        let roots = single_root(ca.clone())
            .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadEncoding))?;
        let leaf = ParsedCertificate::try_from(end_entity)?;
        // The chain may carry a cross-certificate (during a CA rotation): a leaf from the other
        // CA then still chains to the pinned one.
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &leaf,
            &roots,
            intermediates,
            now,
            self.provider.signature_verification_algorithms.all,
        )?;
        self.captured.store(ca);
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The first certificate in `chain` whose pin is `pin` and that is a CA certificate with a valid
/// self-signature; else [`CaPinMismatch`] listing the pins the chain did offer.
fn find_pinned_ca(
    chain: &[CertificateDer<'_>],
    pin: &str,
) -> Result<CertificateDer<'static>, CaPinMismatch> {
    let mut offered = Vec::with_capacity(chain.len());
    for der in chain {
        let Ok(cert) = parse_cert(der) else {
            continue;
        };
        let cert_pin = sha256_hex(cert.tbs_certificate.subject_pki.raw);
        if cert_pin == pin && cert.is_ca() && cert.verify_signature(None).is_ok() {
            return Ok(der.clone().into_owned());
        }
        offered.push(cert_pin);
    }
    Err(CaPinMismatch {
        expected: pin.to_owned(),
        offered,
    })
}

fn ring_provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn single_root(ca_der: CertificateDer<'static>) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    roots.add(ca_der)?;
    Ok(roots)
}

fn parse_error(what: &'static str, detail: impl std::fmt::Display) -> TlsError {
    TlsError::Parse {
        what,
        detail: detail.to_string(),
    }
}

fn parse_cert(der: &[u8]) -> Result<X509Certificate<'_>> {
    x509_parser::parse_x509_certificate(der)
        .map(|(_, cert)| cert)
        .map_err(|e| parse_error("certificate", e))
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

/// All CERTIFICATE blocks in `pem`; at least one.
fn certs(pem: &str) -> Result<Vec<CertificateDer<'static>>> {
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

fn first_cert(pem: &str) -> Result<CertificateDer<'static>> {
    CertificateDer::from_pem_slice(pem.as_bytes()).map_err(|e| parse_error("certificate PEM", e))
}

fn private_key(pem: &str) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|e| parse_error("private key PEM", e))
}

fn der_to_pem(der: &[u8]) -> String {
    pem::encode_config(
        &pem::Pem::new("CERTIFICATE", der.to_vec()),
        pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
    )
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

fn common_name(cn: &str) -> DistinguishedName {
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

/// The SAN for an advertise host: an IP SAN if it parses as an IP address (brackets around an
/// IPv6 address are allowed), else a DNS SAN, which must be a syntactically valid DNS name.
fn host_san(host: &str) -> Result<SanType> {
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

fn is_reserved_name(name: &str) -> bool {
    name == IDENTITY_SUFFIX || name.ends_with(&format!(".{IDENTITY_SUFFIX}"))
}

fn is_dns_label(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn check_cluster_id(cluster_id: &str) -> Result<()> {
    if is_dns_label(cluster_id) {
        Ok(())
    } else {
        Err(TlsError::InvalidClusterId(cluster_id.to_owned()))
    }
}

fn check_pin(pin: &str) -> Result<String> {
    let pin = pin.trim().to_ascii_lowercase();
    if pin.len() == 64 && pin.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(pin)
    } else {
        Err(TlsError::InvalidPin(pin))
    }
}

/// Parses `node-<hex>.<cluster>.muster` (the exact form [`node_dns_name`] writes).
fn parse_identity_name(name: &str) -> Option<PeerIdentity> {
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
