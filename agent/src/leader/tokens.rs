//! Join tokens and operator tokens.
//!
//! A token's text is `<prefix>.<ca-pin>.<id>.<secret>` (see [`muster_shared::token`]). The node
//! the operator talks to generates it, keeps the secret to itself and sends the leader only the
//! id and the SHA-256 of the secret; the leader stamps the times with its own clock and writes
//! the record through raft. The text is returned to the operator once and stored nowhere.
//!
//! This file issues tokens (on the node the operator talks to); the leader's records are
//! `tokens/records.rs`, and checking a presented operator token is `tokens/operator_check.rs`.

use std::time::Duration;

use muster_shared::token::{SecretToken, TokenKind};
use serde::{Deserialize, Serialize};

mod operator_check;
mod records;

pub use operator_check::{
    authorize_operator, check_operator_token_committed, operator_authority, still_valid,
};
pub use records::{
    create_join, create_operator, list_join, list_operator, revoke_join, revoke_operator,
};

use super::Authority;
use crate::agent::Here;
use crate::api::types::TokenCreated;
use crate::api::{ApiError, ErrorKind};
use crate::clock::now_ms;
use crate::leading::{Leader, Replica};
use crate::state::OperatorTokenRecord;
use crate::state::scope::Scope;

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

/// Operator API: a new join token. The secret is made here and leaves this node only in the
/// answer; the leader records its hash.
pub async fn issue_join_token(
    here: Here<'_>,
    authority: &Authority,
    ttl: Duration,
    uses: u32,
    description: String,
) -> Result<TokenCreated, ApiError> {
    let token = SecretToken::generate(TokenKind::Join, &here.leader().ca_pin());
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
    let info = super::ask(here, authority, super::ask::create_join_token(create)).await?;
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
    here: Here<'_>,
    authority: &Authority,
    description: String,
    scopes: Vec<Scope>,
) -> Result<TokenCreated, ApiError> {
    if scopes.is_empty() || scopes.len() > MAX_SCOPES {
        return Err(ApiError::invalid(format!(
            "an operator token has 1 to {MAX_SCOPES} scopes (admin, kv:PREFIX[:ro], lease:NAME, fleetlock)"
        )));
    }
    let token = SecretToken::generate(TokenKind::Operator, &here.leader().ca_pin());
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
    let info = super::ask(here, authority, super::ask::create_operator_token(create)).await?;
    Ok(TokenCreated {
        token: token.reveal(),
        id: info.id,
        expires_ms: None,
        uses: None,
        description: info.description,
    })
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
