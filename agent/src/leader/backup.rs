//! `muster backup` on the leader: the committed state as of a linearizable read.

use crate::agent::Agent;
use crate::api::ApiError;
use crate::backup_file::BackupSnapshot;

pub async fn snapshot(agent: &Agent) -> Result<BackupSnapshot, ApiError> {
    // Read before the state: the state then holds at least this index (a later read could
    // name entries the copy does not hold).
    let applied_index = agent.raft().view().last_applied.unwrap_or(0);
    let state = agent.raft().read_linearizable(|s| s.clone()).await?;
    tracing::info!(applied_index, "backup taken");
    Ok(BackupSnapshot {
        cluster_id: agent.cluster_id().to_string(),
        applied_index,
        state,
    })
}
