//! Raft RPC bodies on the peer listener (`POST /raft/append`, `/raft/vote`, `/raft/snapshot`):
//! deserialized with `serde_json::from_slice` into the agent's openraft types, exactly as
//! `RaftNode::handle_rpc` does, then every replicated command an AppendEntries carries is applied
//! to the state machine's `ClusterState` (what a follower does once the entries commit).
//!
//! Input: one selector byte (`% 3`: append, vote, snapshot), then the JSON body.
//! Invariants: nothing panics; what deserializes re-serializes to JSON that deserializes and
//! serializes to the same bytes (the wire format is a fixed point); applying a command is
//! deterministic and does what it says (a put is readable, a removed node is gone and
//! tombstoned, an admitted node is recorded, a refused command changes nothing).
use crate::explain;

use muster_agent::fuzzing::{
    AppendEntriesRequest, ClusterState, InstallSnapshotRequest, Request, VoteRequest,
};
use openraft::EntryPayload;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Decode as the server does; on success check the wire format is a fixed point.
fn decode<T: DeserializeOwned + Serialize>(body: &[u8]) -> Option<T> {
    let value: T = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            explain::why(std::any::type_name::<T>(), &e);
            return None;
        }
    };
    let once = serde_json::to_vec(&value).expect("a decoded RPC serializes");
    let back: T = serde_json::from_slice(&once).expect("a serialized RPC decodes");
    let twice = serde_json::to_vec(&back).expect("serializes");
    assert_eq!(
        String::from_utf8_lossy(&once),
        String::from_utf8_lossy(&twice),
        "JSON round trip is not a fixed point"
    );
    Some(value)
}

fn apply(state: &mut ClusterState, request: &Request) {
    let before = state.clone();
    let mut twin = state.clone();
    let response = state.apply(request);
    assert_eq!(twin.apply(request), response, "apply is not deterministic");
    assert_eq!(&twin, state, "apply is not deterministic");
    if let Some(refused) = &response.refused {
        explain::why("refused", &refused.message);
        assert_eq!(&before, state, "a refused command changed the state");
        return;
    }
    match request {
        Request::KvPut { key, value, .. } => {
            assert_eq!(state.kv.get(key).map(|v| &v.value), Some(value));
            assert_eq!(
                response.previous,
                before.kv.get(key).map(|v| v.value.clone())
            );
            if !before.kv.legacy {
                assert_eq!(response.revision, Some(before.kv.revision + 1));
            }
        }
        Request::KvDel { key, .. } => {
            assert!(state.kv.get(key).is_none());
            assert_eq!(
                response.previous,
                before.kv.get(key).map(|v| v.value.clone())
            );
        }
        Request::Lease(_) => {
            assert!(
                state.leases.clock_ms >= before.leases.clock_ms,
                "the lease clock went back"
            );
            assert!(
                state.leases.last_token >= before.leases.last_token,
                "a fencing token shrank"
            );
        }
        Request::RemoveNode { id, .. } => {
            assert!(!state.nodes.contains_key(id) && state.removed.contains(id));
        }
        Request::UpsertNode { id, node } => assert_eq!(state.nodes.get(id), Some(node)),
        Request::AdmitWithToken { id, .. } => {
            assert!(state.nodes.contains_key(id));
            if !before.nodes.contains_key(id) {
                assert!(!state.removed.contains(id), "a removed id was admitted");
            }
        }
        Request::InitCluster { cluster_id, .. } => {
            assert_eq!(state.cluster_id.as_ref(), Some(cluster_id));
        }
        _ => {}
    }
    // The state machine's state is what snapshots carry: it must survive its JSON.
    let json = serde_json::to_vec(&*state).expect("state serializes");
    let back: ClusterState = serde_json::from_slice(&json).expect("state decodes");
    assert_eq!(&back, state, "state JSON round trip");
    // ... and so must a `RestoreState` log entry carrying it.
    if !(KNOWN_RESTORE_STATE_KEYS && !state.nodes.is_empty()) {
        let entry = Request::RestoreState {
            state: Box::new(state.clone()),
        };
        let json = serde_json::to_vec(&entry).expect("entry serializes");
        let back: Result<Request, _> = serde_json::from_slice(&json);
        assert_eq!(
            back.ok().as_ref(),
            Some(&entry),
            "RestoreState JSON round trip"
        );
    }
}

/// Known finding (fuzz/README.md, "Findings"): `Request` is internally tagged (`#[serde(tag =
/// "op")]`), so serde buffers a `RestoreState`'s map keys as strings, and the integer keys of
/// `ClusterState::nodes` then fail to deserialize ("invalid type: string \"7\", expected u64"):
/// a `RestoreState` of a state with members cannot be read back from the log. Today
/// `backup_file::restored_state` empties `nodes` first. Set to `false` once fixed; the input
/// `corpus/raft_rpc/crash-restore-state-with-members` then checks the fix.
const KNOWN_RESTORE_STATE_KEYS: bool = false;

/// One input, as the fuzz target `raft_rpc` and the corpus replay run it.
pub fn run(data: &[u8]) {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    match selector % 3 {
        0 => {
            let Some(req) = decode::<AppendEntriesRequest>(body) else {
                return;
            };
            let mut state = ClusterState::default();
            for entry in &req.entries {
                if let EntryPayload::Normal(request) = &entry.payload {
                    apply(&mut state, request);
                }
            }
        }
        1 => {
            let _ = decode::<VoteRequest>(body);
        }
        _ => {
            let _ = decode::<InstallSnapshotRequest>(body);
        }
    }
}
