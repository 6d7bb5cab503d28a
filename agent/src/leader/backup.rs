//! `muster backup` on the leader: the committed state as of a linearizable read.

use crate::api::ApiError;
use crate::backup_file::BackupSnapshot;
use crate::leading::{Leader, Replica};

pub async fn snapshot(leader: Leader<'_, impl Replica>) -> Result<BackupSnapshot, ApiError> {
    // Read before the state: the state then holds at least this index (a later read could
    // name entries the copy does not hold).
    let applied_index = leader.replica.view().last_applied.unwrap_or(0);
    let state = leader.replica.read(|s| s.clone()).await?;
    tracing::info!(applied_index, "backup taken");
    Ok(BackupSnapshot {
        cluster_id: leader.settings().cluster_id.clone(),
        applied_index,
        state,
    })
}
