//! The key-value space: linearizable reads on the leader, writes (plain or compare-and-set)
//! through raft, and the change history that `kv watch` reads.

use crate::api::types::KvEntry;
use crate::api::{ApiError, ErrorKind};
use crate::leading::{Leader, Replica};
use crate::state::Request;
use crate::state::kv::WatchAnswer;

/// A space read from a state that predates revisions gets them first, through the log (see
/// `state/kv.rs`); a space that has them costs a local read.
async fn ensure_revisions(leader: Leader<'_, impl Replica>) -> Result<(), ApiError> {
    if leader.replica.read_local(|s| s.kv.legacy)? {
        leader.replica.write(Request::KvUpgrade).await?;
        tracing::info!("gave the key-value space its revisions (it predates them)");
    }
    Ok(())
}

pub async fn write(
    leader: Leader<'_, impl Replica>,
    request: Request,
) -> Result<serde_json::Value, ApiError> {
    ensure_revisions(leader).await?;
    let response = leader.replica.write(request).await?;
    Ok(serde_json::json!({ "previous": response.previous, "revision": response.revision }))
}

pub async fn get(leader: Leader<'_, impl Replica>, key: String) -> Result<KvEntry, ApiError> {
    ensure_revisions(leader).await?;
    let found = leader
        .replica
        .read(|s| s.kv.get(&key).map(|v| entry(&key, v)))
        .await?;
    found.ok_or_else(|| ApiError::new(ErrorKind::NotFound, format!("key {key:?} not found")))
}

pub async fn list(
    leader: Leader<'_, impl Replica>,
    prefix: String,
) -> Result<Vec<KvEntry>, ApiError> {
    ensure_revisions(leader).await?;
    leader
        .replica
        .read(|s| {
            s.kv.range(&prefix)
                .map(|(k, v)| entry(k, v))
                .collect::<Vec<_>>()
        })
        .await
}

/// The changes under `prefix` from revision `from` on, as committed (0: from now on).
pub async fn watch(
    leader: Leader<'_, impl Replica>,
    prefix: String,
    from: u64,
) -> Result<WatchAnswer, ApiError> {
    ensure_revisions(leader).await?;
    Ok(leader.replica.read(|s| s.kv.watch(&prefix, from)).await??)
}

fn entry(key: &str, v: &crate::state::kv::KvValue) -> KvEntry {
    KvEntry {
        key: key.to_string(),
        value: v.value.clone(),
        create_revision: v.create_revision,
        mod_revision: v.mod_revision,
    }
}
