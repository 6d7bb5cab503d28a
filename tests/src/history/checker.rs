//! [`check`]: splits a history by key, prepares each key's operations for the search
//! ([`super::prepare`]) and turns its result into a [`Summary`] or a [`Violation`]
//! ([`super::violation`]). The model is described in the parent module's documentation.

use std::collections::BTreeMap;
use std::fmt;

use super::bits::count_bits;
use super::key_ops::KeyOps;
use super::prepare::prepare;
use super::search::{End, Search};
use super::violation::Report;
use super::{History, Op, Record, Status};

/// Search steps allowed per key by [`check`]. A linearizable history from a few clients needs
/// about one step per operation, so this is far above what ordinary tests use; it bounds the
/// time spent on pathological histories to seconds.
pub const DEFAULT_BUDGET: u64 = 2_000_000;

/// Checks `history` with [`DEFAULT_BUDGET`] search steps per key.
pub fn check(history: &History) -> Result<Summary, Violation> {
    check_with_budget(history, DEFAULT_BUDGET)
}

/// Checks `history`, allowing `budget` search steps per key.
pub fn check_with_budget(history: &History, budget: u64) -> Result<Summary, Violation> {
    check_records(&history.records(), budget)
}

/// Checks recorded operations (for example a [`History::records`] snapshot, edited or
/// assembled by hand), allowing `budget` search steps per key. Keys are checked in sorted
/// order and the first problem found is returned.
pub fn check_records(records: &[Record], budget: u64) -> Result<Summary, Violation> {
    let report = Report {
        records,
        origin: records.iter().map(|r| r.invoked_at).min(),
    };
    let mut summary = Summary::default();
    let mut by_key: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, r) in records.iter().enumerate() {
        match r.op {
            Op::Read { .. } => summary.reads += 1,
            Op::Write { .. } => summary.writes += 1,
            Op::Delete { .. } => summary.deletes += 1,
            Op::Cas { .. } => summary.cas += 1,
        }
        match r.status {
            Status::Ok(_) => summary.ok += 1,
            Status::Failed => summary.failed += 1,
            Status::Unknown | Status::Pending => summary.unknown += 1,
        }
        by_key.entry(r.op.key()).or_default().push(i);
    }
    summary.keys = by_key.len();
    for (key, indices) in by_key {
        let ops = prepare(&report, key, &indices)?;
        summary.steps += search(&report, &ops, budget)?;
    }
    Ok(summary)
}

/// What a successful [`check`] looked at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Distinct keys, each checked as an independent register.
    pub keys: usize,
    pub reads: usize,
    pub writes: usize,
    pub deletes: usize,
    pub cas: usize,
    pub ok: usize,
    pub failed: usize,
    /// Unknown, including operations never completed.
    pub unknown: usize,
    /// Search steps used, over all keys.
    pub steps: u64,
}

impl Summary {
    /// All recorded operations.
    pub fn ops(&self) -> usize {
        self.ok + self.failed + self.unknown
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "linearizable: {} ops on {} keys ({} reads, {} writes, {} deletes, {} cas; \
             {} ok, {} failed, {} unknown) in {} search steps",
            self.ops(),
            self.keys,
            self.reads,
            self.writes,
            self.deletes,
            self.cas,
            self.ok,
            self.failed,
            self.unknown,
            self.steps
        )
    }
}

pub use super::violation::{ExcerptOp, Violation, ViolationKind};

/// Runs the search for one key; returns the steps used.
fn search(report: &Report<'_>, ops: &KeyOps<'_>, budget: u64) -> Result<u64, Violation> {
    let mut s = Search::new(ops, budget);
    let end = s.run();
    let steps = s.steps;
    let (kind, message) = match end {
        End::Linearizable => return Ok(steps),
        End::Stuck => (
            ViolationKind::NotLinearizable,
            format!(
                "no valid order exists. At most {} of the key's {} completed operations can be \
                 ordered consistently with real time and the register{}; after them the \
                 register holds {}, and none of the operations that could take effect next \
                 (marked >>) agrees with that",
                s.best.count,
                ops.ok.len(),
                match count_bits(&s.best.used) {
                    0 => String::new(),
                    1 => " (with 1 unknown operation assumed to take effect)".to_string(),
                    n => format!(" (with {n} unknown operations assumed to take effect)"),
                },
                s.best_states(),
            ),
        ),
        End::Budget => (
            ViolationKind::BudgetExhausted,
            format!(
                "search budget of {budget} steps exhausted with {} completed and {} unknown \
                 operations on this key; the deepest point reached ordered {} completed \
                 operations (shown below). Inconclusive: raise the budget with \
                 check_with_budget or record a shorter history",
                ops.ok.len(),
                ops.unknown.len(),
                s.best.count,
            ),
        ),
    };
    Err(report.violation(ops.key, kind, message, s.excerpt(kind)))
}
