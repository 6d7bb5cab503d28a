//! Backup files (`muster restore --from FILE`): `backup_file::decode` of any bytes, then
//! `backup_file::restored_state` of what decoded, as `start::restore` runs them before it writes
//! anything.
//!
//! Input: a mode byte (`% 2`: 0 = a whole file, 1 = a payload the target puts behind a matching
//! header, so that mutations reach the state parser), then the bytes.
//! Invariants: decoding never panics; a file that decodes has a payload of exactly the length
//! and SHA-256 its header states, a CA, and the header's cluster id; re-encoding what decoded
//! gives a file that decodes to the same state; the restored state has the new cluster id, no
//! members, every old member tombstoned, no live join token, and keeps the CA and key-values.
use crate::explain;

use muster_agent::fuzzing::{
    BackupError, BackupHeader, BackupSnapshot, OperatorTokenRecord, decode_backup, encode_backup,
    restored_state,
};
use muster_shared::token::sha256_hex;

/// Input mode 1: a payload behind a header that matches it, so that mutations get past the
/// checksum into the state parser and the checks after it.
fn with_header(payload: &[u8]) -> Vec<u8> {
    let header = BackupHeader {
        format: "muster-backup".into(),
        version: 1,
        cluster_id: "c1".into(),
        created_ms: 5,
        applied_index: 1,
        members: 0,
        keys: 0,
        payload_bytes: payload.len() as u64,
        payload_sha256: sha256_hex(payload),
    };
    let mut file = serde_json::to_vec(&header).expect("header");
    file.push(b'\n');
    file.extend_from_slice(payload);
    file
}

/// One input, as the fuzz target `backup_file` and the corpus replay run it.
pub fn run(input: &[u8]) {
    // First byte: 0 = the input is a whole file, 1 = it is a payload (cluster id "c1").
    let Some((&mode, rest)) = input.split_first() else {
        return;
    };
    let built;
    let data = if mode % 2 == 1 {
        built = with_header(rest);
        &built[..]
    } else {
        rest
    };
    let (header, state) = match decode_backup(data) {
        Ok(decoded) => decoded,
        Err(e) => {
            assert!(
                !matches!(e, BackupError::Encode(_)),
                "decode failed to encode: {e}"
            );
            explain::why("backup", &e);
            return;
        }
    };
    let newline = data
        .iter()
        .position(|b| *b == b'\n')
        .expect("a header line");
    let payload = &data[newline + 1..];
    assert_eq!(payload.len() as u64, header.payload_bytes);
    assert_eq!(
        sha256_hex(payload),
        header.payload_sha256,
        "checksum not verified"
    );
    assert!(state.ca.is_some());
    assert_eq!(
        state.cluster_id.as_deref(),
        Some(header.cluster_id.as_str())
    );

    let snapshot = BackupSnapshot {
        cluster_id: header.cluster_id.clone(),
        applied_index: header.applied_index,
        state: state.clone(),
    };
    let bytes = encode_backup(&snapshot, header.created_ms).expect("a decoded state encodes");
    let (again_header, again) = decode_backup(&bytes).expect("a re-encoded backup decodes");
    assert_eq!(again, state, "backup round trip changed the state");
    assert_eq!(again_header.cluster_id, header.cluster_id);
    assert_eq!(again_header.members, state.nodes.len());
    assert_eq!(again_header.keys, state.kv.len());

    let now = header.created_ms.saturating_add(1);
    let token = OperatorTokenRecord {
        secret_sha256: "0".repeat(64),
        description: String::new(),
        created_ms: now,
        revoked_ms: None,
        scopes: Vec::new(),
        ca_pin: None,
    };
    let restored = restored_state(
        state.clone(),
        "fuzz-new-cluster",
        now,
        ("fuzzop".into(), token),
    );
    assert_eq!(restored.cluster_id.as_deref(), Some("fuzz-new-cluster"));
    assert!(restored.nodes.is_empty());
    assert!(state.nodes.keys().all(|id| restored.removed.contains(id)));
    assert!(
        restored
            .join_tokens
            .values()
            .all(|t| t.revoked_ms.is_some())
    );
    assert!(restored.operator_tokens.contains_key("fuzzop"));
    assert_eq!(restored.ca, state.ca);
    assert_eq!(restored.kv, state.kv);
}
