//! The search itself: Wing & Gong's algorithm with Lowe's memoisation over one key's
//! operations (see the parent module's documentation for the model and why it is complete).

//!
//! Its input model is [`super::key_ops`]; which operations may come next is
//! [`super::frontier`]'s; the bit sets and the memo's hash are [`super::bits`].

use std::collections::{HashMap, HashSet};

use super::bits::{FxBuild, bit, is_subset, set_bit};
use super::frontier::{frontier, runs_to};
use super::key_ops::{ABSENT, KeyOps, OkKind, OkOp, UnkOp, Val};
use super::violation::ViolationKind;

pub(super) enum End {
    Linearizable,
    Stuck,
    Budget,
}

/// One way to extend a linearization: unknown ops `run`, then ok op `op`; the register ends
/// up holding `to`.
struct Transition {
    op: usize,
    run: Vec<usize>,
    to: Val,
}

/// What `apply` changed, for `revert`.
struct Undo {
    transition: usize,
    state: Val,
    p: usize,
}

struct Frame {
    successors: Vec<Transition>,
    next: usize,
    applied: Option<Undo>,
}

/// The deepest configuration reached, for reports.
pub(super) struct Best {
    pub(super) count: usize,
    p: usize,
    lin: Vec<u64>,
    pub(super) used: Vec<u64>,
    states: Vec<Val>,
}

/// Visited configurations: (linearized set, register value) to the sets of unknown ops used
/// on the way there, keeping only minimal ones (using fewer unknown ops leaves more options).
type Memo = HashMap<Box<[u64]>, Vec<Box<[u64]>>, FxBuild>;

pub(super) struct Search<'k> {
    ops: &'k KeyOps<'k>,
    /// Linearized ok ops (bit per index of `ops.ok`).
    lin: Vec<u64>,
    /// Unknown ops assumed to have taken effect (bit per index of `ops.unknown`).
    used: Vec<u64>,
    state: Val,
    /// Every ok op before index `p` is linearized.
    p: usize,
    count: usize,
    pub(super) steps: u64,
    budget: u64,
    memo: Memo,
    pub(super) best: Best,
}

