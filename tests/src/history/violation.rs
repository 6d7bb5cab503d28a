//! [`Violation`]: what a failed check reports (the key, why, and an excerpt of the operations
//! around the problem), and [`Report`], which builds one from the recorded operations. Apart from
//! the checker so that preparing a key ([`super::prepare`]) and searching it
//! ([`super::checker`]) can both report a problem without depending on each other.

use std::fmt;
use std::time::{Duration, Instant};

use super::{ClientId, Op, Record, Status};

/// A failed [`check`]: which key, why, and the operations around the point where the search
/// got stuck. `Display` prints all of it.
#[derive(Clone, Debug)]
pub struct Violation {
    pub key: String,
    pub kind: ViolationKind,
    pub message: String,
    /// Relevant operations of `key`, in invocation order.
    pub excerpt: Vec<ExcerptOp>,
}

/// One operation in a [`Violation`]'s excerpt.
#[derive(Clone, Debug)]
pub struct ExcerptOp {
    pub client: ClientId,
    pub op: Op,
    pub status: Status,
    /// Invocation time, relative to the first invocation of the history.
    pub invoked: Duration,
    /// Completion time, relative to the first invocation (`None`: never completed).
    pub completed: Option<Duration>,
    /// The operations the search could not place (shown with `>>`).
    pub stuck: bool,
    /// What the search made of this operation.
    pub note: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            ViolationKind::NotLinearizable => "linearizability violation",
            ViolationKind::BudgetExhausted => "linearizability check inconclusive",
            ViolationKind::Malformed => "malformed history",
        };
        write!(f, "{what} on key {:?}: {}", self.key, self.message)?;
        for op in &self.excerpt {
            write!(f, "\n{op}")?;
        }
        Ok(())
    }
}

impl fmt::Display for ExcerptOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |d: Duration| format!("+{:.3}ms", d.as_secs_f64() * 1e3);
        let times = format!(
            "{} .. {}",
            ms(self.invoked),
            self.completed.map_or_else(|| "?".to_string(), ms)
        );
        write!(
            f,
            "{} client {:<3} {:<30} {:<20} {:<26} {}",
            if self.stuck { ">>" } else { "  " },
            self.client,
            self.op.to_string(),
            self.status.to_string(),
            times,
            self.note
        )
    }
}

impl std::error::Error for Violation {}

/// Builds violations: knows the records and the time origin.
pub(super) struct Report<'a> {
    pub(super) records: &'a [Record],
    pub(super) origin: Option<Instant>,
}

impl Report<'_> {
    fn excerpt_op(&self, rec: usize, stuck: bool, note: impl Into<String>) -> Option<ExcerptOp> {
        let r = self.records.get(rec)?;
        let since = |t: Instant| self.origin.map_or(Duration::ZERO, |o| t.duration_since(o));
        Some(ExcerptOp {
            client: r.client,
            op: r.op.clone(),
            status: r.status.clone(),
            invoked: since(r.invoked_at),
            completed: r.completed_at.map(since),
            stuck,
            note: note.into(),
        })
    }

    pub(super) fn violation(
        &self,
        key: &str,
        kind: ViolationKind,
        message: String,
        mut ops: Vec<(usize, bool, String)>,
    ) -> Violation {
        ops.sort_by_key(|(rec, _, _)| (self.records.get(*rec).map(|r| r.invoke_seq), *rec));
        ops.dedup_by_key(|(rec, _, _)| *rec);
        Violation {
            key: key.to_string(),
            kind,
            message,
            excerpt: ops
                .into_iter()
                .filter_map(|(rec, stuck, note)| self.excerpt_op(rec, stuck, note))
                .collect(),
        }
    }
}

/// Why a a check did not succeed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViolationKind {
    /// No valid order exists: the system is not linearizable (or the test recorded wrongly).
    NotLinearizable,
    /// The search budget ran out: inconclusive.
    BudgetExhausted,
    /// A record cannot be interpreted, e.g. a read completed with a CAS outcome.
    Malformed,
}
