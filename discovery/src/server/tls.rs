//! The HTTPS listener's certificate (`--tls-cert`, `--tls-key`).

use std::path::Path;
use std::sync::Arc;

use super::ServeError;

pub fn load(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, ServeError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<_, _>>())
        .map_err(|e| {
            ServeError::Tls(format!("reading certificates from {}: {e}", cert.display()))
        })?;
    if certs.is_empty() {
        return Err(ServeError::Tls(format!(
            "{} holds no PEM certificate",
            cert.display()
        )));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| ServeError::Tls(format!("reading private key from {}: {e}", key.display())))?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| ServeError::Tls(e.to_string()))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| {
        ServeError::Tls(format!(
            "certificate and key do not match or are unsupported: {e}"
        ))
    })?;
    // h2 first: grpc-go (etcd v3 discovery) refuses a TLS peer that does not negotiate it.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
