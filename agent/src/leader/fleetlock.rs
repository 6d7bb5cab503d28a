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
    HolderStatus,
};
use crate::leading::{Leader, Replica};
use crate::state::fleetlock::{Command, DEFAULT_GROUP, DEFAULT_SLOTS, Outcome, UnknownGroups};
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

/// Applies a FleetLock command through the log; `Lock` and `Unlock` get the leader's clock. A
/// lock or unlock that would change nothing is answered from a linearizable read instead (when
/// the read succeeds). Between that read and a write the state may change; the write decides again
/// when it is applied.
pub async fn command(
    leader: Leader<'_, impl Replica>,
    mut command: Command,
) -> Result<Outcome, ApiError> {
    let asked = match &command {
        Command::Lock { group, id, .. } => Some((group.clone(), id.clone(), true)),
        Command::Unlock { group, id, .. } => Some((group.clone(), id.clone(), false)),
        _ => None,
    };
    if let Some((group, id, lock)) = asked {
        // The same clock the write would be stamped with: a window that is closed now refuses
        // from the read, as the write would.
        let now = leader.replica.wall_ms();
        let decided = leader
            .replica
            .read(|s| {
                let gates = s.fleetlock.groups.get(&group).map(|g| g.gates.clone());
                (s.fleetlock.decide(&group, &id, lock, now), gates)
            })
            .await;
        match decided {
            Ok((Ok(Outcome::Locked), gates)) => {
                fleetlock_gate::check(leader, &group, &id, &gates.unwrap_or_default()).await?;
            }
            Ok((Ok(Outcome::Unlocked), _)) => {}
            Ok((Ok(unchanged), _)) => return Ok(unchanged),
            Ok((Err(refusal), _)) => return Err(refusal.into()),
            // One heartbeat round did not confirm the leadership (a new leader, a member
            // restarting): the write below waits for a quorum as long as a write may, where
            // the read gives up at once. Only under churn does a no-op cost a log entry.
            Err(_) if lock => fleetlock_gate::check_unconfirmed(leader, &group, &id).await?,
            Err(_) => {}
        }
    }
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

/// The semaphores as of now (a linearizable read).
pub async fn status(leader: Leader<'_, impl Replica>) -> Result<FleetLockStatus, ApiError> {
    let (fleetlock, nodes) = leader
        .replica
        .read(|s| (s.fleetlock.clone(), s.nodes.clone()))
        .await?;
    let now = leader.replica.wall_ms();
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
