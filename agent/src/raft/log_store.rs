//! The raft log, the vote and the committed/purged pointers, on fjall.
//!
//! Durability follows openraft 0.9's contract: `save_vote`, `append` (before its callback),
//! `truncate` and `purge` are fsync'd (`PersistMode::SyncAll`) before they report success. The
//! committed pointer rides along with the next of those (see `save_committed` and `read_vote`).

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};

use fjall::{Database, Keyspace, PersistMode, Readable};
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{
    Entry, ErrorSubject, ErrorVerb, LogId, LogState, OptionalSend, RaftLogReader, StorageError,
    Vote,
};

use super::TypeConfig;
use super::codec::{StoreError, blocking, decode, encode};
use super::log_tail::LogTail;
use crate::state::NodeId;

const VOTE_KEY: &[u8] = b"vote";
const COMMITTED_KEY: &[u8] = b"committed";
const LAST_PURGED_KEY: &[u8] = b"last_purged";

/// openraft's log store (and, cloned, its log reader). Cheap to clone: all fields are handles.
#[derive(Clone)]
pub struct LogStore {
    db: Database,
    logs: Keyspace,
    meta: Keyspace,
    /// The newest durable entries, for replication to read without a blocking thread.
    tail: LogTail,
}

impl LogStore {
    pub(crate) fn new(db: Database, logs: Keyspace, meta: Keyspace) -> Self {
        Self {
            db,
            logs,
            meta,
            tail: LogTail::default(),
        }
    }

    fn read_meta<T>(&self, key: &'static [u8], what: &'static str) -> Result<Option<T>, StoreError>
    where
        T: serde::de::DeserializeOwned,
    {
        match self.meta.get(key)? {
            Some(bytes) => Ok(Some(decode(what, &bytes)?)),
            None => Ok(None),
        }
    }

    /// Writes one meta value as a single batch with the given durability.
    fn write_meta<T: serde::Serialize>(
        &self,
        key: &'static [u8],
        what: &'static str,
        value: &T,
        mode: PersistMode,
    ) -> Result<(), StoreError> {
        let bytes = encode(what, value)?;
        let mut batch = self.db.batch().durability(Some(mode));
        batch.insert(&self.meta, key, bytes);
        batch.commit()?;
        Ok(())
    }

    /// Reads the entries in `[start, end)` (`end = None`: to the last one), checking that they
    /// are consecutive and that each entry sits under its own index.
    /// Entries `[start, end)`. With a `budget`, stops once the entries read so far hold that
    /// many bytes (always returning at least one): a replication batch then never grows with
    /// the size of the values in it.
    fn read_range(
        &self,
        start: u64,
        end: Option<u64>,
        budget: Option<usize>,
    ) -> Result<Vec<Entry<TypeConfig>>, StoreError> {
        let end_bound = match end {
            Some(end) if end <= start => return Ok(Vec::new()),
            Some(end) => Bound::Excluded(end.to_be_bytes()),
            None => Bound::Unbounded,
        };
        // Read from a point-in-time view, so a concurrent purge or truncate (log readers are
        // clones used by replication tasks) is seen either entirely or not at all.
        let view = self.db.snapshot();
        let mut entries = Vec::new();
        let mut bytes = 0usize;
        let mut expected: Option<u64> = None;
        for guard in view.range(
            &self.logs,
            (Bound::Included(start.to_be_bytes()), end_bound),
        ) {
            let (key, value) = guard.into_inner()?;
            let index = index_of_key(&key)?;
            let entry: Entry<TypeConfig> = decode("log entry", &value)?;
            if entry.log_id.index != index {
                return Err(StoreError::Corrupt {
                    what: "log entry",
                    reason: format!("entry {} is stored under index {index}", entry.log_id),
                });
            }
            // openraft relies on logs having no holes; a gap means a bug or on-disk damage,
            // and silently returning a shorter range would be worse than stopping.
            if let Some(expected) = expected
                && index != expected
            {
                return Err(StoreError::LogHole {
                    expected,
                    found: index,
                });
            }
            expected = index.checked_add(1);
            entries.push(entry);
            // The stored form is the entry's JSON, as on the wire, so its length is the cost.
            bytes = bytes.saturating_add(value.len());
            if budget.is_some_and(|b| bytes >= b) {
                break;
            }
        }
        Ok(entries)
    }

    fn log_state(&self) -> Result<LogState<TypeConfig>, StoreError> {
        // One view for both reads, so `last_purged` and the last entry belong together.
        let view = self.db.snapshot();
        let last_purged: Option<LogId<NodeId>> = match view.get(&self.meta, LAST_PURGED_KEY)? {
            Some(bytes) => Some(decode("last purged log id", &bytes)?),
            None => None,
        };
        let last_present = match view.last_key_value(&self.logs) {
            Some(guard) => {
                let entry: Entry<TypeConfig> = decode("log entry", &guard.value()?)?;
                Some(entry.log_id)
            }
            None => None,
        };
        Ok(LogState {
            // With every entry purged, the last log id is the last purged one.
            last_log_id: last_present.or(last_purged),
            last_purged_log_id: last_purged,
        })
    }

