//! The one error vocabulary of both binaries: a stable `kind` that scripts match on, the HTTP
//! status that follows from it ([`TABLE`] is the only place a kind meets a status), and the
//! `{kind, message}` body every Muster HTTP surface answers with outside the etcd-compatible
//! paths. The agent's `ApiError` and the discovery service's error pages both speak it, so a
//! kind means the same everywhere.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why an operation failed. The wire spelling ([`ErrorKind::as_str`]) is a public contract: a
/// kind may be added, never renamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The cluster has no CA or id in its replicated state yet.
    ClusterUninitialized,
    /// No leader is known (an election is in progress, or this node is cut off).
    NoLeader,
    /// The leader cannot reach a majority of the voters; the outcome of a write is unknown.
    QuorumLost,
    /// The caller is known but may not do this (a refused join, a non-member certificate).
    Unauthorized,
    /// The caller brought no credentials or invalid ones. Spelled `unauthorized` on the wire,
    /// answered with HTTP 401 instead of 403.
    Unauthenticated,
    NotFound,
    /// A route that exists with another method.
    MethodNotAllowed,
    InvalidArgument,
    /// A request body over the route's limit.
    PayloadTooLarge,
    /// Too many requests from one client; retry later.
    RateLimited,
    /// A server that does not present the CA the caller pinned.
    CaPinMismatch,
    TokenExpired,
    TokenConsumed,
    TokenRevoked,
    /// Another member has this name.
    NameTaken,
    /// Another member has this address (`node set-address`).
    AddressTaken,
    /// A CA rotation is in progress (a second `ca rotate`), or not complete (`--finish`).
    CaRotationPending,
    /// A removal that would leave the voters without a reachable majority (`--force` overrides).
    WouldLoseQuorum,
    /// The caller is a node that was removed from the cluster.
    Removed,
    /// Another membership change is still in flight; retry shortly.
    MembershipBusy,
    /// Something this node depends on (the discovery service, its disk) cannot serve now.
    Unavailable,
    /// FleetLock: every slot of the group is held.
    SemaphoreFull,
    /// FleetLock: a lock outside every maintenance window of its group.
    OutsideWindow,
    /// FleetLock: a voter's lock that would leave the cluster below its failure-tolerance floor.
    QuorumGate,
    /// FleetLock: a health gate of the group refused the lock (or did not answer).
    LockGate,
    /// FleetLock: the group is not configured and unknown groups are refused.
    UnknownGroup,
    /// FleetLock: a lock would create a group on first use, and as many as allowed exist.
    TooManyGroups,
    /// A lease is held by another holder.
    LeaseHeld,
    /// A compare-and-set found the key at another revision (or absent, or present).
    RevisionMismatch,
    /// A watch asked for a revision the history no longer holds.
    Compacted,
    Internal,
}

/// Every kind with its wire spelling and HTTP status.
const TABLE: &[(ErrorKind, &str, u16)] = &[
    (
        ErrorKind::ClusterUninitialized,
        "cluster_uninitialized",
        503,
    ),
    (ErrorKind::NoLeader, "no_leader", 503),
    (ErrorKind::QuorumLost, "quorum_lost", 503),
    (ErrorKind::Unauthorized, "unauthorized", 403),
    (ErrorKind::Unauthenticated, "unauthorized", 401),
    (ErrorKind::NotFound, "not_found", 404),
    (ErrorKind::MethodNotAllowed, "method_not_allowed", 405),
    (ErrorKind::InvalidArgument, "invalid_argument", 400),
    (ErrorKind::PayloadTooLarge, "payload_too_large", 413),
    (ErrorKind::RateLimited, "rate_limited", 429),
    (ErrorKind::CaPinMismatch, "ca_pin_mismatch", 403),
    (ErrorKind::TokenExpired, "token_expired", 403),
    (ErrorKind::TokenConsumed, "token_consumed", 403),
    (ErrorKind::TokenRevoked, "token_revoked", 403),
    (ErrorKind::NameTaken, "name_taken", 409),
    (ErrorKind::AddressTaken, "address_taken", 409),
    (ErrorKind::CaRotationPending, "ca_rotation_pending", 409),
    (ErrorKind::WouldLoseQuorum, "would_lose_quorum", 409),
    (ErrorKind::Removed, "removed", 410),
    (ErrorKind::MembershipBusy, "membership_busy", 503),
    (ErrorKind::Unavailable, "unavailable", 503),
    (ErrorKind::SemaphoreFull, "failed_lock_semaphore_full", 409),
    (ErrorKind::OutsideWindow, "failed_lock_outside_window", 409),
    (ErrorKind::QuorumGate, "failed_lock_quorum", 409),
    (ErrorKind::LockGate, "failed_lock_gate", 409),
    (ErrorKind::UnknownGroup, "unknown_group", 400),
    (ErrorKind::TooManyGroups, "failed_too_many_groups", 503),
    (ErrorKind::LeaseHeld, "lease_held", 409),
    (ErrorKind::RevisionMismatch, "revision_mismatch", 409),
    (ErrorKind::Compacted, "compacted", 410),
    (ErrorKind::Internal, "internal", 500),
];

