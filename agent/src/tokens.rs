//! Join tokens and operator tokens.
//!
//! A token's text is `<prefix>.<ca-pin>.<id>.<secret>` (see [`muster_shared::token`]). The node
//! the operator talks to generates it, keeps the secret to itself and sends the leader only the
//! id and the SHA-256 of the secret; the leader stamps the times with its own clock and writes
//! the record through raft. The text is returned to the operator once and stored nowhere.

use std::time::Duration;

use muster_shared::token::{SecretToken, TokenKind, secret_hashes_match};
use serde::{Deserialize, Serialize};

use crate::api::types::{JoinTokenInfo, OperatorTokenInfo, TokenCreated, kind};
use crate::raft::types::{JoinTokenRecord, OperatorTokenRecord, Request};
use crate::service::{Agent, ForwardedOp, OpError, now_ms};

/// Shortest and longest join-token lifetime.
pub const MIN_TTL: Duration = Duration::from_secs(1);
pub const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 3600);
/// Most nodes one join token may admit.
pub const MAX_USES: u32 = 10_000;
const MAX_DESCRIPTION: usize = 200;
/// Most live (unexpired, unrevoked) tokens of each kind: a bound on replicated state.
const MAX_LIVE_TOKENS: usize = 1_000;

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
}

impl NewToken {
    fn check(&self, join: bool) -> Result<(), OpError> {
        let invalid = |m: String| OpError::of_kind(kind::INVALID_ARGUMENT, m);
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
    }
}

impl Agent {
    /// Operator API: a new join token. The secret is made here and leaves this node only in the
    /// answer; the leader records its hash.
    pub async fn issue_join_token(
        &self,
        ttl: Duration,
        uses: u32,
        description: String,
    ) -> Result<TokenCreated, OpError> {
        let token = SecretToken::generate(TokenKind::Join, &self.ca_pin);
        let create = NewToken {
            id: token.id().to_string(),
            secret_sha256: token.secret_hash(),
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
            uses,
            description,
        };
        create.check(true)?;
        let info: JoinTokenInfo = decode(
            self.on_leader(ForwardedOp::CreateJoinToken { create })
                .await?,
        )?;
        Ok(TokenCreated {
            token: token.reveal(),
            id: info.id,
            expires_ms: Some(info.expires_ms),
            uses: Some(info.uses_total),
            description: info.description,
        })
    }

    /// Operator API: a new operator token (see [`Agent::issue_join_token`]).
    pub async fn issue_operator_token(&self, description: String) -> Result<TokenCreated, OpError> {
        let token = SecretToken::generate(TokenKind::Operator, &self.ca_pin);
        let create = NewToken {
            id: token.id().to_string(),
            secret_sha256: token.secret_hash(),
            ttl_ms: 0,
            uses: 0,
            description,
        };
        create.check(false)?;
        let info: OperatorTokenInfo = decode(
            self.on_leader(ForwardedOp::CreateOperatorToken { create })
                .await?,
        )?;
        Ok(TokenCreated {
            token: token.reveal(),
            id: info.id,
            expires_ms: None,
            uses: None,
            description: info.description,
        })
    }

