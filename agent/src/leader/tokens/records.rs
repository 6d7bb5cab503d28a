//! The leader's side of tokens: it checks a new token against the cluster's limits, stamps it
//! with its own clock, writes the record through raft, and lists and revokes records. Separate
//! from issuing (`tokens.rs`), which runs on whichever node the operator talks to and alone
//! sees the secret.

use super::{MAX_LIVE_TOKENS, MAX_SCOPES, NewToken};
use crate::api::types::{JoinTokenInfo, OperatorTokenInfo};
use crate::api::{ApiError, ErrorKind};
use crate::leading::{Leader, Replica};
use crate::state::scope::Scope;
use crate::state::{JoinTokenRecord, OperatorTokenRecord, Request};

/// Leader: records a join token.
pub async fn create_join(
    leader: Leader<'_, impl Replica>,
    create: NewToken,
) -> Result<JoinTokenInfo, ApiError> {
    create.check(true)?;
    let now = leader.cluster_now()?;
    let live = leader.replica.read_local(|s| {
        s.join_tokens
            .values()
            .filter(|t| t.state(now) == "active")
            .count()
    })?;
    if live >= MAX_LIVE_TOKENS {
        return Err(ApiError::new(
            ErrorKind::InvalidArgument,
            format!(
                "{live} join tokens are active; revoke unused ones (muster token list) before creating more"
            ),
        ));
    }
    let ca_pin = Some(create.recorded_pin(leader)?);
    let token = JoinTokenRecord {
        secret_sha256: create.secret_sha256,
        description: create.description,
        created_ms: now,
        expires_ms: now.saturating_add(create.ttl_ms),
        uses_total: create.uses,
        uses_left: create.uses,
        consumed_ms: None,
        revoked_ms: None,
        last_used_by: None,
        ca_pin,
        verify_key: None,
    };
    let info = join_info(&create.id, &token, now);
    leader
        .replica
        .write(Request::CreateJoinToken {
            id: create.id,
            token,
        })
        .await?;
    tracing::info!(token = %info.id, uses = info.uses_total, "join token created");
    Ok(info)
}

/// Leader: every join token the cluster still remembers, newest first.
pub async fn list_join(leader: Leader<'_, impl Replica>) -> Result<Vec<JoinTokenInfo>, ApiError> {
    let now = leader.cluster_now()?;
    let mut list = leader
        .replica
        .read(|s| {
            s.join_tokens
                .iter()
                .map(|(id, t)| join_info(id, t, now))
                .collect::<Vec<_>>()
        })
        .await?;
    list.sort_by(|a, b| b.created_ms.cmp(&a.created_ms).then(a.id.cmp(&b.id)));
    Ok(list)
}

/// Leader: revokes a join token. Nodes it already admitted stay members.
pub async fn revoke_join(
    leader: Leader<'_, impl Replica>,
    id: &str,
) -> Result<JoinTokenInfo, ApiError> {
    leader
        .replica
        .write(Request::RevokeJoinToken {
            id: id.to_string(),
            now_ms: leader.cluster_now()?,
        })
        .await?;
    tracing::info!(token = %id, "join token revoked");
    let now = leader.cluster_now()?;
    leader
        .replica
        .read_local(|s| s.join_tokens.get(id).map(|t| join_info(id, t, now)))?
        .ok_or_else(|| ApiError::new(ErrorKind::NotFound, format!("no join token {id}")))
}

/// Leader: records an operator token.
pub async fn create_operator(
    leader: Leader<'_, impl Replica>,
    create: NewToken,
) -> Result<OperatorTokenInfo, ApiError> {
    create.check(false)?;
    let live = leader.replica.read_local(|s| {
        s.operator_tokens
            .values()
            .filter(|t| t.revoked_ms.is_none())
            .count()
    })?;
    if live >= MAX_LIVE_TOKENS {
        return Err(ApiError::new(
            ErrorKind::InvalidArgument,
            format!("{live} operator tokens are active; revoke unused ones first"),
        ));
    }
    if create.scopes.is_empty() || create.scopes.len() > MAX_SCOPES {
        return Err(ApiError::invalid(format!(
            "an operator token has 1 to {MAX_SCOPES} scopes"
        )));
    }
    let ca_pin = Some(create.recorded_pin(leader)?);
    let token = OperatorTokenRecord {
        secret_sha256: create.secret_sha256,
        description: create.description,
        created_ms: leader.replica.wall_ms(),
        revoked_ms: None,
        scopes: create.scopes,
        ca_pin,
    };
    let info = operator_info(&create.id, &token);
    leader
        .replica
        .write(Request::CreateOperatorToken {
            id: create.id,
            token,
        })
        .await?;
    tracing::info!(token = %info.id, "operator token created");
    Ok(info)
}

pub async fn list_operator(
    leader: Leader<'_, impl Replica>,
) -> Result<Vec<OperatorTokenInfo>, ApiError> {
    let mut list = leader
        .replica
        .read(|s| {
            s.operator_tokens
                .iter()
                .map(|(id, t)| operator_info(id, t))
                .collect::<Vec<_>>()
        })
        .await?;
    list.sort_by(|a, b| b.created_ms.cmp(&a.created_ms).then(a.id.cmp(&b.id)));
    Ok(list)
}

pub async fn revoke_operator(
    leader: Leader<'_, impl Replica>,
    id: &str,
) -> Result<OperatorTokenInfo, ApiError> {
    leader
        .replica
        .write(Request::RevokeOperatorToken {
            id: id.to_string(),
            now_ms: leader.cluster_now()?,
        })
        .await?;
    tracing::info!(token = %id, "operator token revoked");
    leader
        .replica
        .read_local(|s| s.operator_tokens.get(id).map(|t| operator_info(id, t)))?
        .ok_or_else(|| ApiError::new(ErrorKind::NotFound, format!("no operator token {id}")))
}

pub(super) fn join_info(id: &str, t: &JoinTokenRecord, now: u64) -> JoinTokenInfo {
    JoinTokenInfo {
        id: id.to_string(),
        description: t.description.clone(),
        state: t.state(now).to_string(),
        created_ms: t.created_ms,
        expires_ms: t.expires_ms,
        uses_total: t.uses_total,
        uses_left: t.uses_left,
        consumed_ms: t.consumed_ms,
        revoked_ms: t.revoked_ms,
        last_used_by: t.last_used_by.clone(),
    }
}

pub(super) fn operator_info(id: &str, t: &OperatorTokenRecord) -> OperatorTokenInfo {
    OperatorTokenInfo {
        id: id.to_string(),
        description: t.description.clone(),
        state: if t.revoked_ms.is_some() {
            "revoked"
        } else {
            "active"
        }
        .to_string(),
        created_ms: t.created_ms,
        revoked_ms: t.revoked_ms,
        scopes: t.scopes.iter().map(Scope::to_string).collect(),
    }
}
