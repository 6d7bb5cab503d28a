//! Scheduled snapshots (`--snapshot-every`, `--snapshot-keep`, `--snapshot-dir`): off unless
//! an interval is given.

use std::path::Path;
use std::time::Duration;

use super::sources::{Setting, Sources};
use super::values::{count, optional_duration};
use super::{ConfigError, DEFAULT_SNAPSHOT_KEEP, SnapshotSchedule};

pub(super) fn resolve(
    src: &Sources,
    data_dir: &Path,
) -> Result<Option<SnapshotSchedule>, ConfigError> {
    // The default given stands for "off": unset and `0` both mean no schedule.
    let every = optional_duration(
        Setting::SnapshotEvery,
        src.text(Setting::SnapshotEvery)?,
        Duration::ZERO,
    )?
    .filter(|d| !d.is_zero());
    let keep = count(
        Setting::SnapshotKeep,
        src.text(Setting::SnapshotKeep)?,
        DEFAULT_SNAPSHOT_KEEP,
        1..=10_000,
    )?;
    let dir = src
        .path(
            &src.flags.snapshot_dir,
            "MUSTER_SNAPSHOT_DIR",
            &src.file.snapshot_dir,
        )
        .unwrap_or_else(|| data_dir.join("snapshots"));
    Ok(every.map(|every| SnapshotSchedule { every, keep, dir }))
}
