//! The backup file of `muster backup` and `muster restore`: the committed cluster state in a
//! checksummed file, and the state a restored one-node cluster starts from.
//!
//! File layout: one header line of JSON, then exactly `payload_bytes` bytes of payload (the
//! replicated [`ClusterState`] as JSON). The header carries the payload's SHA-256, so a file that
//! was truncated, altered or belongs to something else is refused before anything is written.
//! The payload holds the cluster CA's private key: a backup is as secret as a member's data dir.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::state::{ClusterState, OperatorTokenRecord};

const FORMAT: &str = "muster-backup";
const VERSION: u32 = 1;
/// Refuse absurd files before reading them whole (the state itself is far smaller).
pub const MAX_BACKUP_BYTES: u64 = 1 << 30;

/// What the leader hands out for a backup: the state as of a linearizable read.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BackupSnapshot {
    pub cluster_id: String,
    /// The raft log index the state includes (at least).
    pub applied_index: u64,
    pub state: ClusterState,
}

/// The first line of a backup file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BackupHeader {
    pub format: String,
    pub version: u32,
    pub cluster_id: String,
    pub created_ms: u64,
    pub applied_index: u64,
    pub members: usize,
    pub keys: usize,
    pub payload_bytes: u64,
    pub payload_sha256: String,
}

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("not a muster backup file (it does not start with a muster-backup header)")]
    Foreign,
    #[error(
        "backup format version {0} is newer than this muster reads ({VERSION}); use a newer muster"
    )]
    Version(u32),
    #[error("the backup is corrupt: {0}")]
    Corrupt(String),
    #[error("cannot encode the backup: {0}")]
    Encode(#[from] serde_json::Error),
}

/// Encodes `snapshot` as the bytes of a backup file.
pub fn encode(snapshot: &BackupSnapshot, created_ms: u64) -> Result<Vec<u8>, BackupError> {
    let payload = serde_json::to_vec(&snapshot.state)?;
    let header = BackupHeader {
        format: FORMAT.into(),
        version: VERSION,
        cluster_id: snapshot.cluster_id.clone(),
        created_ms,
        applied_index: snapshot.applied_index,
        members: snapshot.state.nodes.len(),
        keys: snapshot.state.kv.len(),
        payload_bytes: payload.len() as u64,
        payload_sha256: muster_shared::token::sha256_hex(&payload),
    };
    let mut out = serde_json::to_vec(&header)?;
    out.push(b'\n');
    out.extend_from_slice(&payload);
    Ok(out)
}

/// Decodes and verifies a backup file's bytes.
pub fn decode(bytes: &[u8]) -> Result<(BackupHeader, ClusterState), BackupError> {
    let newline = bytes
        .iter()
        .position(|b| *b == b'\n')
        .ok_or(BackupError::Foreign)?;
    let header: BackupHeader =
        serde_json::from_slice(&bytes[..newline]).map_err(|_| BackupError::Foreign)?;
    if header.format != FORMAT {
        return Err(BackupError::Foreign);
    }
    if header.version > VERSION {
        return Err(BackupError::Version(header.version));
    }
    let payload = &bytes[newline + 1..];
    if payload.len() as u64 != header.payload_bytes {
        return Err(BackupError::Corrupt(format!(
            "the payload is {} bytes, the header says {} (truncated or appended to)",
            payload.len(),
            header.payload_bytes
        )));
    }
    let sum = muster_shared::token::sha256_hex(payload);
    if sum != header.payload_sha256 {
        return Err(BackupError::Corrupt(format!(
            "checksum mismatch (header {}, content {sum})",
            header.payload_sha256
        )));
    }
    let state: ClusterState = serde_json::from_slice(payload)
        .map_err(|e| BackupError::Corrupt(format!("the payload does not parse: {e}")))?;
    if state.ca.is_none() || state.cluster_id.as_deref() != Some(header.cluster_id.as_str()) {
        return Err(BackupError::Corrupt(
            "the payload holds no cluster CA or another cluster id than the header".into(),
        ));
    }
    Ok((header, state))
}

