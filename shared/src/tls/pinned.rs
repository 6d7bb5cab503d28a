//! Connecting with nothing but a CA pin (from a join token or the discovery record): the client
//! config that accepts only a server whose chain holds the pinned CA, the slot where it keeps
//! the CA it matched, and how a caller recognises a pin mismatch in a failed request.

use std::sync::{Arc, Mutex};

use rustls::client::danger::ServerCertVerified;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, ClientConfig, OtherError, RootCertStore};

use super::verifier::{ServerCheck, Verifier};
use super::{
    CaPinMismatch, Result, TlsError, anonymous_client_config, causes, der_to_pem, parse_cert,
    ring_provider,
};
use crate::token::sha256_hex;

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
    let captured = PinnedCa::default();
    let verifier = Verifier::new(PinnedCaCheck {
        pin,
        algorithms: ring_provider().signature_verification_algorithms,
        captured: captured.clone(),
    });
    Ok((anonymous_client_config(verifier)?, captured))
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
    causes(err).find_map(|e| {
        if let Some(found) = e.downcast_ref::<CaPinMismatch>() {
            return Some(found.clone());
        }
        if let Some(TlsError::CaPinMismatch(found)) = e.downcast_ref() {
            return Some(found.clone());
        }
        if let Some(rustls::Error::InvalidCertificate(CertificateError::Other(other))) =
            e.downcast_ref::<rustls::Error>()
        {
            return other.0.downcast_ref::<CaPinMismatch>().cloned();
        }
        None
    })
}

/// Verifies a server chain against the CA whose pin it was given (see [`pinned_client_config`]).
#[derive(Debug)]
struct PinnedCaCheck {
    pin: String,
    algorithms: WebPkiSupportedAlgorithms,
    captured: PinnedCa,
}

impl ServerCheck for PinnedCaCheck {
    fn check_server(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
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
            self.algorithms.all,
        )?;
        self.captured.store(ca);
        Ok(ServerCertVerified::assertion())
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

fn single_root(ca_der: CertificateDer<'static>) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    roots.add(ca_der)?;
    Ok(roots)
}

fn check_pin(pin: &str) -> Result<String> {
    let pin = pin.trim().to_ascii_lowercase();
    if pin.len() == 64 && pin.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(pin)
    } else {
        Err(TlsError::InvalidPin(pin))
    }
}
