//! What can go wrong in key, certificate and TLS-config handling: [`TlsError`], the
//! [`CaPinMismatch`] a pinned handshake fails with, and the walk down an error's causes that
//! finds a rustls error inside the `std::io::Error`s tokio-rustls wraps it in.

use std::time::Duration;

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

pub(super) fn parse_error(what: &'static str, detail: impl std::fmt::Display) -> TlsError {
    TlsError::Parse {
        what,
        detail: detail.to_string(),
    }
}

/// `err` and what caused it, looking inside `std::io::Error`s: an io::Error's `source()`
/// skips the error it wraps (tokio-rustls puts rustls's error there), so the walk goes to the
/// wrapped error itself.
pub(super) fn causes<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(err), |e| {
        match e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        }
    })
}
