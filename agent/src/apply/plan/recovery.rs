//! The lost-quorum branch of the plan: which machine to recover or restore on and which to
//! rejoin, and the commands that say so. Separate from the rest of the plan because it changes
//! nothing in the cluster: it only advises `muster recover` on the most up-to-date survivor
//! (when one answers and holds more than the newest backup) or a rebuild from a backup, paths
//! with their own reasoning.

use serde::Serialize;

use super::{Observed, ObservedMember};
use crate::apply::manifest::{DesiredMember, Manifest};

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
    /// What `restore_on` has applied, when it answered: a recovery there keeps at least that.
    pub survivor_applied: Option<u64>,
    /// The members that do not answer: the ones `muster recover` is told are lost.
    pub unreachable: Vec<String>,
    /// The members that answer besides `restore_on`: they follow it after a recovery.
    pub other_survivors: Vec<String>,
}

/// The newest backup of the cluster that was found: its file and the log index it holds.
#[derive(Debug, Clone, Copy)]
pub struct FoundBackup<'a> {
    pub file: &'a str,
    pub applied_index: u64,
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
            .filter(|dir| crate::apply::manifest::is_plain_dir(dir));
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

pub(super) fn recovery(desired: &Manifest, observed: &Observed) -> Recovery {
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
    let survivor_applied = applied(&restore_on.name);
    let unreachable = observed
        .members
        .iter()
        .filter(|m| !m.reachable)
        .map(|m| m.name.clone())
        .collect();
    let other_survivors = observed
        .members
        .iter()
        .filter(|m| m.reachable && m.name != restore_on.name)
        .map(|m| m.name.clone())
        .collect();
    Recovery {
        survivor_applied,
        unreachable,
        other_survivors,
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

/// Whether `muster recover` on the survivor keeps at least what the backup would: a survivor
/// answered and has applied as far as the newest backup or further (or no backup was found).
/// Recovering then loses nothing the backup has, and keeps the cluster's id, its members'
/// certificates and the survivors' data dirs, where a restore rebuilds all of them.
pub fn recover_keeps_more(r: &Recovery, backup: Option<FoundBackup<'_>>) -> bool {
    match (r.survivor_applied, backup) {
        (None, _) => false,
        (Some(_), None) => true,
        (Some(applied), Some(b)) => applied >= b.applied_index,
    }
}

/// The disaster-recovery steps for a lost quorum, as commands to run. `backup` is the newest
/// backup of the cluster found (`--backups DIR`), if any; `file` the cluster.toml path. When a
/// survivor holds as much as that backup or more, `muster recover` there comes first.
pub fn recovery_steps(
    r: &Recovery,
    cluster_id: &str,
    backup: Option<FoundBackup<'_>>,
    file: &str,
) -> Vec<String> {
    if recover_keeps_more(r, backup) {
        return recover_steps(r, backup);
    }
    restore_steps(r, cluster_id, backup.map(|b| b.file), file)
}

/// `muster recover` on the most up-to-date survivor.
fn recover_steps(r: &Recovery, backup: Option<FoundBackup<'_>>) -> Vec<String> {
    let t = &r.restore_on;
    let applied = r.survivor_applied.unwrap_or(0);
    let than_backup = match backup {
        Some(b) => format!(
            ", as far as the newest backup ({}, index {}) or further",
            b.file, b.applied_index
        ),
        None => String::new(),
    };
    let lost = r.unreachable.join(",");
    let mut steps = vec![format!(
        "The quorum is lost: {} of {} voters answer ({}); {} are needed. Nothing was changed. \
         {} holds the cluster's log through index {applied}{than_backup}: if the members that \
         do not answer are gone for good, recover the cluster from it (docs/backup.md, \
         \"Recover from the survivors\"); if they can come back, start them instead.",
        r.reachable_voters.len(),
        r.voters.len(),
        answering(r),
        r.quorum,
        t.name
    )];
    steps.push(
        "Stop `muster agent` on every machine of the cluster that still runs (systemctl stop \
         muster)."
            .to_string(),
    );
    steps.push(format!(
        "On {name}: check the plan, then carry it out:\n    \
         muster recover --lost {lost} --data-dir {dir}\n    \
         muster recover --lost {lost} --data-dir {dir} --yes",
        name = t.name,
        dir = t.data_dir,
    ));
    let mut start = format!(
        "Start the agent on {} (systemctl start muster): it leads at once",
        t.name
    );
    if !r.other_survivors.is_empty() {
        start.push_str(&format!(
            "; then on {}, unchanged: they follow it",
            r.other_survivors.join(", ")
        ));
    }
    steps.push(format!("{start}."));
    steps.push(format!(
        "Wipe the data dirs of {} before those machines boot again, and add machines back with \
         `muster apply` (it issues join tokens).",
        r.unreachable.join(", ")
    ));
    steps
}

fn answering(r: &Recovery) -> String {
    if r.reachable_voters.is_empty() {
        "none".to_string()
    } else {
        r.reachable_voters.join(", ")
    }
}

/// A rebuild from the newest backup.
fn restore_steps(r: &Recovery, cluster_id: &str, backup: Option<&str>, file: &str) -> Vec<String> {
    let answering = answering(r);
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
