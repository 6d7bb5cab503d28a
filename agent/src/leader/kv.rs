//! The key-value space: linearizable reads on the leader, and writes through raft.

use crate::agent::Agent;
use crate::api::types::KvEntry;
use crate::api::{ApiError, ErrorKind};
use crate::state::Request;

pub async fn write(agent: &Agent, request: Request) -> Result<serde_json::Value, ApiError> {
    let response = agent.raft().write(request).await?;
    Ok(serde_json::json!({ "previous": response.previous }))
}

pub async fn get(agent: &Agent, key: String) -> Result<KvEntry, ApiError> {
    let value = agent
        .raft()
        .read_linearizable(|s| s.kv.get(&key).cloned())
        .await?;
    match value {
        Some(value) => Ok(KvEntry { key, value }),
        None => Err(ApiError::new(
            ErrorKind::NotFound,
            format!("key {key:?} not found"),
        )),
    }
}

pub async fn list(agent: &Agent, prefix: String) -> Result<Vec<KvEntry>, ApiError> {
    Ok(agent
        .raft()
        .read_linearizable(|s| {
            s.kv.range(prefix.clone()..)
                .take_while(|(k, _)| k.starts_with(&prefix))
                .map(|(k, v)| KvEntry {
                    key: k.clone(),
                    value: v.clone(),
                })
                .collect::<Vec<_>>()
        })
        .await?)
}
