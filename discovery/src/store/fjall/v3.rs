//! etcd v3 discovery's keys in the embedded store: one revision counter for the whole service,
//! the current keys (`v3kv`) and a bounded revision log (`v3log`) that watches replay.
//!
//! One thread writes ([`super::v3commit`]); this module is the reading side and the way in.
//! Readers see revisions in order and never one a crash could take back, and revisions stay
//! monotonic across restarts (the newest log entry is never trimmed).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use muster_shared::storage::{self, Database, Keyspace};
use tokio::sync::{mpsc, oneshot, watch};

use super::v3commit::{Job, PutJob, Writer};
use crate::store::v3::V3StoreError;
use crate::v3::keys::in_range;
use crate::v3::state::{Entry, FIRST_REVISION, RangeResult, Record, V3State};

/// What a watch finds after a revision.
#[derive(Debug)]
pub enum LogRead {
    /// Matching records (in revision order) and the newest revision looked at.
    Records {
        records: Vec<Record>,
        scanned_to: u64,
    },
    /// The revisions asked for are gone; this is the newest revision dropped.
    Compacted(u64),
}

pub struct V3Log {
    state: Arc<RwLock<V3State>>,
    revision: watch::Sender<u64>,
    compacted: Arc<AtomicU64>,
    jobs: mpsc::UnboundedSender<Job>,
    log: Keyspace,
}

fn unavailable(e: impl std::fmt::Display) -> V3StoreError {
    V3StoreError::Unavailable(e.to_string())
}

