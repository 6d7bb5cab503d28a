//! The plan: what must change to turn the observed cluster into the desired one, in a
//! quorum-safe order, with the failure tolerance before and after every step. A pure function
//! of the file and the probes (table tests in `tests.rs`); `cli/apply.rs` gathers the probes and
//! carries the steps out.
//!
//! The arithmetic, as KubeOne does it for etcd: a cluster of `V` voters needs `V/2 + 1` of them
//! (the quorum); with `H` of them healthy it survives `H − quorum` more failures (the failure
//! tolerance). Removing an unreachable voter never lowers it; removing a healthy one may, and
//! is refused when it would take the tolerance below zero.
//!
//! [`plan`] only orders the steps; each kind is worked out in `plan/`: the members' checks and
//! removals (`removals.rs`, the only steps that move the tolerance), the settings, FleetLock
//! and joins (`changes.rs`), the upgrades (`upgrades.rs`), the probe table (`probes.rs`) and
//! the advice for a lost quorum (`recovery.rs`).

mod changes;
mod probes;
mod recovery;
mod removals;
mod upgrades;

use serde::Serialize;

use super::manifest::Manifest;
use crate::api::fleetlock::FleetLockStatus;
use crate::api::probe::{NodeProbe, SettingsUpdate};
pub use probes::ProbeRow;
pub use recovery::{FoundBackup, Recovery, recovery_steps};

/// The cluster as probed (see `cli/apply.rs`).
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub cluster_id: String,
    /// The member that gathered the probes (apply talks to it).
    pub asked: String,
    /// The leader, when one leads with a quorum behind it.
    pub leader: Option<String>,
    pub commit_index: u64,
    pub members: Vec<ObservedMember>,
    /// The settings in force (none without a leader).
    pub settings: Option<SettingsUpdate>,
    /// The settings are the cluster's own (written by apply), not the leader's flags.
    pub settings_pinned: bool,
    pub fleetlock: Option<FleetLockStatus>,
}

impl Observed {
    /// `m` is the leader.
    fn leads(&self, m: &ObservedMember) -> bool {
        self.leader.as_deref() == Some(m.name.as_str())
    }

    /// The member of that name.
    fn member(&self, name: &str) -> Option<&ObservedMember> {
        self.members.iter().find(|m| m.name == name)
    }
}

#[derive(Debug, Clone, Default)]
pub struct ObservedMember {
    pub name: String,
    pub address: String,
    /// `voter`, `standby` or `spare`.
    pub role: String,
    /// The leader hears from it (without a leader: it answered the probe).
    pub reachable: bool,
    /// It answered the probe of the member asked (with a report, or as an older agent).
    pub answered: bool,
    /// The leader's replication progress to it.
    pub match_index: Option<u64>,
    pub report: Option<NodeProbe>,
    /// Why it did not answer.
    pub error: Option<String>,
}

impl ObservedMember {
    fn voter(&self) -> bool {
        self.role == "voter"
    }

    /// Reachable, and its data dir is not failing: a voter that counts toward the tolerance.
    fn healthy(&self) -> bool {
        self.reachable && self.report.as_ref().is_none_or(|r| r.data_dir.ok)
    }

    /// An agent too old to answer the probe (it has no report, but answered).
    fn older(&self) -> bool {
        self.answered && self.report.is_none()
    }
}

/// One change, in the order it is made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// `muster node remove NAME`: demoted first when a voter, then taken out.
    RemoveMember { name: String, address: String },
    /// A single-use join token and the exact command for the machine.
    IssueToken {
        name: String,
        address: String,
        data_dir: String,
    },
    /// The membership repairs' settings, written through the log.
    SetSettings {
        from: SettingsUpdate,
        to: SettingsUpdate,
    },
    /// A FleetLock group's slots, maintenance windows and health gates (`from`: none when it is not
    /// configured; windows left out when there are none, i.e. always open).
    SetFleetlockGroup {
        group: String,
        from: Option<u32>,
        slots: u32,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        from_windows: Vec<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        windows: Vec<String>,
        /// Its health gates (names), before and after; left out when there are none.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        from_gates: Vec<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        gates: Vec<String>,
    },
    /// A FleetLock group the file does not list.
    DeleteFleetlockGroup { group: String },
    /// FleetLock's rule for groups nobody configured.
    SetUnknownGroups { from: String, to: String },
    /// An agent to upgrade by hand (apply does not log in to machines): printed, not done.
    Upgrade {
        name: String,
        from_version: String,
        to_version: String,
    },
}

impl Action {
    /// False for the steps an operator carries out (upgrades).
    pub fn automatic(&self) -> bool {
        !matches!(self, Action::Upgrade { .. })
    }
}

/// What a step of the plan came to: the step, or why it cannot be taken now (shown to the
/// operator under "blocked"; not an error of the planner's).
pub(super) enum Decided {
    Step(Step),
    Blocked(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    #[serde(flatten)]
    pub action: Action,
    pub reason: String,
    /// Failures the voters survive before and after this step.
    pub tolerance_before: i64,
    pub tolerance_after: i64,
}

/// `muster plan --json`: a public shape (fields may be added, never renamed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub cluster_id: String,
    pub leader: Option<String>,
    pub voters: usize,
    pub healthy_voters: usize,
    pub quorum: usize,
    pub failure_tolerance: i64,
    pub probes: Vec<ProbeRow>,
    /// Set when the quorum is lost: then `steps` is empty.
    pub quorum_lost: Option<Recovery>,
    pub steps: Vec<Step>,
    /// What apply will not do, and why (each needs the operator).
    pub blocked: Vec<String>,
}

