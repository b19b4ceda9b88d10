//! The sampled blocks still allocated: which sampled allocations were not
//! freed by the end of a profile (the "in use" view). Every free of the
//! profiled process asks whether its block is one, so asking must be cheap
//! and lock-free (frees come from every thread): an open-addressing table
//! of block addresses with atomic slots, allocated once when the profile
//! starts. A freed block's slot becomes a tombstone (probes go past it, an
//! insert may reuse it); a full table counts the samples it could not keep.
//! A small bitmap of the addresses ever kept (4 KiB, stays in cache) lets
//! most frees skip the table even while sampled blocks are held.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

const EMPTY: usize = 0;
const TOMBSTONE: usize = 1;

/// Probes at most this many slots (a longer run means the table is too
/// full: the insert gives up, the lookup says "not there").
const MAX_PROBE: usize = 64;

/// A table of live sampled blocks: address to the sample's number.
pub struct Live {
    addrs: Box<[AtomicUsize]>,
    samples: Box<[AtomicU64]>,
    /// Blocks kept (inserted and not removed).
    held: AtomicUsize,
    /// Samples that found no slot.
    pub lost: AtomicU64,
    /// One bit per hash of an address kept since the last `clear_filter()`.
    filter: Box<[AtomicU64]>,
}

/// Bits of the filter (a power of two).
const FILTER_BITS: usize = 1 << 15;