/// The state a restored cluster starts from:
/// * a **new cluster id**, so the restored cluster and any survivor of the old one never accept
///   each other's nodes (their certificates name the old id);
/// * the **same CA**, so the backup's key material stays the cluster's;
/// * **no members**: the old ones are tombstoned and the restoring node records itself;
/// * **join tokens revoked** (a token used after the backup was taken would otherwise work again);
/// * **operator tokens kept**, plus `new_operator_token` (printed once by `muster restore`);
/// * the key-value space as it was.
pub fn restored_state(
    mut state: ClusterState,
    new_cluster_id: &str,
    now_ms: u64,
    new_operator_token: (String, OperatorTokenRecord),
) -> ClusterState {
    state.cluster_id = Some(new_cluster_id.to_string());
    let old_members: BTreeSet<_> = state.nodes.keys().copied().collect();
    state.removed.extend(old_members);
    state.nodes.clear();
    // A backup taken mid-formation must not make the new cluster admit the old URL's cohort.
    state.formation = None;
    // Nor one taken mid-rotation leave the new cluster half-way between two CAs: it starts on
    // the backup's CA (rotate again if needed).
    state.ca_next = None;
    for token in state.join_tokens.values_mut() {
        token.revoked_ms.get_or_insert(now_ms);
    }
    state
        .operator_tokens
        .insert(new_operator_token.0, new_operator_token.1);
    state
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{CaMaterial, JoinTokenRecord, NodeRecord};

    fn snapshot() -> BackupSnapshot {
        let mut state = ClusterState {
            cluster_id: Some("c1".into()),
            ca: Some(CaMaterial {
                cert_pem: "cert".into(),
                key_pem: "key".into(),
            }),
            ..Default::default()
        };
        state.kv.put("k", "v", None).expect("put");
        state.nodes.insert(
            7,
            NodeRecord {
                name: "n1".into(),
                addr: "10.0.0.1:7000".into(),
                key_fingerprint: "f".into(),
                joined_ms: 1,
                joined_with: None,
                zone: None,
                version: None,
            },
        );
        state.join_tokens.insert(
            "t".into(),
            JoinTokenRecord {
                secret_sha256: "h".into(),
                description: String::new(),
                created_ms: 1,
                expires_ms: u64::MAX,
                uses_total: 1,
                uses_left: 1,
                consumed_ms: None,
                revoked_ms: None,
                last_used_by: None,
                ca_pin: None,
                verify_key: None,
            },
        );
        BackupSnapshot {
            cluster_id: "c1".into(),
            applied_index: 42,
            state,
        }
    }

    #[test]
    fn a_backup_round_trips_and_any_flipped_byte_is_refused() {
        let snap = snapshot();
        let bytes = encode(&snap, 5).expect("encode");
        let (header, state) = decode(&bytes).expect("decode");
        assert_eq!(header.applied_index, 42);
        assert_eq!(state, snap.state);
        let payload_start = bytes.iter().position(|b| *b == b'\n').expect("nl") + 1;
        for i in [payload_start, bytes.len() / 2, bytes.len() - 1] {
            let mut bad = bytes.clone();
            bad[i] ^= 0x01;
            assert!(
                matches!(decode(&bad), Err(BackupError::Corrupt(_))),
                "byte {i}"
            );
        }
        assert!(matches!(
            decode(&bytes[..bytes.len() - 3]),
            Err(BackupError::Corrupt(_))
        ));
        assert!(matches!(
            decode(b"{\"hello\":1}\nworld"),
            Err(BackupError::Foreign)
        ));
        assert!(matches!(decode(b"random"), Err(BackupError::Foreign)));
    }

    #[test]
    fn a_restored_state_has_a_new_id_no_members_and_no_live_join_tokens() {
        let snap = snapshot();
        let op = OperatorTokenRecord {
            secret_sha256: "x".into(),
            description: String::new(),
            created_ms: 9,
            revoked_ms: None,
            scopes: crate::state::scope::admin_only(),
            ca_pin: None,
        };
        let state = restored_state(snap.state.clone(), "c2", 9, ("op".into(), op));
        assert_eq!(state.cluster_id.as_deref(), Some("c2"));
        assert!(state.nodes.is_empty());
        assert!(
            state.removed.contains(&7),
            "old members can never come back"
        );
        assert_eq!(state.join_tokens["t"].state(10), "revoked");
        assert!(state.operator_tokens.contains_key("op"));
        assert_eq!(state.kv, snap.state.kv);
        assert_eq!(state.ca, snap.state.ca);
    }
}
