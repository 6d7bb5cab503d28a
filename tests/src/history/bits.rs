//! Bit sets over operation indices (`&[u64]`, a bit per operation) and the fast hash the
//! search's memo uses on them. Apart from the search because they are plain data-structure
//! helpers, shared with [`super::frontier`].

use std::hash::{BuildHasherDefault, Hasher};

/// The memo's hasher (see [`FxHasher`]).
pub(super) type FxBuild = BuildHasherDefault<FxHasher>;

pub(super) fn bit(bits: &[u64], i: usize) -> bool {
    bits.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
}

pub(super) fn set_bit(bits: &mut [u64], i: usize, on: bool) {
    if let Some(w) = bits.get_mut(i / 64) {
        if on {
            *w |= 1 << (i % 64);
        } else {
            *w &= !(1 << (i % 64));
        }
    }
}

/// Whether every bit set in `a` is set in `b` (same lengths).
pub(super) fn is_subset(a: &[u64], b: &[u64]) -> bool {
    a.iter().zip(b).all(|(x, y)| x & !y == 0)
}

pub(super) fn count_bits(bits: &[u64]) -> u32 {
    bits.iter().map(|w| w.count_ones()).sum()
}

/// The rustc/Firefox "Fx" hash: much faster than SipHash on the memo's word slices, and
/// collision resistance does not matter here.
#[derive(Default)]
pub(super) struct FxHasher {
    hash: u64,
}

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        for &b in chunks.remainder() {
            self.add(u64::from(b));
        }
    }

    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn finish(&self) -> u64 {
        self.hash
    }
}
