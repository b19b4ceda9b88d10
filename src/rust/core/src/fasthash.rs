//! A fast hasher for the caches a capture consults many times per frame,
//! keyed by integers (addresses, module numbers) that come from this
//! process, never from input an attacker chooses: the standard library's
//! SipHash, made to resist such input, was a tenth of a warm capture.
//! One multiply and rotate per word (the scheme of rustc's FxHash).

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

#[derive(Clone, Copy, Default)]
pub struct FastHasher(u64);

const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FastHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(K);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        for &b in chunks.remainder() {
            self.add(b as u64);
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(i as u64);
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    /// The product's well-mixed high bits are moved down: hash tables
    /// take their bucket from the low bits, which after a multiply depend
    /// only on the key's low bits (all zero in aligned pointers).
    #[inline]
    fn finish(&self) -> u64 {
        self.0.rotate_left(26)
    }
}

pub type FastBuild = BuildHasherDefault<FastHasher>;
pub type FastMap<K, V> = HashMap<K, V, FastBuild>;
pub type FastSet<K> = HashSet<K, FastBuild>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_keyed_by_addresses_find_what_was_put() {
        let mut m: FastMap<usize, usize> = FastMap::default();
        for i in 0..10_000usize {
            m.insert(0x7f00_0000_0000 + i * 16, i);
        }
        assert!((0..10_000usize).all(|i| m[&(0x7f00_0000_0000 + i * 16)] == i));
        assert!(!m.contains_key(&0x7f00_0000_0008));
        let mut h = FastHasher::default();
        h.write(b"abc");
        let mut g = FastHasher::default();
        g.write(b"abd");
        assert_ne!(h.finish(), g.finish());
        // Aligned pointers spread over a table's buckets (its low bits).
        let buckets: FastSet<u64> = (0..1024u64)
            .map(|i| {
                let mut h = FastHasher::default();
                h.write_usize(0x5555_0000_0000 + 64 * i as usize);
                h.finish() & 1023
            })
            .collect();
        assert!(buckets.len() > 512, "{} buckets of 1024", buckets.len());
    }
}
