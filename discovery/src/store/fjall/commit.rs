//! The commit thread: every durable write of the fjall store goes through here. It gathers all
//! writes that are waiting (from any tokens, up to [`MAX_GROUP`]) into one fjall batch and
//! covers them with one fsync (group commit).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use muster_shared::storage::{Database, Keyspace, PersistMode, StorageError};
use tokio::sync::{mpsc, oneshot};

/// Largest number of waiting writes folded into one fsync.
const MAX_GROUP: usize = 4096;

pub enum Op {
    Insert(Tree, Vec<u8>, Vec<u8>),
    Remove(Tree, Vec<u8>),
}

#[derive(Clone, Copy)]
pub enum Tree {
    Tokens,
    Events,
}

pub struct CommitJob {
    pub ops: Vec<Op>,
    /// Every job of a group gets the same outcome, so a failure is shared, not copied as text.
    pub done: oneshot::Sender<Result<(), Arc<StorageError>>>,
}

/// Waits (blocking) for one job, then takes every job already waiting, up to `max` in all: one
/// commit group, covered by one fsync. False once the senders are gone.
pub fn next_group<T>(rx: &mut mpsc::UnboundedReceiver<T>, group: &mut Vec<T>, max: usize) -> bool {
    let Some(first) = rx.blocking_recv() else {
        return false;
    };
    group.push(first);
    while group.len() < max {
        match rx.try_recv() {
            Ok(job) => group.push(job),
            Err(_) => break,
        }
    }
    true
}

pub fn commit_loop(
    db: Database,
    (tokens_tree, events_tree): (Keyspace, Keyspace),
    mut rx: mpsc::UnboundedReceiver<CommitJob>,
    healthy: Arc<AtomicBool>,
) {
    let pick = |tree: &Tree| match tree {
        Tree::Tokens => &tokens_tree,
        Tree::Events => &events_tree,
    };
    let mut group = Vec::new();
    while next_group(&mut rx, &mut group, MAX_GROUP) {
        let mut batch = db.batch().durability(Some(PersistMode::SyncAll));
        for job in &group {
            for op in &job.ops {
                match op {
                    Op::Insert(tree, k, v) => batch.insert(pick(tree), k.as_slice(), v.as_slice()),
                    Op::Remove(tree, k) => batch.remove(pick(tree), k.as_slice()),
                }
            }
        }
        let result = batch.commit().map_err(|e| Arc::new(StorageError::from(e)));
        if let Err(e) = &result {
            // fjall poisons the database after a failed write or fsync: every later write fails
            // too, and /health says so. Nothing was acknowledged, so nothing is lost.
            tracing::error!(error = %e, "durable write failed; storage is now read-only");
            healthy.store(false, Ordering::Release);
        }
        for job in group.drain(..) {
            let _ = job.done.send(result.clone());
        }
    }
    // Channel closed: the store was dropped. One last fsync for good measure.
    let _ = db.persist(PersistMode::SyncAll);
}