impl Live {
    /// A table of `capacity` slots (rounded up to a power of two).
    pub fn new(capacity: usize) -> Live {
        let n = capacity.max(16).next_power_of_two();
        Live {
            addrs: (0..n).map(|_| AtomicUsize::new(EMPTY)).collect(),
            samples: (0..n).map(|_| AtomicU64::new(0)).collect(),
            held: AtomicUsize::new(0),
            lost: AtomicU64::new(0),
            filter: (0..FILTER_BITS / 64).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn home(&self, addr: usize) -> usize {
        // Blocks are 16-byte aligned: mix the bits above those.
        ((addr >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 20) & (self.addrs.len() - 1)
    }

    /// The filter's word and bit for `addr` (other hash bits than `home`).
    #[inline(always)]
    fn filter_bit(addr: usize) -> (usize, u64) {
        let h = (addr >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - FILTER_BITS.trailing_zeros());
        (h / 64, 1u64 << (h % 64))
    }

    /// Forgets the addresses the filter has seen; only while the table is
    /// empty and nothing inserts (between profiles).
    pub fn clear_filter(&self) {
        if self.is_empty() {
            for w in self.filter.iter() {
                w.store(0, Ordering::Release);
            }
        }
    }

    /// Keeps block `addr` as sample `sample`; false if there was no room.
    pub fn insert(&self, addr: usize, sample: u64) -> bool {
        if addr <= TOMBSTONE {
            return false;
        }
        // (The bit goes first: a free that finds the block in the table
        // must find its bit.)
        let (w, bit) = Live::filter_bit(addr);
        self.filter[w].fetch_or(bit, Ordering::AcqRel);
        let mask = self.addrs.len() - 1;
        let home = self.home(addr);
        for k in 0..MAX_PROBE.min(self.addrs.len()) {
            let i = (home + k) & mask;
            let cur = self.addrs[i].load(Ordering::Acquire);
            if (cur == EMPTY || cur == TOMBSTONE)
                && self.addrs[i].compare_exchange(cur, addr, Ordering::AcqRel, Ordering::Acquire).is_ok()
            {
                // (A reader that finds the address before the number is
                // stored reads an older number: the number is only read at
                // the end of the profile, when no insert runs.)
                self.samples[i].store(sample, Ordering::Release);
                self.held.fetch_add(1, Ordering::AcqRel);
                return true;
            }
        }
        self.lost.fetch_add(1, Ordering::Relaxed);
        false
    }

    /// Forgets block `addr` if it is kept (it was freed): its sample's
    /// number.
    #[inline(always)]
    pub fn remove(&self, addr: usize) -> Option<u64> {
        if self.held.load(Ordering::Acquire) == 0 || addr <= TOMBSTONE {
            return None;
        }
        let (w, bit) = Live::filter_bit(addr);
        if self.filter[w].load(Ordering::Acquire) & bit == 0 {
            return None;
        }
        self.probe_and_remove(addr)
    }

    /// `remove()` while some block is kept (kept out of line: the hooked
    /// `free` inlines only the test above).
    #[inline(never)]
    fn probe_and_remove(&self, addr: usize) -> Option<u64> {
        let mask = self.addrs.len() - 1;
        let home = self.home(addr);
        for k in 0..MAX_PROBE.min(self.addrs.len()) {
            let i = (home + k) & mask;
            let cur = self.addrs[i].load(Ordering::Acquire);
            if cur == EMPTY {
                return None;
            }
            if cur == addr {
                let sample = self.samples[i].load(Ordering::Acquire);
                // One free wins (a block is freed once; a double free is
                // the program's bug, not counted twice).
                if self.addrs[i]
                    .compare_exchange(addr, TOMBSTONE, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    self.held.fetch_sub(1, Ordering::AcqRel);
                    return Some(sample);
                }
                return None;
            }
        }
        None
    }

    /// The blocks kept now: (address, sample number).
    pub fn kept(&self) -> Vec<(usize, u64)> {
        self.addrs
            .iter()
            .zip(self.samples.iter())
            .filter_map(|(a, s)| {
                let a = a.load(Ordering::Acquire);
                (a > TOMBSTONE).then(|| (a, s.load(Ordering::Acquire)))
            })
            .collect()
    }

    /// How many blocks are kept.
    pub fn len(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_kept_until_freed_once() {
        let t = Live::new(64);
        assert!(t.insert(0x1000, 1));
        assert!(t.insert(0x2000, 2));
        assert_eq!(t.len(), 2);
        assert_eq!(t.remove(0x1000), Some(1));
        assert_eq!(t.remove(0x1000), None, "freed once");
        assert_eq!(t.remove(0x3000), None, "never sampled");
        assert_eq!(t.kept(), vec![(0x2000, 2)]);
        // The tombstone's slot is used again, and probes pass it.
        assert!(t.insert(0x1000, 3));
        assert_eq!(t.remove(0x2000), Some(2));
        assert_eq!(t.kept(), vec![(0x1000, 3)]);
        assert!(!t.insert(0, 4) && !t.insert(1, 4), "not addresses");
    }

    #[test]
    fn the_filter_passes_every_kept_block_and_turns_most_others_away() {
        let t = Live::new(1 << 10);
        let kept: Vec<usize> = (0..200).map(|i| 0x7f00_0000_0000 + i * 4096 + 16).collect();
        for (i, &a) in kept.iter().enumerate() {
            assert!(t.insert(a, i as u64));
        }
        let passed = |a: usize| {
            let (w, bit) = Live::filter_bit(a);
            t.filter[w].load(Ordering::Relaxed) & bit != 0
        };
        assert!(kept.iter().all(|&a| passed(a)), "no kept block is turned away");
        let others = (0..10_000).map(|i| 0x5500_0000_0000 + i * 48).filter(|&a| passed(a)).count();
        assert!(others < 200, "{others} of 10,000 other blocks pass 200 bits of 32,768");
        for (i, &a) in kept.iter().enumerate() {
            assert_eq!(t.remove(a), Some(i as u64));
        }
        t.clear_filter();
        assert!(kept.iter().all(|&a| !passed(a)), "cleared once the table is empty");
    }

    #[test]
    fn a_full_table_counts_what_it_cannot_keep() {
        let t = Live::new(16);
        let n = (0..100).filter(|&i| t.insert(0x10_0000 + i * 16, i as u64)).count();
        assert_eq!(n, 16);
        assert_eq!(t.lost.load(Ordering::Relaxed), 84);
        assert_eq!(t.kept().len(), 16);
    }

    #[test]
    fn threads_insert_and_remove_at_once() {
        let t = std::sync::Arc::new(Live::new(1 << 16));
        let handles: Vec<_> = (0..4usize)
            .map(|k| {
                let t = t.clone();
                std::thread::spawn(move || {
                    for i in 0..5000usize {
                        let a = 0x100_0000 * (k + 1) + i * 16;
                        assert!(t.insert(a, i as u64));
                        if i % 2 == 0 {
                            assert_eq!(t.remove(a), Some(i as u64));
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(t.len(), 4 * 2500);
        assert_eq!(t.kept().len(), 4 * 2500);
    }
}
