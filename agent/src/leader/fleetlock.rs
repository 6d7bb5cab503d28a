//! FleetLock on the leader: a lock or unlock that changes the semaphores, and every setting, is
//! one replicated write (linearizable by construction); one that changes nothing (a recursive
//! lock, an unlock by a non-holder, a refusal) is answered from a linearizable read, so that
//! Zincati's ticks and floods of no-ops cost no fsync'd log entry on every member. A lock that
//! would take a slot first passes its group's health gates (`fleetlock_gate.rs`). Status is a
//! linearizable read, and so is the audit trail (`history`).

use std::collections::BTreeMap;

use super::fleetlock_gate;
use crate::api::ApiError;
use crate::api::fleetlock::{
    EventStatus, FleetLockHistory, FleetLockStatus, GateResultStatus, GateStatus, GroupStatus,
    HolderStatus, MachineStatus, QuorumGateStatus, VoterStatus,
};
use crate::leading::{Leader, Replica};
use crate::policy;
use crate::state::fleetlock::{
    Command, DEFAULT_GROUP, DEFAULT_SLOTS, Outcome, Stamped, UnknownGroups,
};
use crate::state::fleetlock_quorum::QuorumFacts;
use crate::state::fleetlock_trail::{Event, MAX_EVENTS};
use crate::state::fleetlock_window;
use crate::state::{NodeId, NodeRecord, Request, member_id};

/// A holder older than this is flagged in status (a machine that rebooted and never came back?).
pub const STALE_AFTER_MS: u64 = 3_600_000;
/// Events of the audit trail that status carries: enough to see the last few reboots at a
/// glance; `history` has them all.
pub const RECENT_EVENTS: usize = 10;

/// A member's name, or its id once it is gone (a removed member).
fn member_name(nodes: &BTreeMap<NodeId, NodeRecord>, id: NodeId) -> String {
    nodes
        .get(&id)
        .map(|n| n.name.clone())
        .unwrap_or_else(|| member_id(id))
}

fn event_status(nodes: &BTreeMap<NodeId, NodeRecord>, e: &Event) -> EventStatus {
    EventStatus {
        seq: e.seq,
        kind: e.kind.as_str().into(),
        group: e.group.clone(),
        id: e.id.clone(),
        via: member_name(nodes, e.via),
        at_ms: e.at_ms,
    }
}

/// Applies a FleetLock command through the log; `Lock` and `Unlock` get the leader's clock, and
/// `Lock` the quorum gate's facts. A lock or unlock that would change nothing is answered from a
/// linearizable read instead (when the read succeeds). Between that read and a write the state
/// may change; the write decides again when it is applied, on the facts stamped into it. A lock
/// is stamped and written under the membership lock, so that no membership change this leader
/// makes can come between the voters it counted and the decision.
pub async fn command(
    leader: Leader<'_, impl Replica>,
    mut command: Command,
) -> Result<Outcome, ApiError> {
    // Only a member's own machine can be marked: an id is never learned for a node id that is
    // no member (which also keeps the learned ids bounded by the members).
    if let Command::Lock { via, own, .. } | Command::Unlock { via, own, .. } = &mut command
        && *own
        && !leader.replica.view().nodes.contains_key(via)
    {
        *own = false;
    }
    if let Command::Lock { quorum, .. } = &mut command {
        *quorum = quorum_facts(&leader);
    }
    let asked = match &command {
        Command::Lock {
            group,
            id,
            via,
            own,
            quorum,
            ..
        } => Some((group.clone(), id.clone(), true, *via, *own, quorum.clone())),
        Command::Unlock {
            group,
            id,
            via,
            own,
            ..
        } => Some((group.clone(), id.clone(), false, *via, *own, None)),
        _ => None,
    };
    if let Some((group, id, lock, via, own, quorum)) = asked {
        // The same clock the write would be stamped with: a window that is closed now refuses
        // from the read, as the write would.
        let now = leader.replica.wall_ms();
        let stamped = Stamped {
            machine: own.then_some(via),
            quorum: quorum.as_ref(),
        };
        let decided = leader
            .replica
            .read(|s| {
                let f = &s.fleetlock;
                let gates = f.groups.get(&group).map(|g| g.gates.clone());
                (
                    f.decide(&group, &id, lock, now, stamped),
                    f.learns(via, &id, own),
                    gates,
                )
            })
            .await;
        match decided {
            Ok((Ok(Outcome::Locked), _, gates)) => {
                fleetlock_gate::check(leader, &group, &id, &gates.unwrap_or_default()).await?;
            }
            Ok((Ok(Outcome::Unlocked), _, _)) => {}
            // It teaches the state whose machine this id is: worth its log entry, once.
            Ok((Ok(_), true, _)) => {}
            Ok((Ok(unchanged), false, _)) => return Ok(unchanged),
            Ok((Err(refusal), _, _)) => return Err(refusal.into()),
            // One heartbeat round did not confirm the leadership (a new leader, a member
            // restarting): the write below waits for a quorum as long as a write may, where
            // the read gives up at once. Only under churn does a no-op cost a log entry.
            Err(_) if lock => fleetlock_gate::check_unconfirmed(leader, &group, &id).await?,
            Err(_) => {}
        }
    }
    // The quorum gate's facts again, now under the membership lock (held until the lock is
    // written): the health gates above may have taken seconds, and no membership change of
    // this leader may come between the voters counted and the write.
    let _voters_hold_still = match &mut command {
        Command::Lock { quorum, .. } => {
            let held = leader.local.membership_ops.lock().await;
            *quorum = quorum_facts(&leader);
            Some(held)
        }
        _ => None,
    };
    // The leader's clock goes into the command, so that every member records the same time
    // (the holder's `since`, and the audit trail's time).
    if let Command::Lock { now_ms: at, .. } | Command::Unlock { now_ms: at, .. } = &mut command {
        *at = leader.replica.wall_ms();
    }
    let response = leader.replica.write(Request::FleetLock(command)).await?;
    response
        .fleetlock
        .ok_or_else(|| ApiError::internal("FleetLock command without an outcome"))
}