    fn append_blocking(&self, entries: Vec<Entry<TypeConfig>>) -> Result<(), StoreError> {
        // One batch for all entries; committing it with SyncAll makes them readable and
        // durable in one step (an empty batch is a no-op, which is fine: nothing to persist).
        let mut batch = self.db.batch().durability(Some(PersistMode::SyncAll));
        let mut sizes = Vec::with_capacity(entries.len());
        for entry in &entries {
            let bytes = encode("log entry", entry)?;
            sizes.push(bytes.len());
            batch.insert(&self.logs, entry.log_id.index.to_be_bytes(), bytes);
        }
        batch.commit()?;
        self.tail.appended(entries.into_iter().zip(sizes));
        Ok(())
    }

    /// Removes every entry at or after `since`.
    fn truncate_blocking(&self, since: u64) -> Result<(), StoreError> {
        let committed: Option<LogId<NodeId>> =
            self.read_meta(COMMITTED_KEY, "committed log id")?.flatten();
        if let Some(committed) = committed
            && since <= committed.index
        {
            return Err(StoreError::Diverged {
                since,
                committed: committed.index,
            });
        }
        // Before the store, so the tail never serves an entry the store no longer has.
        self.tail.truncated(since);
        // fjall has no range delete: collect the keys, then remove them in one batch. Regular
        // (not weak) tombstones, because these indexes are written again after a truncate.
        let mut batch = self.db.batch().durability(Some(PersistMode::SyncAll));
        for guard in self.logs.range(since.to_be_bytes()..) {
            batch.remove(&self.logs, guard.key()?);
        }
        batch.commit()?;
        Ok(())
    }

    /// Records `upto` as purged and removes every entry up to it, in one atomic batch: a crash
    /// can never leave `last_purged` ahead of entries that still exist, or entries gone
    /// without `last_purged` saying so.
    fn purge_blocking(&self, upto: LogId<NodeId>) -> Result<(), StoreError> {
        let mut batch = self.db.batch().durability(Some(PersistMode::SyncAll));
        batch.insert(
            &self.meta,
            LAST_PURGED_KEY,
            encode("last purged log id", &upto)?,
        );
        for guard in self.logs.range(..=upto.index.to_be_bytes()) {
            batch.remove(&self.logs, guard.key()?);
        }
        batch.commit()?;
        self.tail.purged(upto.index);
        Ok(())
    }

    /// Test hook: deletes one raw log key to simulate on-disk damage.
    #[cfg(test)]
    pub(crate) fn remove_raw_for_test(&self, index: u64) -> Result<(), StoreError> {
        self.logs.remove(index.to_be_bytes())?;
        Ok(())
    }
}

fn index_of_key(key: &[u8]) -> Result<u64, StoreError> {
    let bytes: [u8; 8] = key.try_into().map_err(|_| StoreError::Corrupt {
        what: "log key",
        reason: format!("{} bytes, expected 8", key.len()),
    })?;
    Ok(u64::from_be_bytes(bytes))
}

/// `RangeBounds<u64>` as a half-open `[start, end)`, `end = None` meaning unbounded. A range
/// that cannot contain anything (e.g. `(u64::MAX, ..)`) comes back as `[0, 0)`.
fn half_open(range: &impl RangeBounds<u64>) -> (u64, Option<u64>) {
    let start = match range.start_bound() {
        Bound::Included(&s) => Some(s),
        Bound::Excluded(&s) => s.checked_add(1),
        Bound::Unbounded => Some(0),
    };
    let Some(start) = start else {
        return (0, Some(0));
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => None,
    };
    (start, end)
}

