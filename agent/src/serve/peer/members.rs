//! Who may call the member routes (raft RPCs, check-ins, forwarded operations): a node with a
//! certificate from this cluster that is a member (or, for some routes, a spare). Refusals are
//! counted and logged once per caller. Separate from the handlers so one place decides, for
//! every route, what a removed node, a stranger or another cluster's node is told.

use axum::extract::Request;
use muster_shared::tls::PeerIdentity;

use super::Peer;
use crate::agent::Here;
use crate::api::{ApiError, ErrorKind};
use crate::state::{NodeId, member_id};

/// True if `id` was removed from the cluster (per this node's applied state).
pub(super) fn is_tombstoned(here: Here<'_>, id: NodeId) -> bool {
    here.group
        .raft()
        .read_local(|s| s.removed.contains(&id))
        .unwrap_or(false)
}

/// Refuses callers without a certificate from this cluster, and counts them. The error is the
/// refusal to send back. Raft routes take members of the configuration only.
pub(super) fn require_member(here: Here<'_>, req: &Request) -> Result<PeerIdentity, ApiError> {
    check_member(here, req, false)
}

/// Like [`require_member`], but a spare (a member with a record, outside the raft
/// configuration) passes too: for check-ins and forwarded operations.
pub(super) fn require_member_or_spare(
    here: Here<'_>,
    req: &Request,
) -> Result<PeerIdentity, ApiError> {
    check_member(here, req, true)
}

/// True if the last check-in answer (from a member, over mutual TLS) listed `id`. A spare's
/// own state stops when it stops replicating; members that joined since, a new leader among
/// them, are known to it only this way, and such a leader must be able to make it a standby.
fn checked_in_member(here: Here<'_>, id: NodeId) -> bool {
    here.group.check_in().members.iter().any(|(m, _)| *m == id)
}

fn is_recorded(here: Here<'_>, id: NodeId) -> bool {
    here.group
        .raft()
        .read_local(|s| s.nodes.contains_key(&id))
        .unwrap_or(false)
}

fn check_member(here: Here<'_>, req: &Request, spares: bool) -> Result<PeerIdentity, ApiError> {
    let peer = req.extensions().get::<Peer>().and_then(|p| p.0.clone());
    let view = here.group.raft().view();
    // A removed node is told so once it is out of the configuration. Until then it is still
    // served: a removed leader has to keep replicating until its successor takes over.
    if let Some(id) = &peer
        && id.cluster_id == here.me.cluster_id.as_str()
        && !view.nodes.contains_key(&id.node_id)
        && is_tombstoned(here, id.node_id)
    {
        here.counters.count_refused();
        if here.counters.first_refusal(id.node_id, "removed") {
            tracing::warn!(peer = %member_id(id.node_id), "refused a raft request: the node was removed (answered 410; logged once)");
        }
        return Err(ApiError::new(
            ErrorKind::Removed,
            format!(
                "node {} was removed from this cluster; it must stop (wipe its data dir to join again as a new node)",
                member_id(id.node_id)
            ),
        ));
    }
    match peer {
        // A member, or anyone from this cluster while this node knows no membership yet (a
        // fresh joiner receives its first AppendEntries from a leader it has never heard of)
        // and has learned no members by checking in either (a spare that never replicated).
        Some(id)
            if id.cluster_id == here.me.cluster_id.as_str()
                && ((view.nodes.is_empty() && here.group.check_in().members.is_empty())
                    || view.nodes.contains_key(&id.node_id)
                    || (spares && is_recorded(here, id.node_id))
                    || checked_in_member(here, id.node_id)) =>
        {
            Ok(id)
        }
        Some(id) if id.cluster_id == here.me.cluster_id.as_str() => {
            here.counters.count_refused();
            if here.counters.first_refusal(id.node_id, "not a member") {
                tracing::warn!(peer = %member_id(id.node_id), "refused a raft request: the node is not a member (logged once)");
            }
            Err(ApiError::new(
                ErrorKind::Unauthorized,
                format!(
                    "node {} is not a member of this cluster",
                    member_id(id.node_id)
                ),
            ))
        }
        other => {
            here.counters.count_refused();
            let why = match other {
                Some(id) => format!(
                    "certificate belongs to cluster {}, not this one",
                    id.cluster_id
                ),
                None => "a client certificate issued by this cluster's CA is required".into(),
            };
            tracing::warn!(%why, "refused a raft request");
            Err(ApiError::new(ErrorKind::Unauthenticated, why))
        }
    }
}
