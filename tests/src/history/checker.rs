//! [`check`]: splits a history by key, prepares each key's operations for the search and turns
//! its result into a [`Summary`] or a [`Violation`]. The model is described in the parent
//! module's documentation.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::{Duration, Instant};

use super::search::{ABSENT, Effect, End, KeyOps, OkKind, OkOp, Search, UnkOp, Val, count_bits};
use super::{ClientId, History, Op, Outcome, Record, Status};

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

pub use super::search::ViolationKind;

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
struct Report<'a> {
    records: &'a [Record],
    origin: Option<Instant>,
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

    fn violation(
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

/// Interns values, drops failed operations and unknown reads, and reports malformed records and
/// reads of values nothing could have written.
fn prepare<'a>(
    report: &Report<'a>,
    key: &'a str,
    indices: &[usize],
) -> Result<KeyOps<'a>, Violation> {
    let records = report.records;
    let mut ids: HashMap<&'a str, Val> = HashMap::new();
    let mut values: Vec<Option<&'a str>> = vec![None];
    let mut intern = |v: Option<&'a str>| -> Val {
        let Some(v) = v else { return ABSENT };
        *ids.entry(v).or_insert_with(|| {
            values.push(Some(v));
            Val::try_from(values.len() - 1).unwrap_or(Val::MAX)
        })
    };
    let mut ok = Vec::new();
    let mut unknown = Vec::new();
    for &rec in indices {
        let Some(r) = records.get(rec) else { continue };
        let inv = r.invoke_seq;
        match &r.status {
            Status::Failed => {}
            Status::Pending | Status::Unknown => {
                let effect = match &r.op {
                    Op::Read { .. } => continue,
                    Op::Write { value, .. } => Effect::Set(intern(Some(value))),
                    Op::Delete { .. } => Effect::Set(ABSENT),
                    Op::Cas { expected, new, .. } => {
                        let (e, n) = (intern(expected.as_deref()), intern(Some(new)));
                        if e == n {
                            continue; // changes nothing whether or not it happened
                        }
                        Effect::Cas(e, n)
                    }
                };
                unknown.push(UnkOp { inv, effect, rec });
            }
            Status::Ok(outcome) => {
                let malformed = |why: String| {
                    report.violation(
                        key,
                        ViolationKind::Malformed,
                        why,
                        vec![(rec, true, "malformed".to_string())],
                    )
                };
                let ret = match r.complete_seq {
                    Some(ret) if ret > inv => ret,
                    _ => {
                        return Err(malformed(
                            "ok operation without a completion after its invocation".into(),
                        ));
                    }
                };
                let kind = match (&r.op, outcome) {
                    (Op::Read { .. }, Outcome::Read(v)) => OkKind::Read(intern(v.as_deref())),
                    (Op::Write { value, .. }, Outcome::Done) => OkKind::Set(intern(Some(value))),
                    (Op::Delete { .. }, Outcome::Done) => OkKind::Set(ABSENT),
                    (Op::Cas { expected, new, .. }, Outcome::Cas(true)) => {
                        OkKind::CasOk(intern(expected.as_deref()), intern(Some(new)))
                    }
                    (Op::Cas { expected, .. }, Outcome::Cas(false)) => {
                        OkKind::CasFail(intern(expected.as_deref()))
                    }
                    (op, outcome) => {
                        return Err(malformed(format!(
                            "{} completed with {outcome:?}, which is not an outcome of a {}",
                            op.kind(),
                            op.kind()
                        )));
                    }
                };
                let wrote = match kind {
                    OkKind::Set(v) | OkKind::CasOk(_, v) => Some(v),
                    OkKind::Read(_) | OkKind::CasFail(_) => None,
                };
                ok.push(OkOp {
                    inv,
                    ret,
                    kind,
                    wrote,
                    rec,
                });
            }
        }
    }
    ok.sort_by_key(|o| o.inv);
    unknown.sort_by_key(|u| u.inv);
    let mut ops = KeyOps {
        key,
        values,
        ok,
        unknown,
        junk: None,
    };

    // Values that some included operation could have put in the register.
    let mut written = vec![false; ops.values.len()];
    written[ABSENT as usize] = true;
    let mut mark = |v: Val| {
        if let Some(w) = written.get_mut(v as usize) {
            *w = true;
        }
    };
    for o in &ops.ok {
        match o.kind {
            OkKind::Set(v) | OkKind::CasOk(_, v) => mark(v),
            OkKind::Read(_) | OkKind::CasFail(_) => {}
        }
    }
    for u in &ops.unknown {
        match u.effect {
            Effect::Set(v) | Effect::Cas(_, v) => mark(v),
        }
    }
    for o in &ops.ok {
        let needed = match o.kind {
            OkKind::Read(v) | OkKind::CasOk(v, _) => v,
            OkKind::Set(_) | OkKind::CasFail(_) => continue,
        };
        if written.get(needed as usize).copied().unwrap_or(false) {
            continue;
        }
        let shown = ops.show(needed);
        let mut excerpt = vec![(o.rec, true, format!("expects {shown}"))];
        let failed_writers: Vec<usize> = indices
            .iter()
            .copied()
            .filter(|&i| {
                records.get(i).is_some_and(|r| {
                    r.status == Status::Failed
                        && match &r.op {
                            Op::Write { value, .. } | Op::Cas { new: value, .. } => {
                                ops.values.get(needed as usize) == Some(&Some(value.as_str()))
                            }
                            Op::Read { .. } | Op::Delete { .. } => false,
                        }
                })
            })
            .take(3)
            .collect();
        let why = if failed_writers.is_empty() {
            "no operation on this key wrote it".to_string()
        } else {
            "only a failed operation wrote it, and failed means it did not take effect".to_string()
        };
        excerpt.extend(
            failed_writers
                .into_iter()
                .map(|i| (i, false, "failed write".to_string())),
        );
        let kind = records.get(o.rec).map_or("operation", |r| r.op.kind());
        return Err(report.violation(
            key,
            ViolationKind::NotLinearizable,
            format!("a {kind} observed {shown}, but {why}"),
            excerpt,
        ));
    }
    merge_junk(&mut ops);
    Ok(ops)
}

