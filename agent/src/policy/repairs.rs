//! The repairs of the reconciler's plan: removed members taken out, a failed voter replaced,
//! a dead member cleaned up. Separate from the cluster's shape (`shape.rs`) because each of
//! these acts on a member that is leaving or gone, and may wait rather than act ([`Wait`]).

use std::collections::BTreeSet;
use std::time::Duration;

use super::view::promotable;
use super::{Change, ClusterView, MemberView, Wait, Why, check_voters_leaving};

/// A removed nonvoter is dropped from the configuration once its log holds the removal and it
/// has had this long to apply it and stop by itself …
pub const REMOVAL_NOTICE: Duration = Duration::from_secs(1);
/// … or after this long in any case (it may be down and never hear of it).
pub const REMOVAL_GRACE: Duration = Duration::from_secs(5);

pub(super) fn removal_step(view: &ClusterView, waiting: &mut Vec<Wait>) -> Option<Change> {
    let doomed: Vec<&MemberView> = view
        .members
        .iter()
        .filter(|m| m.removal.is_some())
        .collect();
    // One change per step; a member that cannot move yet does not hold up the others.
    for member in &doomed {
        let Some(removal) = member.removal else {
            continue;
        };
        if !member.voter {
            let waited = removal.nonvoter_for.unwrap_or_default();
            if (removal.informed && waited >= REMOVAL_NOTICE) || waited >= REMOVAL_GRACE {
                return Some(Change::Remove(member.id));
            }
            continue;
        }
        if view.voters().len() == 1 {
            let mut successors: Vec<&MemberView> = view
                .members
                .iter()
                .filter(|m| m.removal.is_none() && m.caught_up && m.reachable)
                .collect();
            successors.sort_by(|a, b| a.name.cmp(&b.name));
            if let Some(s) = successors.first() {
                return Some(Change::Promote(BTreeSet::from([s.id]), Why::Successor));
            }
            waiting.push(Wait::NoSuccessor {
                name: member.name.clone(),
            });
            continue;
        }
        if !removal.forced {
            // Voters may have gone away since `node remove` checked: demoting now must still
            // leave a reachable majority, or it waits for them.
            let leaving = doomed.iter().filter(|d| d.voter).map(|d| d.id).collect();
            if let Err(refusal) = check_voters_leaving(view, &leaving, &member.name) {
                waiting.push(Wait::RemovalKeepsQuorum(refusal));
                continue;
            }
        }
        return Some(Change::Demote(member.id, Why::Removal));
    }
    None
}

pub(super) fn replacement_step(view: &ClusterView, waiting: &mut Vec<Wait>) -> Option<Change> {
    let mut failed: Vec<&MemberView> = view
        .members
        .iter()
        .filter(|m| m.voter && m.id != view.leader)
        .filter(|m| unreachable_at_least(m, view.automation.replace_after))
        .collect();
    // The longest-silent first; names break ties so every leader picks the same one.
    failed.sort_by(|a, b| {
        b.unreachable_for
            .cmp(&a.unreachable_for)
            .then(a.name.cmp(&b.name))
    });
    let victim = failed.first()?;
    if let Some(wait) = settling(view, victim, view.automation.replace_after) {
        waiting.push(wait);
        return None;
    }
    if !view.members.iter().any(|m| promotable(view, m)) {
        waiting.push(Wait::NoReplacement {
            name: victim.name.clone(),
        });
        return None;
    }
    // Demoting an unreachable voter never costs reachable votes, but the joint configuration
    // of the change still needs a reachable majority of the voters before and after.
    check_voters_leaving(view, &BTreeSet::from([victim.id]), &victim.name).ok()?;
    Some(Change::Demote(victim.id, Why::FailedVoter))
}

pub(super) fn cleanup_step(view: &ClusterView, waiting: &mut Vec<Wait>) -> Option<Change> {
    let after = view.automation.cleanup_dead_after?;
    let in_config = |m: &MemberView| view.members.iter().any(|c| c.id == m.id);
    let mut dead: Vec<&MemberView> = view
        .members
        .iter()
        .chain(&view.spares)
        .filter(|m| m.id != view.leader && m.removal.is_none())
        .filter(|m| unreachable_at_least(m, Some(after)))
        .collect();
    // Spares first, then nonvoters (they cost no vote), then the longest-silent, then by name.
    dead.sort_by(|a, b| {
        in_config(a)
            .cmp(&in_config(b))
            .then(a.voter.cmp(&b.voter))
            .then(b.unreachable_for.cmp(&a.unreachable_for))
            .then(a.name.cmp(&b.name))
    });
    let victim = dead.first()?;
    if let Some(wait) = settling(view, victim, Some(after)) {
        waiting.push(wait);
        return None;
    }
    let members = view.member_count();
    let unreachable = view
        .members
        .iter()
        .chain(&view.spares)
        .filter(|m| !m.reachable)
        .count();
    if unreachable * 2 >= members {
        waiting.push(Wait::CleanupTooManyUnreachable {
            unreachable,
            members,
        });
        return None;
    }
    let members_after = members - 1;
    if members_after < view.automation.min_voters {
        waiting.push(Wait::CleanupBelowMinVoters {
            name: victim.name.clone(),
            members_after,
            min_voters: view.automation.min_voters,
        });
        return None;
    }
    if victim.voter {
        check_voters_leaving(view, &BTreeSet::from([victim.id]), &victim.name).ok()?;
    }
    Some(Change::CleanUp(victim.id))
}

/// A member that has just come back after a silence (a rolling restart under way): the
/// repair of `victim` (due after `due`) waits until it has settled, so that the cluster is
/// judged once the restarted machine is back in its place, not while it is still catching up
/// (Consul's server stabilization time). The wait is bounded: a repair is put off by at most
/// one `--promote-after`, so a member that keeps coming back (a crash loop, a flaky link)
/// cannot hold the repairs of others off for good.
fn settling(view: &ClusterView, victim: &MemberView, due: Option<Duration>) -> Option<Wait> {
    let overdue = victim.unreachable_for.unwrap_or_default();
    if overdue >= due.unwrap_or_default() + view.promote_after {
        return None;
    }
    view.members
        .iter()
        .chain(&view.spares)
        .filter(|m| m.settling(view.promote_after))
        .map(|m| Wait::Settling {
            name: m.name.clone(),
        })
        .next()
}

fn unreachable_at_least(member: &MemberView, after: Option<Duration>) -> bool {
    match (after, member.unreachable_for) {
        (Some(after), Some(down)) => !member.reachable && down >= after,
        _ => false,
    }
}
