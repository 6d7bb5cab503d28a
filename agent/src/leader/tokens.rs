//! Join tokens and operator tokens.
//!
//! A token's text is `<prefix>.<ca-pin>.<id>.<secret>` (see [`muster_shared::token`]). The node
//! the operator talks to generates it, keeps the secret to itself and sends the leader only the
//! id and the SHA-256 of the secret; the leader stamps the times with its own clock and writes
//! the record through raft. The text is returned to the operator once and stored nowhere.

use std::time::Duration;

use muster_shared::token::{SecretToken, TokenKind, secret_hashes_match};
use serde::{Deserialize, Serialize};

use super::{Authority, LeaderOp, decode, run};
use crate::agent::Agent;
use crate::api::types::{JoinTokenInfo, OperatorTokenInfo, TokenCreated};
use crate::api::{ApiError, ErrorKind};
use crate::clock::now_ms;
use crate::leading::{Leader, Replica};
use crate::state::scope::Scope;
use crate::state::{JoinTokenRecord, OperatorTokenRecord, Request};

use crate::api::types::JOIN_TOKEN_MIN_TTL as MIN_TTL;
use crate::api::types::{JOIN_TOKEN_MAX_TTL as MAX_TTL, JOIN_TOKEN_MAX_USES as MAX_USES};
const MAX_DESCRIPTION: usize = 200;
/// Most live (unexpired, unrevoked) tokens of each kind: a bound on replicated state.
const MAX_LIVE_TOKENS: usize = 1_000;
/// Most scopes on one operator token.
const MAX_SCOPES: usize = 32;

/// A token to record, as the leader receives it: the secret already replaced by its hash.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewToken {
    pub id: String,
    pub secret_sha256: String,
    /// Join tokens: lifetime in milliseconds (ignored for operator tokens).
    #[serde(default)]
    pub ttl_ms: u64,
    /// Join tokens: how many nodes it admits (ignored for operator tokens).
    #[serde(default)]
    pub uses: u32,
    #[serde(default)]
    pub description: String,
    /// Operator tokens: what it may do (a sender that predates scopes makes `admin` tokens).
    #[serde(default = "crate::state::scope::admin_only")]
    pub scopes: Vec<Scope>,
    /// The CA pin written in the token's text (empty from a sender that predates pinned
    /// records: the leader then records the CA that signs now).
    #[serde(default)]
    pub ca_pin: String,
}

