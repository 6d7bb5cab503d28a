//! The rustls configs nodes listen and connect with: the node listener over replaceable
//! credentials (with revocation), the plain operator listener, node-to-node clients, and the
//! one client that checks no server certificate. Every one is built with the ring provider
//! explicitly and speaks only ALPN `http/1.1`.

use std::sync::Arc;

use rustls::client::danger::{ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ServerConfig};

use super::verifier::{ServerCheck, Verifier};
use super::{
    NodeCredentials, Result, RevokedIds, certs, client_auth, private_key, revoking_verifier,
};

/// The only ALPN protocol nodes speak.
const ALPN_HTTP1: &[u8] = b"http/1.1";

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
    let verifier = revoking_verifier(credentials.client_verifier(), revoked, cluster_id);
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
    plain_server_config_with_clients(cert_pem, key_pem, None)
}

/// [`plain_server_config`] that, with `client_ca_pem`, asks for a client certificate from that
/// CA (see [`client_auth`]).
pub fn plain_server_config_with_clients(
    cert_pem: &str,
    key_pem: &str,
    client_ca_pem: Option<&str>,
) -> Result<Arc<ServerConfig>> {
    let builder = ServerConfig::builder_with_provider(ring_provider())
        .with_safe_default_protocol_versions()?;
    let builder = match client_ca_pem {
        None => builder.with_no_client_auth(),
        Some(ca) => builder.with_client_cert_verifier(client_auth::verifier(ca)?),
    };
    let mut config = builder.with_single_cert(certs(cert_pem)?, private_key(key_pem)?)?;
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

/// A client config that accepts any server certificate (the handshake's own signatures are
/// still checked). For one purpose only: asking a server to *prove* it knows a join secret
/// ([`crate::token::secret_proof`]), when the asker has no CA pin yet. The proof, not the
/// channel, authenticates that answer; nothing secret is sent over such a connection, and the
/// pin it yields is then used for a properly pinned connection.
pub fn unverified_client_config() -> Result<Arc<ClientConfig>> {
    anonymous_client_config(Verifier::new(AnyServer))
}

/// A client config that presents no certificate and accepts servers as `verifier` says.
pub(super) fn anonymous_client_config(
    verifier: Arc<dyn ServerCertVerifier>,
) -> Result<Arc<ClientConfig>> {
    let mut config = ClientConfig::builder_with_provider(ring_provider())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    Ok(Arc::new(config))
}

/// Accepts every server chain; [`Verifier`] still checks the handshake signatures.
#[derive(Debug)]
struct AnyServer;

impl ServerCheck for AnyServer {
    fn check_server(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
}

pub(super) fn ring_provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}