impl Plan {
    /// True when the cluster differs from the file in any way.
    pub fn has_changes(&self) -> bool {
        self.quorum_lost.is_some() || !self.steps.is_empty() || !self.blocked.is_empty()
    }
}

/// Voters and how many of them are healthy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quorum {
    pub voters: usize,
    pub healthy: usize,
}

impl Quorum {
    /// The voters of the cluster as probed.
    fn of(observed: &Observed) -> Quorum {
        Quorum {
            voters: observed.members.iter().filter(|m| m.voter()).count(),
            healthy: observed
                .members
                .iter()
                .filter(|m| m.voter() && m.healthy())
                .count(),
        }
    }

    pub fn needed(self) -> usize {
        self.voters / 2 + 1
    }

    /// Further failures the voters survive (negative: the quorum is already lost).
    pub fn tolerance(self) -> i64 {
        i64::try_from(self.healthy).unwrap_or(i64::MAX)
            - i64::try_from(self.needed()).unwrap_or(i64::MAX)
    }

    /// After `member` has left.
    fn without(self, member: &ObservedMember) -> Quorum {
        if !member.voter() {
            return self;
        }
        Quorum {
            voters: self.voters.saturating_sub(1),
            healthy: self.healthy.saturating_sub(usize::from(member.healthy())),
        }
    }
}

/// The plan to make `observed` what `desired` describes: first whether anything may change at
/// all, then the members' checks and removals, the settings, the joins and the upgrades.
pub fn plan(desired: &Manifest, observed: &Observed) -> Plan {
    let quorum = Quorum::of(observed);
    let mut plan = Plan {
        cluster_id: observed.cluster_id.clone(),
        leader: observed.leader.clone(),
        voters: quorum.voters,
        healthy_voters: quorum.healthy,
        quorum: quorum.needed(),
        failure_tolerance: quorum.tolerance(),
        probes: probes::probe_rows(desired, observed),
        quorum_lost: None,
        steps: Vec::new(),
        blocked: Vec::new(),
    };
    match gate(quorum, observed) {
        Gate::Open => {}
        Gate::Lost => {
            plan.quorum_lost = Some(recovery::recovery(desired, observed));
            return plan;
        }
        Gate::Wait(why) => {
            plan.blocked.push(why);
            return plan;
        }
    }
    plan.blocked.extend(removals::moved(desired, observed));
    plan.blocked
        .extend(removals::unreachable_kept(desired, observed));
    let removals = removals::removals(desired, observed, quorum);
    plan.blocked.extend(removals.blocked);
    // The dead go first: removing them never lowers the tolerance.
    plan.steps.extend(removals.now);
    // Every later step leaves the voters as the removals left them.
    let q = removals.after;
    match changes::settings(desired, observed, q) {
        Some(Decided::Step(step)) => plan.steps.push(step),
        Some(Decided::Blocked(why)) => plan.blocked.push(why),
        None => {}
    }
    plan.steps.extend(changes::fleetlock(desired, observed, q));
    plan.steps.extend(changes::joins(desired, observed, q));
    // The healthy leave once their replacements were asked to join, the leader last.
    plan.steps.extend(removals.last);
    plan.steps.extend(upgrades::upgrades(observed));
    plan
}

/// Whether the plan may change anything.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Gate {
    Open,
    /// Raft agrees the quorum is lost: advise a restore.
    Lost,
    /// Nothing is changed for now, for the reason given.
    Wait(String),
}

/// Lost only when raft agrees: no leader with a quorum answers either. A leader that says it
/// has one while the probes say otherwise means the views differ (a partition around the
/// member asked, a slow disk): change nothing, but do not advise a restore.
fn gate(quorum: Quorum, observed: &Observed) -> Gate {
    if quorum.tolerance() < 0 && observed.leader.is_none() {
        return Gate::Lost;
    }
    if quorum.tolerance() < 0 {
        return Gate::Wait(format!(
            "{} leads with a quorum, but only {} of {} voters look healthy from here (reachable, \
             data dir writable): nothing is changed while the views differ; run plan against \
             another member, or look at the members' disks",
            observed.leader.as_deref().unwrap_or("a leader"),
            quorum.healthy,
            quorum.voters
        ));
    }
    if observed.leader.is_none() {
        return Gate::Wait(format!(
            "no leader, although {} of {} voters answer: an election is under way; run this \
             again in a few seconds",
            quorum.healthy, quorum.voters
        ));
    }
    Gate::Open
}

/// A step that leaves the voters as they are (`q`).
fn steady(action: Action, reason: String, q: Quorum) -> Step {
    Step {
        action,
        reason,
        tolerance_before: q.tolerance(),
        tolerance_after: q.tolerance(),
    }
}

/// ` (why)` after a member that did not answer, or nothing.
fn why_unreachable(m: &ObservedMember) -> String {
    m.error
        .as_deref()
        .map(|e| format!(" ({e})"))
        .unwrap_or_default()
}
