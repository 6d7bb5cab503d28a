//! The cluster's membership settings in the replicated state, as `muster apply` writes them
//! from `cluster.toml`. Until the first write the leader uses its own flags (`--replace-after`,
//! `--cleanup-dead-after`, `--min-voters`, `--standbys`); once written, these win on every
//! leader, so a leader change cannot change how the cluster repairs itself.

use serde::{Deserialize, Serialize};

/// Fewest members automatic cleanup may leave (below three a cluster tolerates no failure).
pub const MIN_MIN_VOTERS: u32 = 1;
/// Most `min_voters` can usefully be: the voter table never makes more than seven voters.
pub const MAX_MIN_VOTERS: u32 = 7;
/// Most standbys (as `--standbys`): each one is a replication stream the leader feeds.
pub const MAX_STANDBYS: u32 = 100;
/// Shortest and longest replacement or cleanup delay (as the flags); `0` turns a repair off.
pub const MIN_DELAY_MS: u64 = 1000;
pub const MAX_DELAY_MS: u64 = 30 * 24 * 3600 * 1000;

/// The membership repairs' settings (`0` ms turns a repair off).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipSettings {
    pub replace_after_ms: u64,
    pub cleanup_dead_after_ms: u64,
    pub min_voters: u32,
    pub standbys: u32,
}

/// A membership setting no leader could act on sensibly; each says the allowed range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("min_voters {0} is not between {MIN_MIN_VOTERS} and {MAX_MIN_VOTERS}")]
    MinVoters(u32),
    #[error("standbys {0} is more than {MAX_STANDBYS}")]
    Standbys(u32),
    #[error("{0} must be 0 (off) or between 1s and 30d")]
    Delay(&'static str),
}

impl MembershipSettings {
    /// Refuses values no leader could act on sensibly.
    pub fn check(&self) -> Result<(), SettingsError> {
        if !(MIN_MIN_VOTERS..=MAX_MIN_VOTERS).contains(&self.min_voters) {
            return Err(SettingsError::MinVoters(self.min_voters));
        }
        if self.standbys > MAX_STANDBYS {
            return Err(SettingsError::Standbys(self.standbys));
        }
        for (name, ms) in [
            ("replace_after", self.replace_after_ms),
            ("cleanup_dead_after", self.cleanup_dead_after_ms),
        ] {
            if ms != 0 && !(MIN_DELAY_MS..=MAX_DELAY_MS).contains(&ms) {
                return Err(SettingsError::Delay(name));
            }
        }
        Ok(())
    }
}
