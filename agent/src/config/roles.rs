//! The membership automation settings (`--replace-after`, `--cleanup-dead-after`,
//! `--min-voters`, `--standbys`), resolved into the `policy::Automation` the reconciler reads.

use super::ConfigError;
use super::sources::{Setting, Sources};
use super::values::{count, optional_duration};
use crate::policy::Automation;

pub(super) fn resolve(src: &Sources) -> Result<Automation, ConfigError> {
    Ok(Automation {
        replace_after: optional_duration(
            Setting::ReplaceAfter,
            src.text(Setting::ReplaceAfter)?,
            Automation::DEFAULT_REPLACE_AFTER,
        )?,
        cleanup_dead_after: optional_duration(
            Setting::CleanupDeadAfter,
            src.text(Setting::CleanupDeadAfter)?,
            Automation::DEFAULT_CLEANUP_DEAD_AFTER,
        )?,
        min_voters: count(
            Setting::MinVoters,
            src.text(Setting::MinVoters)?,
            Automation::DEFAULT_MIN_VOTERS,
            1..=7,
        )?,
        standbys: count(
            Setting::Standbys,
            src.text(Setting::Standbys)?,
            Automation::DEFAULT_STANDBYS,
            0..=100,
        )?,
    })
}
