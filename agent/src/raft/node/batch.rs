//! Group commit for writes. openraft 0.9 appends, fsyncs and replicates each client write as an
//! entry of its own, one after another: under concurrent writers every write costs each member
//! an fsync and the leader a round of replication. Here a write that arrives while
//! [`MAX_IN_FLIGHT`] entries are already on their way waits, and the writes that waited go
//! together as one `Request::Batch` entry once a slot frees: one append, one fsync per member,
//! one apply pass, each write still answered on its own. A write that finds a free slot goes
//! at once, alone, so a single writer waits for nothing more than before.
//!
//! A batch is written only while every member's agent reads one (`can_batch`, from the members'
//! reported versions): an older agent could not decode the entry. Until then the writes that
//! waited go as entries of their own, as before.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use openraft::Raft;
use openraft::error::{ClientWriteError, RaftError};
use tokio::sync::oneshot;

use super::super::stats::RaftStats;
use super::errors::client_write_error;
use super::{RaftNodeError, TypeConfig};
use crate::state::{Node, NodeId, Request, Response};

/// Entries of client writes in flight at once. Two keep the leader's disk and the followers'
/// busy at the same time (one entry is fsync'd while the other replicates) and leave every
/// other concurrent write to the next batch.
const MAX_IN_FLIGHT: usize = 2;
/// The most writes in one entry, and the most bytes it may take in the log by the writes'
/// worst-case size (`Request::approx_bytes`): half a replication batch, so a follower that
/// catches up still gets several entries per AppendEntries, each well inside an RPC's
/// timeout. A write larger than that goes alone, as every write went before batches.
const MAX_BATCH: usize = 256;
const MAX_BATCH_BYTES: usize = crate::raft::log_store::REPLICATION_BATCH_BYTES / 2;

type Answer = Result<Response, RaftNodeError>;

pub struct ProposalBatch {
    raft: Raft<TypeConfig>,
    stats: Arc<RaftStats>,
    /// Set while the leader hands over: nothing more is proposed.
    handing_over: Arc<AtomicBool>,
    can_batch: Arc<dyn Fn() -> bool + Send + Sync>,
    queue: Arc<Mutex<Queue>>,
    /// The longest an entry may take to commit before its writes are answered with a
    /// timeout (their callers have given up by then).
    timeout: Duration,
}

#[derive(Default)]
struct Queue {
    in_flight: usize,
    waiting: Vec<(Request, oneshot::Sender<Answer>)>,
}

