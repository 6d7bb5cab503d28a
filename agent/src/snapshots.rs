//! Scheduled snapshots (`--snapshot-every`, `--snapshot-keep`, `--snapshot-dir`): while this
//! member is a voter it writes the committed cluster state into its snapshot dir on a schedule,
//! exactly as `muster backup` writes it (the same file, restorable with `muster restore`),
//! reads each one back to verify it, and deletes the oldest beyond `--snapshot-keep`.
//!
//! Every voter takes its own, rather than the leader alone: a copy then sits on every voter's
//! disk (the machine that led last is often the one that is gone), the schedule does not move
//! or reset with leadership, and a member's retention only ever deletes its own files. Each
//! snapshot is the state as of a linearizable read through the leader (`LeaderOp::Backup`), so
//! every voter's copy holds every write acknowledged before it was taken.
//!
//! [`file_name`] and [`to_prune`] are the policy (pure, tested below); [`schedule_loop`] carries
//! it out; [`list`] is what `muster backup list` prints.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use serde::Serialize;

use crate::agent::Agent;
use crate::backup_file::{self, BackupSnapshot};
use crate::config::SnapshotSchedule as Schedule;
use crate::leader::{self, Authority, LeaderOp};

/// The file names this module writes and prunes: `muster-<cluster>-<UTC time>-i<index>.backup`.
const PREFIX: &str = "muster-";
const SUFFIX: &str = ".backup";

/// Why a scheduled snapshot was not written.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("the leader did not hand out the state: {0}")]
    Read(#[from] crate::api::ApiError),
    #[error("the leader's answer is not a backup: {0}")]
    Answer(serde_json::Error),
    #[error(transparent)]
    Encode(#[from] backup_file::BackupError),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} does not read back as written ({why}); it was deleted")]
    Verify { path: PathBuf, why: String },
}

/// `20261126T121500Z` for a time in milliseconds since the epoch (UTC, to the second): names
/// that sort as the times they carry.
pub fn utc_stamp(ms: u64) -> String {
    let time = UNIX_EPOCH + Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(time)
        .to_string()
        .replace(['-', ':'], "")
}

/// The file name of a snapshot of `cluster_id` taken at `created_ms` holding log index `index`.
pub fn file_name(cluster_id: &str, created_ms: u64, index: u64) -> String {
    let cluster: String = cluster_id.chars().take(12).collect();
    format!(
        "{PREFIX}{cluster}-{}-i{index}{SUFFIX}",
        utc_stamp(created_ms)
    )
}

/// Whether a file name is one of ours (a scheduled snapshot), for listing and pruning: other
/// files in the directory are never touched.
fn is_snapshot_name(name: &str) -> bool {
    name.starts_with(PREFIX) && name.ends_with(SUFFIX)
}

/// The snapshots to delete so that the newest `keep` remain: the oldest by the time in their
/// names (the name sorts by time within a cluster; across clusters, by cluster, then time,
/// which keeps a restored cluster's files apart from the old cluster's).
pub fn to_prune(names: &[String], keep: usize) -> Vec<String> {
    let mut ours: Vec<&String> = names.iter().filter(|n| is_snapshot_name(n)).collect();
    ours.sort_by_key(|n| stamp_of(n));
    let excess = ours.len().saturating_sub(keep);
    ours.into_iter().take(excess).cloned().collect()
}

/// The time stamp inside a snapshot name (`…-20261126T121500Z-i42.backup`), for ordering.
fn stamp_of(name: &str) -> String {
    name.rsplit('-')
        .nth(1)
        .map(str::to_string)
        .unwrap_or_default()
}

/// Takes one snapshot into `schedule.dir`, verifies it, prunes; returns the file written.
pub async fn take(agent: &Agent, schedule: &Schedule) -> Result<PathBuf, SnapshotError> {
    // The member's own socket authority: whoever set --snapshot-every runs this agent, and may
    // read its socket (and so take a backup) anyway.
    let answer = leader::run(agent, &Authority::LocalSocket, LeaderOp::Backup).await?;
    let snapshot: BackupSnapshot = serde_json::from_value(answer).map_err(SnapshotError::Answer)?;
    let created_ms = crate::clock::now_ms();
    let bytes = backup_file::encode(&snapshot, created_ms)?;
    let dir = &schedule.dir;
    std::fs::create_dir_all(dir).map_err(|source| SnapshotError::Write {
        path: dir.clone(),
        source,
    })?;
    let path = dir.join(file_name(
        &snapshot.cluster_id,
        created_ms,
        snapshot.applied_index,
    ));
    // Written to a temporary file, fsync'd, renamed, and the directory fsync'd: a power cut
    // leaves the old set of snapshots or the new one, never a torn file under a final name.
    crate::datadir::write_private(&path, &bytes).map_err(|source| SnapshotError::Write {
        path: path.clone(),
        source,
    })?;
    verify(&path, &bytes)?;
    prune(dir, schedule.keep);
    Ok(path)
}

/// Reads `path` back from disk and decodes it as `muster restore` would.
fn verify(path: &Path, written: &[u8]) -> Result<(), SnapshotError> {
    let why = match std::fs::read(path) {
        Ok(read) if read == written => match backup_file::decode(&read) {
            Ok(_) => return Ok(()),
            Err(e) => e.to_string(),
        },
        Ok(read) => format!("{} bytes read, {} written", read.len(), written.len()),
        Err(e) => e.to_string(),
    };
    let _ = std::fs::remove_file(path);
    Err(SnapshotError::Verify {
        path: path.to_path_buf(),
        why,
    })
}

/// Deletes the oldest snapshots beyond `keep`; a failure is logged, never fatal (the next
/// round tries again).
fn prune(dir: &Path, keep: usize) {
    let names: Vec<String> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot list the snapshot dir to prune it");
            return;
        }
    };
    for name in to_prune(&names, keep) {
        match std::fs::remove_file(dir.join(&name)) {
            Ok(()) => tracing::info!(file = %name, keep, "old snapshot deleted"),
            Err(e) => tracing::warn!(file = %name, error = %e, "cannot delete an old snapshot"),
        }
    }
}

