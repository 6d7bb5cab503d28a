//! The plan: what must change to turn the observed cluster into the desired one, in a
//! quorum-safe order, with the failure tolerance before and after every step. A pure function
//! of the file and the probes (table tests in `tests.rs`); `cli/apply.rs` gathers the probes and
//! carries the steps out.
//!
//! The arithmetic, as KubeOne does it for etcd: a cluster of `V` voters needs `V/2 + 1` of them
//! (the quorum); with `H` of them healthy it survives `H − quorum` more failures (the failure
//! tolerance). Removing an unreachable voter never lowers it; removing a healthy one may, and
//! is refused when it would take the tolerance below zero.

use serde::Serialize;

use super::manifest::{DesiredMember, Manifest};
use crate::api::fleetlock::FleetLockStatus;
use crate::api::probe::{NodeProbe, SettingsUpdate};

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

/// One row of the probe table: a member, a machine the file wants, or both.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProbeRow {
    pub name: String,
    pub address: String,
    /// Listed in the file.
    pub in_file: bool,
    /// `voter`, `standby`, `spare`, or `absent` (in the file, not a member).
    pub role: String,
    pub reachable: bool,
    /// Log entries it is behind the leader's commit index (members the leader replicates to).
    pub lag: Option<u64>,
    pub version: Option<String>,
    pub cert_expires_ms: Option<u64>,
    /// Its data dir is writable (as it reports it).
    pub data_dir_ok: Option<bool>,
    pub data_dir_bytes: Option<u64>,
    /// Whether it ever joined: true once it applied or was sent log entries, false for a
    /// machine the file adds (or a member that never received the log); none when it is not
    /// known (an unreachable member while no leader answers).
    pub joined: Option<bool>,
    /// Why it did not answer, or what is wrong with its data dir.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
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
    /// A FleetLock group's slots (`from`: none when it is not configured).
    SetFleetlockGroup {
        group: String,
        from: Option<u32>,
        slots: u32,
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    #[serde(flatten)]
    pub action: Action,
    pub reason: String,
    /// Failures the voters survive before and after this step.
    pub tolerance_before: i64,
    pub tolerance_after: i64,
}

/// A lost quorum: nothing is changed; the cluster is rebuilt from a backup on one machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Recovery {
    pub voters: Vec<String>,
    pub reachable_voters: Vec<String>,
    pub quorum: usize,
    /// The machine to restore on: a reachable one in the file (the most up to date), else the
    /// file's first member.
    pub restore_on: DesiredTarget,
    /// The file's other machines, to join the restored cluster.
    pub rejoin: Vec<DesiredTarget>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DesiredTarget {
    pub name: String,
    pub address: String,
    pub data_dir: String,
}