/// The quorum gate's facts as this leader knows them now: the voters, the ones it has not heard
/// from lately, and the floor; `None` when the gate is off (`--fleetlock-min-tolerance off`).
fn quorum_facts(leader: &Leader<'_, impl Replica>) -> Option<QuorumFacts> {
    let min_tolerance = leader.local.settings.fleetlock_min_tolerance?;
    let view = leader.replica.view();
    let me = leader.replica.id();
    let name = |id: &NodeId| {
        view.nodes
            .get(id)
            .map(|n| n.name.clone())
            .unwrap_or_else(|| member_id(*id))
    };
    Some(QuorumFacts {
        voters: view.voters.iter().map(|id| (*id, name(id))).collect(),
        unreachable: view
            .voters
            .iter()
            .filter(|id| {
                **id != me
                    && !policy::is_reachable(
                        leader
                            .replica
                            .last_seen_ms(**id)
                            .map(std::time::Duration::from_millis),
                    )
            })
            .copied()
            .collect(),
        min_tolerance,
        changing: view.voter_sets.len() > 1,
    })
}

/// The semaphores as of now (a linearizable read).
pub async fn status(leader: Leader<'_, impl Replica>) -> Result<FleetLockStatus, ApiError> {
    let (fleetlock, nodes) = leader
        .replica
        .read(|s| (s.fleetlock.clone(), s.nodes.clone()))
        .await?;
    let now = leader.replica.wall_ms();
    let facts = quorum_facts(&leader);
    let voters = leader.replica.view().voters;
    let mut machines: Vec<MachineStatus> = fleetlock
        .machines
        .iter()
        .map(|(member, id)| MachineStatus {
            member: member_name(&nodes, *member),
            id: id.clone(),
            voter: voters.contains(member),
        })
        .collect();
    machines.sort_by(|a, b| (!a.voter, &a.member).cmp(&(!b.voter, &b.member)));
    let holding = fleetlock.holding();
    let quorum_gate = Some(match facts {
        None => QuorumGateStatus {
            on: false,
            min_tolerance: 0,
            voters: Vec::new(),
        },
        Some(f) => QuorumGateStatus {
            on: true,
            min_tolerance: f.min_tolerance,
            voters: f
                .voters
                .iter()
                .map(|(id, name)| VoterStatus {
                    name: name.clone(),
                    state: if f.unreachable.contains(id) {
                        "unreachable"
                    } else if holding.contains(id) {
                        "holds a reboot slot"
                    } else {
                        "up"
                    }
                    .into(),
                    machine_id: fleetlock.machines.get(id).cloned(),
                })
                .collect(),
        },
    });
    let mut groups: Vec<GroupStatus> = fleetlock
        .groups
        .iter()
        .map(|(name, g)| GroupStatus {
            name: name.clone(),
            slots: g.slots,
            configured: !g.on_first_use,
            holders: g
                .holders
                .iter()
                .map(|(id, h)| HolderStatus {
                    id: id.clone(),
                    since_ms: h.since_ms,
                    via: member_name(&nodes, h.via),
                    stale: now.saturating_sub(h.since_ms) > STALE_AFTER_MS,
                })
                .collect(),
            windows: g.windows.iter().map(ToString::to_string).collect(),
            open: fleetlock_window::is_open(&g.windows, now),
            next_open_ms: fleetlock_window::next_open(&g.windows, now),
            gates: g
                .gates
                .iter()
                .map(|name| gate_status(leader, name))
                .collect(),
        })
        .collect();
    if !fleetlock.groups.contains_key(DEFAULT_GROUP) {
        groups.push(GroupStatus {
            name: DEFAULT_GROUP.into(),
            slots: DEFAULT_SLOTS,
            configured: false,
            holders: Vec::new(),
            windows: Vec::new(),
            open: true,
            next_open_ms: None,
            gates: Vec::new(),
        });
        groups.sort_by(|a, b| a.name.cmp(&b.name));
    }
    Ok(FleetLockStatus {
        unknown_groups: match fleetlock.unknown_groups {
            UnknownGroups::Create => "create",
            UnknownGroups::Reject => "reject",
        }
        .into(),
        groups,
        recent: fleetlock
            .trail
            .events()
            .skip(fleetlock.trail.len().saturating_sub(RECENT_EVENTS))
            .map(|e| event_status(&nodes, e))
            .collect(),
        machines,
        quorum_gate,
    })
}

/// Gate `name` as this leader defines it, with its last result here.
fn gate_status(leader: Leader<'_, impl Replica>, name: &str) -> GateStatus {
    let gates = &leader.local.gates;
    GateStatus {
        name: name.to_string(),
        check: gates.describe(name),
        last: gates.last(name).map(|r| GateResultStatus {
            passed: r.passed,
            reason: r.reason,
            at_ms: r.at_ms,
        }),
    }
}

/// The audit trail as of now (a linearizable read), oldest first; only `group`'s events when
/// one is given.
pub async fn history(
    leader: Leader<'_, impl Replica>,
    group: Option<&str>,
) -> Result<FleetLockHistory, ApiError> {
    let events: Vec<EventStatus> = leader
        .replica
        .read(|s| {
            s.fleetlock
                .trail
                .events()
                .filter(|e| group.is_none_or(|g| e.group == g))
                .map(|e| event_status(&s.nodes, e))
                .collect()
        })
        .await?;
    Ok(FleetLockHistory {
        kept: MAX_EVENTS,
        events,
    })
}
