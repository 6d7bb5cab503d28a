//! The membership settings on the leader: which ones are in force (the replicated ones once
//! `muster apply` wrote them, else this leader's flags), read and written through the log.

use std::time::Duration;

use crate::api::ApiError;
use crate::api::probe::{SettingsInfo, SettingsUpdate};
use crate::leading::{Leader, Replica};
use crate::policy::Automation;
use crate::state::Request;
use crate::state::settings::MembershipSettings;

/// The repairs' settings in force: the replicated ones when written, else the leader's flags.
pub fn effective(flags: Automation, replicated: Option<MembershipSettings>) -> Automation {
    let Some(s) = replicated else {
        return flags;
    };
    let delay = |ms: u64| (ms > 0).then(|| Duration::from_millis(ms));
    Automation {
        replace_after: delay(s.replace_after_ms),
        cleanup_dead_after: delay(s.cleanup_dead_after_ms),
        min_voters: s.min_voters as usize,
        standbys: s.standbys as usize,
    }
}

fn millis(delay: Option<Duration>) -> u64 {
    delay.map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The settings in force now (a linearizable read).
pub async fn get(leader: Leader<'_, impl Replica>) -> Result<SettingsInfo, ApiError> {
    let replicated = leader.replica.read(|s| s.settings).await?;
    let a = effective(leader.settings().automation, replicated);
    Ok(SettingsInfo {
        settings: SettingsUpdate {
            replace_after_ms: millis(a.replace_after),
            cleanup_dead_after_ms: millis(a.cleanup_dead_after),
            min_voters: u32::try_from(a.min_voters).unwrap_or(u32::MAX),
            standbys: u32::try_from(a.standbys).unwrap_or(u32::MAX),
        },
        source: if replicated.is_some() {
            "cluster"
        } else {
            "leader_flags"
        }
        .into(),
    })
}

/// Writes the settings for every leader from now on.
pub async fn set(
    leader: Leader<'_, impl Replica>,
    update: SettingsUpdate,
) -> Result<SettingsInfo, ApiError> {
    let settings = MembershipSettings {
        replace_after_ms: update.replace_after_ms,
        cleanup_dead_after_ms: update.cleanup_dead_after_ms,
        min_voters: update.min_voters,
        standbys: update.standbys,
    };
    settings
        .check()
        .map_err(|e| ApiError::invalid(e.to_string()))?;
    leader
        .replica
        .write(Request::SetSettings { settings })
        .await?;
    get(leader).await
}