/// Takes a snapshot every `schedule.every` while this member is a voter, for as long as the
/// agent runs. The first comes one interval after the start, so that a restart loop does not
/// write a snapshot per restart.
pub async fn schedule_loop(agent: Arc<Agent>, schedule: Schedule) {
    tracing::info!(
        every = %muster_shared::duration::format_duration(schedule.every),
        keep = schedule.keep,
        dir = %schedule.dir.display(),
        "scheduled snapshots on"
    );
    let mut ticks =
        tokio::time::interval_at(tokio::time::Instant::now() + schedule.every, schedule.every);
    // A machine that was suspended takes one snapshot when it wakes, not all it missed.
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if !agent.raft().view().voters.contains(&agent.node_id()) {
            tracing::debug!("not a voter: no scheduled snapshot this time");
            continue;
        }
        match take(&agent, &schedule).await {
            Ok(path) => tracing::info!(file = %path.display(), "snapshot written and verified"),
            Err(e) => {
                tracing::warn!(error = %e, "scheduled snapshot failed; trying again at the next interval")
            }
        }
    }
}

/// One snapshot file as `muster backup list` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Listed {
    pub file: String,
    pub bytes: u64,
    /// From the file's header; absent when the file is not a readable backup.
    pub cluster_id: Option<String>,
    pub created_ms: Option<u64>,
    pub applied_index: Option<u64>,
    pub members: Option<usize>,
    pub keys: Option<usize>,
    /// Whether the whole file checks out (header, size, checksum, state).
    pub verified: bool,
    /// Why not, when it does not.
    pub problem: Option<String>,
}

/// Every scheduled snapshot in `dir`, oldest first, each read and checked in full.
pub fn list(dir: &Path) -> std::io::Result<Vec<Listed>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| is_snapshot_name(n))
        .collect();
    names.sort_by_key(|n| stamp_of(n));
    Ok(names
        .into_iter()
        .map(|name| {
            let path = dir.join(&name);
            let read = std::fs::read(&path);
            let bytes = read.as_ref().map(|b| b.len() as u64).unwrap_or(0);
            let decoded = read
                .map_err(|e| e.to_string())
                .and_then(|b| backup_file::decode(&b).map_err(|e| e.to_string()));
            match decoded {
                Ok((header, _)) => Listed {
                    file: path.display().to_string(),
                    bytes,
                    cluster_id: Some(header.cluster_id),
                    created_ms: Some(header.created_ms),
                    applied_index: Some(header.applied_index),
                    members: Some(header.members),
                    keys: Some(header.keys),
                    verified: true,
                    problem: None,
                },
                Err(problem) => Listed {
                    file: path.display().to_string(),
                    bytes,
                    cluster_id: None,
                    created_ms: None,
                    applied_index: None,
                    members: None,
                    keys: None,
                    verified: false,
                    problem: Some(problem),
                },
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_cluster_utc_time_and_index_and_sort_by_time() {
        // 2026-11-26T12:15:00Z
        let ms = 1_795_695_300_000;
        assert_eq!(
            file_name("00112233445566778899aabb", ms, 42),
            "muster-001122334455-20261126T121500Z-i42.backup"
        );
        assert_eq!(utc_stamp(0), "19700101T000000Z");
        let earlier = file_name("c", ms - 1_000, 9_999);
        let later = file_name("c", ms, 1);
        assert!(stamp_of(&earlier) < stamp_of(&later));
    }

    #[test]
    fn pruning_keeps_the_newest_and_touches_nothing_else() {
        let at = |s: u64| file_name("c", 1_795_695_300_000 + s * 1000, s);
        let table: &[(&[u64], usize, &[u64])] = &[
            // (snapshots present, keep, deleted)
            (&[], 3, &[]),
            (&[1, 2], 3, &[]),
            (&[1, 2, 3], 3, &[]),
            (&[1, 2, 3, 4], 3, &[1]),
            (&[4, 1, 3, 2, 5], 2, &[1, 2, 3]),
            (&[7], 1, &[]),
        ];
        for (present, keep, deleted) in table {
            let mut names: Vec<String> = present.iter().map(|s| at(*s)).collect();
            names.push("notes.txt".into());
            names.push("muster-c-other.tmp".into());
            let got = to_prune(&names, *keep);
            let want: Vec<String> = deleted.iter().map(|s| at(*s)).collect();
            assert_eq!(got, want, "present {present:?}, keep {keep}");
        }
    }
}
