//! Changing a member's address (`muster node set-address`, or the member itself started with
//! a new `--advertise` and `--allow-address-change`), on the leader: the raft configuration's
//! copy of the address (what peers dial) and the member record (what status, joins and the
//! certificate's SAN use) are both updated; the member then renews its certificate for the new
//! host on its own (see `renew`), and peers redial at the next message.
//!
//! Nothing trusts the address alone: peers reach a member by its identity name, which only the
//! certificate issued for its key carries, so pointing a member at another machine's address
//! makes it unreachable, never impersonated. Whether it answers at the new address is asked of a
//! [`Reach`] ([`PeerReach`] dials it over mutual TLS; unit tests give their own).

use std::future::Future;

use crate::api::types::AddressChange;
use crate::api::{ApiError, ErrorKind};
use crate::client::PeerClients;
use crate::leading::{Leader, Replica};
use crate::state::{Node, NodeId, Request, member_id};

/// Whether member `id` answers at `addr` before it is moved there: an `Unavailable` error,
/// naming why, if not.
pub trait Reach: Sync {
    fn answers_at(
        &self,
        id: NodeId,
        name: &str,
        addr: &str,
    ) -> impl Future<Output = Result<(), ApiError>> + Send;
}

/// The member named `name` (or with member id `name`) is now at `addr`.
pub async fn set_address(
    leader: Leader<'_, impl Replica>,
    reach: &impl Reach,
    name: &str,
    addr: &str,
) -> Result<AddressChange, ApiError> {
    crate::config::validate_host_port("address", addr)
        .map_err(|e| ApiError::invalid(e.to_string()))?;
    muster_shared::tls::advertise_san(crate::config::host_of(addr))
        .map_err(|e| ApiError::invalid(e.to_string()))?;
    let _one_at_a_time = leader.local.membership_ops.lock().await;
    let nodes = leader.replica.read(|s| s.nodes.clone()).await?;
    let (id, record) = find(&nodes, name)?;
    if let Some((_, other)) = nodes.iter().find(|(i, n)| **i != id && n.addr == addr) {
        return Err(ApiError::new(
            ErrorKind::AddressTaken,
            format!(
                "{addr} is the address of member {}; two members cannot share one (move or remove {} first)",
                other.name, other.name
            ),
        ));
    }
    let from = record.addr.clone();
    let change = AddressChange {
        name: record.name.clone(),
        id: member_id(id),
        from: from.clone(),
        to: addr.to_string(),
        changed: from != addr,
    };
    let in_configuration = leader.replica.view().nodes.get(&id).cloned();
    if !change.changed && in_configuration.as_ref().is_none_or(|n| n.addr == addr) {
        return Ok(change);
    }
    // The leader itself: whoever dials it will find out; it cannot dial itself meaningfully.
    if id != leader.replica.id() {
        reach.answers_at(id, &record.name, addr).await?;
    }
    // The configuration first: peers dial what it says. A retry after a failure between the
    // two writes finds the record still old and finishes the change.
    if in_configuration.is_some() {
        leader
            .replica
            .set_node(
                id,
                Node {
                    name: record.name.clone(),
                    addr: addr.to_string(),
                },
            )
            .await?;
    }
    let mut moved = record.clone();
    moved.addr = addr.to_string();
    leader
        .replica
        .write(Request::UpsertNode { id, node: moved })
        .await?;
    tracing::info!(node = %change.name, %from, to = %addr, "moved a member to a new address");
    Ok(change)
}

/// Dials members over mutual TLS through this node's peer pool.
pub struct PeerReach<'a>(pub &'a PeerClients);

/// A member moved to an address where it does not answer would be cut off (and, after
/// `--cleanup-dead-after`, removed for good): the leader first reaches it there, over mutual
/// TLS, by its identity name, which only that member's certificate carries.
impl Reach for PeerReach<'_> {
    async fn answers_at(&self, id: NodeId, name: &str, addr: &str) -> Result<(), ApiError> {
        let unreachable = |why: String| {
            ApiError::new(
                ErrorKind::Unavailable,
                format!(
                    "{name} does not answer at {addr} ({why}); it must listen there before it is \
                     moved (its --listen must cover that address)"
                ),
            )
        };
        let peer = self
            .0
            .get(id, addr)
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        let answer = peer
            .http
            .get(format!("{}{}", peer.base, crate::api::paths::MEMBER_CHECK))
            .timeout(super::probe::PROBE_TIMEOUT)
            .send()
            .await;
        // Whatever the route answers, the handshake proved the member is there.
        let result = answer
            .map(|_| ())
            .map_err(|e| unreachable(super::probe::root_cause(&e)));
        self.0.forget(id);
        result
    }
}

fn find<'a>(
    nodes: &'a std::collections::BTreeMap<NodeId, crate::state::NodeRecord>,
    name: &str,
) -> Result<(NodeId, &'a crate::state::NodeRecord), ApiError> {
    // An exact name first: a member may be named like another member's id.
    nodes
        .iter()
        .find(|(_, n)| n.name == name)
        .or_else(|| nodes.iter().find(|(id, _)| member_id(**id) == name))
        .map(|(id, n)| (*id, n))
        .ok_or_else(|| {
            ApiError::new(
                ErrorKind::NotFound,
                format!("no member named {name}; `muster status` lists the members"),
            )
        })
}
