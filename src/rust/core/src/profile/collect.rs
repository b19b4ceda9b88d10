//! What the collector thread makes of the sampler's records: distinct
//! stacks with their counts (memory grows with distinct stacks, not with
//! samples), and how long the handler took.

use std::collections::HashMap;

/// Header flags of a sample (set by the sampler).
pub const TRUNCATED_NATIVE: u64 = 1;
pub const TRUNCATED_R: u64 = 2;

/// Counts of one distinct stack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Timer intervals the stack stands for (samples weighted by timer
    /// overruns).
    pub weight: u64,
    /// Handler runs that found it.
    pub samples: u64,
    /// Of those, how many could not walk the whole native stack or read the
    /// whole context chain.
    pub truncated: u64,
}

/// Handler times in nanoseconds: 100 ns buckets below 100 µs, then 64
/// buckets per power of two (1.6% wide) up to the largest time a record
/// holds (32 bits of nanoseconds).
#[derive(Clone, Debug)]
pub struct Times {
    buckets: Vec<u64>,
    max: u64,
    pub total_ns: u64,
    pub count: u64,
}

const BUCKET_NS: u64 = 100;
const LINEAR: usize = 1000;
/// Sub-buckets per power of two, as a shift.
const SUB: u32 = 6;
/// Powers of two from 2^16 (below 100 µs) to 2^33.
const FIRST_POW: u32 = 16;
const POWS: usize = 18;

impl Default for Times {
    fn default() -> Times {
        Times { buckets: vec![0; LINEAR + (POWS << SUB)], max: 0, total_ns: 0, count: 0 }
    }
}

/// The bucket of `ns`.
fn bucket(ns: u64) -> usize {
    if ns < LINEAR as u64 * BUCKET_NS {
        return (ns / BUCKET_NS) as usize;
    }
    let pow = (63 - ns.leading_zeros()).clamp(FIRST_POW, FIRST_POW + POWS as u32 - 1);
    let sub = ((ns >> (pow - SUB)) & ((1 << SUB) - 1)) as usize;
    LINEAR + (((pow - FIRST_POW) as usize) << SUB) + sub
}

/// The upper end of bucket `i`.
fn upper(i: usize) -> u64 {
    if i < LINEAR {
        return (i as u64 + 1) * BUCKET_NS;
    }
    let pow = FIRST_POW + ((i - LINEAR) >> SUB) as u32;
    let sub = ((i - LINEAR) & ((1 << SUB) - 1)) as u64;
    ((1 << SUB) + sub + 1) << (pow - SUB)
}

impl Times {
    pub fn add(&mut self, ns: u64) {
        self.total_ns += ns;
        self.count += 1;
        self.max = self.max.max(ns);
        let i = bucket(ns).min(self.buckets.len() - 1);
        self.buckets[i] += 1;
    }

    /// The `q` quantile (0..=1), to the bucket's upper end (at most the
    /// largest time seen); None if empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, &b) in self.buckets.iter().enumerate() {
            seen += b;
            if seen >= rank {
                return Some(upper(i).min(self.max));
            }
        }
        Some(self.max)
    }
}

/// Everything collected from a session's records.
#[derive(Default)]
pub struct Collected {
    pub stacks: HashMap<Box<[u64]>, Counts>,
    pub samples: u64,
    pub weight: u64,
    pub truncated: u64,
    pub times: Times,
}

impl Collected {
    /// Adds one record (`[header, entry...]`, see `sampler`).
    pub fn absorb(&mut self, record: &[u64]) {
        self.absorb_as(record, false);
    }

