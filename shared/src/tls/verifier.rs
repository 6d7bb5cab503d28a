//! The one implementation of rustls's verifier traits. Each of our verifiers decides only
//! whether to accept a peer's chain ([`ServerCheck`], [`ClientCheck`]); [`Verifier`] adds what
//! they all share: handshake signatures checked with the ring provider's algorithms (the same
//! ones rustls's WebPKI verifiers built with that provider use) and, on a listener, a client
//! certificate asked for but never demanded.

use std::fmt::Debug;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

use super::ring_provider;

/// Whether a server's chain is accepted (the rest of [`ServerCertVerifier`] is [`Verifier`]'s).
pub(super) trait ServerCheck: Debug + Send + Sync {
    fn check_server(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error>;
}

/// Whether a client's chain is accepted (the rest of [`ClientCertVerifier`] is [`Verifier`]'s).
pub(super) trait ClientCheck: Debug + Send + Sync {
    fn check_client(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error>;
}

/// A check made into a rustls verifier.
#[derive(Debug)]
pub(super) struct Verifier<C> {
    check: C,
    algorithms: WebPkiSupportedAlgorithms,
}

impl<C> Verifier<C> {
    pub(super) fn new(check: C) -> Arc<Self> {
        Arc::new(Self {
            check,
            algorithms: ring_provider().signature_verification_algorithms,
        })
    }
}

/// The three handshake-signature methods, which both rustls verifier traits declare alike.
macro_rules! handshake_signatures {
    () => {
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.algorithms.supported_schemes()
        }
    };
}

impl<C: ServerCheck> ServerCertVerifier for Verifier<C> {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.check
            .check_server(end_entity, intermediates, server_name, ocsp_response, now)
    }

    handshake_signatures!();
}

impl<C: ClientCheck> ClientCertVerifier for Verifier<C> {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        // Joiners have no certificate yet; routes that need one check for it.
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        // Hints are optional, and the trust can change under a borrowed slice: send none
        // (members present their one certificate whatever the hints say).
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.check.check_client(end_entity, intermediates, now)
    }

    handshake_signatures!();
}
