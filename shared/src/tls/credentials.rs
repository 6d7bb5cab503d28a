//! A node's TLS credentials that can be replaced while it serves: the CAs it trusts, its
//! certificate chain and its key. The listener's and the client's rustls configs are built
//! once and ask [`NodeCredentials`] for the current certificate and trust at every handshake,
//! so a renewed certificate is used for the next connection without a restart (connections
//! already open keep the certificate they were made with).
//!
//! The trust is a bundle: usually the cluster CA alone, during a CA change both the old and
//! the new one, so that a member with a certificate from either is accepted.

use std::sync::{Arc, RwLock};

use rustls::client::danger::{ServerCertVerified, ServerCertVerifier};
use rustls::client::{ResolvesClientCert, WebPkiServerVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, SignatureScheme};

use super::verifier::{ClientCheck, ServerCheck, Verifier};
use super::{Result, certs, private_key, ring_provider};

/// The replaceable credentials; cheap to clone (one shared slot).
#[derive(Clone)]
pub struct NodeCredentials(Arc<RwLock<Arc<Material>>>);

/// One consistent set: what a handshake reads at once.
struct Material {
    certified: Arc<CertifiedKey>,
    clients: Arc<dyn ClientCertVerifier>,
    servers: Arc<dyn ServerCertVerifier>,
    /// The trusted CA certificates, in the order given.
    trust: Vec<CertificateDer<'static>>,
}

impl std::fmt::Debug for NodeCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeCredentials")
            .field("trusted_cas", &self.current().trust.len())
            .finish_non_exhaustive()
    }
}

impl NodeCredentials {
    /// Credentials from PEM: `trust_pem` holds one or more CA certificates, `cert_pem` the
    /// node's certificate (the chain presented is it plus every trusted CA, so a joiner that
    /// pins either CA finds it), `key_pem` its private key.
    pub fn new(trust_pem: &str, cert_pem: &str, key_pem: &str) -> Result<Self> {
        Ok(Self(Arc::new(RwLock::new(Arc::new(Material::build(
            trust_pem, cert_pem, key_pem,
        )?)))))
    }

    /// Replaces everything at once. Checked before anything is swapped: on an error the old
    /// credentials stay in force.
    pub fn replace(&self, trust_pem: &str, cert_pem: &str, key_pem: &str) -> Result<()> {
        let material = Arc::new(Material::build(trust_pem, cert_pem, key_pem)?);
        match self.0.write() {
            Ok(mut slot) => *slot = material,
            Err(poisoned) => *poisoned.into_inner() = material,
        }
        Ok(())
    }

    /// How many CAs are trusted now (2 during a CA change).
    pub fn trusted_cas(&self) -> usize {
        self.current().trust.len()
    }

    fn current(&self) -> Arc<Material> {
        match self.0.read() {
            Ok(slot) => slot.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The listener's certificate source.
    pub(super) fn server_cert(&self) -> Arc<dyn ResolvesServerCert> {
        Arc::new(CurrentCert(self.clone()))
    }

    /// The client's certificate source.
    pub(super) fn client_cert(&self) -> Arc<dyn ResolvesClientCert> {
        Arc::new(CurrentCert(self.clone()))
    }

    /// The verifier of client certificates against the current trust.
    pub(super) fn client_verifier(&self) -> Arc<dyn ClientCertVerifier> {
        Verifier::new(CurrentTrust(self.clone()))
    }

    /// The verifier of server certificates against the current trust.
    pub(super) fn server_verifier(&self) -> Arc<dyn ServerCertVerifier> {
        Verifier::new(CurrentTrust(self.clone()))
    }
}

impl Material {
    fn build(trust_pem: &str, cert_pem: &str, key_pem: &str) -> Result<Self> {
        let provider = ring_provider();
        let trust = certs(trust_pem)?;
        let mut roots = RootCertStore::empty();
        for ca in &trust {
            roots.add(ca.clone())?;
        }
        let roots = Arc::new(roots);
        let mut chain = certs(cert_pem)?;
        for ca in &trust {
            if !chain.contains(ca) {
                chain.push(ca.clone());
            }
        }
        let certified = CertifiedKey::from_der(chain, private_key(key_pem)?, &provider)?;
        let clients = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .allow_unauthenticated()
            .build()?;
        let servers = WebPkiServerVerifier::builder_with_provider(roots, provider).build()?;
        Ok(Self {
            certified: Arc::new(certified),
            clients,
            servers,
            trust,
        })
    }
}

#[derive(Debug)]
struct CurrentCert(NodeCredentials);

impl ResolvesServerCert for CurrentCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.current().certified.clone())
    }
}

impl ResolvesClientCert for CurrentCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.0.current().certified.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// Checks a peer's chain against the trust in force at that handshake.
#[derive(Debug)]
struct CurrentTrust(NodeCredentials);

impl ClientCheck for CurrentTrust {
    fn check_client(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> std::result::Result<ClientCertVerified, rustls::Error> {
        self.0
            .current()
            .clients
            .verify_client_cert(end_entity, intermediates, now)
    }
}

impl ServerCheck for CurrentTrust {
    fn check_server(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        self.0.current().servers.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )
    }
}
