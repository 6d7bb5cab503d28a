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
use std::time::{Duration, UNIX_EPOCH};

use serde::Serialize;

use crate::agent::Here;
use crate::backup_file;
use crate::config::SnapshotSchedule as Schedule;
use crate::leader::{self, Authority};

/// The file names this module writes and prunes:
/// `muster-<cluster>-<member>-<UTC time>-i<log index>.backup`.
const PREFIX: &str = "muster-";
const SUFFIX: &str = ".backup";

/// Why a scheduled snapshot was not written.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("the leader did not hand out the state: {0}")]
    Read(#[from] crate::api::ApiError),
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

/// The short cluster id a file name carries.
fn cluster_part(cluster_id: &str) -> String {
    cluster_id.chars().take(12).collect()
}

/// The file name of a snapshot of `cluster_id` taken by member `member` (its id as
/// `state::member_id` spells it) at `created_ms`, holding log index `index`.
pub fn file_name(cluster_id: &str, member: &str, created_ms: u64, index: u64) -> String {
    format!(
        "{PREFIX}{}-{member}-{}-i{index}{SUFFIX}",
        cluster_part(cluster_id),
        utc_stamp(created_ms)
    )
}

/// What a scheduled snapshot's file name says, or `None` for any other file (an operator's
/// own `muster backup`, a file of another program): those are never pruned.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SnapshotName {
    cluster: String,
    member: String,
    stamp: String,
    index: u64,
}

fn parse_name(name: &str) -> Option<SnapshotName> {
    let body = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    let parts: Vec<&str> = body.split('-').collect();
    let [cluster, member, stamp, index] = parts.as_slice() else {
        return None;
    };
    let hex = |s: &str, most: usize| {
        !s.is_empty()
            && s.len() <= most
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let stamp_ok = stamp.len() == 16
        && stamp.as_bytes()[8] == b'T'
        && stamp.ends_with('Z')
        && stamp[..8]
            .bytes()
            .chain(stamp[9..15].bytes())
            .all(|b| b.is_ascii_digit());
    let index = index.strip_prefix('i')?.parse::<u64>().ok()?;
    (hex(cluster, 12) && hex(member, 16) && stamp_ok).then(|| SnapshotName {
        cluster: cluster.to_string(),
        member: member.to_string(),
        stamp: stamp.to_string(),
        index,
    })
}

/// The snapshots to delete so that this member's newest `keep` of this cluster remain: only
/// files named as this member writes them for this cluster (never another member's or
/// cluster's, in a shared directory, nor any other file), oldest first by log index (a member's
/// index only grows; a clock that was wrong once must not make a new snapshot look old), and
/// never `just_written`.
pub fn to_prune(
    names: &[String],
    cluster_id: &str,
    member: &str,
    keep: usize,
    just_written: &str,
) -> Vec<String> {
    let cluster = cluster_part(cluster_id);
    let mut ours: Vec<(SnapshotName, &String)> = names
        .iter()
        .filter_map(|n| parse_name(n).map(|p| (p, n)))
        .filter(|(p, _)| p.cluster == cluster && p.member == member)
        .collect();
    ours.sort_by(|(a, _), (b, _)| a.index.cmp(&b.index).then(a.stamp.cmp(&b.stamp)));
    let excess = ours.len().saturating_sub(keep);
    ours.into_iter()
        .take(excess)
        .map(|(_, n)| n.clone())
        .filter(|n| n != just_written)
        .collect()
}

/// Makes `schedule.dir` (mode 0700: the snapshots hold the CA key) and proves it takes a
/// file, at start: a path that is a file, or a directory this agent cannot write, is refused
/// as the setting it is.
pub fn prepare(schedule: &Schedule) -> Result<(), crate::config::ConfigError> {
    let dir = &schedule.dir;
    let refuse = |what: String| crate::config::ConfigError::Invalid {
        setting: "snapshot-dir",
        message: format!(
            "{}: {what}; give --snapshot-dir a directory this agent can write (or \
             --snapshot-every 0 for no scheduled snapshots)",
            dir.display()
        ),
    };
    create_private_dir(dir).map_err(|e| refuse(format!("cannot create it ({e})")))?;
    tempfile::Builder::new()
        .prefix(".muster-probe-")
        .tempfile_in(dir)
        .map(drop)
        .map_err(|e| refuse(format!("cannot write a file in it ({e})")))
}

/// Takes one snapshot into `schedule.dir`, verifies it, prunes; returns the file written.
pub async fn take(here: Here<'_>, schedule: &Schedule) -> Result<PathBuf, SnapshotError> {
    // The member's own socket authority: whoever set --snapshot-every runs this agent, and may
    // read its socket (and so take a backup) anyway.
    let snapshot = leader::ask(here, &Authority::LocalSocket, leader::ask::backup()).await?;
    let created_ms = crate::clock::now_ms();
    let bytes = backup_file::encode(&snapshot, created_ms)?;
    let dir = &schedule.dir;
    // Made again, private, if someone removed it since start.
    create_private_dir(dir).map_err(|source| SnapshotError::Write {
        path: dir.clone(),
        source,
    })?;
    let member = crate::state::member_id(here.me.node_id);
    let name = file_name(
        &snapshot.cluster_id,
        &member,
        created_ms,
        snapshot.applied_index,
    );
    let path = dir.join(&name);
    // Written to a temporary file, fsync'd, renamed, and the directory fsync'd: a power cut
    // leaves the old set of snapshots or the new one, never a torn file under a final name.
    crate::datadir::write_private(&path, &bytes).map_err(|source| SnapshotError::Write {
        path: path.clone(),
        source,
    })?;
    verify(&path, &bytes)?;
    prune(dir, &snapshot.cluster_id, &member, schedule.keep, &name);
    Ok(path)
}

/// Creates `dir` and its missing parents with mode 0700: the snapshots hold the CA key.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
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

/// Deletes this member's oldest snapshots of this cluster beyond `keep` (see [`to_prune`]); a
/// failure is logged, never fatal (the next round tries again).
fn prune(dir: &Path, cluster_id: &str, member: &str, keep: usize, just_written: &str) {
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
    for name in to_prune(&names, cluster_id, member, keep, just_written) {
        match std::fs::remove_file(dir.join(&name)) {
            Ok(()) => tracing::info!(file = %name, keep, "old snapshot deleted"),
            Err(e) => tracing::warn!(file = %name, error = %e, "cannot delete an old snapshot"),
        }
    }
}

/// Takes a snapshot every `schedule.every` while this member is a voter, for as long as the
/// agent runs. The first comes one interval after the start, so that a restart loop does not
/// write a snapshot per restart.
pub async fn schedule_loop(here: Here<'_>, schedule: Schedule) {
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
        if !here.raft().view().voters.contains(&here.me.node_id) {
            tracing::debug!("not a voter: no scheduled snapshot this time");
            continue;
        }
        match take(here, &schedule).await {
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
        .filter(|n| parse_name(n).is_some())
        .collect();
    // Oldest first: by cluster and member, then log index.
    names.sort_by_key(|n| parse_name(n).map(|p| (p.cluster, p.member, p.index, p.stamp)));
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
mod tests;