impl DesiredTarget {
    /// The machine `d` of the file, with the data dir to print for it: the file's when it
    /// gives one, else the one the member reported itself (the `--data-dir` it runs with),
    /// else the default.
    fn of(d: &DesiredMember, observed: &Observed) -> Self {
        let reported = observed
            .members
            .iter()
            .find(|m| m.name == d.name)
            .and_then(|m| m.report.as_ref())
            .and_then(|r| r.data_dir_path.clone())
            .filter(|dir| super::manifest::is_plain_dir(dir));
        let data_dir = match reported {
            Some(dir) if !d.data_dir_given => dir,
            _ => d.data_dir.clone(),
        };
        Self {
            name: d.name.clone(),
            address: d.address.clone(),
            data_dir,
        }
    }
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

/// The plan to make `observed` what `desired` describes.
pub fn plan(desired: &Manifest, observed: &Observed) -> Plan {
    let quorum = Quorum {
        voters: observed.members.iter().filter(|m| m.voter()).count(),
        healthy: observed
            .members
            .iter()
            .filter(|m| m.voter() && m.healthy())
            .count(),
    };
    let mut plan = Plan {
        cluster_id: observed.cluster_id.clone(),
        leader: observed.leader.clone(),
        voters: quorum.voters,
        healthy_voters: quorum.healthy,
        quorum: quorum.needed(),
        failure_tolerance: quorum.tolerance(),
        probes: probe_rows(desired, observed),
        quorum_lost: None,
        steps: Vec::new(),
        blocked: Vec::new(),
    };
    // Lost only when raft agrees: no leader with a quorum answers either. A leader that says
    // it has one while the probes say otherwise means the views differ (a partition around the
    // member asked, a slow disk): change nothing, but do not advise a restore.
    if quorum.tolerance() < 0 && observed.leader.is_none() {
        plan.quorum_lost = Some(recovery(desired, observed));
        return plan;
    }
    if quorum.tolerance() < 0 {
        plan.blocked.push(format!(
            "{} leads with a quorum, but only {} of {} voters look healthy from here (reachable, \
             data dir writable): nothing is changed while the views differ; run plan against \
             another member, or look at the members' disks",
            observed.leader.as_deref().unwrap_or("a leader"),
            quorum.healthy,
            quorum.voters
        ));
        return plan;
    }
    if observed.leader.is_none() {
        plan.blocked.push(format!(
            "no leader, although {} of {} voters answer: an election is under way; run this \
             again in a few seconds",
            quorum.healthy, quorum.voters
        ));
        return plan;
    }
    let in_file = |name: &str| desired.members.iter().any(|d| d.name == name);
    let member = |name: &str| observed.members.iter().find(|m| m.name == name);

    for d in &desired.members {
        if let Some(m) = member(&d.name)
            && m.address != d.address
        {
            plan.blocked.push(format!(
                "{} is a member at {}, but the file says {}: apply does not move members; \
                 correct the file, or remove {} and join the machine at its new address",
                d.name, m.address, d.address, d.name
            ));
        }
    }

    for m in observed
        .members
        .iter()
        .filter(|m| in_file(&m.name) && !m.reachable)
    {
        plan.blocked.push(format!(
            "{} is in the file but unreachable{}: start it again, or take it out of the file \
             (apply then removes it) and add its replacement under a new name",
            m.name,
            m.error
                .as_deref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default()
        ));
    }

    // Removals: the dead first (nonvoters, then voters), then the healthy, the leader last.
    let mut leaving: Vec<&ObservedMember> = observed
        .members
        .iter()
        .filter(|m| !in_file(&m.name))
        .collect();
    if !leaving.is_empty() && leaving.len() == observed.members.len() {
        plan.blocked.push(
            "the file keeps none of the current members: a cluster cannot be replaced whole; \
             list at least one current member (`muster config export` writes them)"
                .into(),
        );
        leaving.clear();
    }
    let is_leader = |m: &ObservedMember| observed.leader.as_deref() == Some(m.name.as_str());
    leaving.sort_by_key(|m| (m.reachable, m.voter(), is_leader(m), m.name.clone()));
    let mut q = quorum;
    let mut later = Vec::new();
    for m in leaving {
        if m.name == observed.asked {
            plan.blocked.push(format!(
                "{} is the member asked, and the file removes it: run plan and apply against a \
                 member that stays (--data-dir on it, or --server HOST:PORT)",
                m.name
            ));
            continue;
        }
        let after = q.without(m);
        if m.voter() && m.reachable && after.tolerance() < 0 {
            plan.blocked.push(format!(
                "removing {} would leave {} healthy of {} voters, fewer than the {} a quorum \
                 needs; start the file's new machines first, then apply again",
                m.name,
                after.healthy,
                after.voters,
                after.needed()
            ));
            continue;
        }
        let reason = if !m.reachable {
            format!(
                "not in the file; unreachable{}",
                m.error
                    .as_deref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default()
            )
        } else if is_leader(m) {
            "not in the file; the leader, so removed last (it hands over leadership)".into()
        } else {
            "not in the file".into()
        };
        let step = Step {
            action: Action::RemoveMember {
                name: m.name.clone(),
                address: m.address.clone(),
            },
            reason,
            tolerance_before: q.tolerance(),
            tolerance_after: after.tolerance(),
        };
        q = after;
        if m.reachable {
            later.push(step);
        } else {
            plan.steps.push(step);
        }
    }

    let steady = |action: Action, reason: String| Step {
        action,
        reason,
        tolerance_before: q.tolerance(),
        tolerance_after: q.tolerance(),
    };
    if let Some(from) = observed.settings {
        let s = desired.settings;
        let to = SettingsUpdate {
            replace_after_ms: s.replace_after_ms.unwrap_or(from.replace_after_ms),
            cleanup_dead_after_ms: s
                .cleanup_dead_after_ms
                .unwrap_or(from.cleanup_dead_after_ms),
            min_voters: s.min_voters.unwrap_or(from.min_voters),
            standbys: s.standbys.unwrap_or(from.standbys),
        };
        let older: Vec<&str> = observed
            .members
            .iter()
            .filter(|m| m.older())
            .map(|m| m.name.as_str())
            .collect();
        // Values are compared, not where they come from: the file `config export` wrote
        // from an untouched cluster (the leader's flags) is no change.
        if to != from {
            if older.is_empty() {
                plan.steps.push(steady(
                    Action::SetSettings { from, to },
                    "[cluster] differs from the settings in force".into(),
                ));
            } else {
                plan.blocked.push(format!(
                    "the [cluster] settings are not written while older agents run ({}): they \
                     could not read the entry; upgrade them first",
                    older.join(", ")
                ));
            }
        }
    }
    if let (Some(want), Some(have)) = (&desired.fleetlock, &observed.fleetlock) {
        if let Some(mode) = &want.unknown_groups
            && *mode != have.unknown_groups
        {
            plan.steps.push(steady(
                Action::SetUnknownGroups {
                    from: have.unknown_groups.clone(),
                    to: mode.clone(),
                },
                "[fleetlock] unknown_groups differs".into(),
            ));
        }
        for (group, slots) in &want.groups {
            let current = have.groups.iter().find(|g| g.name == *group);
            let configured = current.filter(|g| g.configured).map(|g| g.slots);
            if configured != Some(*slots) {
                plan.steps.push(steady(
                    Action::SetFleetlockGroup {
                        group: group.clone(),
                        from: configured,
                        slots: *slots,
                    },
                    match configured {
                        Some(n) => format!("the file gives group {group} {slots} slot(s), not {n}"),
                        None => format!("group {group} is not configured"),
                    },
                ));
            }
        }
        for g in have
            .groups
            .iter()
            .filter(|g| g.configured && !want.groups.contains_key(&g.name))
        {
            plan.steps.push(steady(
                Action::DeleteFleetlockGroup {
                    group: g.name.clone(),
                },
                format!("group {} is not in the file", g.name),
            ));
        }
    }

    for d in desired.members.iter().filter(|d| member(&d.name).is_none()) {
        plan.steps.push(steady(
            Action::IssueToken {
                name: d.name.clone(),
                address: d.address.clone(),
                data_dir: d.data_dir.clone(),
            },
            "in the file, not a member: start the machine with the printed command".into(),
        ));
    }
    plan.steps.extend(later);
    plan.steps.extend(upgrades(observed));
    plan
}

/// Agents older than the newest one, in the order to upgrade them: standbys and spares, then
/// the follower voters one at a time, the leader last.
fn upgrades(observed: &Observed) -> Vec<Step> {
    // An agent too old to answer the probe is older than every agent that does.
    let versioned: Vec<(&ObservedMember, &str)> = observed
        .members
        .iter()
        .filter_map(|m| match &m.report {
            Some(r) => Some((m, r.version.as_str())),
            None if m.older() => Some((m, "0-older")),
            None => None,
        })
        .collect();
    let Some(newest) = versioned
        .iter()
        .map(|(_, v)| *v)
        .max_by_key(|v| version_key(v))
    else {
        return Vec::new();
    };
    let is_leader = |m: &ObservedMember| observed.leader.as_deref() == Some(m.name.as_str());
    let mut behind: Vec<(&ObservedMember, &str)> = versioned
        .into_iter()
        .filter(|(_, v)| version_key(v) < version_key(newest))
        .collect();
    behind.sort_by_key(|(m, _)| (m.voter(), is_leader(m), m.name.clone()));
    behind
        .into_iter()
        .map(|(m, v)| Step {
            action: Action::Upgrade {
                name: m.name.clone(),
                from_version: v.to_string(),
                to_version: newest.to_string(),
            },
            reason: if is_leader(m) {
                "older than the newest agent; the leader goes last".into()
            } else if m.voter() {
                "older than the newest agent; one voter at a time, each back before the next".into()
            } else {
                "older than the newest agent; nonvoters first".into()
            },
            tolerance_before: 0,
            tolerance_after: 0,
        })
        .collect()
}

/// `1.10.0` sorts after `1.9.3` (numeric parts compared as numbers), and a release after its
/// pre-releases (`0.2.0` after `0.2.0-rc.1`), as semver orders them (build metadata ignored).
fn version_key(v: &str) -> (Vec<u64>, bool, Vec<u64>) {
    let v = v.split('+').next().unwrap_or(v);
    let (core, pre) = match v.split_once('-') {
        Some((core, pre)) => (core, Some(pre)),
        None => (v, None),
    };
    let numbers = |s: &str| -> Vec<u64> { s.split('.').map(|p| p.parse().unwrap_or(0)).collect() };
    (
        numbers(core),
        pre.is_none(),
        pre.map(numbers).unwrap_or_default(),
    )
}

fn probe_rows(desired: &Manifest, observed: &Observed) -> Vec<ProbeRow> {
    let mut rows: Vec<ProbeRow> = observed
        .members
        .iter()
        .map(|m| {
            let report = m.report.as_ref();
            let applied = report.map(|r| r.applied_index).unwrap_or(0);
            ProbeRow {
                name: m.name.clone(),
                address: m.address.clone(),
                in_file: desired.members.iter().any(|d| d.name == m.name),
                role: m.role.clone(),
                reachable: m.reachable,
                lag: m
                    .match_index
                    .map(|i| observed.commit_index.saturating_sub(i)),
                version: report.map(|r| r.version.clone()),
                cert_expires_ms: report.and_then(|r| r.cert_expires_ms),
                data_dir_ok: report.map(|r| r.data_dir.ok),
                data_dir_bytes: report.map(|r| r.data_dir.bytes),
                joined: if applied > 0 || m.match_index.is_some_and(|i| i > 0) {
                    Some(true)
                } else if report.is_some() || (observed.leader.is_some() && m.role != "spare") {
                    Some(false)
                } else {
                    // A spare has no replication progress; unreachable, nothing is known.
                    None
                },
                problem: m
                    .error
                    .clone()
                    .or_else(|| report.and_then(|r| r.data_dir.problem.clone())),
            }
        })
        .collect();
    for d in &desired.members {
        if !observed.members.iter().any(|m| m.name == d.name) {
            rows.push(ProbeRow {
                name: d.name.clone(),
                address: d.address.clone(),
                in_file: true,
                role: "absent".into(),
                reachable: false,
                lag: None,
                version: None,
                cert_expires_ms: None,
                data_dir_ok: None,
                data_dir_bytes: None,
                joined: Some(false),
                problem: None,
            });
        }
    }
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    rows
}

fn recovery(desired: &Manifest, observed: &Observed) -> Recovery {
    let voters: Vec<&ObservedMember> = observed.members.iter().filter(|m| m.voter()).collect();
    let reachable_voters: Vec<String> = voters
        .iter()
        .filter(|m| m.reachable)
        .map(|m| m.name.clone())
        .collect();
    // The most up-to-date machine that still answers and is in the file keeps its address.
    let applied = |name: &str| {
        observed
            .members
            .iter()
            .find(|m| m.name == name && m.reachable)
            .and_then(|m| m.report.as_ref())
            .map(|r| r.applied_index)
    };
    let restore_on = desired
        .members
        .iter()
        .filter(|d| applied(&d.name).is_some())
        .max_by_key(|d| (applied(&d.name), std::cmp::Reverse(d.name.clone())))
        .or_else(|| desired.members.first())
        .map(|d| DesiredTarget::of(d, observed))
        .unwrap_or(DesiredTarget {
            name: String::new(),
            address: String::new(),
            data_dir: String::new(),
        });
    Recovery {
        quorum: voters.len() / 2 + 1,
        voters: voters.iter().map(|m| m.name.clone()).collect(),
        reachable_voters,
        rejoin: desired
            .members
            .iter()
            .filter(|d| d.name != restore_on.name)
            .map(|d| DesiredTarget::of(d, observed))
            .collect(),
        restore_on,
    }
}

/// The disaster-recovery steps for a lost quorum, as commands to run. `backup` is the newest
/// backup of the cluster found (`--backups DIR`), if any; `file` the cluster.toml path.
pub fn recovery_steps(
    r: &Recovery,
    cluster_id: &str,
    backup: Option<&str>,
    file: &str,
) -> Vec<String> {
    let answering = if r.reachable_voters.is_empty() {
        "none".to_string()
    } else {
        r.reachable_voters.join(", ")
    };
    let backup_file = backup.unwrap_or("BACKUP");
    let mut steps = vec![format!(
        "The quorum is lost: {} of {} voters answer ({answering}); {} are needed. Nothing was \
         changed. A cluster without a quorum cannot commit anything, so it is rebuilt from \
         the last backup (docs/backup.md). Whatever was written after that backup is lost.",
        r.reachable_voters.len(),
        r.voters.len(),
        r.quorum
    )];
    let t = &r.restore_on;
    steps.push(
        "Stop `muster agent` on every machine of the cluster that still runs (systemctl stop \
         muster), so that the old members cannot elect a leader behind the new cluster's back."
            .to_string(),
    );
    steps.push(match backup {
        Some(found) => format!("The newest backup of cluster {cluster_id} is {found}."),
        None => format!(
            "Find the newest backup of cluster {cluster_id} (written by `muster backup`; `head -1 \
             FILE` shows its cluster_id and created_ms), and copy it to {}. Below it is called \
             BACKUP.",
            t.name
        ),
    });
    steps.push(format!(
        "On {name}: keep the old data dir aside and restore into an empty one:\n    \
         mv {dir} {dir}.lost\n    \
         muster restore {backup_file} --name {name} --advertise {addr} --data-dir {dir}\n  \
         It prints a new operator token once (keep it) and runs as the cluster's only member; \
         stop it and start the agent as usual (systemctl start muster) on the same data dir.",
        name = t.name,
        addr = t.address,
        dir = t.data_dir,
    ));
    if !r.rejoin.is_empty() {
        let names: Vec<&str> = r.rejoin.iter().map(|m| m.name.as_str()).collect();
        steps.push(format!(
            "On {} move the old data dir aside too (mv DIR DIR.lost): their data belongs to \
             the lost cluster and is refused by the new one.",
            names.join(", ")
        ));
        steps.push(format!(
            "Run `muster apply -f {file} --data-dir {}` on {} (or `--server {}` with the new \
             operator token): it issues a single-use join token for {} and prints the exact \
             `muster agent … --token …` command for each.",
            t.data_dir,
            t.name,
            t.address,
            names.join(", ")
        ));
    }
    steps
}