    /// Adds one record, its snapshot word (the first entry) marked
    /// `UNCERTAIN` if `uncertain`.
    pub fn absorb_as(&mut self, record: &[u64], uncertain: bool) {
        let Some((&header, entries)) = record.split_first() else { return };
        let marked;
        let entries = match entries.split_first() {
            Some((&snap, rest)) if uncertain && snap & super::sampler::TAG == super::sampler::SNAPSHOT => {
                marked = [&[snap | super::sampler::UNCERTAIN][..], rest].concat();
                &marked[..]
            }
            _ => entries,
        };
        let flags = header & 0xff;
        let weight = ((header >> 8) & 0xff_ffff).max(1);
        let truncated = flags & (TRUNCATED_NATIVE | TRUNCATED_R) != 0;
        self.times.add(header >> 32);
        self.samples += 1;
        self.weight += weight;
        self.truncated += truncated as u64;
        let c = match self.stacks.get_mut(entries) {
            Some(c) => c,
            None => self.stacks.entry(entries.into()).or_default(),
        };
        c.weight += weight;
        c.samples += 1;
        c.truncated += truncated as u64;
    }

    /// Approximate heap bytes held (for the memory report).
    pub fn heap_bytes(&self) -> usize {
        self.stacks.keys().map(|k| k.len() * 8 + 64).sum::<usize>() + self.times.buckets.len() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(flags: u64, weight: u64, ns: u64) -> u64 {
        flags | weight << 8 | ns << 32
    }

    #[test]
    fn distinct_stacks_are_counted_not_stored_again() {
        let mut c = Collected::default();
        for i in 0..10_000u64 {
            let stack = if i % 4 == 0 { [1u64, 2] } else { [3, 4] };
            c.absorb(&[header(0, 1, 500), stack[0], stack[1]]);
        }
        c.absorb(&[header(TRUNCATED_NATIVE, 3, 500), 1, 2]);
        assert_eq!(c.stacks.len(), 2);
        assert_eq!(c.samples, 10_001);
        assert_eq!(c.weight, 10_003);
        assert_eq!(c.truncated, 1);
        let a = c.stacks[&[1u64, 2][..]];
        assert_eq!((a.weight, a.samples, a.truncated), (2503, 2501, 1));
        assert!(c.heap_bytes() < 20_000);
    }

    #[test]
    fn uncertain_samples_are_stacks_of_their_own() {
        use crate::profile::sampler::{NATIVE, SNAPSHOT, UNCERTAIN};
        let mut c = Collected::default();
        let rec = [header(0, 1, 500), SNAPSHOT | 1, NATIVE | 0x1234];
        c.absorb(&rec);
        c.absorb_as(&rec, true);
        c.absorb_as(&rec, false);
        assert_eq!(c.stacks.len(), 2);
        assert_eq!(c.stacks[&[SNAPSHOT | 1, NATIVE | 0x1234][..]].samples, 2);
        assert_eq!(c.stacks[&[SNAPSHOT | 1 | UNCERTAIN, NATIVE | 0x1234][..]].samples, 1);
        assert_eq!(c.samples, 3);
    }

    #[test]
    fn handler_time_quantiles() {
        let mut t = Times::default();
        assert_eq!(t.quantile(0.5), None);
        for ns in [150, 250, 250, 350, 1_000_000] {
            t.add(ns);
        }
        assert_eq!(t.quantile(0.5), Some(300));
        assert_eq!(t.quantile(0.99), Some(1_000_000));
        assert_eq!(t.total_ns, 1_001_000);
    }

    #[test]
    fn long_handler_times_keep_their_quantiles() {
        // Beyond 100 µs: within 1.6% of the truth, the median apart from
        // the 99th percentile.
        let mut t = Times::default();
        for i in 0..1000u64 {
            t.add(200_000 + i * 1000); // 200 µs to 1.2 ms
        }
        let median = t.quantile(0.5).unwrap() as f64;
        let p99 = t.quantile(0.99).unwrap() as f64;
        assert!((median / 700_000.0 - 1.0).abs() < 0.02, "median {median}");
        assert!((p99 / 1_190_000.0 - 1.0).abs() < 0.02, "p99 {p99}");
        for ns in [99_999, 100_000, 131_071, 131_072, 5_000_000_000, u32::MAX as u64] {
            let i = bucket(ns);
            assert!(upper(i) > ns, "{ns} below its bucket's upper end");
            assert!(i == 0 || upper(i - 1) <= ns, "{ns} above the previous bucket");
        }
    }
}
