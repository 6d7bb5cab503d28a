//! A forwarded leader operation (`POST /raft/client`, from a member): `LeaderOp` deserialized
//! with `serde_json::from_slice` as `serve::peer::forwarded` does, the forwarding filter
//! (`LeaderOp::may_be_forwarded`), and the checks the leader runs on what passes before it
//! writes: a raw write is applied to the state machine, a token join goes through the
//! admission checks (`admission.rs`).
//!
//! Invariants: nothing panics; what deserializes re-serializes to a fixed point; only key-value
//! puts and deletes pass the filter as raw writes; applying them does what they say; a token
//! join's early check and its replicated command agree.
use crate::admission;
use crate::explain;

use muster_agent::fuzzing::{LeaderOp, Request};

/// One input, as the fuzz target `leader_op` and the corpus replay run it.
pub fn run(data: &[u8]) {
    let op = match serde_json::from_slice::<LeaderOp>(data) {
        Ok(op) => op,
        Err(e) => return explain::why("LeaderOp", &e),
    };
    let once = serde_json::to_string(&op).expect("serializes");
    let back: LeaderOp = serde_json::from_str(&once).expect("decodes");
    assert_eq!(serde_json::to_string(&back).expect("serializes"), once);
    assert_eq!(back.may_be_forwarded(), op.may_be_forwarded());
    if !op.may_be_forwarded() {
        assert!(
            matches!(&op, LeaderOp::Write { request } if !matches!(request, Request::KvPut { .. } | Request::KvDel { .. })),
            "refused to forward {op:?}"
        );
        return;
    }
    match op {
        LeaderOp::Write { request } => {
            let mut state = admission::state();
            let before = state.clone();
            let response = state.apply(&request);
            if let Some(refused) = &response.refused {
                // Only a compare-and-set may be refused, and then nothing changes.
                assert_eq!(refused.kind.as_str(), "revision_mismatch", "{refused:?}");
                assert_eq!(state, before, "a refused write changed the state");
                return;
            }
            match &request {
                Request::KvPut { key, value, .. } => {
                    assert_eq!(state.kv.get(key).map(|v| &v.value), Some(value));
                    let mut expected = before.clone();
                    expected.kv.put(key, value, None).expect("a plain put");
                    assert_eq!(state, expected, "a put changed more than its key");
                }
                Request::KvDel { key, .. } => {
                    let mut expected = before.clone();
                    expected.kv.del(key, None).expect("a plain delete");
                    assert_eq!(state, expected, "a delete changed more than its key");
                }
                other => panic!("{other:?} passed the forwarding filter"),
            }
        }
        LeaderOp::TokenJoin { join } => admission::token_join(
            &join.token_id,
            &join.secret_sha256,
            &join.node_id,
            &join.name,
            &join.addr,
            &join.key_fingerprint,
            &join.csr_pem,
        ),
        _ => {}
    }
}