impl ErrorKind {
    fn row(self) -> (&'static str, u16) {
        TABLE
            .iter()
            .find(|(k, _, _)| *k == self)
            .map(|(_, name, status)| (*name, *status))
            .unwrap_or(("internal", 500))
    }

    /// The stable spelling on the wire.
    pub fn as_str(self) -> &'static str {
        self.row().0
    }

    /// The HTTP status an answer with this kind carries.
    pub fn status(self) -> u16 {
        self.row().1
    }

    /// Reads a kind from the wire. `unauthorized` with status 401 is [`Unauthenticated`]; a
    /// kind this build does not know (from a newer peer) becomes [`Internal`].
    ///
    /// [`Unauthenticated`]: ErrorKind::Unauthenticated
    /// [`Internal`]: ErrorKind::Internal
    pub fn from_wire(name: &str, status: u16) -> Self {
        if name == "unauthorized" && status == 401 {
            return ErrorKind::Unauthenticated;
        }
        TABLE
            .iter()
            .find(|(k, n, _)| *n == name && *k != ErrorKind::Unauthenticated)
            .map(|(k, _, _)| *k)
            .unwrap_or(ErrorKind::Internal)
    }

    /// Every kind, in table order.
    pub fn all() -> impl Iterator<Item = ErrorKind> {
        TABLE.iter().map(|(k, _, _)| *k)
    }

    /// True if the same request may succeed when sent again shortly (no leader yet, a
    /// membership change in flight, a busy or restarting member).
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            ErrorKind::NoLeader
                | ErrorKind::QuorumLost
                | ErrorKind::MembershipBusy
                | ErrorKind::ClusterUninitialized
                | ErrorKind::RateLimited
                | ErrorKind::Unavailable
                | ErrorKind::Internal
        )
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ErrorKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Ok(ErrorKind::from_wire(&name, 0))
    }
}

/// The JSON body of a non-etcd error answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub kind: ErrorKind,
    pub message: String,
}

impl ErrorBody {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_serialize_as_their_stable_names_and_read_back() {
        for kind in ErrorKind::all() {
            let json = serde_json::to_string(&kind).expect("serialize kind");
            assert_eq!(json, format!("\"{}\"", kind.as_str()));
            assert_eq!(ErrorKind::from_wire(kind.as_str(), kind.status()), kind);
        }
    }

    #[test]
    fn documented_statuses() {
        assert_eq!(ErrorKind::Unauthenticated.as_str(), "unauthorized");
        assert_eq!(ErrorKind::Unauthenticated.status(), 401);
        assert_eq!(ErrorKind::Unauthorized.status(), 403);
        assert_eq!(ErrorKind::Removed.status(), 410);
        assert_eq!(ErrorKind::NameTaken.status(), 409);
        assert_eq!(ErrorKind::NoLeader.status(), 503);
        // The discovery service's kinds answer with the statuses its pages always had.
        assert_eq!(ErrorKind::MethodNotAllowed.status(), 405);
        assert_eq!(ErrorKind::PayloadTooLarge.status(), 413);
        assert_eq!(ErrorKind::InvalidArgument.status(), 400);
        assert_eq!(ErrorKind::NotFound.status(), 404);
        assert_eq!(ErrorKind::Unavailable.status(), 503);
    }
}
