//! The commands that create and revoke join and operator tokens. Separate because tokens
//! carry the replicated wall clock forward (their times are judged on it), unlike the other
//! records.

use super::records::{JoinTokenRecord, OperatorTokenRecord};
use super::{ClusterState, DEAD_TOKEN_RETENTION_MS, Response};
use crate::api::ErrorKind;

impl ClusterState {
    /// A new join token; dead ones past their retention are dropped as it is written.
    pub(super) fn create_join_token(&mut self, id: &str, token: &JoinTokenRecord) -> Response {
        if self.join_tokens.contains_key(id) {
            return exists(id);
        }
        let now = self.observe_wall_clock(token.created_ms);
        self.join_tokens
            .retain(|_, t| t.dead_since().saturating_add(DEAD_TOKEN_RETENTION_MS) > now);
        self.join_tokens.insert(id.to_string(), token.clone());
        Response::default()
    }

    pub(super) fn revoke_join_token(&mut self, id: &str, now_ms: u64) -> Response {
        self.revoke_token("join", id, now_ms, |state, id| {
            state.join_tokens.get_mut(id).map(|t| &mut t.revoked_ms)
        })
    }

    pub(super) fn create_operator_token(
        &mut self,
        id: &str,
        token: &OperatorTokenRecord,
    ) -> Response {
        if self.operator_tokens.contains_key(id) {
            return exists(id);
        }
        self.observe_wall_clock(token.created_ms);
        self.operator_tokens.insert(id.to_string(), token.clone());
        Response::default()
    }

    pub(super) fn revoke_operator_token(&mut self, id: &str, now_ms: u64) -> Response {
        self.revoke_token("operator", id, now_ms, |state, id| {
            state.operator_tokens.get_mut(id).map(|t| &mut t.revoked_ms)
        })
    }

    /// Revokes the `kind` token `id`, whose `revoked_ms` `slot` finds, on the cluster's clock;
    /// the clock moves only when the revocation is not refused.
    fn revoke_token(
        &mut self,
        kind: &str,
        id: &str,
        now_ms: u64,
        slot: for<'a> fn(&'a mut ClusterState, &str) -> Option<&'a mut Option<u64>>,
    ) -> Response {
        let now = self.wall_clock_at(now_ms);
        let answer = revoke(slot(self, id), now, kind, id);
        if answer.refused.is_none() {
            self.observe_wall_clock(now);
        }
        answer
    }
}

fn exists(id: &str) -> Response {
    Response::refused(ErrorKind::InvalidArgument, format!("token {id} exists"))
}

/// Marks a token revoked at `now` (kept if it already was); `slot` is its `revoked_ms`, if
/// the token exists.
fn revoke(slot: Option<&mut Option<u64>>, now: u64, kind: &str, id: &str) -> Response {
    match slot {
        Some(revoked_ms) => {
            revoked_ms.get_or_insert(now);
            Response::default()
        }
        None => Response::refused(ErrorKind::NotFound, format!("no {kind} token with id {id}")),
    }
}
