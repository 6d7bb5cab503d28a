//! Checking an operator token presented on a call: its form and cluster, then its record
//! (here, in the applied state, or on the leader, in the committed state). Separate from
//! issuing and recording because it runs on every operator call, on any member, and decides
//! who the caller is.

use muster_shared::token::{SecretToken, TokenKind, secret_hashes_match};

use crate::api::{ApiError, ErrorKind};
use crate::leader::Authority;
use crate::leading::{Leader, Replica};
use crate::state::scope::Scope;

/// True unless `authority` is an operator token that `state` (this node's applied state) no
/// longer holds valid: for a held call (a watch) that goes on answering from this node's state
/// after the leader checked it once. Events this node applied after a revocation come after it
/// in the log, so the revocation is applied here too.
pub fn still_valid(state: &crate::state::ClusterState, authority: &Authority) -> bool {
    let Authority::OperatorToken { id, secret_sha256 } = authority else {
        return true;
    };
    state.operator_tokens.get(id).is_some_and(|t| {
        secret_hashes_match(&t.secret_sha256, secret_sha256) && t.revoked_ms.is_none()
    })
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
/// follower may not have applied its revocation yet). `then_ordered`: the operation that follows
/// is ordered by raft itself (a write, a linearizable read), so the leader's own state, once it
/// holds every earlier term's entries, is enough and the check costs no round of heartbeats.
pub async fn check_operator_token_committed(
    leader: Leader<'_, impl Replica>,
    id: &str,
    secret_sha256: &str,
    then_ordered: bool,
) -> Result<Vec<Scope>, ApiError> {
    let find = |s: &crate::state::ClusterState| {
        s.operator_tokens
            .get(id)
            .filter(|t| {
                secret_hashes_match(&t.secret_sha256, secret_sha256) && t.revoked_ms.is_none()
            })
            .map(|t| (t.scopes.clone(), t.ca_pin.clone()))
    };
    let scopes = if then_ordered {
        leader.replica.read_leader_state(find).await?
    } else {
        leader.replica.read(find).await?
    };
    scopes
        .filter(|(_, pin)| pinned_to_trusted_ca(leader, pin.as_deref()))
        .map(|(scopes, _)| scopes)
        .ok_or_else(|| ApiError::new(ErrorKind::Unauthenticated, UNKNOWN_OPERATOR_TOKEN))
}
