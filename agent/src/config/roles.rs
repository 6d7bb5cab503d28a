//! The membership automation settings (`--replace-after`, `--cleanup-dead-after`,
//! `--min-voters`, `--standbys`), resolved into the `policy::Automation` the reconciler reads,
//! and FleetLock's quorum gate: the floor of voters it keeps (`--fleetlock-min-tolerance`) and
//! the id this machine's Zincati asks with (`--fleetlock-id`); and the failure zone the role
//! policy spreads voters over (`--zone`).

use super::ConfigError;
use super::sources::{Setting, Sources};
use super::values::{count, invalid, optional_duration};
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

/// Voters the quorum gate keeps to spare once a voter reboots: a number from 0 to 3 (by default
/// 0: a voter may reboot while the others keep a majority), or `off`.
pub(super) fn fleetlock_min_tolerance(src: &Sources) -> Result<Option<u32>, ConfigError> {
    let Some(raw) = src.text(Setting::FleetlockMinTolerance)? else {
        return Ok(Some(0));
    };
    match raw.trim() {
        "off" => Ok(None),
        n => match n.parse::<u32>() {
            Ok(n) if n <= 3 => Ok(Some(n)),
            _ => Err(invalid(
                Setting::FleetlockMinTolerance,
                format!(
                    "{raw:?} is neither a number of voters from 0 to 3 nor `off` (no quorum \
                     gate)"
                ),
            )),
        },
    }
}

/// The FleetLock id of this machine's Zincati: `--fleetlock-id`, else the one Zincati derives
/// from /etc/machine-id (`None` when that cannot be read: this machine's locks then go
/// ungated until its id is given).
pub(super) fn fleetlock_id(src: &Sources) -> Result<Option<String>, ConfigError> {
    match src.text(Setting::FleetlockId)? {
        Some(id) if crate::state::fleetlock::valid_id(&id) => Ok(Some(id)),
        Some(id) => Err(invalid(
            Setting::FleetlockId,
            format!(
                "{id:?} is no FleetLock id: 1 to 253 printable characters, as Zincati's `node_uuid`"
            ),
        )),
        None => Ok(muster_shared::machine_id::this_machine_zincati_id()),
    }
}

/// This machine's failure zone (`--zone`), checked with [`crate::state::valid_zone`].
pub(super) fn zone(src: &Sources) -> Result<Option<String>, ConfigError> {
    match src.text(Setting::Zone)? {
        Some(zone) if crate::state::valid_zone(&zone) => Ok(Some(zone)),
        Some(zone) => Err(invalid(
            Setting::Zone,
            format!(
                "{zone:?} is no zone name: 1 to 63 letters, digits, `.`, `_` or `-` (such as \
                 us-east-1a or rack-3)"
            ),
        )),
        None => Ok(None),
    }
}
