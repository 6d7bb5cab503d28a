//! Join request bodies on the peer listener, open to nodes without a certificate:
//! `POST /v1/join` (`JoinRequest`, a discovery registrant) and `POST /v1/join/token`
//! (`TokenJoinRequest`), deserialized with `serde_json::from_slice` as `serve::http::parse_json`
//! does, then put through every check the leader runs before it writes (`admission.rs`).
//!
//! Input: one selector byte (`% 2`: registrant join, token join), then the JSON body.
//! Invariants: nothing panics; a body that deserializes re-serializes to a fixed point; the
//! secret of a token join never shows in its `Debug`; a member id reads as non-zero; the
//! leader's early admission check and the replicated command agree; a certificate is issued
//! only for the declared key and names the joiner.
use crate::admission;
use crate::explain;

use muster_agent::fuzzing::{JoinRequest, TokenJoin, TokenJoinRequest};

fn fixed_point<T: serde::Serialize + serde::de::DeserializeOwned>(value: &T) {
    let once = serde_json::to_string(value).expect("serializes");
    let back: T = serde_json::from_str(&once).expect("decodes");
    assert_eq!(serde_json::to_string(&back).expect("serializes"), once);
}

/// One input, as the fuzz target `peer_join` and the corpus replay run it.
pub fn run(data: &[u8]) {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    if selector % 2 == 0 {
        let join = match serde_json::from_slice::<JoinRequest>(body) {
            Ok(j) => j,
            Err(e) => return explain::why("JoinRequest", &e),
        };
        fixed_point(&join);
        // admit_registrant: the URL comparison, then the id; the rest asks the discovery service.
        let _ = join.discovery_url.trim_end_matches('/');
        let _ = admission::check_member_id(&join.member_id);
        return;
    }
    let request = match serde_json::from_slice::<TokenJoinRequest>(body) {
        Ok(r) => r,
        Err(e) => return explain::why("TokenJoinRequest", &e),
    };
    fixed_point(&request);
    // Debug (logs, errors) must not depend on the secret at all.
    let without_secret = TokenJoinRequest {
        secret: String::new(),
        ..request.clone()
    };
    assert_eq!(
        format!("{request:?}"),
        format!("{without_secret:?}"),
        "Debug shows the secret"
    );
    // serve::peer::token_join hashes the secret on arrival and hands the leader a TokenJoin.
    let join = TokenJoin::from(request);
    fixed_point(&join);
    admission::token_join(
        &join.token_id,
        &join.secret_sha256,
        &join.node_id,
        &join.name,
        &join.addr,
        &join.key_fingerprint,
        &join.csr_pem,
    );
}
