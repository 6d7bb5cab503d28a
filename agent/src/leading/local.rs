//! What this node keeps for leading and nothing else uses: its settings as a leader (cluster id,
//! certificate lifetime, the repairs' flags), the clocks it judges leases and token expiry on
//! during its term, the lock that serializes membership changes, and the log of the changes it
//! made, and the FleetLock health gates it runs (`gates.rs`). Held by the agent, handed to leader actions through [`super::Leader`].

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use super::gates::Gates;
use crate::api::types::MembershipEvent;
use crate::clock::TermClock;
use crate::config::FleetLockGates;
use crate::policy::Automation;

/// A leader's settings, fixed for the life of the process.
#[derive(Debug, Clone)]
pub struct LeaderSettings {
    pub cluster_id: String,
    /// The CA pin this node started with: what tokens carry before any state is applied.
    pub start_ca_pin: String,
    /// `--cert-validity`: lifetime of the certificates this node issues as leader.
    pub cert_validity: Duration,
    /// The repairs' settings from this node's flags (the replicated ones win once written).
    pub automation: Automation,
    /// A nonvoter is promoted only after it has been in the configuration this long.
    pub promote_after: Duration,
    /// `--fleetlock-min-tolerance`: the voters FleetLock's quorum gate keeps to spare once a
    /// voter reboots (`None`: the gate is off).
    pub fleetlock_min_tolerance: Option<u32>,
    /// `--fleetlock-gate`, `--fleetlock-gate-timeout`: the gates this node runs as leader.
    pub fleetlock_gates: FleetLockGates,
}

/// This node's leader-side state (see the module comment).
pub struct LeaderLocal {
    pub settings: LeaderSettings,
    /// This node's count of the lease clock while it leads (see `leader::lease`).
    pub lease_clock: TermClock,
    /// This node's count of the token clock while it leads (see `Leader::cluster_now`).
    pub token_clock: TermClock,
    /// Held by a membership operation (`node remove`, the reconciler's changes), so each
    /// quorum check sees the one before it.
    pub membership_ops: tokio::sync::Mutex<()>,
    membership_log: Mutex<MembershipLog>,
    /// The FleetLock health gates this node defines, with their recent results.
    pub gates: Gates,
}

impl LeaderLocal {
    pub fn new(settings: LeaderSettings) -> Self {
        Self {
            gates: Gates::new(settings.fleetlock_gates.clone()),
            settings,
            lease_clock: TermClock::default(),
            token_clock: TermClock::default(),
            membership_ops: tokio::sync::Mutex::new(()),
            membership_log: Mutex::default(),
        }
    }

    /// Records an automatic or operator membership change for `muster status`.
    pub fn record_membership_event(&self, change: String, cause: String) {
        if let Ok(mut log) = self.membership_log.lock() {
            log.record(change, cause, crate::clock::now_ms());
        }
    }

    /// What the reconciler is waiting for now, as sentences.
    pub fn set_membership_waits(&self, waits: Vec<String>) {
        if let Ok(mut log) = self.membership_log.lock() {
            log.waiting = waits;
        }
    }

    /// The latest membership events (oldest first) and the current waits.
    pub fn membership_log(&self) -> (Vec<MembershipEvent>, Vec<String>) {
        self.membership_log
            .lock()
            .map(|log| (log.events.iter().cloned().collect(), log.waiting.clone()))
            .unwrap_or_default()
    }
}

/// The membership changes this node made while it led, newest last, and what its reconciler
/// waits for. Kept in memory: a new leader starts an empty log (the agent logs say more).
#[derive(Default)]
struct MembershipLog {
    events: VecDeque<MembershipEvent>,
    waiting: Vec<String>,
}

impl MembershipLog {
    /// How many events `muster status` shows.
    const KEEP: usize = 20;

    fn record(&mut self, change: String, cause: String, at_ms: u64) {
        if self.events.len() == Self::KEEP {
            self.events.pop_front();
        }
        self.events.push_back(MembershipEvent {
            at_ms,
            change,
            cause,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_membership_log_keeps_the_latest_twenty_events_oldest_first() {
        let mut log = MembershipLog::default();
        for i in 0..25u64 {
            log.record(format!("change {i}"), "test".into(), i);
        }
        let changes: Vec<&str> = log.events.iter().map(|e| e.change.as_str()).collect();
        assert_eq!(changes.len(), MembershipLog::KEEP);
        assert_eq!(changes.first(), Some(&"change 5"));
        assert_eq!(changes.last(), Some(&"change 24"));
    }
}
