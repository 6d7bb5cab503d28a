//! Prepares one key's recorded operations for the linearizability search ([`prepare`]): interns
//! values, drops what cannot matter (failed operations, unknown reads), rejects malformed
//! records and reads of values nothing could have written, and merges values no read or CAS
//! expects. Apart from the checker's driver ([`super::checker`]) and from the search
//! ([`super::search`]) because it is the one place that turns records into the search's input
//! ([`super::key_ops`]): the search may then assume well-formed, interned operations.

use std::collections::HashMap;

use super::key_ops::{ABSENT, Effect, KeyOps, OkKind, OkOp, UnkOp, Val};
use super::violation::{Report, Violation, ViolationKind};
use super::{Op, Outcome, Record, Status};

/// A key's distinct values, numbered in the order first seen; [`ABSENT`] (0) is no value.
struct Interner<'a> {
    ids: HashMap<&'a str, Val>,
    /// Indexed by `Val`.
    values: Vec<Option<&'a str>>,
}

impl<'a> Interner<'a> {
    fn new() -> Self {
        Interner {
            ids: HashMap::new(),
            values: vec![None],
        }
    }

    fn intern(&mut self, v: Option<&'a str>) -> Val {
        let Some(v) = v else { return ABSENT };
        let values = &mut self.values;
        *self.ids.entry(v).or_insert_with(|| {
            values.push(Some(v));
            Val::try_from(values.len() - 1).unwrap_or(Val::MAX)
        })
    }
}

/// Interns values, drops failed operations and unknown reads, and reports malformed records and
/// reads of values nothing could have written.
pub(super) fn prepare<'a>(
    report: &Report<'a>,
    key: &'a str,
    indices: &[usize],
) -> Result<KeyOps<'a>, Violation> {
    let records = report.records;
    let mut values = Interner::new();
    let mut ok = Vec::new();
    let mut unknown = Vec::new();
    for &rec in indices {
        let Some(r) = records.get(rec) else { continue };
        match &r.status {
            Status::Failed => {}
            Status::Pending | Status::Unknown => {
                if let Some(u) = unknown_op(r, rec, &mut values) {
                    unknown.push(u);
                }
            }
            Status::Ok(outcome) => ok.push(ok_op(report, key, r, rec, outcome, &mut values)?),
        }
    }
    ok.sort_by_key(|o| o.inv);
    unknown.sort_by_key(|u| u.inv);
    let mut ops = KeyOps {
        key,
        values: values.values,
        ok,
        unknown,
        junk: None,
    };
    reads_were_written(report, indices, &ops)?;
    merge_junk(&mut ops);
    Ok(ops)
}

/// The effect an unknown operation (record number `rec`) has if it took place; `None` for one
/// that changes nothing either way (a read, a CAS to the value it expects).
fn unknown_op<'a>(r: &'a Record, rec: usize, values: &mut Interner<'a>) -> Option<UnkOp> {
    let effect = match &r.op {
        Op::Read { .. } => return None,
        Op::Write { value, .. } => Effect::Set(values.intern(Some(value))),
        Op::Delete { .. } => Effect::Set(ABSENT),
        Op::Cas { expected, new, .. } => {
            let (e, n) = (values.intern(expected.as_deref()), values.intern(Some(new)));
            if e == n {
                return None; // changes nothing whether or not it happened
            }
            Effect::Cas(e, n)
        }
    };
    Some(UnkOp {
        inv: r.invoke_seq,
        effect,
        rec,
    })
}

/// An operation (record number `rec`) that completed with `outcome`, for the search; a
/// malformed record (no completion after its invocation, or an outcome its kind cannot have)
/// is a [`ViolationKind::Malformed`].
fn ok_op<'a>(
    report: &Report<'a>,
    key: &str,
    r: &'a Record,
    rec: usize,
    outcome: &'a Outcome,
    values: &mut Interner<'a>,
) -> Result<OkOp, Violation> {
    let inv = r.invoke_seq;
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
        (Op::Read { .. }, Outcome::Read(v)) => OkKind::Read(values.intern(v.as_deref())),
        (Op::Write { value, .. }, Outcome::Done) => OkKind::Set(values.intern(Some(value))),
        (Op::Delete { .. }, Outcome::Done) => OkKind::Set(ABSENT),
        (Op::Cas { expected, new, .. }, Outcome::Cas(true)) => {
            OkKind::CasOk(values.intern(expected.as_deref()), values.intern(Some(new)))
        }
        (Op::Cas { expected, .. }, Outcome::Cas(false)) => {
            OkKind::CasFail(values.intern(expected.as_deref()))
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
    Ok(OkOp {
        inv,
        ret,
        kind,
        wrote,
        rec,
    })
}

/// Reports the first completed read or successful CAS (in invocation order) that observed a
/// value no included operation could have put in the register: no search is needed to know
/// the history is not linearizable, and the failed writes of that value, if any, explain it.
fn reads_were_written(
    report: &Report<'_>,
    indices: &[usize],
    ops: &KeyOps<'_>,
) -> Result<(), Violation> {
    let (records, key) = (report.records, ops.key);
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
    Ok(())
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
