//! The newest log entries, kept in memory after they are durable: replication reads what the
//! leader has just appended, once per follower and entry, and serving that from memory saves
//! each read a trip to a blocking thread and fjall (two thread hand-overs per follower per
//! write, a visible share of a leader's CPU with a single writer). Anything not held here (a
//! follower far behind, a range cut by a truncate or purge) is read from the store as before.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::Entry;

use super::TypeConfig;

/// Entries held at most, and about the most bytes (their stored size).
const MAX_ENTRIES: usize = 1024;
const MAX_BYTES: usize = 8 * 1024 * 1024;

/// Shared by the log store and its readers (clones).
#[derive(Clone, Default)]
pub struct LogTail {
    held: Arc<Mutex<Held>>,
}

#[derive(Default)]
struct Held {
    /// Consecutive entries, oldest first, each with its stored size.
    entries: VecDeque<(Entry<TypeConfig>, usize)>,
    bytes: usize,
}

impl Held {
    fn first_index(&self) -> Option<u64> {
        self.entries.front().map(|(e, _)| e.log_id.index)
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    fn pop_front(&mut self) {
        if let Some((_, size)) = self.entries.pop_front() {
            self.bytes -= size;
        }
    }
}

impl LogTail {
    fn held(&self) -> MutexGuard<'_, Held> {
        // A cache: a panic elsewhere leaves it usable (at worst it is cleared below).
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Entries just made durable, each with its stored size. Entries that do not follow the
    /// held ones (after a truncate, or the first append) start the tail afresh.
    pub fn appended(&self, entries: impl IntoIterator<Item = (Entry<TypeConfig>, usize)>) {
        let mut held = self.held();
        for (entry, size) in entries {
            let follows = held
                .entries
                .back()
                .is_none_or(|(last, _)| last.log_id.index + 1 == entry.log_id.index);
            if !follows {
                held.clear();
            }
            held.bytes += size;
            held.entries.push_back((entry, size));
            while held.entries.len() > MAX_ENTRIES || held.bytes > MAX_BYTES {
                held.pop_front();
            }
        }
    }

    /// Forgets every entry at or after `since` (a truncate).
    pub fn truncated(&self, since: u64) {
        let mut held = self.held();
        while held
            .entries
            .back()
            .is_some_and(|(last, _)| last.log_id.index >= since)
        {
            if let Some((_, size)) = held.entries.pop_back() {
                held.bytes -= size;
            }
        }
    }

    /// Forgets every entry up to `upto` (a purge).
    pub fn purged(&self, upto: u64) {
        let mut held = self.held();
        while held.first_index().is_some_and(|first| first <= upto) {
            held.pop_front();
        }
    }

    /// Entries `[start, end)` if every one is held, stopping once they hold `budget` bytes
    /// (always at least one); `None` when the range is not all here.
    pub fn get(&self, start: u64, end: u64, budget: usize) -> Option<Vec<Entry<TypeConfig>>> {
        if end <= start {
            return Some(Vec::new());
        }
        let held = self.held();
        let first = held.first_index()?;
        let last = held.entries.back()?.0.log_id.index;
        if start < first || end - 1 > last {
            return None;
        }
        let mut out = Vec::new();
        let mut bytes = 0usize;
        let skip = usize::try_from(start - first).ok()?;
        for (entry, size) in held.entries.iter().skip(skip) {
            if entry.log_id.index >= end {
                break;
            }
            out.push(entry.clone());
            bytes = bytes.saturating_add(*size);
            if bytes >= budget {
                break;
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, EntryPayload, LogId};

    use super::*;

    fn entry(index: u64) -> (Entry<TypeConfig>, usize) {
        (
            Entry {
                log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
                payload: EntryPayload::Blank,
            },
            100,
        )
    }

    fn indexes(entries: Option<Vec<Entry<TypeConfig>>>) -> Option<Vec<u64>> {
        entries.map(|e| e.iter().map(|e| e.log_id.index).collect())
    }

    #[test]
    fn serves_only_ranges_it_holds_whole() {
        let tail = LogTail::default();
        assert_eq!(indexes(tail.get(1, 2, usize::MAX)), None);
        tail.appended((5..=9).map(entry));
        assert_eq!(indexes(tail.get(6, 9, usize::MAX)), Some(vec![6, 7, 8]));
        assert_eq!(indexes(tail.get(5, 10, 250)), Some(vec![5, 6, 7]));
        assert_eq!(indexes(tail.get(4, 6, usize::MAX)), None, "4 is not held");
        assert_eq!(indexes(tail.get(8, 11, usize::MAX)), None, "10 is not held");
        assert_eq!(indexes(tail.get(7, 7, usize::MAX)), Some(vec![]));
    }

    #[test]
    fn truncate_purge_and_a_gap_forget_what_no_longer_holds() {
        let tail = LogTail::default();
        tail.appended((1..=10).map(entry));
        tail.truncated(8);
        assert_eq!(indexes(tail.get(7, 8, usize::MAX)), Some(vec![7]));
        assert_eq!(indexes(tail.get(8, 9, usize::MAX)), None);
        // New entries 8.. after the truncate follow 7.
        tail.appended((8..=9).map(entry));
        assert_eq!(indexes(tail.get(6, 10, usize::MAX)), Some(vec![6, 7, 8, 9]));
        tail.purged(6);
        assert_eq!(indexes(tail.get(6, 7, usize::MAX)), None);
        assert_eq!(indexes(tail.get(7, 10, usize::MAX)), Some(vec![7, 8, 9]));
        // Entries that do not follow start the tail afresh.
        tail.appended([entry(20)]);
        assert_eq!(indexes(tail.get(9, 10, usize::MAX)), None);
        assert_eq!(indexes(tail.get(20, 21, usize::MAX)), Some(vec![20]));
    }

    #[test]
    fn holds_a_bounded_number_of_entries() {
        let tail = LogTail::default();
        tail.appended((1..=(MAX_ENTRIES as u64 + 10)).map(entry));
        assert_eq!(indexes(tail.get(1, 2, usize::MAX)), None);
        assert!(tail.get(11, 12, usize::MAX).is_some());
        assert_eq!(tail.held().entries.len(), MAX_ENTRIES);
        assert_eq!(tail.held().bytes, MAX_ENTRIES * 100);
    }
}
