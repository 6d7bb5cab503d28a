//! Which operations the search may linearize next: the ok operations on the real-time
//! frontier ([`frontier`]) and the shortest runs of unknown operations that take the register
//! to a value one of them needs ([`runs_to`]). Pure functions of the operations and the search's
//! bit sets, apart from the search's state machine so that they can be read and reasoned about
//! on their own.

use super::bits::bit;
use super::key_ops::{Effect, OkOp, UnkOp, Val};

/// The ok ops that may be linearized next given linearized set `lin` (complete below `p`):
/// those not linearized and invoked no later than `m`, the earliest return among the ops not
/// linearized (an op invoked after another returned cannot precede it). Returns `m` and those
/// ops' indices.
pub(super) fn frontier(ops: &[OkOp], lin: &[u64], p: usize) -> (u64, Vec<usize>) {
    let mut m = u64::MAX;
    let mut candidates = Vec::new();
    for (j, op) in ops.iter().enumerate().skip(p) {
        if op.inv > m {
            // Later ops are invoked later still, so they can neither be next nor lower `m`.
            break;
        }
        if !bit(lin, j) {
            m = m.min(op.ret);
            candidates.push(j);
        }
    }
    // No op pushed earlier can have been invoked after the final `m`: ops are sorted by
    // invocation, so every return seen after it is later than its invocation.
    (m, candidates)
}

/// Shortest-form sequences of unknown ops (from `avail`) taking the register from `from` to
/// `to`: at most one write or delete, first, then compare-and-sets each changing the value to
/// one not seen before. Any sequence that works contains one of these.
pub(super) fn runs_to(
    unknown: &[UnkOp],
    avail: &[usize],
    from: Val,
    to: Val,
    steps: &mut u64,
    limit: u64,
) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    for &u in avail {
        let Some(op) = unknown.get(u) else { continue };
        *steps += 1;
        let a = op.effect.apply(from);
        if a == from {
            continue;
        }
        if a == to {
            out.push(vec![u]);
            continue;
        }
        let mut path = vec![u];
        let mut seen = vec![from, a];
        cas_chains(
            unknown, avail, to, &mut path, &mut seen, &mut out, steps, limit,
        );
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn cas_chains(
    unknown: &[UnkOp],
    avail: &[usize],
    to: Val,
    path: &mut Vec<usize>,
    seen: &mut Vec<Val>,
    out: &mut Vec<Vec<usize>>,
    steps: &mut u64,
    limit: u64,
) {
    let Some(&current) = seen.last() else { return };
    for &u in avail {
        if *steps >= limit {
            return;
        }
        let Some(UnkOp {
            effect: Effect::Cas(expected, new),
            ..
        }) = unknown.get(u)
        else {
            continue;
        };
        if *expected != current || seen.contains(new) || path.contains(&u) {
            continue;
        }
        *steps += 1;
        path.push(u);
        if *new == to {
            out.push(path.clone());
        } else {
            seen.push(*new);
            cas_chains(unknown, avail, to, path, seen, out, steps, limit);
            seen.pop();
        }
        path.pop();
    }
}
