//! The members' side of the plan: members the file places elsewhere or that it keeps while
//! they are down (both need the operator), and the removals of members the file drops, in an
//! order that keeps the quorum. Separate because it is the one part of the plan that changes
//! the voters, so the only one that moves the failure tolerance.

use super::{Action, Decided, Observed, ObservedMember, Quorum, Step, why_unreachable};
use crate::apply::manifest::Manifest;

/// The removals, in the order they are made, and what is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Removals {
    /// The unreachable: removed first (it never lowers the tolerance).
    pub now: Vec<Step>,
    /// The reachable, the leader last: removed after everything else.
    pub last: Vec<Step>,
    /// Removals refused, and why.
    pub blocked: Vec<String>,
    /// The voters once every removal is done.
    pub after: Quorum,
}

/// Members the file lists at another address: apply does not move members.
pub(super) fn moved(desired: &Manifest, observed: &Observed) -> Vec<String> {
    desired
        .members
        .iter()
        .filter_map(|d| {
            let m = observed.member(&d.name)?;
            (m.address != d.address).then(|| {
                format!(
                    "{} is a member at {}, but the file says {}: apply does not move members; \
                     correct the file, or remove {} and join the machine at its new address",
                    d.name, m.address, d.address, d.name
                )
            })
        })
        .collect()
}

/// Members the file keeps that do not answer: they need starting, or replacing by hand.
pub(super) fn unreachable_kept(desired: &Manifest, observed: &Observed) -> Vec<String> {
    observed
        .members
        .iter()
        .filter(|m| in_file(desired, &m.name) && !m.reachable)
        .map(|m| {
            format!(
                "{} is in the file but unreachable{}: start it again, or take it out of the file \
                 (apply then removes it) and add its replacement under a new name",
                m.name,
                why_unreachable(m)
            )
        })
        .collect()
}

/// Removals: the dead first (nonvoters, then voters), then the healthy, the leader last.
pub(super) fn removals(desired: &Manifest, observed: &Observed, quorum: Quorum) -> Removals {
    let mut out = Removals {
        now: Vec::new(),
        last: Vec::new(),
        blocked: Vec::new(),
        after: quorum,
    };
    let mut leaving: Vec<&ObservedMember> = observed
        .members
        .iter()
        .filter(|m| !in_file(desired, &m.name))
        .collect();
    if !leaving.is_empty() && leaving.len() == observed.members.len() {
        out.blocked.push(
            "the file keeps none of the current members: a cluster cannot be replaced whole; \
             list at least one current member (`muster config export` writes them)"
                .into(),
        );
        leaving.clear();
    }
    leaving.sort_by_key(|m| (m.reachable, m.voter(), observed.leads(m), m.name.clone()));
    for m in leaving {
        let step = match removal(observed, m, out.after) {
            Decided::Step(step) => step,
            Decided::Blocked(why) => {
                out.blocked.push(why);
                continue;
            }
        };
        out.after = out.after.without(m);
        if m.reachable {
            out.last.push(step);
        } else {
            out.now.push(step);
        }
    }
    out
}

/// Removing `m` from the voters `q`, or why it is refused.
fn removal(observed: &Observed, m: &ObservedMember, q: Quorum) -> Decided {
    if m.name == observed.asked {
        return Decided::Blocked(format!(
            "{} is the member asked, and the file removes it: run plan and apply against a \
             member that stays (--data-dir on it, or --server HOST:PORT)",
            m.name
        ));
    }
    let after = q.without(m);
    if m.voter() && m.reachable && after.tolerance() < 0 {
        return Decided::Blocked(format!(
            "removing {} would leave {} healthy of {} voters, fewer than the {} a quorum \
             needs; start the file's new machines first, then apply again",
            m.name,
            after.healthy,
            after.voters,
            after.needed()
        ));
    }
    let reason = if !m.reachable {
        format!("not in the file; unreachable{}", why_unreachable(m))
    } else if observed.leads(m) {
        "not in the file; the leader, so removed last (it hands over leadership)".into()
    } else {
        "not in the file".into()
    };
    Decided::Step(Step {
        action: Action::RemoveMember {
            name: m.name.clone(),
            address: m.address.clone(),
        },
        reason,
        tolerance_before: q.tolerance(),
        tolerance_after: after.tolerance(),
    })
}

fn in_file(desired: &Manifest, name: &str) -> bool {
    desired.members.iter().any(|d| d.name == name)
}