/// Why the v3 keys could not be loaded at start-up.
#[derive(Debug, thiserror::Error)]
pub enum V3OpenError {
    #[error(transparent)]
    Storage(#[from] storage::StorageError),
    #[error("key {key:?} holds an unreadable entry: {source}")]
    Entry {
        key: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot start the v3 commit thread: {0}")]
    Thread(#[source] std::io::Error),
}

impl V3Log {
    /// Loads the keys and the log's bounds and starts the commit thread.
    pub fn open(db: &Database, healthy: Arc<AtomicBool>) -> Result<Self, V3OpenError> {
        let kv = storage::open_keyspace(db, "v3kv")?;
        let log = storage::open_keyspace(db, "v3log")?;
        let mut kvs = BTreeMap::new();
        for item in kv.iter() {
            let (k, v) = item.into_inner().map_err(storage::StorageError::from)?;
            let entry: Entry = serde_json::from_slice(&v).map_err(|source| V3OpenError::Entry {
                key: String::from_utf8_lossy(&k).into_owned(),
                source,
            })?;
            kvs.insert(String::from_utf8_lossy(&k).into_owned(), entry);
        }
        let rev_of = |k: &[u8]| <[u8; 8]>::try_from(k).map(u64::from_be_bytes).ok();
        let first = log
            .first_key_value()
            .and_then(|g| g.key().ok().and_then(|k| rev_of(&k)));
        let last = log
            .last_key_value()
            .and_then(|g| g.key().ok().and_then(|k| rev_of(&k)));
        let state = V3State::restore(kvs, last.unwrap_or(FIRST_REVISION));
        let compacted = first
            .filter(|f| *f > FIRST_REVISION + 1)
            .map_or(0, |f| f - 1);
        tracing::info!(
            revision = state.revision(),
            compacted,
            "v3 discovery keys loaded"
        );

        let (revision, _) = watch::channel(state.revision());
        let state = Arc::new(RwLock::new(state));
        let compacted = Arc::new(AtomicU64::new(compacted));
        let (jobs, rx) = mpsc::unbounded_channel();
        let writer = Writer {
            db: db.clone(),
            kv,
            log: log.clone(),
            state: state.clone(),
            revision: revision.clone(),
            compacted: compacted.clone(),
            healthy,
        };
        std::thread::Builder::new()
            .name("v3-commit".into())
            .spawn(move || writer.run(rx))
            .map_err(V3OpenError::Thread)?;
        Ok(Self {
            state,
            revision,
            compacted,
            jobs,
            log,
        })
    }

    /// Writes `key` and returns its record once durable. With `cap = (prefix, most, extra)`, a
    /// new key is refused while `most` keys under `prefix` exist already.
    pub async fn put(
        &self,
        key: String,
        value: String,
        cap: Option<(String, usize, usize)>,
    ) -> Result<Record, V3StoreError> {
        let (done, wait) = oneshot::channel();
        self.jobs
            .send(Job::Put(PutJob {
                key,
                value,
                cap,
                done,
            }))
            .map_err(|_| unavailable("v3 commit thread stopped"))?;
        wait.await
            .map_err(|_| unavailable("v3 commit thread stopped"))?
    }

    /// Forgets every key under `prefix`, durably.
    pub async fn drop_prefix(&self, prefix: String) -> Result<(), V3StoreError> {
        let (done, wait) = oneshot::channel();
        self.jobs
            .send(Job::Drop { prefix, done })
            .map_err(|_| unavailable("v3 commit thread stopped"))?;
        wait.await
            .map_err(|_| unavailable("v3 commit thread stopped"))?
    }

    /// A Range from one consistent snapshot: the keys and the revision they were read at.
    pub fn range(&self, start: &[u8], end: &[u8], limit: usize) -> (RangeResult, u64) {
        match self.state.read() {
            Ok(s) => (s.range(start, end, limit), s.revision()),
            Err(poisoned) => {
                let s = poisoned.into_inner();
                (s.range(start, end, limit), s.revision())
            }
        }
    }

    /// A Range as of the past revision `at` (`etcdctl get --rev`), with the newest revision.
    /// Keys written after `at` are looked up in the log: one created after `at` did not exist
    /// then; one that did reads as its newest write at or before `at`. When that write is older
    /// than the log's history the answer is [`V3StoreError::Compacted`], as etcd answers for a
    /// compacted revision: we keep no older versions to answer from.
    pub fn range_at(
        &self,
        start: &[u8],
        end: &[u8],
        at: u64,
    ) -> Result<(RangeResult, u64), V3StoreError> {
        // Everything up to `newest` is in the log before it is visible here (commit_group).
        let (now, newest) = self.range(start, end, 0);
        if at > newest {
            return Err(V3StoreError::FutureRevision);
        }
        if at == newest {
            return Ok((now, newest));
        }
        let compacted = self.compacted.load(Ordering::Acquire);
        if at < compacted {
            return Err(V3StoreError::Compacted);
        }
        // The first write after `at` of each key in the range.
        let mut first_after: BTreeMap<String, Entry> = BTreeMap::new();
        let after = self
            .log
            .range((at + 1).to_be_bytes()..=newest.to_be_bytes());
        for item in after {
            let (_, v) = item.into_inner().map_err(unavailable)?;
            let record: Record = serde_json::from_slice(&v).map_err(unavailable)?;
            if in_range(record.key.as_bytes(), start, end) {
                first_after.entry(record.key).or_insert(record.entry);
            }
        }
        let mut kvs: BTreeMap<String, Entry> = now.kvs.into_iter().collect();
        let mut wanted = std::collections::BTreeSet::new();
        for (key, first) in first_after {
            kvs.remove(&key);
            if first.create_revision <= at {
                wanted.insert(key);
            }
        }
        if !wanted.is_empty() {
            let from = compacted.max(FIRST_REVISION) + 1;
            for item in self.log.range(from.to_be_bytes()..=at.to_be_bytes()).rev() {
                let (_, v) = item.into_inner().map_err(unavailable)?;
                let record: Record = serde_json::from_slice(&v).map_err(unavailable)?;
                if wanted.remove(&record.key) {
                    kvs.insert(record.key, record.entry);
                    if wanted.is_empty() {
                        break;
                    }
                }
            }
        }
        // A trim racing the scans may have removed part of what was needed.
        if !wanted.is_empty() || at < self.compacted.load(Ordering::Acquire) {
            return Err(V3StoreError::Compacted);
        }
        let kvs: Vec<(String, Entry)> = kvs.into_iter().collect();
        let result = RangeResult {
            count: kvs.len() as u64,
            kvs,
            more: false,
        };
        Ok((result, newest))
    }

    /// How many keys start with `prefix`.
    pub fn count_prefix(&self, prefix: &str) -> usize {
        self.state
            .read()
            .map(|s| s.count_prefix(&BTreeMap::new(), prefix))
            .unwrap_or(0)
    }

    /// The newest visible revision.
    pub fn revision(&self) -> u64 {
        *self.revision.borrow()
    }

    /// The newest visible revision, and a way to wait for the next one.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.revision.subscribe()
    }

    /// Up to `max` records in `[start, end)` with revisions from `from` to the newest visible.
    pub fn read_log(
        &self,
        from: u64,
        start: &[u8],
        end: &[u8],
        max: usize,
    ) -> Result<LogRead, V3StoreError> {
        let compacted = self.compacted.load(Ordering::Acquire);
        if from <= compacted {
            return Ok(LogRead::Compacted(compacted));
        }
        let newest = *self.revision.borrow();
        let mut records = Vec::new();
        let mut scanned_to = from.saturating_sub(1);
        if from <= newest {
            for item in self.log.range(from.to_be_bytes()..=newest.to_be_bytes()) {
                let (_, v) = item.into_inner().map_err(unavailable)?;
                let record: Record = serde_json::from_slice(&v).map_err(unavailable)?;
                scanned_to = record.revision();
                if in_range(record.key.as_bytes(), start, end) {
                    records.push(record);
                    if records.len() >= max {
                        break;
                    }
                }
            }
            if records.len() < max {
                scanned_to = newest;
            }
        }
        // A trim racing the scan may have removed part of what we read past.
        let compacted = self.compacted.load(Ordering::Acquire);
        if from <= compacted {
            return Ok(LogRead::Compacted(compacted));
        }
        Ok(LogRead::Records {
            records,
            scanned_to,
        })
    }
}
