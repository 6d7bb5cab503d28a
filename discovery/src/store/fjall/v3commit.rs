//! The `v3-commit` thread, the one writer of etcd v3 discovery's keys in the embedded store: it
//! takes every job that is waiting, gives each Put the next revision, writes keys and log in
//! one fjall batch, fsyncs once (group commit), and only then makes the group visible and
//! answers it. Apart from the reading side ([`super::v3`]) because only this thread may change
//! the state, and what a group does is decided before anything is written.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use muster_shared::storage::{Database, Keyspace, PersistMode};
use tokio::sync::{mpsc, oneshot, watch};

use crate::store::v3::V3StoreError;
use crate::v3::state::{Entry, FIRST_REVISION, Record, V3State};

/// Revisions the log keeps for watch replay; older ones answer `compact_revision` as etcd does.
pub const HISTORY: u64 = 100_000;
/// Largest number of waiting writes folded into one fsync.
const MAX_GROUP: usize = 1024;

/// A Put to make durable, with the member cap of its token (`prefix`, most keys under it).
pub struct PutJob {
    pub key: String,
    pub value: String,
    pub cap: Option<(String, usize, usize)>,
    pub done: oneshot::Sender<Result<Record, V3StoreError>>,
}

pub enum Job {
    Put(PutJob),
    /// Forget every key under this prefix (an expired token's).
    Drop {
        prefix: String,
        done: oneshot::Sender<Result<(), V3StoreError>>,
    },
}

fn unavailable(e: impl std::fmt::Display) -> V3StoreError {
    V3StoreError::Unavailable(e.to_string())
}

pub struct Writer {
    pub db: Database,
    pub kv: Keyspace,
    pub log: Keyspace,
    pub state: Arc<RwLock<V3State>>,
    pub revision: watch::Sender<u64>,
    pub compacted: Arc<AtomicU64>,
    pub healthy: Arc<AtomicBool>,
}

/// Where a Put's answer goes, and the answer.
type PutAnswer = (
    oneshot::Sender<Result<Record, V3StoreError>>,
    Result<Record, V3StoreError>,
);

/// One change to the batch, in the order the jobs asked for them: a Drop after a Put of the
/// same group removes the key that Put wrote (its log entry stays, as any log entry does).
enum Write {
    Key(String, Vec<u8>),
    Log(u64, Vec<u8>),
    Forget(String),
}

/// A commit group's plan: what to write, records to apply, keys to forget, who gets which
/// answer, and the newest revision once it is durable.
struct Group {
    writes: Vec<Write>,
    records: Vec<Record>,
    dropped: Vec<String>,
    put_answers: Vec<PutAnswer>,
    drop_answers: Vec<oneshot::Sender<Result<(), V3StoreError>>>,
    newest: u64,
    /// Keys written or forgotten by the group so far, as later jobs of the group must see them.
    pending: BTreeMap<String, Entry>,
}

impl Writer {
    pub fn run(self, mut rx: mpsc::UnboundedReceiver<Job>) {
        let mut jobs = Vec::new();
        while super::commit::next_group(&mut rx, &mut jobs, MAX_GROUP) {
            self.commit_group(&mut jobs);
        }
        let _ = self.db.persist(PersistMode::SyncAll);
    }

    fn commit_group(&self, jobs: &mut Vec<Job>) {
        let group = {
            let state = match self.state.read() {
                Ok(s) => s,
                Err(p) => p.into_inner(),
            };
            plan_group(&state, jobs.drain(..))
        };
        let mut batch = self.db.batch().durability(Some(PersistMode::SyncAll));
        for write in &group.writes {
            match write {
                Write::Key(key, entry) => batch.insert(&self.kv, key.as_bytes(), entry),
                Write::Log(rev, logged) => batch.insert(&self.log, rev.to_be_bytes(), logged),
                Write::Forget(key) => batch.remove(&self.kv, key.as_bytes()),
            }
        }
        // Trim the log to HISTORY revisions; the newest entry always stays, so the revision
        // counter survives a restart.
        let compacted_before = self.compacted.load(Ordering::Acquire);
        let compacted_now = group.newest.saturating_sub(HISTORY).max(compacted_before);
        for rev in compacted_before.max(FIRST_REVISION) + 1..=compacted_now {
            batch.remove(&self.log, rev.to_be_bytes());
        }
        match batch.commit().map_err(unavailable) {
            Ok(()) => self.publish(group, compacted_now),
            Err(e) => self.fail(group, &e),
        }
    }

