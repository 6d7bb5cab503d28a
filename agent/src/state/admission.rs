//! Who may become or stay a member: the checks behind [`Request::UpsertNode`] and
//! [`Request::AdmitWithToken`], which the leader also runs before it signs anything.

#[cfg(doc)]
use super::Request;
use super::{ClusterState, JoinTokenRecord, NodeId, NodeRecord, Refusal};
use crate::api::ErrorKind;

impl ClusterState {
    /// May node `id` be recorded as `node`? Its id must never have been removed, and its name
    /// must be free (the same node may update its own record).
    pub fn check_node(&self, id: NodeId, node: &NodeRecord) -> Result<(), Refusal> {
        if self.removed.contains(&id) {
            return Err(Refusal::new(
                ErrorKind::Unauthorized,
                format!(
                    "node id {id:x} was removed from this cluster and is never admitted again; \
                     wipe that machine's data dir and join it as a new node"
                ),
            ));
        }
        // A member's key is its identity: an update may change its address, never its key.
        if let Some(existing) = self.nodes.get(&id)
            && existing.key_fingerprint != node.key_fingerprint
        {
            return Err(Refusal::new(
                ErrorKind::Unauthorized,
                format!("node id {id:x} belongs to another member (its key differs)"),
            ));
        }
        if let Some((other, _)) = self
            .nodes
            .iter()
            .find(|(i, n)| **i != id && n.name == node.name)
        {
            return Err(Refusal::new(
                ErrorKind::NameTaken,
                format!(
                    "name {} is taken by member {other:x}; pick another --name, or remove that member first (muster node remove {})",
                    node.name, node.name
                ),
            ));
        }
        // Two members at one address: peers would dial one for the other (refused by identity,
        // so the member is unreachable, then replaced). etcd refuses a duplicate peer URL too.
        if let Some((_, other)) = self
            .nodes
            .iter()
            .find(|(i, n)| **i != id && n.addr == node.addr)
        {
            return Err(Refusal::new(
                ErrorKind::AddressTaken,
                format!(
                    "{} is the address of member {}; two members cannot share one. If this \
                     machine replaces {}, remove it first (muster node remove {}), or advertise \
                     another address",
                    node.addr, other.name, other.name, other.name
                ),
            ));
        }
        Ok(())
    }

    /// Decides a token admission without changing anything; [`Request::AdmitWithToken`] applies
    /// it, and the leader runs it first to refuse early (before it signs a certificate).
    pub fn check_admission(
        &self,
        token_id: &str,
        secret_sha256: &str,
        now_ms: u64,
        id: NodeId,
        node: &NodeRecord,
    ) -> Result<Admission, Refusal> {
        // The secret first: without it, nothing about the token (not even its state) is told.
        let token = self
            .join_tokens
            .get(token_id)
            .filter(|t| muster_shared::token::secret_hashes_match(&t.secret_sha256, secret_sha256))
            .ok_or_else(|| {
                Refusal::new(
                    ErrorKind::Unauthorized,
                    "the join token is not valid for this cluster; create one with `muster token create` on a member",
                )
            })?;
        if let Some(existing) = self.nodes.get(&id) {
            return readmission(token, token_id, now_ms, id, existing, node);
        }
        usable_for_a_new_member(token, token_id, now_ms)?;
        self.check_node(id, node)?;
        Ok(Admission::New)
    }
}

/// A retry by a node already admitted (its answer was lost), perhaps with a new token, or a
/// member renewing a certificate that expired while it was down: admit it again without taking
/// a use (a used-up token still counts). Its key proves it is the same node (the leader signs
/// only a CSR made with that key). A revoked or expired token does not.
fn readmission(
    token: &JoinTokenRecord,
    token_id: &str,
    now_ms: u64,
    id: NodeId,
    existing: &NodeRecord,
    node: &NodeRecord,
) -> Result<Admission, Refusal> {
    if existing.key_fingerprint != node.key_fingerprint {
        return Err(Refusal::new(
            ErrorKind::Unauthorized,
            format!(
                "node id {id:x} belongs to another member; this machine's data dir was copied \
                 from a member: wipe it and join again"
            ),
        ));
    }
    if token.revoked_ms.is_some() || now_ms >= token.expires_ms {
        return Err(Refusal::new(
            if token.revoked_ms.is_some() {
                ErrorKind::TokenRevoked
            } else {
                ErrorKind::TokenExpired
            },
            format!(
                "join token {token_id} is no longer valid; create a new one with \
                 `muster token create`"
            ),
        ));
    }
    Ok(Admission::AlreadyMember)
}

/// A token a new member may take a use of: not revoked, not used up, not expired (checked in
/// that order, so the message names the first reason).
fn usable_for_a_new_member(
    token: &JoinTokenRecord,
    token_id: &str,
    now_ms: u64,
) -> Result<(), Refusal> {
    if let Some(revoked) = token.revoked_ms {
        return Err(Refusal::new(
            ErrorKind::TokenRevoked,
            format!(
                "join token {token_id} was revoked ({} ago); create a new one with `muster token create`",
                ago(now_ms, revoked)
            ),
        ));
    }
    if token.uses_left == 0 {
        return Err(Refusal::new(
            ErrorKind::TokenConsumed,
            format!(
                "join token {token_id} has been used up ({} of {} uses, last by {}); create a new one with `muster token create`",
                token.uses_total,
                token.uses_total,
                token.last_used_by.as_deref().unwrap_or("?")
            ),
        ));
    }
    if now_ms >= token.expires_ms {
        return Err(Refusal::new(
            ErrorKind::TokenExpired,
            format!(
                "join token {token_id} expired {} ago; create a new one with `muster token create --ttl …`",
                ago(now_ms, token.expires_ms)
            ),
        ));
    }
    Ok(())
}

/// The outcome of [`ClusterState::check_admission`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// A new member: one use of the token is taken.
    New,
    /// The same node, admitted before with this token.
    AlreadyMember,
}

fn ago(now_ms: u64, then_ms: u64) -> String {
    let secs = now_ms.saturating_sub(then_ms) / 1000;
    muster_shared::duration::format_duration(std::time::Duration::from_secs(secs))
}