fn locked(queue: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    // The lock guards a list and a count: a panic elsewhere leaves them usable.
    queue
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Frees the slot of a flight whose task ends without doing so itself (a panic; the writes it
/// held are then answered "dropped"): later writes find a slot instead of waiting for a task
/// that is gone. A flight that ends normally frees its slot in the same critical section in
/// which it found nothing waiting, so a write queued just then is never left behind.
struct Slot {
    queue: Arc<Mutex<Queue>>,
    armed: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.armed {
            let mut queue = locked(&self.queue);
            queue.in_flight = queue.in_flight.saturating_sub(1);
        }
    }
}

impl ProposalBatch {
    pub fn new(
        raft: Raft<TypeConfig>,
        stats: Arc<RaftStats>,
        handing_over: Arc<AtomicBool>,
        can_batch: impl Fn() -> bool + Send + Sync + 'static,
        timeout: Duration,
    ) -> Self {
        Self {
            raft,
            stats,
            handing_over,
            can_batch: Arc::new(can_batch),
            queue: Arc::default(),
            timeout,
        }
    }

    /// Replicates `request` (alone or in a batch) and returns the state machine's answer.
    pub async fn submit(&self, request: Request) -> Answer {
        let (tx, rx) = oneshot::channel();
        let first = {
            let mut queue = locked(&self.queue);
            if queue.in_flight < MAX_IN_FLIGHT {
                queue.in_flight += 1;
                Some(vec![(request, tx)])
            } else {
                queue.waiting.push((request, tx));
                None
            }
        };
        if let Some(first) = first {
            self.fly(first);
        }
        // Bounded from the moment it was asked for, waiting included.
        match tokio::time::timeout(self.timeout, rx).await {
            Err(_) => Err(RaftNodeError::Timeout("the write")),
            Ok(answer) => {
                answer.unwrap_or_else(|_| Err(RaftNodeError::Other("the write was dropped".into())))
            }
        }
    }

    /// One flight: commits `batch`, then the writes that waited meanwhile, until none wait.
    fn fly(&self, first: Vec<(Request, oneshot::Sender<Answer>)>) {
        let raft = self.raft.clone();
        let stats = self.stats.clone();
        let can_batch = self.can_batch.clone();
        let queue = self.queue.clone();
        let timeout = self.timeout;
        let handing_over = self.handing_over.clone();
        tokio::spawn(async move {
            let mut slot = Slot {
                queue: queue.clone(),
                armed: true,
            };
            let mut batch = first;
            loop {
                if handing_over.load(Ordering::SeqCst) {
                    // A new entry would renew the followers' leases and hold the successor's
                    // election up (see handover.rs); these writes were never proposed.
                    for (_, tx) in batch {
                        let _ = tx.send(Err(RaftNodeError::NoLeader));
                    }
                } else {
                    commit(&raft, &stats, batch, can_batch.as_ref(), timeout).await;
                }
                let mut queue = locked(&queue);
                // Writes whose callers gave up (timed out, hung up) are not proposed late.
                queue.waiting.retain(|(_, tx)| !tx.is_closed());
                if queue.waiting.is_empty() {
                    queue.in_flight = queue.in_flight.saturating_sub(1);
                    slot.armed = false;
                    return;
                }
                batch = take_batch(&mut queue.waiting);
            }
        });
    }
}

/// The oldest waiting writes, up to [`MAX_BATCH`] of them and about [`MAX_BATCH_BYTES`] (at
/// least one).
fn take_batch<T>(waiting: &mut Vec<(Request, T)>) -> Vec<(Request, T)> {
    let mut bytes = 0;
    let mut n = 0;
    for (request, _) in waiting.iter() {
        bytes += request.approx_bytes();
        if n > 0 && (n == MAX_BATCH || bytes > MAX_BATCH_BYTES) {
            break;
        }
        n += 1;
    }
    waiting.drain(..n).collect()
}

/// Commits the writes, as one entry when there are several and every member reads batches,
/// and answers each.
async fn commit(
    raft: &Raft<TypeConfig>,
    stats: &RaftStats,
    mut batch: Vec<(Request, oneshot::Sender<Answer>)>,
    can_batch: &(dyn Fn() -> bool + Send + Sync),
    timeout: Duration,
) {
    if batch.len() == 1 || !can_batch() {
        // Each on its own entry, all at once (as every write went before batches).
        let alone: Vec<_> = batch
            .drain(..)
            .map(|(request, tx)| {
                stats.write_entry(1);
                let raft = raft.clone();
                tokio::spawn(async move {
                    let _ = tx.send(write(&raft, request, timeout).await.map_err(Into::into));
                })
            })
            .collect();
        for task in alone {
            let _ = task.await;
        }
        return;
    }
    let (requests, senders): (Vec<Request>, Vec<_>) = batch.into_iter().unzip();
    let count = requests.len();
    stats.write_entry(count);
    match write(raft, Request::Batch { requests }, timeout).await {
        Ok(response) if response.batch.len() == count => {
            for (tx, answer) in senders.into_iter().zip(response.batch) {
                let _ = tx.send(Ok(answer));
            }
        }
        Ok(response) => {
            for tx in senders {
                let _ = tx.send(Err(RaftNodeError::Other(format!(
                    "a batch of {count} writes was answered {} times",
                    response.batch.len()
                ))));
            }
        }
        Err(failure) => {
            for tx in senders {
                let _ = tx.send(Err(failure.clone().into()));
            }
        }
    }
}

/// Why an entry did not commit, for as many writes as it held.
#[derive(Clone)]
enum Failure {
    Timeout,
    Raft(Box<RaftError<NodeId, ClientWriteError<NodeId, Node>>>),
}

impl From<Failure> for RaftNodeError {
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::Timeout => RaftNodeError::Timeout("the write"),
            Failure::Raft(e) => client_write_error(*e),
        }
    }
}

/// One entry through raft, bounded by `timeout`.
async fn write(
    raft: &Raft<TypeConfig>,
    request: Request,
    timeout: Duration,
) -> Result<Response, Failure> {
    match tokio::time::timeout(timeout, raft.client_write(request)).await {
        Err(_) => Err(Failure::Timeout),
        Ok(Err(e)) => Err(Failure::Raft(Box::new(e))),
        Ok(Ok(written)) => Ok(written.data),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(bytes: usize) -> (Request, ()) {
        (
            Request::KvPut {
                key: "k".into(),
                value: "v".repeat(bytes),
                expect: None,
            },
            (),
        )
    }

    #[test]
    fn a_batch_is_bounded_by_count_and_bytes_and_never_empty() {
        let mut waiting: Vec<_> = (0..300).map(|_| put(10)).collect();
        assert_eq!(take_batch(&mut waiting).len(), MAX_BATCH);
        assert_eq!(waiting.len(), 300 - MAX_BATCH);

        let mut large: Vec<_> = (0..40).map(|_| put(20 * 1024)).collect();
        let each = large[0].0.approx_bytes();
        let taken = take_batch(&mut large).len();
        assert!(taken > 1, "{taken} writes of 20 KiB");
        assert!(
            taken * each <= MAX_BATCH_BYTES,
            "{taken} writes of {each} bytes"
        );
        assert!((taken + 1) * each > MAX_BATCH_BYTES, "room for one more");

        let mut huge = vec![put(2 * MAX_BATCH_BYTES), put(1)];
        assert_eq!(take_batch(&mut huge).len(), 1);
        assert_eq!(huge.len(), 1);
    }
}