    /// The group is durable: make it visible, then answer it.
    fn publish(&self, group: Group, compacted_now: u64) {
        {
            let mut state = match self.state.write() {
                Ok(s) => s,
                Err(p) => p.into_inner(),
            };
            state.remove(&group.dropped);
            for record in group.records {
                state.apply(record);
            }
        }
        self.compacted.store(compacted_now, Ordering::Release);
        self.revision.send_replace(group.newest);
        for (done, answer) in group.put_answers {
            let _ = done.send(answer);
        }
        for done in group.drop_answers {
            let _ = done.send(Ok(()));
        }
    }

    /// Nothing of the group is visible or acknowledged; every job gets the error.
    fn fail(&self, group: Group, e: &V3StoreError) {
        tracing::error!(error = %e, "v3 durable write failed; storage is now read-only");
        self.healthy.store(false, Ordering::Release);
        for (done, _) in group.put_answers {
            let _ = done.send(Err(e.clone()));
        }
        for done in group.drop_answers {
            let _ = done.send(Err(e.clone()));
        }
    }
}

/// Decides what a group of jobs does to `state`: which Puts the member cap refuses, which
/// revisions the others get, which keys the Drops forget. Nothing is written here.
fn plan_group(state: &V3State, jobs: impl Iterator<Item = Job>) -> Group {
    let mut group = Group {
        writes: Vec::new(),
        records: Vec::new(),
        dropped: Vec::new(),
        put_answers: Vec::new(),
        drop_answers: Vec::new(),
        newest: state.revision(),
        pending: BTreeMap::new(),
    };
    for job in jobs {
        match job {
            Job::Put(put) => plan_put(state, &mut group, put),
            Job::Drop { prefix, done } => {
                let mut keys = state.keys_with_prefix(&prefix);
                keys.extend(
                    group
                        .pending
                        .keys()
                        .filter(|k| k.starts_with(&prefix))
                        .cloned(),
                );
                group.pending.retain(|k, _| !k.starts_with(&prefix));
                group.records.retain(|r| !r.key.starts_with(&prefix));
                group
                    .writes
                    .extend(keys.iter().map(|key| Write::Forget(key.clone())));
                group.dropped.extend(keys);
                group.drop_answers.push(done);
            }
        }
    }
    group
}

/// One Put of a group: refused over its member cap, else the next revision.
fn plan_put(state: &V3State, group: &mut Group, put: PutJob) {
    if let Some((prefix, most, extra)) = &put.cap {
        let held = state.count_prefix(&group.pending, prefix);
        let exists = group.pending.contains_key(&put.key) || state.get(&put.key).is_some();
        if !exists && held >= *most {
            let refused = Err(V3StoreError::TooManyMembers {
                held,
                extra: *extra,
            });
            group.put_answers.push((put.done, refused));
            return;
        }
    }
    let next = group.newest + 1;
    let record = state.plan_put(&group.pending, &put.key, put.value, next);
    let (Ok(entry), Ok(logged)) = (
        serde_json::to_vec(&record.entry),
        serde_json::to_vec(&record),
    ) else {
        group
            .put_answers
            .push((put.done, Err(unavailable("cannot encode record"))));
        return;
    };
    group.newest = next;
    group.writes.push(Write::Key(record.key.clone(), entry));
    group.writes.push(Write::Log(next, logged));
    group
        .pending
        .insert(record.key.clone(), record.entry.clone());
    group.records.push(record.clone());
    group.put_answers.push((put.done, Ok(record)));
}
