//! Recording concurrent client operations on key/value registers and checking that the
//! recorded history is linearizable.
//!
//! # Model
//!
//! Every key is an independent register that starts absent and supports four operations:
//! [`Op::Read`] (returns the value or `None`), [`Op::Write`], [`Op::Delete`] and
//! [`Op::Cas`] (compare-and-set: if the register holds `expected` — `None` meaning "if
//! absent" — set it to `new` and return `true`, else change nothing and return `false`).
//!
//! A test records each operation as it happens: [`History::invoke`] before the request is
//! sent, then exactly one completion on the returned [`OpHandle`] once the client knows what
//! happened:
//!
//! - [`OpHandle::ok`]: the operation took effect exactly once, at some instant between its
//!   invocation and this completion, and returned the given [`Outcome`].
//! - [`OpHandle::fail`]: the operation definitely did not take effect (for example a refusal
//!   that is known not to have been applied). Failed operations are dropped from the history;
//!   if their effect is observed anyway, the check fails.
//! - [`OpHandle::unknown`]: the client cannot tell (timeout, connection lost). The operation
//!   may have taken effect at any instant after its invocation — even long after the client
//!   gave up — or never. Dropping a handle without completing it counts as unknown (so a
//!   handle owned by a request future that a timeout cancels ends up unknown), and so does an
//!   operation still in flight when the history is checked.
//!
//! Invocation and completion are stamped under one lock with a global sequence number (used for
//! real-time order: A precedes B iff A completed before B was invoked) and an [`Instant`] (used
//! only to print times in reports).
//!
//! # Checking
//!
//! [`check`] asks whether there is a single sequential order of the operations that (1)
//! respects real-time order, (2) includes every ok operation, includes no failed operation and
//! includes any subset of the unknown ones, and (3) is legal for a register: every read returns
//! the latest value written before it, every CAS returns what the register dictates.
//!
//! Linearizability is *local* (Herlihy & Wing 1990): a history over several objects is
//! linearizable iff each object's sub-history is. Registers under different keys are
//! different objects, so the history is split by key and every key is checked alone; this
//! turns one search exponential in the total concurrency into several small ones.
//!
//! Per key, the checker runs the Wing & Gong search with Lowe's memoisation (as in Lowe,
//! "Testing for linearizability", 2017, and the `porcupine` checker): a depth-first search that
//! repeatedly picks an operation that may take effect next — one that is not yet linearized and
//! was invoked before every other non-linearized operation returned — applies it to the
//! register, and backtracks when the result disagrees with the recorded outcome. Each visited
//! configuration (set of linearized operations, register value, set of unknown operations used)
//! is remembered, so no configuration is explored twice. The set is stored compactly as "the
//! first `p` operations in invocation order, plus a bitset window after `p`": at quiescent
//! points (no operation in flight) the window is empty and the configurations collapse onto the
//! register value, so the cost grows with operations × 2^(operations in flight) × values, not
//! exponentially in the history's length; that is the within-key partitioning.
//!
//! Reductions, none of which loses a linearization:
//!
//! - Failed operations and unknown reads are dropped: neither can affect the register.
//! - A read of the register's current value, or a CAS that fails against it, is linearized at
//!   once without trying alternatives: it changes nothing, so any valid order from that point
//!   can be rearranged to start with it.
//! - Values that no read or CAS ever expects are merged into one: the register behaves the
//!   same whichever of them it holds.
//! - Unknown operations never block anything (they have no completion), so left alone they
//!   would be concurrent with everything after them. They are only placed where they matter:
//!   immediately before an ok read or CAS whose recorded outcome needs the register to change
//!   (for a read or successful CAS, a shortest chain of unknown operations that brings the
//!   register to the needed value; for a failed CAS, one unknown operation that moves it off
//!   `expected`). Any linearization can be rewritten into that shape: unknown operations can
//!   always be moved later, and ones whose effect is overwritten or undone before being
//!   observed can be left out. Of several available unknown operations with the same effect
//!   only one is tried, and a configuration is skipped if the same one was reached using a
//!   subset of its unknown operations.
//!
//! Before searching, a read or successful CAS that expects a value no operation on that key
//! could have written is reported directly, naming the failed operation that wrote it if there
//! is one.
//!
//! # Budget
//!
//! Checking linearizability is NP-complete in general, so the search is bounded: every tried
//! step counts against a per-key budget ([`DEFAULT_BUDGET`], or [`check_with_budget`]). When it
//! runs out, the result is a [`Violation`] with [`ViolationKind::BudgetExhausted`] — an
//! inconclusive answer, not a proof of a bug. A linearizable history from 5 clients needs a few
//! steps per operation (2,000 operations over 4 keys: about 3,000 steps, milliseconds); a
//! non-linearizable one must exhaust every order up to the problem, which costs more. The
//! default budget takes a second or two in a debug build, and is reached only by extreme
//! histories (say 10–20 operations in flight on one key together with many unknown ones).
//!
//! # Reports
//!
//! A [`Violation`] names the key and shows an excerpt around the point where the search got
//! stuck: the longest prefix that could be linearized (as in porcupine) ends with some
//! operations already linearized (a few are shown for context), and the operations that could
//! come next (marked `>>`) each disagree with every register value reachable at that point.
//! Times are relative to the first invocation in the whole history.

