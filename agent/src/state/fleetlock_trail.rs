//! FleetLock's audit trail in the replicated state: every slot taken and every slot given back
//! (by its holder, by an operator's force-release, or with a removed member), in the order the
//! log applied them, with the leader's clock reading the command carried. Bounded: the oldest
//! events go first.
//!
//! Only changes are recorded. A recursive lock, an unlock by a machine that holds nothing and
//! every refusal change no slot, and are not events: Zincati asks every few minutes, and a
//! trail of its no-ops would push the grants out within hours.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::NodeId;

/// Events kept. A full update round of a few hundred machines (two events each: lock and
/// unlock) fits, so the trail answers "who rebooted in the last round, and when"; and the
/// trail stays small next to the rest of the state: an event is about 100 bytes of JSON with
/// typical names, at most about 600 with names at the 253-character limit, so at most about
/// 0.6 MB in every snapshot, backup and `history` answer.
pub const MAX_EVENTS: usize = 1_000;

/// Of those, the most operator events (force-releases, auto-releases) kept. They are evicted
/// only by each other, never by machines' locks and unlocks: the FleetLock port takes requests
/// from anyone who can reach it, and a flood of lock/unlock pairs must not erase the record of
/// an operator's force-release.
pub const MAX_OPERATOR_EVENTS: usize = 100;

/// What happened to a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A machine took a slot (`pre-reboot`).
    Lock,
    /// Its holder gave the slot back (`steady-state`).
    Unlock,
    /// An operator released the slot (`muster fleetlock release`).
    ForceRelease,
    /// The member the lock came through was removed from the cluster, and the slot with it.
    AutoRelease,
}

impl EventKind {
    /// The spelling in the API and in `muster fleetlock history`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Lock => "lock",
            EventKind::Unlock => "unlock",
            EventKind::ForceRelease => "force_release",
            EventKind::AutoRelease => "auto_release",
        }
    }

    /// True for what an operator or the cluster did (not a machine's own request).
    pub fn by_operator(self) -> bool {
        matches!(self, EventKind::ForceRelease | EventKind::AutoRelease)
    }

    /// True for the kinds that give a slot back.
    pub fn releases(self) -> bool {
        self != EventKind::Lock
    }
}

/// One event of the trail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The event's place in the trail: 1 for the first event the cluster ever recorded, one
    /// more for each after it. Never reused, so it keeps counting while old events drop out.
    pub seq: u64,
    pub kind: EventKind,
    pub group: String,
    /// The machine's FleetLock id.
    pub id: String,
    /// The member the request came through: the agent whose FleetLock endpoint (lock,
    /// unlock) or operator API (force-release) received it, or the removed member
    /// (auto-release). 0 in events of commands written before the field existed.
    pub via: NodeId,
    /// The leader's wall clock (ms since the Unix epoch) when it wrote the command; 0 when the
    /// command predates the field. Never read while applying: every member records the same.
    pub at_ms: u64,
}

/// The last [`MAX_EVENTS`] events, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Trail {
    events: VecDeque<Event>,
}

impl Trail {
    /// Appends an event with the next sequence number; drops the oldest beyond the bound.
    pub fn record(&mut self, kind: EventKind, group: &str, id: &str, via: NodeId, at_ms: u64) {
        // The next number follows the newest event: the trail is never emptied once it has
        // an event (only the oldest go), so the numbers never repeat.
        let seq = self.events.back().map_or(1, |e| e.seq + 1);
        self.events.push_back(Event {
            seq,
            kind,
            group: group.to_string(),
            id: id.to_string(),
            via,
            at_ms,
        });
        // Operator events beyond their own bound go first (oldest of them), then the oldest
        // machine events: the newest event is never the one dropped, so `seq` keeps counting.
        while self.events.iter().filter(|e| e.kind.by_operator()).count() > MAX_OPERATOR_EVENTS {
            self.drop_oldest(true);
        }
        while self.events.len() > MAX_EVENTS {
            self.drop_oldest(false);
        }
    }

    /// Drops the oldest operator event (`operator`), or the oldest machine event.
    fn drop_oldest(&mut self, operator: bool) {
        if let Some(at) = self
            .events
            .iter()
            .position(|e| e.kind.by_operator() == operator)
        {
            self.events.remove(at);
        }
    }

    /// Oldest first.
    pub fn events(&self) -> impl DoubleEndedIterator<Item = &Event> + ExactSizeIterator {
        self.events.iter()
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trail_keeps_the_newest_events_and_never_reuses_a_number() {
        let mut t = Trail::default();
        for i in 0..(MAX_EVENTS as u64 + 5) {
            t.record(EventKind::Lock, "g", &format!("m{i}"), 1, i);
        }
        assert_eq!(t.len(), MAX_EVENTS);
        let first = t.events().next().expect("an event");
        assert_eq!((first.seq, first.id.as_str()), (6, "m5"));
        let last = t.events().next_back().expect("an event");
        assert_eq!(last.seq, MAX_EVENTS as u64 + 5);
        let seqs: Vec<u64> = t.events().map(|e| e.seq).collect();
        assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    }

    #[test]
    fn a_flood_of_locks_and_unlocks_never_erases_an_operators_force_release() {
        let mut t = Trail::default();
        t.record(EventKind::ForceRelease, "g", "stuck", 7, 1);
        for i in 0..(2 * MAX_EVENTS as u64) {
            let kind = if i % 2 == 0 {
                EventKind::Lock
            } else {
                EventKind::Unlock
            };
            t.record(kind, &format!("g{}", i % 7), "m", 1, i);
        }
        assert_eq!(t.len(), MAX_EVENTS);
        let first = t.events().next().expect("an event");
        assert_eq!((first.seq, first.kind), (1, EventKind::ForceRelease));
        let last = t.events().next_back().expect("an event");
        assert_eq!(last.seq, 2 * MAX_EVENTS as u64 + 1);
        // Operator events have their own bound, and drop only each other.
        for i in 0..(MAX_OPERATOR_EVENTS as u64 + 3) {
            t.record(EventKind::AutoRelease, "g", &format!("r{i}"), 2, i);
        }
        let operator: Vec<&Event> = t.events().filter(|e| e.kind.by_operator()).collect();
        assert_eq!(operator.len(), MAX_OPERATOR_EVENTS);
        assert_eq!(
            operator[0].id, "r3",
            "the oldest operator events went first"
        );
        assert_eq!(t.len(), MAX_EVENTS);
        let seqs: Vec<u64> = t.events().map(|e| e.seq).collect();
        assert!(seqs.windows(2).all(|w| w[1] > w[0]), "in order");
    }
}
