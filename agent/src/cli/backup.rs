//! `muster backup FILE` (a consistent copy of the committed state, from the agent) and `muster
//! backup list` (the scheduled snapshots on disk, read without an agent). Kept apart because
//! both write or read backup files, which nothing else in the CLI touches.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{CliError, Target, output, print_json};
use crate::api::paths;
use crate::backup_file::BackupSnapshot;
use crate::{config, datadir, outln};

/// `muster backup FILE`: the committed state, checksummed, written atomically with mode 0600
/// (it holds the CA's private key).
pub async fn backup(target: &Target, file: &Path, json: bool) -> Result<(), CliError> {
    let snapshot: BackupSnapshot = target.call("GET", paths::BACKUP, None).await?;
    let bytes = crate::backup_file::encode(&snapshot, crate::clock::now_ms())
        .map_err(|e| CliError::Failed(e.to_string()))?;
    datadir::write_private(file, &bytes)
        .map_err(|e| CliError::Failed(format!("writing {}: {e}", file.display())))?;
    let summary = serde_json::json!({
        "file": file.display().to_string(),
        "cluster_id": snapshot.cluster_id,
        "applied_index": snapshot.applied_index,
        "members": snapshot.state.nodes.len(),
        "keys": snapshot.state.kv.len(),
        "bytes": bytes.len(),
    });
    if json {
        return print_json(&summary);
    }
    outln!(
        "backup of cluster {} (index {}, {} members, {} keys) written to {} ({} bytes, mode 0600: it holds the CA key)",
        snapshot.cluster_id,
        snapshot.applied_index,
        snapshot.state.nodes.len(),
        snapshot.state.kv.len(),
        file.display(),
        bytes.len()
    );
    Ok(())
}

/// `muster backup list`: the scheduled snapshots in `--snapshot-dir` (or `<data-dir>/snapshots`),
/// oldest first, each read and checked in full.
pub fn backup_list(
    snapshot_dir: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    json: bool,
) -> Result<(), CliError> {
    // As the agent resolves it: the flag, then MUSTER_SNAPSHOT_DIR, then <data-dir>/snapshots.
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let dir = snapshot_dir
        .or_else(|| env("MUSTER_SNAPSHOT_DIR").map(PathBuf::from))
        .unwrap_or_else(|| {
            data_dir
                .or_else(|| env("MUSTER_DATA_DIR").map(PathBuf::from))
                .unwrap_or_else(|| PathBuf::from(config::DEFAULT_DATA_DIR))
                .join("snapshots")
        });
    let listed = crate::snapshots::list(&dir).map_err(|e| {
        CliError::Failed(format!(
            "cannot read the snapshot dir {} ({e}): is `muster agent` running with \
             --snapshot-every, and is this its --snapshot-dir (or --data-dir)?",
            dir.display()
        ))
    })?;
    if json {
        return print_json(&listed);
    }
    if listed.is_empty() {
        outln!("no scheduled snapshots in {} yet", dir.display());
        return Ok(());
    }
    let mut rows = Vec::new();
    for l in &listed {
        let file = Path::new(&l.file)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| l.file.clone());
        let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
        rows.push(vec![
            file,
            opt(l.created_ms.map(|ms| {
                humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_millis(ms))
                    .to_string()
            })),
            opt(l.applied_index.map(|i| i.to_string())),
            opt(l.members.map(|m| m.to_string())),
            opt(l.keys.map(|k| k.to_string())),
            l.bytes.to_string(),
            match &l.problem {
                None => "ok".into(),
                Some(why) => format!("CORRUPT: {why}"),
            },
        ]);
    }
    output::print_table(
        &[
            "FILE",
            "CREATED (UTC)",
            "INDEX",
            "MEMBERS",
            "KEYS",
            "BYTES",
            "CHECK",
        ],
        rows,
        &[2, 3, 4, 5],
    );
    outln!(
        "{} snapshots in {}; restore one with `muster restore FILE --name … --advertise … --data-dir …`",
        listed.len(),
        dir.display()
    );
    Ok(())
}