impl<'k> Search<'k> {
    pub(super) fn new(ops: &'k KeyOps<'k>, budget: u64) -> Search<'k> {
        let lin = vec![0; ops.ok.len().div_ceil(64)];
        let used = vec![0; ops.unknown.len().div_ceil(64)];
        Search {
            ops,
            best: Best {
                count: 0,
                p: 0,
                lin: lin.clone(),
                used: used.clone(),
                states: vec![ABSENT],
            },
            lin,
            used,
            state: ABSENT,
            p: 0,
            count: 0,
            steps: 0,
            budget,
            memo: Memo::default(),
        }
    }

    pub(super) fn run(&mut self) -> End {
        let n = self.ops.ok.len();
        if n == 0 {
            return End::Linearizable;
        }
        self.visit();
        let mut stack = vec![Frame {
            successors: self.successors(),
            next: 0,
            applied: None,
        }];
        while let Some(frame) = stack.last_mut() {
            if let Some(undo) = frame.applied.take() {
                self.revert(&frame.successors, undo);
            }
            if self.steps >= self.budget {
                return End::Budget;
            }
            let index = frame.next;
            let Some(transition) = frame.successors.get(index) else {
                stack.pop();
                continue;
            };
            frame.next += 1;
            self.steps += 1;
            let undo = self.apply(transition, index);
            if self.count == n {
                return End::Linearizable;
            }
            if !self.visit() {
                self.revert(&frame.successors, undo);
                continue;
            }
            frame.applied = Some(undo);
            self.note_best();
            let successors = self.successors();
            stack.push(Frame {
                successors,
                next: 0,
                applied: None,
            });
        }
        End::Stuck
    }

    fn apply(&mut self, t: &Transition, index: usize) -> Undo {
        let undo = Undo {
            transition: index,
            state: self.state,
            p: self.p,
        };
        set_bit(&mut self.lin, t.op, true);
        for &u in &t.run {
            set_bit(&mut self.used, u, true);
        }
        self.count += 1;
        self.state = t.to;
        while self.p < self.ops.ok.len() && bit(&self.lin, self.p) {
            self.p += 1;
        }
        undo
    }

    fn revert(&mut self, successors: &[Transition], undo: Undo) {
        if let Some(t) = successors.get(undo.transition) {
            set_bit(&mut self.lin, t.op, false);
            for &u in &t.run {
                set_bit(&mut self.used, u, false);
            }
        }
        self.count -= 1;
        self.state = undo.state;
        self.p = undo.p;
    }

    /// Records the current configuration; false if it (or one that used a subset of its
    /// unknown ops) was visited before, so exploring it again cannot succeed.
    fn visit(&mut self) -> bool {
        let used = &self.used;
        let seen = self.memo.entry(self.memo_key()).or_default();
        if seen.iter().any(|other| is_subset(other, used)) {
            return false;
        }
        seen.retain(|other| !is_subset(used, other));
        seen.push(used.clone().into_boxed_slice());
        true
    }

    /// (p, register value) and the linearized set from word `p / 64` up to its last non-zero
    /// word. Bits below `p` are all set, so this identifies the set.
    fn memo_key(&self) -> Box<[u64]> {
        let lo = self.p / 64;
        let hi = self
            .lin
            .iter()
            .rposition(|w| *w != 0)
            .map_or(0, |i| i + 1)
            .max(lo);
        let mut key = Vec::with_capacity(1 + hi - lo);
        key.push(((self.p as u64) << 32) | u64::from(self.state));
        key.extend_from_slice(self.lin.get(lo..hi).unwrap_or_default());
        key.into_boxed_slice()
    }

    fn note_best(&mut self) {
        let best = &mut self.best;
        if self.count > best.count {
            *best = Best {
                count: self.count,
                p: self.p,
                lin: self.lin.clone(),
                used: self.used.clone(),
                states: vec![self.state],
            };
        } else if self.count == best.count
            && best.states.len() < 8
            && !best.states.contains(&self.state)
            && best.lin == self.lin
        {
            best.states.push(self.state);
        }
    }

    pub(super) fn best_states(&self) -> String {
        let show = |v: Val| {
            if Some(v) != self.ops.junk {
                return self.ops.show(v);
            }
            // Name the junk value most likely meant: the last one written by the ops ordered.
            let example = (self.ops.ok.iter().enumerate())
                .filter(|(j, o)| bit(&self.best.lin, *j) && o.wrote.is_some())
                .max_by_key(|(_, o)| o.ret)
                .and_then(|(_, o)| o.wrote)
                .filter(|&w| w != v)
                .map(|w| self.ops.show(w));
            match example {
                Some(w) => format!("{w} (or another value that no read or CAS expects)"),
                None => self.ops.show(v),
            }
        };
        let states: Vec<String> = self.best.states.iter().map(|&v| show(v)).collect();
        if states.len() == 1 {
            states.concat()
        } else {
            format!("one of {}", states.join(", "))
        }
    }

    /// Unknown ops not yet used that may take effect once every ok op returning before `m` is
    /// linearized; of several with the same effect only the first, since they are
    /// interchangeable (the others stay available for later, as the first would have).
    fn available(&self, m: u64) -> Vec<usize> {
        let mut effects = HashSet::with_hasher(FxBuild::default());
        self.ops
            .unknown
            .iter()
            .enumerate()
            .take_while(|(_, u)| u.inv <= m)
            .filter(|(i, u)| !bit(&self.used, *i) && effects.insert(u.effect))
            .map(|(i, _)| i)
            .collect()
    }

    /// Ways to linearize one more ok op from the current configuration: those needing no
    /// unknown op first (earliest return first), then by the number of unknown ops they
    /// assume.
    fn successors(&mut self) -> Vec<Transition> {
        let (m, candidates) = frontier(&self.ops.ok, &self.lin, self.p);
        let s = self.state;
        // A read of the current value, or a CAS failing on it, changes nothing: if any order
        // works from here, one starting with it does (move it to the front), so it is the only
        // choice to try.
        for &j in &candidates {
            let keeps = match self.ops.ok.get(j).map(|o| o.kind) {
                Some(OkKind::Read(r)) => r == s,
                Some(OkKind::CasFail(e)) => e != s,
                _ => false,
            };
            if keeps {
                return vec![Transition {
                    op: j,
                    run: Vec::new(),
                    to: s,
                }];
            }
        }
        let mut direct = Vec::new();
        let mut with_runs = Vec::new();
        let mut avail: Option<Vec<usize>> = None;
        for j in candidates {
            let Some(op) = self.ops.ok.get(j) else {
                continue;
            };
            let (need, to) = match op.kind {
                OkKind::Set(v) => (None, v),
                OkKind::Read(r) => (Some(r), r),
                OkKind::CasOk(e, n) => (Some(e), n),
                OkKind::CasFail(_) => {
                    // The register holds `expected` (else the op would have been taken greedily
                    // above): one unknown op must move it off first.
                    let avail = avail.get_or_insert_with(|| self.available(m));
                    for &u in avail.iter() {
                        let to = self.ops.unknown.get(u).map_or(s, |u| u.effect.apply(s));
                        if to != s {
                            with_runs.push(Transition {
                                op: j,
                                run: vec![u],
                                to,
                            });
                        }
                    }
                    continue;
                }
            };
            match need {
                Some(need) if need != s => {
                    let avail = avail.get_or_insert_with(|| self.available(m));
                    let limit = self.budget;
                    for run in runs_to(&self.ops.unknown, avail, s, need, &mut self.steps, limit) {
                        with_runs.push(Transition { op: j, run, to });
                    }
                }
                _ => direct.push(Transition {
                    op: j,
                    run: Vec::new(),
                    to,
                }),
            }
        }
        let ret = |t: &Transition| self.ops.ok.get(t.op).map_or(u64::MAX, |o| o.ret);
        direct.sort_by_key(ret);
        with_runs.sort_by_key(|t| t.run.len());
        direct.extend(with_runs);
        direct
    }

    /// Operations for the report: a few linearized ones for context, the ones that could come
    /// next (stuck), and the unknown ones that could have taken effect at that point.
    pub(super) fn excerpt(&self, kind: ViolationKind) -> Vec<(usize, bool, String)> {
        let ops = &self.ops.ok;
        let best = &self.best;
        let (m, candidates) = frontier(ops, &best.lin, best.p);
        let mut out = Vec::new();
        let mut linearized: Vec<&OkOp> = ops
            .iter()
            .enumerate()
            .filter(|(j, _)| bit(&best.lin, *j))
            .map(|(_, o)| o)
            .collect();
        linearized.sort_by_key(|o| std::cmp::Reverse(o.ret));
        for o in linearized.into_iter().take(4) {
            out.push((o.rec, false, "ordered before the stuck point".to_string()));
        }
        for &j in candidates.iter().take(12) {
            if let Some(o) = ops.get(j) {
                let note = match (kind, o.ret == m) {
                    (ViolationKind::NotLinearizable, true) => {
                        "cannot take effect here, yet precedes all ops invoked after it returned"
                    }
                    (ViolationKind::NotLinearizable, false) => "cannot take effect here",
                    (_, _) => "could be next (search unfinished)",
                };
                out.push((o.rec, true, note.to_string()));
            }
        }
        let unknown = &self.ops.unknown;
        let used: Vec<usize> = (0..unknown.len()).filter(|&i| bit(&best.used, i)).collect();
        for &i in used.iter().rev().take(3) {
            if let Some(u) = unknown.get(i) {
                out.push((
                    u.rec,
                    false,
                    "unknown; assumed to have taken effect".to_string(),
                ));
            }
        }
        let open: Vec<&UnkOp> = unknown
            .iter()
            .enumerate()
            .take_while(|(_, u)| u.inv <= m)
            .filter(|(i, _)| !bit(&best.used, *i))
            .map(|(_, u)| u)
            .collect();
        for u in open.iter().rev().take(4) {
            out.push((u.rec, false, "unknown; could still take effect".to_string()));
        }
        out
    }
}
