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
//!
//! One file per job: [`error`] what fails, [`encoding`] PEM and DER, [`identity`] node names and
//! ids, [`key`] a node's key and CSRs, [`ca`] the CA, [`inspect`] facts read from certificates,
//! [`credentials`] replaceable node credentials, [`revocation`] refusing removed members,
//! [`configs`] the rustls configs, [`pinned`] connecting by CA pin, and [`verifier`] the one
//! implementation of rustls's verifier traits they all use.

use std::time::Duration;

mod ca;
pub mod client_auth;
mod configs;
mod credentials;
mod encoding;
mod error;
mod identity;
mod inspect;
mod key;
mod pinned;
mod revocation;
mod verifier;

pub use ca::ClusterCa;
pub use configs::{
    client_config, client_config_for, plain_server_config, plain_server_config_with_clients,
    server_config, server_config_for, unverified_client_config,
};
pub use credentials::NodeCredentials;
pub use encoding::first_cert_der;
pub use error::{CaPinMismatch, Result, TlsError};
pub use identity::{PeerIdentity, advertise_san, member_id_of_key, node_dns_name, peer_identity};
pub use inspect::{
    bundle_pins, cert_expires_ms, cert_hosts, cert_lifetime_ms, issued_by, newest_ca_pin,
    renewal_due_ms, spki_pin, spki_pin_der,
};
pub use key::{NodeKey, csr_key_fingerprint};
pub use pinned::{
    PinnedCa, ca_from_chain, ca_pin_mismatch, is_ca_pin_mismatch, pinned_client_config,
    pinned_client_config_capturing,
};
pub use revocation::{RevokedIds, is_certificate_revoked};

// What the files share among themselves, not part of the API.
use ca::common_name;
use configs::{anonymous_client_config, ring_provider};
use encoding::{certs, der_to_pem, first_cert, parse_cert, private_key};
use error::{causes, parse_error};
use identity::{check_cluster_id, host_san, is_reserved_name, parse_identity_name};
use revocation::revoking_verifier;

/// DNS suffix of the per-node identity names. Advertise hosts may not use it.
pub const IDENTITY_SUFFIX: &str = "muster";

/// How far back `not_before` is set on every certificate, to absorb clock skew between nodes.
pub const CLOCK_SKEW: Duration = Duration::from_secs(5 * 60);

/// Lifetime of a cluster CA certificate.
pub const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 60 * 60);
