//! The revisioned key-value state behind etcd v3 discovery, pure: what a Put becomes (its
//! revision, create revision and version) and what a Range sees. A store persists each
//! [`Record`] and only then [`V3State::apply`]s it, so readers never see a write a crash could
//! take back, and replaying the records rebuilds the same state.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The revision of an empty store. etcd starts there too; the first write gets revision 2.
pub const FIRST_REVISION: u64 = 1;

/// A stored key's value and revisions (etcd's `mvccpb.KeyValue` without the key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    #[serde(rename = "v")]
    pub value: String,
    #[serde(rename = "c")]
    pub create_revision: u64,
    #[serde(rename = "m")]
    pub mod_revision: u64,
    #[serde(rename = "n")]
    pub version: u64,
}

/// One write, as persisted in the revision log and replayed to watchers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    #[serde(rename = "k")]
    pub key: String,
    #[serde(flatten)]
    pub entry: Entry,
}

impl Record {
    pub fn revision(&self) -> u64 {
        self.entry.mod_revision
    }
}

/// What a read sees: keys in order with their entries, how many matched, and whether the
/// answer was cut short.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeResult {
    pub kvs: Vec<(String, Entry)>,
    pub count: u64,
    pub more: bool,
}

/// The v3 keys of every token and the latest revision.
#[derive(Debug, Clone)]
pub struct V3State {
    revision: u64,
    kvs: BTreeMap<String, Entry>,
}

impl Default for V3State {
    fn default() -> Self {
        Self {
            revision: FIRST_REVISION,
            kvs: BTreeMap::new(),
        }
    }
}

impl V3State {
    /// Rebuilds the state from stored entries and the latest revision ever assigned.
    pub fn restore(kvs: BTreeMap<String, Entry>, revision: u64) -> Self {
        let newest = kvs.values().map(|e| e.mod_revision).max().unwrap_or(0);
        Self {
            revision: revision.max(newest).max(FIRST_REVISION),
            kvs,
        }
    }

    pub fn revision(&self) -> u64 {
        self.revision
    }

    pub fn get(&self, key: &str) -> Option<&Entry> {
        self.kvs.get(key)
    }

    /// The record a Put of `key` makes at `revision`; `pending` holds writes already planned at
    /// lower revisions and not yet applied (a commit group), which win over the state.
    pub fn plan_put(
        &self,
        pending: &BTreeMap<String, Entry>,
        key: &str,
        value: String,
        revision: u64,
    ) -> Record {
        let before = pending.get(key).or_else(|| self.kvs.get(key));
        let entry = match before {
            Some(old) => Entry {
                value,
                create_revision: old.create_revision,
                mod_revision: revision,
                version: old.version + 1,
            },
            None => Entry {
                value,
                create_revision: revision,
                mod_revision: revision,
                version: 1,
            },
        };
        Record {
            key: key.to_string(),
            entry,
        }
    }

    /// Makes a persisted record visible.
    pub fn apply(&mut self, record: Record) {
        self.revision = self.revision.max(record.revision());
        self.kvs.insert(record.key, record.entry);
    }

    /// Forgets keys (an expired token's); revisions stay as they are.
    pub fn remove(&mut self, keys: &[String]) {
        for key in keys {
            self.kvs.remove(key);
        }
    }

    /// Keys that start with `prefix`, in order.
    pub fn keys_with_prefix(&self, prefix: &str) -> Vec<String> {
        self.kvs
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// How many keys start with `prefix`, counting `pending` writes not yet applied.
    pub fn count_prefix(&self, pending: &BTreeMap<String, Entry>, prefix: &str) -> usize {
        let stored = self
            .kvs
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .count();
        let new = pending
            .keys()
            .filter(|k| k.starts_with(prefix) && !self.kvs.contains_key(*k))
            .count();
        stored + new
    }

    /// Keys in `[start, end)` (just `start` if `end` is empty), at most `limit` (0: no limit).
    pub fn range(&self, start: &[u8], end: &[u8], limit: usize) -> RangeResult {
        let mut result = RangeResult::default();
        let from = String::from_utf8_lossy(start).into_owned();
        for (k, e) in self.kvs.range(from..) {
            if !super::keys::in_range(k.as_bytes(), start, end) {
                break;
            }
            result.count += 1;
            if limit == 0 || result.kvs.len() < limit {
                result.kvs.push((k.clone(), e.clone()));
            } else {
                result.more = true;
            }
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(state: &mut V3State, key: &str, value: &str) -> Record {
        let rev = state.revision() + 1;
        let record = state.plan_put(&BTreeMap::new(), key, value.to_string(), rev);
        state.apply(record.clone());
        record
    }

    #[test]
    fn overwrite_keeps_create_revision_and_bumps_version() {
        let mut s = V3State::default();
        let a = put(&mut s, "/r/t/members/a", "x=http://a:1");
        let b = put(&mut s, "/r/t/members/b", "y=http://b:1");
        let a2 = put(&mut s, "/r/t/members/a", "x=http://a:2");
        assert_eq!((a.entry.create_revision, a.entry.mod_revision), (2, 2));
        assert_eq!(b.entry.create_revision, 3);
        assert_eq!(
            (
                a2.entry.create_revision,
                a2.entry.mod_revision,
                a2.entry.version
            ),
            (2, 4, 2)
        );
        assert_eq!(s.revision(), 4);
    }

    #[test]
    fn pending_writes_count_and_win() {
        let mut s = V3State::default();
        put(&mut s, "/r/t/members/a", "1");
        let mut pending = BTreeMap::new();
        let b = s.plan_put(&pending, "/r/t/members/b", "2".into(), 3);
        pending.insert(b.key.clone(), b.entry.clone());
        let b2 = s.plan_put(&pending, "/r/t/members/b", "3".into(), 4);
        assert_eq!((b2.entry.create_revision, b2.entry.version), (3, 2));
        assert_eq!(s.count_prefix(&pending, "/r/t/members/"), 2);
    }

    #[test]
    fn range_counts_all_and_cuts_at_limit() {
        let mut s = V3State::default();
        for k in [
            "/r/t/members/a",
            "/r/t/members/b",
            "/r/t/members/c",
            "/r/u/x",
        ] {
            put(&mut s, k, "v");
        }
        let r = s.range(b"/r/t/members/", b"/r/t/members0", 2);
        assert_eq!((r.count, r.kvs.len(), r.more), (3, 2, true));
        let one = s.range(b"/r/t/members/b", b"", 0);
        assert_eq!(one.kvs.len(), 1);
        assert!(s.range(b"/r/t/members/z", b"", 0).kvs.is_empty());
    }

    #[test]
    fn restore_never_goes_back() {
        let mut kvs = BTreeMap::new();
        kvs.insert(
            "k".to_string(),
            Entry {
                value: "v".into(),
                create_revision: 7,
                mod_revision: 9,
                version: 2,
            },
        );
        assert_eq!(V3State::restore(kvs.clone(), 5).revision(), 9);
        assert_eq!(V3State::restore(kvs, 12).revision(), 12);
        assert_eq!(
            V3State::restore(BTreeMap::new(), 0).revision(),
            FIRST_REVISION
        );
    }
}
