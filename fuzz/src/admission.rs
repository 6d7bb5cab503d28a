//! What the leader runs on a token join before it touches the replicated state
//! (`leader::admit_with_token`), shared by the `peer_join` and `leader_op` targets: the name and
//! address checks, the node id, the early admission check on the leader's state, the CSR
//! signature, and then the replicated command itself.

use std::sync::OnceLock;

use muster_agent::config::host_of;
use muster_agent::fuzzing::{
    Admission, CERT_VALIDITY, CaMaterial, ClusterState, JoinTokenRecord, NodeRecord, Request,
    member_id, parse_member_id, validate_host_port, validate_name,
};
use muster_shared::tls::{ClusterCa, peer_identity, spki_pin};
use muster_shared::token::hash_secret;

pub const CLUSTER_ID: &str = "00112233445566ff";
/// The leader's clock during a fuzzed join.
pub const NOW_MS: u64 = 1_700_000_000_000;
/// The secret of every join token in [`state`].
pub const SECRET: &str = "fuzz-secret";

/// The cluster's CA, made once per process (Ed25519: cheap to sign with).
pub fn ca() -> &'static ClusterCa {
    static CA: OnceLock<ClusterCa> = OnceLock::new();
    CA.get_or_init(|| ClusterCa::generate(CLUSTER_ID).expect("CA"))
}

fn token(uses_left: u32, expires_ms: u64, revoked_ms: Option<u64>) -> JoinTokenRecord {
    JoinTokenRecord {
        secret_sha256: hash_secret(SECRET),
        description: String::new(),
        created_ms: 1,
        expires_ms,
        uses_total: 2,
        uses_left,
        consumed_ms: None,
        revoked_ms,
        last_used_by: None,
        ca_pin: None,
        verify_key: None,
    }
}

/// A leader's state: one member (`a1`, "n1"), one removed id (`dead`), and join tokens that are
/// live (`…0001`), used up (`…0002`), expired (`…0003`) and revoked (`…0004`).
pub fn state() -> ClusterState {
    let mut s = ClusterState {
        cluster_id: Some(CLUSTER_ID.into()),
        ca: Some(CaMaterial {
            cert_pem: ca().cert_pem().to_string(),
            key_pem: String::new(),
        }),
        ..Default::default()
    };
    s.nodes.insert(
        0xa1,
        NodeRecord {
            name: "n1".into(),
            addr: "10.0.0.1:7000".into(),
            key_fingerprint: "f".repeat(64),
            joined_ms: 1,
            joined_with: None,
            zone: None,
            version: None,
        },
    );
    s.removed.insert(0xdead);
    s.join_tokens
        .insert("0000000000000001".into(), token(2, u64::MAX, None));
    s.join_tokens
        .insert("0000000000000002".into(), token(0, u64::MAX, None));
    s.join_tokens
        .insert("0000000000000003".into(), token(2, NOW_MS, None));
    s.join_tokens
        .insert("0000000000000004".into(), token(2, u64::MAX, Some(5)));
    s
}

/// A member id as the server reads it: never 0, and its canonical spelling reads back the same.
pub fn check_member_id(text: &str) -> Option<u64> {
    let id = parse_member_id(text)?;
    assert_ne!(id, 0);
    assert_eq!(parse_member_id(&member_id(id)), Some(id));
    Some(id)
}

/// `admit_with_token`'s checks in its order, then the replicated command. Invariants: the
/// leader's early check and the state machine agree; an admission takes exactly one use; a
/// certificate is only ever issued for the CSR's key when that key is the one the joiner
/// declared, and names the joiner's node id in this cluster.
#[allow(clippy::too_many_arguments)]
pub fn token_join(
    token_id: &str,
    secret_sha256: &str,
    node_id: &str,
    name: &str,
    addr: &str,
    key_fingerprint: &str,
    csr_pem: &str,
) {
    if let Err(e) = validate_name(name).and(validate_host_port("advertise", addr)) {
        return crate::explain::why("join", &e);
    }
    let Some(id) = check_member_id(node_id) else {
        return crate::explain::why("join", &"node id is not non-zero hex");
    };
    let mut state = state();
    let record = NodeRecord {
        name: name.to_string(),
        addr: addr.to_string(),
        key_fingerprint: key_fingerprint.to_string(),
        joined_ms: NOW_MS,
        joined_with: Some(token_id.to_string()),
        zone: None,
        version: None,
    };
    let early = state.check_admission(token_id, secret_sha256, NOW_MS, id, &record);
    if early.is_ok() {
        // The leader signs before it writes.
        match ca().sign_node(
            csr_pem,
            id,
            CLUSTER_ID,
            key_fingerprint,
            host_of(addr),
            CERT_VALIDITY,
        ) {
            Ok(cert_pem) => {
                let pin = spki_pin(&cert_pem).expect("an issued cert parses");
                assert_eq!(
                    pin,
                    key_fingerprint.trim().to_ascii_lowercase(),
                    "a cert was issued for another key than the declared one"
                );
                let first = cert_der(&cert_pem);
                let who = peer_identity(&first).expect("an issued cert names a node");
                assert_eq!((who.node_id, who.cluster_id.as_str()), (id, CLUSTER_ID));
            }
            Err(e) => crate::explain::why("sign_node", &e),
        }
    }
    let before = state.clone();
    let response = state.apply(&Request::AdmitWithToken {
        token_id: token_id.to_string(),
        secret_sha256: secret_sha256.to_string(),
        now_ms: NOW_MS,
        id,
        node: record.clone(),
    });
    if let Err(r) = &early {
        crate::explain::why("check_admission", &r.message);
    }
    match early {
        Ok(Admission::New) => {
            assert_eq!(
                response.refused, None,
                "checked, then refused by the state machine"
            );
            assert_eq!(state.nodes.get(&id), Some(&record));
            let (was, now) = (&before.join_tokens[token_id], &state.join_tokens[token_id]);
            assert_eq!(now.uses_left + 1, was.uses_left, "one use taken");
        }
        Ok(Admission::AlreadyMember) => {
            assert_eq!(response.refused, None);
            assert_eq!(state, before, "a retry by a member changes nothing");
        }
        Err(refusal) => {
            assert_eq!(
                response.refused.map(|r| r.kind),
                Some(refusal.kind),
                "the early check refused what the state machine accepts"
            );
            assert_eq!(state, before);
        }
    }
}

fn cert_der(pem: &str) -> Vec<u8> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(pem.as_bytes())
        .expect("PEM")
        .to_vec()
}