    /// Leader: records a join token.
    pub async fn create_join_token(&self, create: NewToken) -> Result<JoinTokenInfo, OpError> {
        create.check(true)?;
        let now = now_ms();
        let live = self.raft.read_local(|s| {
            s.join_tokens
                .values()
                .filter(|t| t.state(now) == "active")
                .count()
        })?;
        if live >= MAX_LIVE_TOKENS {
            return Err(OpError::of_kind(
                kind::INVALID_ARGUMENT,
                format!(
                    "{live} join tokens are active; revoke unused ones (muster token list) before creating more"
                ),
            ));
        }
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
        };
        let info = join_info(&create.id, &token, now);
        self.raft
            .write(Request::CreateJoinToken {
                id: create.id,
                token,
            })
            .await?;
        tracing::info!(token = %info.id, uses = info.uses_total, "join token created");
        Ok(info)
    }

    /// Leader: every join token the cluster still remembers, newest first.
    pub async fn list_join_tokens(&self) -> Result<Vec<JoinTokenInfo>, OpError> {
        let now = now_ms();
        let mut list = self
            .raft
            .read_linearizable(|s| {
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
    pub async fn revoke_join_token(&self, id: &str) -> Result<JoinTokenInfo, OpError> {
        self.raft
            .write(Request::RevokeJoinToken {
                id: id.to_string(),
                now_ms: now_ms(),
            })
            .await?;
        tracing::info!(token = %id, "join token revoked");
        let now = now_ms();
        self.raft
            .read_local(|s| s.join_tokens.get(id).map(|t| join_info(id, t, now)))?
            .ok_or_else(|| OpError::of_kind(kind::NOT_FOUND, format!("no join token {id}")))
    }

    /// Leader: records an operator token.
    pub async fn create_operator_token(
        &self,
        create: NewToken,
    ) -> Result<OperatorTokenInfo, OpError> {
        create.check(false)?;
        let live = self.raft.read_local(|s| {
            s.operator_tokens
                .values()
                .filter(|t| t.revoked_ms.is_none())
                .count()
        })?;
        if live >= MAX_LIVE_TOKENS {
            return Err(OpError::of_kind(
                kind::INVALID_ARGUMENT,
                format!("{live} operator tokens are active; revoke unused ones first"),
            ));
        }
        let token = OperatorTokenRecord {
            secret_sha256: create.secret_sha256,
            description: create.description,
            created_ms: now_ms(),
            revoked_ms: None,
        };
        let info = operator_info(&create.id, &token);
        self.raft
            .write(Request::CreateOperatorToken {
                id: create.id,
                token,
            })
            .await?;
        tracing::info!(token = %info.id, "operator token created");
        Ok(info)
    }

    pub async fn list_operator_tokens(&self) -> Result<Vec<OperatorTokenInfo>, OpError> {
        let mut list = self
            .raft
            .read_linearizable(|s| {
                s.operator_tokens
                    .iter()
                    .map(|(id, t)| operator_info(id, t))
                    .collect::<Vec<_>>()
            })
            .await?;
        list.sort_by(|a, b| b.created_ms.cmp(&a.created_ms).then(a.id.cmp(&b.id)));
        Ok(list)
    }

    pub async fn revoke_operator_token(&self, id: &str) -> Result<OperatorTokenInfo, OpError> {
        self.raft
            .write(Request::RevokeOperatorToken {
                id: id.to_string(),
                now_ms: now_ms(),
            })
            .await?;
        tracing::info!(token = %id, "operator token revoked");
        self.raft
            .read_local(|s| s.operator_tokens.get(id).map(|t| operator_info(id, t)))?
            .ok_or_else(|| OpError::of_kind(kind::NOT_FOUND, format!("no operator token {id}")))
    }

    /// Checks the `Authorization: Bearer …` of an operator call over TCP against this node's
    /// applied state. A token revoked a moment ago may still pass on a follower that has not
    /// applied the revocation yet (normally milliseconds behind the leader).
    pub fn authorize_operator(&self, bearer: Option<&str>) -> Result<(), OpError> {
        // 401: the caller has not authenticated (as opposed to a refused join token, 403).
        let unauthorized = |m: &str| OpError::new(kind::UNAUTHORIZED, 401, m.to_string());
        let Some(text) = bearer else {
            return Err(unauthorized(
                "operator calls over TCP need `Authorization: Bearer <operator token>` (the CLI reads MUSTER_TOKEN)",
            ));
        };
        let token = SecretToken::parse(TokenKind::Operator, text)
            .map_err(|e| unauthorized(&e.to_string()))?;
        if token.ca_pin() != self.ca_pin {
            return Err(unauthorized(
                "the operator token belongs to another cluster",
            ));
        }
        let presented = token.secret_hash();
        let valid = self.raft.read_local(|s| {
            s.operator_tokens.get(token.id()).is_some_and(|t| {
                secret_hashes_match(&t.secret_sha256, &presented) && t.revoked_ms.is_none()
            })
        })?;
        if !valid {
            return Err(unauthorized(
                "the operator token is unknown or revoked; create one with `muster operator-token create` on a member",
            ));
        }
        Ok(())
    }
}

/// Reads a typed answer back from the JSON an operation returned (possibly from the leader).
pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    value: serde_json::Value,
) -> Result<T, OpError> {
    serde_json::from_value(value).map_err(|e| OpError::internal(format!("unexpected answer: {e}")))
}
