//! One leadership check for all the linearizable reads that wait at the same time. openraft
//! 0.9 sends every follower a heartbeat for each `ensure_linearizable` call; a burst of reads
//! (FleetLock's no-op locks and unlocks) would cost a round of RPCs each and load the very
//! heartbeats that keep the leader. Here a read waits for the next check that *starts after
//! it arrived* (so what it then reads includes every write committed before it was asked:
//! still linearizable), and every read waiting for that check shares its answer.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

/// A check shared by the reads waiting for it.
pub type Check<T> = Pin<Box<dyn Future<Output = T> + Send>>;

pub struct ReadBatch<T> {
    check: Arc<dyn Fn() -> Check<T> + Send + Sync>,
    pending: Arc<Mutex<Pending<T>>>,
}

struct Pending<T> {
    /// A task is running checks (and will take the waiters below for its next one).
    running: bool,
    waiters: Vec<oneshot::Sender<T>>,
}

/// Clears `running` if the task running checks ends without doing so itself (its check
/// panicked): the next read then starts a new task instead of waiting for one that is gone.
struct Running<T> {
    pending: Arc<Mutex<Pending<T>>>,
    armed: bool,
}

impl<T> Drop for Running<T> {
    fn drop(&mut self) {
        if self.armed {
            locked(&self.pending).running = false;
        }
    }
}

fn locked<T>(pending: &Mutex<Pending<T>>) -> MutexGuard<'_, Pending<T>> {
    // The lock guards a list: a panic elsewhere leaves it usable.
    pending
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<T: Clone + Send + 'static> ReadBatch<T> {
    pub fn new(check: impl Fn() -> Check<T> + Send + Sync + 'static) -> Self {
        Self {
            check: Arc::new(check),
            pending: Arc::new(Mutex::new(Pending {
                running: false,
                waiters: Vec::new(),
            })),
        }
    }

    /// The answer of a check that started after this call (`None` if the runtime is shutting
    /// down).
    pub async fn check(&self) -> Option<T> {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut pending = locked(&self.pending);
            pending.waiters.push(tx);
            !std::mem::replace(&mut pending.running, true)
        };
        if start {
            let (check, pending) = (self.check.clone(), self.pending.clone());
            tokio::spawn(async move {
                let mut running = Running {
                    pending: pending.clone(),
                    armed: true,
                };
                loop {
                    let batch = {
                        let mut p = locked(&pending);
                        if p.waiters.is_empty() {
                            // Under the lock: a read that comes after this starts a new task.
                            p.running = false;
                            running.armed = false;
                            return;
                        }
                        std::mem::take(&mut p.waiters)
                    };
                    let answer = check().await;
                    for waiter in batch {
                        let _ = waiter.send(answer.clone());
                    }
                }
            });
        }
        rx.await.ok()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn reads_that_wait_together_share_one_check_that_starts_after_them() {
        let started = Arc::new(AtomicU32::new(0));
        let counter = started.clone();
        let batch = Arc::new(ReadBatch::new(move || {
            let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                n
            })
        }));
        // The first read starts check 1; the 20 that arrive while it runs share check 2 (one
        // that started after each of them), not check 1.
        let first = tokio::spawn({
            let batch = batch.clone();
            async move { batch.check().await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        let later: Vec<_> = (0..20)
            .map(|_| {
                let batch = batch.clone();
                tokio::spawn(async move { batch.check().await })
            })
            .collect();
        assert_eq!(first.await.expect("task"), Some(1));
        for read in later {
            assert_eq!(read.await.expect("task"), Some(2));
        }
        assert_eq!(started.load(Ordering::SeqCst), 2);
        // Nobody waiting: the next read starts a check of its own.
        assert_eq!(batch.check().await, Some(3));
    }

    #[tokio::test]
    async fn a_check_that_panics_does_not_strand_the_reads_after_it() {
        let calls = Arc::new(AtomicU32::new(0));
        let counter = calls.clone();
        let batch = ReadBatch::new(move || {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                assert!(n > 0, "the first check fails");
                n
            })
        });
        assert_eq!(batch.check().await, None);
        assert_eq!(batch.check().await, Some(1));
    }
}