impl NewToken {
    fn check(&self, join: bool) -> Result<(), ApiError> {
        let invalid = |m: String| ApiError::new(ErrorKind::InvalidArgument, m);
        let hex = |s: &str, len: usize| {
            s.len() == len
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        if !hex(&self.id, 16) || !hex(&self.secret_sha256, 64) {
            return Err(invalid("malformed token id or hash".into()));
        }
        if self.description.chars().count() > MAX_DESCRIPTION
            || self.description.chars().any(char::is_control)
        {
            return Err(invalid(format!(
                "--description: at most {MAX_DESCRIPTION} printable characters"
            )));
        }
        if join {
            let ttl = Duration::from_millis(self.ttl_ms);
            if !(MIN_TTL..=MAX_TTL).contains(&ttl) {
                return Err(invalid(format!(
                    "--ttl must be between {} and {}",
                    muster_shared::duration::format_duration(MIN_TTL),
                    muster_shared::duration::format_duration(MAX_TTL)
                )));
            }
            if !(1..=MAX_USES).contains(&self.uses) {
                return Err(invalid(format!("--uses must be between 1 and {MAX_USES}")));
            }
        }
        Ok(())
    }
}

impl NewToken {
    /// The pin the record keeps: the one in the token's text, which must be a CA the cluster
    /// trusts now (a token pinned to a retired CA would be dead on arrival).
    fn recorded_pin(&self, leader: Leader<'_, impl Replica>) -> Result<String, ApiError> {
        if self.ca_pin.is_empty() {
            return Ok(leader.ca_pin());
        }
        if !leader.trusts_ca_pin(&self.ca_pin) {
            return Err(ApiError::new(
                ErrorKind::CaPinMismatch,
                "the token names a CA this cluster no longer trusts; create it again on a member",
            ));
        }
        Ok(self.ca_pin.clone())
    }
}

fn join_info(id: &str, t: &JoinTokenRecord, now: u64) -> JoinTokenInfo {
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

fn operator_info(id: &str, t: &OperatorTokenRecord) -> OperatorTokenInfo {
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

/// Operator API: a new join token. The secret is made here and leaves this node only in the
/// answer; the leader records its hash.
pub async fn issue_join_token(
    agent: &Agent,
    authority: &Authority,
    ttl: Duration,
    uses: u32,
    description: String,
) -> Result<TokenCreated, ApiError> {
    let token = SecretToken::generate(TokenKind::Join, &agent.leader().ca_pin());
    let create = NewToken {
        id: token.id().to_string(),
        secret_sha256: token.secret_hash(),
        ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        uses,
        description,
        scopes: Vec::new(),
        ca_pin: token.ca_pin().to_string(),
    };
    create.check(true)?;
    let info: JoinTokenInfo =
        decode(run(agent, authority, LeaderOp::CreateJoinToken { create }).await?)?;
    Ok(TokenCreated {
        token: token.reveal(),
        id: info.id,
        expires_ms: Some(info.expires_ms),
        uses: Some(info.uses_total),
        description: info.description,
    })
}

/// Operator API: a new operator token (see [`issue_join_token`]).
pub async fn issue_operator_token(
    agent: &Agent,
    authority: &Authority,
    description: String,
    scopes: Vec<Scope>,
) -> Result<TokenCreated, ApiError> {
    if scopes.is_empty() || scopes.len() > MAX_SCOPES {
        return Err(ApiError::invalid(format!(
            "an operator token has 1 to {MAX_SCOPES} scopes (admin, kv:PREFIX[:ro], lease:NAME, fleetlock)"
        )));
    }
    let token = SecretToken::generate(TokenKind::Operator, &agent.leader().ca_pin());
    let create = NewToken {
        id: token.id().to_string(),
        secret_sha256: token.secret_hash(),
        ttl_ms: 0,
        uses: 0,
        description,
        scopes,
        ca_pin: token.ca_pin().to_string(),
    };
    create.check(false)?;
    let info: OperatorTokenInfo =
        decode(run(agent, authority, LeaderOp::CreateOperatorToken { create }).await?)?;
    Ok(TokenCreated {
        token: token.reveal(),
        id: info.id,
        expires_ms: None,
        uses: None,
        description: info.description,
    })
}

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

/// Checks the `Authorization: Bearer …` of an operator call over TCP against this node's
/// applied state. A token revoked a moment ago may still pass on a follower that has not
/// applied the revocation yet (normally milliseconds behind the leader).
pub fn authorize_operator(
    leader: Leader<'_, impl Replica>,
    bearer: Option<&str>,
) -> Result<Authority, ApiError> {
    // 401: the caller has not authenticated (as opposed to a refused join token, 403).
    let unauthorized = |m: &str| ApiError::new(ErrorKind::Unauthenticated, m.to_string());
    let Some(text) = bearer else {
        return Err(unauthorized(
            "operator calls over TCP need `Authorization: Bearer <operator token>` (the CLI reads MUSTER_OPERATOR_TOKEN)",
        ));
    };
    let Authority::OperatorToken {
        id,
        secret_sha256: presented,
    } = operator_authority(leader, text)?
    else {
        return Err(unauthorized(UNKNOWN_OPERATOR_TOKEN));
    };
    let record_pin = leader.replica.read_local(|s| {
        s.operator_tokens
            .get(&id)
            .filter(|t| secret_hashes_match(&t.secret_sha256, &presented) && t.revoked_ms.is_none())
            .map(|t| t.ca_pin.clone())
    })?;
    let valid = record_pin.is_some_and(|pin| pinned_to_trusted_ca(leader, pin.as_deref()));
    if !valid {
        return Err(unauthorized(UNKNOWN_OPERATOR_TOKEN));
    }
    Ok(Authority::OperatorToken {
        id,
        secret_sha256: presented,
    })
}

/// The authority an operator token's text claims, checked for form and cluster only: whether
/// the token is valid is for the caller to find out (locally, or from the leader).
pub fn operator_authority(
    leader: Leader<'_, impl Replica>,
    text: &str,
) -> Result<Authority, ApiError> {
    let unauthorized = |m: &str| ApiError::new(ErrorKind::Unauthenticated, m.to_string());
    let token =
        SecretToken::parse(TokenKind::Operator, text).map_err(|e| unauthorized(&e.to_string()))?;
    if !leader.trusts_ca_pin(token.ca_pin()) {
        return Err(unauthorized(
            "the operator token belongs to another cluster",
        ));
    }
    Ok(Authority::OperatorToken {
        id: token.id().to_string(),
        secret_sha256: token.secret_hash(),
    })
}

/// True if a token record is pinned to a CA the cluster trusts now. Pinless records predate
/// pinned records; every finished rotation revokes them, so they are valid only while the CA
/// they were made under is still the cluster's.
pub fn pinned_to_trusted_ca(leader: Leader<'_, impl Replica>, record_pin: Option<&str>) -> bool {
    record_pin.is_none_or(|pin| leader.trusts_ca_pin(pin))
}

const UNKNOWN_OPERATOR_TOKEN: &str = "the operator token is unknown or revoked; create one with `muster operator-token create` on a member";

/// Leader: an operator token a follower vouched for is still valid in the committed state (the
/// follower may not have applied its revocation yet).
pub async fn check_operator_token_committed(
    leader: Leader<'_, impl Replica>,
    id: &str,
    secret_sha256: &str,
) -> Result<Vec<Scope>, ApiError> {
    let scopes = leader
        .replica
        .read(|s| {
            s.operator_tokens
                .get(id)
                .filter(|t| {
                    secret_hashes_match(&t.secret_sha256, secret_sha256) && t.revoked_ms.is_none()
                })
                .map(|t| (t.scopes.clone(), t.ca_pin.clone()))
        })
        .await?;
    scopes
        .filter(|(_, pin)| pinned_to_trusted_ca(leader, pin.as_deref()))
        .map(|(scopes, _)| scopes)
        .ok_or_else(|| ApiError::new(ErrorKind::Unauthenticated, UNKNOWN_OPERATOR_TOKEN))
}

/// A fresh operator token and the record the cluster keeps of it (the secret's hash).
pub fn new_operator_token(ca_pin: &str, description: &str) -> (SecretToken, OperatorTokenRecord) {
    let token = SecretToken::generate(TokenKind::Operator, ca_pin);
    let record = OperatorTokenRecord {
        secret_sha256: token.secret_hash(),
        description: description.to_string(),
        created_ms: now_ms(),
        revoked_ms: None,
        scopes: crate::state::scope::admin_only(),
        ca_pin: Some(ca_pin.to_string()),
    };
    (token, record)
}