/// The most entry bytes one AppendEntries carries (one entry more if a single entry is larger).
/// The largest entry is a key-value write of a 64 KiB value that needs JSON escaping of every
/// byte (six bytes each): about 400 KiB, so a batch holds one or two of those, and
/// stays far below the peer listener's body limit.
pub const REPLICATION_BATCH_BYTES: usize = 512 * 1024;

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        let (start, end) = half_open(&range);
        let this = self.clone();
        blocking(move || this.read_range(start, end, None))
            .await
            .map_err(|e| e.into_raft(ErrorSubject::Logs, ErrorVerb::Read))
    }

    /// What replication sends in one AppendEntries: at most [`REPLICATION_BATCH_BYTES`] (and
    /// openraft's `max_payload_entries`), so a follower that fell behind on large values
    /// catches up in many small batches instead of one that never fits in an RPC timeout.
    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        if let Some(entries) = self.tail.get(start, end, REPLICATION_BATCH_BYTES) {
            return Ok(entries);
        }
        let this = self.clone();
        blocking(move || this.read_range(start, Some(end), Some(REPLICATION_BATCH_BYTES)))
            .await
            .map_err(|e| e.into_raft(ErrorSubject::Logs, ErrorVerb::Read))
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let this = self.clone();
        blocking(move || this.log_state())
            .await
            .map_err(|e| e.into_raft(ErrorSubject::Logs, ErrorVerb::Read))
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        // Must be on disk before returning: a vote forgotten in a crash allows a second vote
        // in the same term, i.e. two leaders.
        let this = self.clone();
        let vote = *vote;
        blocking(move || this.write_meta(VOTE_KEY, "vote", &vote, PersistMode::SyncAll))
            .await
            .map_err(|e| e.into_raft(ErrorSubject::Vote, ErrorVerb::Write))
    }

    /// Read at startup only. A leader's vote comes back as a plain vote for itself: openraft
    /// 0.9 would resume a committed leader vote as leader at once, without an election, and
    /// serve linearizable reads from max(the stored committed index, its term's first entry),
    /// which after a power cut can predate writes it acknowledged (the committed index is not
    /// fsync'd on its own, see `save_committed`). As a follower, the member campaigns: a new
    /// term's first entry covers every committed write. Safe for raft: the vote still names
    /// this member in its term, so it grants no other candidate of that term.
    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        let this = self.clone();
        let stored: Option<Vote<NodeId>> = blocking(move || this.read_meta(VOTE_KEY, "vote"))
            .await
            .map_err(|e| e.into_raft(ErrorSubject::Vote, ErrorVerb::Read))?;
        Ok(stored.map(|vote| Vote {
            committed: false,
            ..vote
        }))
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<NodeId>>,
    ) -> Result<(), StorageError<NodeId>> {
        // Not fsync'd on its own: it becomes durable with the next append (one journal), and a
        // committed index that a power cut sets back only means applying less at startup and
        // learning the rest from the leader. It was fsync'd before every apply (a second fsync
        // per write on every member) while openraft resumed a restarted leader without an
        // election and served reads from it: power_cut.rs's history checker saw a stale read
        // about 1 run in 20. `read_vote` closes that path, so the fsync went (issue 32).
        // On a blocking thread although it does not fsync: fjall's journal lock can be held by
        // another keyspace's fsync (a snapshot being persisted), and its write backpressure
        // sleeps; either would stall an async worker here.
        let this = self.clone();
        blocking(move || {
            this.write_meta(
                COMMITTED_KEY,
                "committed log id",
                &committed,
                PersistMode::Buffer,
            )
        })
        .await
        .map_err(|e| e.into_raft(ErrorSubject::Store, ErrorVerb::Write))
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        let this = self.clone();
        // Stored as `Option<LogId>` (save_committed may be given `None`), hence the flatten.
        blocking(move || {
            Ok(this
                .read_meta::<Option<LogId<NodeId>>>(COMMITTED_KEY, "committed log id")?
                .flatten())
        })
        .await
        .map_err(|e| e.into_raft(ErrorSubject::Store, ErrorVerb::Read))
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // In 0.9 RaftCore awaits the callback right after `append` returns, so flushing in
        // the background would gain nothing; write + fsync here, then report.
        let entries: Vec<_> = entries.into_iter().collect();
        let this = self.clone();
        match blocking(move || this.append_blocking(entries)).await {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(e.into_raft(ErrorSubject::Logs, ErrorVerb::Write))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let this = self.clone();
        blocking(move || this.truncate_blocking(log_id.index))
            .await
            .map_err(|e| e.into_raft(ErrorSubject::Logs, ErrorVerb::Delete))
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let this = self.clone();
        blocking(move || this.purge_blocking(log_id))
            .await
            .map_err(|e| e.into_raft(ErrorSubject::Logs, ErrorVerb::Delete))
    }
}

#[cfg(test)]
mod tests {
    use super::half_open;

    #[test]
    fn ranges_become_half_open() {
        assert_eq!(half_open(&(3..7)), (3, Some(7)));
        assert_eq!(half_open(&(3..=7)), (3, Some(8)));
        assert_eq!(half_open(&(5..)), (5, None));
        assert_eq!(half_open(&(..)), (0, None));
        assert_eq!(half_open(&(..=u64::MAX)), (0, None));
        assert_eq!(
            half_open(&(
                std::ops::Bound::Excluded(u64::MAX),
                std::ops::Bound::Unbounded
            )),
            (0, Some(0))
        );
    }
}
