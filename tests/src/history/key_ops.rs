//! One key's operations as the search reads them ([`KeyOps`]): values interned to numbers
//! ([`Val`]), completed operations with their real-time bounds ([`OkOp`]) and unknown ones with
//! the effect they may have had ([`UnkOp`]). The contract between [`super::prepare`], which
//! builds it, and [`super::search`], which explores it; apart so that neither depends on the
//! other.

use super::show_value;

/// A register value: `ABSENT`, or 1 + the index of a distinct string of the key.
pub(super) type Val = u32;
pub(super) const ABSENT: Val = 0;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Effect {
    /// Write (or delete, setting `ABSENT`).
    Set(Val),
    /// Compare-and-set: (expected, new).
    Cas(Val, Val),
}

impl Effect {
    pub(super) fn apply(self, state: Val) -> Val {
        match self {
            Effect::Set(v) => v,
            Effect::Cas(expected, new) if state == expected => new,
            Effect::Cas(..) => state,
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub(super) enum OkKind {
    Read(Val),
    Set(Val),
    CasOk(Val, Val),
    CasFail(Val),
}

/// A completed operation of one key: must be linearized between `inv` and `ret`.
pub(super) struct OkOp {
    pub(super) inv: u64,
    pub(super) ret: u64,
    pub(super) kind: OkKind,
    /// The value written (for a write or successful CAS) before junk values were merged; only
    /// for reports.
    pub(super) wrote: Option<Val>,
    pub(super) rec: usize,
}

/// An unknown operation that could change the register: may be linearized after `inv`, or not.
pub(super) struct UnkOp {
    pub(super) inv: u64,
    pub(super) effect: Effect,
    pub(super) rec: usize,
}

/// One key's operations, ready for the search.
pub(super) struct KeyOps<'a> {
    pub(super) key: &'a str,
    /// Indexed by `Val`.
    pub(super) values: Vec<Option<&'a str>>,
    /// Sorted by `inv`.
    pub(super) ok: Vec<OkOp>,
    /// Sorted by `inv`.
    pub(super) unknown: Vec<UnkOp>,
    /// Stands for every value that no read and no CAS ever expects: the register behaves the
    /// same whichever of them it holds, so the search treats them as one.
    pub(super) junk: Option<Val>,
}

impl KeyOps<'_> {
    pub(super) fn show(&self, v: Val) -> String {
        if Some(v) == self.junk {
            return "a value that no read or CAS expects".to_string();
        }
        show_value(self.values.get(v as usize).copied().flatten())
    }
}
