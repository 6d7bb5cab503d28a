//! The quorum rule every voter change must keep: the joint configuration of the change needs
//! a reachable majority of the voters before and after, and the last voter leaves only to a
//! successor. Separate because the operator's `node remove` checks it as well as the
//! reconciler's own steps.

use std::collections::BTreeSet;

use super::ClusterView;
use crate::state::NodeId;

/// Why taking voters out would leave the cluster unable to commit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuorumRefusal {
    #[error(
        "{name} is the last voter and no other member is reachable and caught up to take \
         over; start or repair another member first, or repeat with --force"
    )]
    LastVoter { name: String },
    #[error(
        "removing {name} would leave {after} voters of which only {alive_after} reachable ({reachable_after}); \
         a quorum needs {majority}. Bring back {unreachable_before} first, or repeat with --force \
         to remove it anyway: the cluster then stops taking writes until enough of the remaining \
         voters are back"
    )]
    WouldLoseQuorum {
        name: String,
        after: usize,
        alive_after: usize,
        /// Names, comma-separated.
        reachable_after: String,
        majority: usize,
        /// Names, comma-separated.
        unreachable_before: String,
    },
}

/// May the voters in `leaving` go? The joint configuration of the change needs a reachable
/// majority of the voters now and of the voters after; the last voter may leave only once a
/// reachable, caught-up member can take over. `name` names the member being removed.
pub fn check_voters_leaving(
    view: &ClusterView,
    leaving: &BTreeSet<NodeId>,
    name: &str,
) -> Result<(), QuorumRefusal> {
    let before = view.voters();
    let after: BTreeSet<NodeId> = before.difference(leaving).copied().collect();
    let reachable = |id: &NodeId| view.member(*id).is_some_and(|m| m.reachable);
    if after.is_empty() {
        let successor = view
            .members
            .iter()
            .any(|m| !leaving.contains(&m.id) && m.reachable && m.caught_up);
        return if successor {
            Ok(())
        } else {
            Err(QuorumRefusal::LastVoter {
                name: name.to_string(),
            })
        };
    }
    let majority = |set: &BTreeSet<NodeId>| set.len() / 2 + 1;
    let alive = |set: &BTreeSet<NodeId>| set.iter().filter(|v| reachable(v)).count();
    if alive(&after) >= majority(&after) && alive(&before) >= majority(&before) {
        return Ok(());
    }
    let names = |set: &BTreeSet<NodeId>, want: bool| {
        set.iter()
            .filter(|v| reachable(v) == want)
            .map(|v| view.name(*v))
            .collect::<Vec<_>>()
            .join(", ")
    };
    Err(QuorumRefusal::WouldLoseQuorum {
        name: name.to_string(),
        after: after.len(),
        alive_after: alive(&after),
        reachable_after: names(&after, true),
        majority: majority(&after),
        unreachable_before: names(&before, false),
    })
}