mod bits;
mod checker;
mod frontier;
mod key_ops;
mod prepare;
mod search;
#[cfg(test)]
mod tests;
mod violation;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

pub use checker::{
    DEFAULT_BUDGET, ExcerptOp, Summary, Violation, ViolationKind, check, check_records,
    check_with_budget,
};

/// Identifies the client (task, connection, thread) that issued an operation; only used in
/// reports.
pub type ClientId = usize;

/// An operation on one key's register.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Returns the current value; completes with [`Outcome::Read`].
    Read { key: String },
    /// Sets the value; completes with [`Outcome::Done`].
    Write { key: String, value: String },
    /// Makes the key absent (a no-op if it already is); completes with [`Outcome::Done`].
    Delete { key: String },
    /// Sets `new` if the register holds `expected` (`None`: if the key is absent); completes
    /// with [`Outcome::Cas`] saying whether it did.
    Cas {
        key: String,
        expected: Option<String>,
        new: String,
    },
}

impl Op {
    pub fn read(key: impl Into<String>) -> Op {
        Op::Read { key: key.into() }
    }

    pub fn write(key: impl Into<String>, value: impl Into<String>) -> Op {
        Op::Write {
            key: key.into(),
            value: value.into(),
        }
    }

    pub fn delete(key: impl Into<String>) -> Op {
        Op::Delete { key: key.into() }
    }

    pub fn cas(key: impl Into<String>, expected: Option<&str>, new: impl Into<String>) -> Op {
        Op::Cas {
            key: key.into(),
            expected: expected.map(str::to_string),
            new: new.into(),
        }
    }

    /// The key this operation acts on.
    pub fn key(&self) -> &str {
        match self {
            Op::Read { key } | Op::Write { key, .. } | Op::Delete { key } | Op::Cas { key, .. } => {
                key
            }
        }
    }

    /// `read`, `write`, `delete` or `cas`.
    pub fn kind(&self) -> &'static str {
        match self {
            Op::Read { .. } => "read",
            Op::Write { .. } => "write",
            Op::Delete { .. } => "delete",
            Op::Cas { .. } => "cas",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Read { .. } => write!(f, "read"),
            Op::Write { value, .. } => write!(f, "write {value:?}"),
            Op::Delete { .. } => write!(f, "delete"),
            Op::Cas { expected, new, .. } => {
                write!(f, "cas {} -> {new:?}", show_value(expected.as_deref()))
            }
        }
    }
}