/// Maps every value that no read or CAS expects to one stand-in (`KeyOps::junk`): the register
/// behaves the same whichever of them it holds (reads and CASes compare only with expected
/// values), so this is exact, and it lets the search merge configurations and treat unknown
/// writes of such values as interchangeable.
fn merge_junk(ops: &mut KeyOps<'_>) {
    let mut expected = vec![false; ops.values.len()];
    let mut mark = |v: Val| {
        if let Some(e) = expected.get_mut(v as usize) {
            *e = true;
        }
    };
    mark(ABSENT);
    for o in &ops.ok {
        match o.kind {
            OkKind::Read(v) | OkKind::CasOk(v, _) | OkKind::CasFail(v) => mark(v),
            OkKind::Set(_) => {}
        }
    }
    for u in &ops.unknown {
        if let Effect::Cas(e, _) = u.effect {
            mark(e);
        }
    }
    if expected.iter().all(|e| *e) {
        return;
    }
    let junk = Val::try_from(ops.values.len()).unwrap_or(Val::MAX);
    ops.values.push(None);
    ops.junk = Some(junk);
    let map = |v: Val| {
        if expected.get(v as usize).copied().unwrap_or(true) {
            v
        } else {
            junk
        }
    };
    for o in &mut ops.ok {
        o.kind = match o.kind {
            OkKind::Set(v) => OkKind::Set(map(v)),
            OkKind::CasOk(e, n) => OkKind::CasOk(e, map(n)),
            kind @ (OkKind::Read(_) | OkKind::CasFail(_)) => kind,
        };
    }
    for u in &mut ops.unknown {
        u.effect = match u.effect {
            Effect::Set(v) => Effect::Set(map(v)),
            Effect::Cas(e, n) => Effect::Cas(e, map(n)),
        };
    }
}

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