/// Formats a register value: the quoted string, or `absent`.
pub(crate) fn show_value(v: Option<&str>) -> String {
    match v {
        Some(v) => format!("{v:?}"),
        None => "absent".to_string(),
    }
}

/// What a successful operation returned.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// A read's result (`None`: the key was absent).
    Read(Option<String>),
    /// A write or delete was applied.
    Done,
    /// Whether a CAS swapped.
    Cas(bool),
}

/// How an operation ended, as recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// Not completed yet; checked as [`Status::Unknown`].
    Pending,
    /// Took effect once and returned this outcome.
    Ok(Outcome),
    /// Definitely did not take effect.
    Failed,
    /// May or may not have taken effect, at any time after invocation.
    Unknown,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Status::Pending => write!(f, "pending"),
            Status::Failed => write!(f, "failed"),
            Status::Unknown => write!(f, "unknown"),
            Status::Ok(Outcome::Done) => write!(f, "ok"),
            Status::Ok(Outcome::Read(v)) => write!(f, "ok -> {}", show_value(v.as_deref())),
            Status::Ok(Outcome::Cas(swapped)) => write!(f, "ok -> {swapped}"),
        }
    }
}

/// One recorded operation.
#[derive(Clone, Debug)]
pub struct Record {
    pub client: ClientId,
    pub op: Op,
    pub status: Status,
    /// Position of the invocation in the history's global event order.
    pub invoke_seq: u64,
    /// Position of the completion (ok, fail or unknown) in the global event order.
    pub complete_seq: Option<u64>,
    pub invoked_at: Instant,
    pub completed_at: Option<Instant>,
}

/// A shared, append-only log of operations. Cheap to clone; clones record into the same log,
/// from any thread or task.
#[derive(Clone, Debug, Default)]
pub struct History {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    records: Vec<Record>,
    seq: u64,
}

impl History {
    pub fn new() -> History {
        History::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that `client` is about to issue `op`. Call it before sending the request, and
    /// complete the returned handle after the response (or its absence) is known.
    #[must_use = "complete the operation with ok, fail or unknown"]
    pub fn invoke(&self, client: ClientId, op: Op) -> OpHandle {
        let mut inner = self.lock();
        inner.seq += 1;
        let invoke_seq = inner.seq;
        inner.records.push(Record {
            client,
            op,
            status: Status::Pending,
            invoke_seq,
            complete_seq: None,
            invoked_at: Instant::now(),
            completed_at: None,
        });
        OpHandle {
            history: self.clone(),
            index: inner.records.len() - 1,
        }
    }

    /// A snapshot of the operations recorded so far, in invocation order.
    pub fn records(&self) -> Vec<Record> {
        self.lock().records.clone()
    }

    pub fn len(&self) -> usize {
        self.lock().records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().records.is_empty()
    }
}

/// An invoked operation awaiting its completion. Dropping it without completing records the
/// operation as unknown.
#[derive(Debug)]
pub struct OpHandle {
    history: History,
    index: usize,
}

impl OpHandle {
    /// The operation took effect and returned `outcome`.
    pub fn ok(self, outcome: Outcome) {
        self.finish(Status::Ok(outcome));
    }

    /// The operation definitely did not take effect.
    pub fn fail(self) {
        self.finish(Status::Failed);
    }

    /// The operation may or may not have taken effect (timeout, lost connection).
    pub fn unknown(self) {
        self.finish(Status::Unknown);
    }

    fn finish(&self, status: Status) {
        let mut guard = self.history.lock();
        let inner = &mut *guard;
        if let Some(record) = inner.records.get_mut(self.index)
            && record.status == Status::Pending
        {
            inner.seq += 1;
            record.status = status;
            record.complete_seq = Some(inner.seq);
            record.completed_at = Some(Instant::now());
        }
    }
}

impl Drop for OpHandle {
    fn drop(&mut self) {
        // A no-op after ok/fail/unknown, which already left Pending.
        self.finish(Status::Unknown);
    }
}
