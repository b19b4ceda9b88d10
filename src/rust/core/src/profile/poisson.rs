//! Sampling allocations by bytes: each byte allocated is sampled with
//! probability `1 / mean`, so that on average one sample is taken every
//! `mean` bytes, a large allocation is nearly always sampled, and the bytes
//! and counts a sample stands for are unbiased estimates (as tcmalloc, Go's
//! heap profile and jemalloc sample). The gaps between sampled bytes are
//! exponential; each thread draws its own.

/// The bytes left before the next sample on one thread, and its random
/// state (0 before its first allocation). The allocation hook keeps the
/// two in thread-local cells and runs the same steps: the fast path
/// subtracts, [`after_gap`] does the rest.
#[cfg(test)]
#[derive(Clone, Copy, Debug)]
pub struct Countdown {
    left: i64,
    rng: u64,
    seed: u64,
}

#[cfg(test)]
impl Countdown {
    /// A countdown seeded with `seed` (any value; distinct per thread).
    pub fn new(seed: u64) -> Countdown {
        Countdown { left: 0, rng: 0, seed }
    }

    /// Counts an allocation of `size` bytes: true when it is to be sampled
    /// (the next gap is drawn then).
    #[inline]
    pub fn take(&mut self, size: usize, mean: u64) -> bool {
        self.left -= size as i64;
        if self.left > 0 {
            return false;
        }
        let seed = self.seed;
        after_gap(&mut self.left, &mut self.rng, size, mean, || seed)
    }
}

/// When a countdown reached 0 or less on an allocation of `size` bytes:
/// whether the allocation is sampled, with `left` set to the bytes before
/// the next sample. On a thread's first allocation (`rng` 0, seeded with
/// `seed()`) its first gap is drawn, and the allocation is sampled only if
/// that gap ends inside it; otherwise a gap ended inside this allocation
/// (what is left of it is spent there too: one sample per allocation,
/// whose weight accounts for that), and the next one starts after it.
pub fn after_gap(left: &mut i64, rng: &mut u64, size: usize, mean: u64, seed: impl FnOnce() -> u64) -> bool {
    if *rng == 0 {
        *rng = seed() | 1;
        let first = next_gap(rng, mean);
        if first > size as i64 {
            *left = first - size as i64;
            return false;
        }
    }
    *left = next_gap(rng, mean);
    true
}

/// The next gap between sampled bytes, from random state `rng` (any value
/// but 0; advanced): exponential with mean `mean`, at least 1.
pub fn next_gap(rng: &mut u64, mean: u64) -> i64 {
    // xorshift64*: enough randomness for spacing samples.
    let mut x = *rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *rng = x;
    let bits = x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11; // 53 bits
    let u = (bits as f64 + 0.5) / (1u64 << 53) as f64; // in (0, 1)
    let g = -(u.ln()) * mean as f64;
    (g.min(i64::MAX as f64 / 2.0) as i64).max(1)
}

/// What one sampled allocation of `size` bytes stands for when bytes are
/// sampled with mean gap `mean`: the estimated bytes allocated and number
/// of allocations (of about that size) it represents. An allocation is
/// sampled with probability `1 - exp(-size / mean)`, so each is weighted by
/// the inverse of that.
pub fn estimate(size: usize, mean: u64) -> (f64, f64) {
    if size == 0 || mean == 0 {
        return (size as f64, 1.0);
    }
    let p = 1.0 - (-(size as f64) / mean as f64).exp();
    let count = 1.0 / p;
    (size as f64 * count, count)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Allocations of `size` bytes, `n` of them: the estimates summed over
    /// the sampled ones.
    fn estimated(size: usize, n: usize, mean: u64, seed: u64) -> (f64, f64, usize) {
        let mut c = Countdown::new(seed);
        let (mut bytes, mut count, mut samples) = (0.0, 0.0, 0);
        for _ in 0..n {
            if c.take(size, mean) {
                let (b, k) = estimate(size, mean);
                bytes += b;
                count += k;
                samples += 1;
            }
        }
        (bytes, count, samples)
    }

    #[test]
    fn estimates_of_bytes_and_counts_are_unbiased_for_small_and_large_sizes() {
        let mean = 512 * 1024;
        for (size, n) in [(64usize, 4_000_000usize), (4096, 200_000), (300_000, 5_000), (4 << 20, 200)] {
            let truth = (size * n) as f64;
            let (mut bytes, mut count) = (0.0, 0.0);
            for seed in 1..=5u64 {
                let (b, k, _) = estimated(size, n, mean, seed * 7919);
                bytes += b / 5.0;
                count += k / 5.0;
            }
            assert!((bytes / truth - 1.0).abs() < 0.1, "size {size}: {bytes} for {truth}");
            assert!((count / n as f64 - 1.0).abs() < 0.1, "size {size}: {count} for {n}");
        }
    }

    #[test]
    fn about_one_sample_per_mean_bytes_and_every_huge_allocation() {
        let mean = 1 << 20;
        let (_, _, samples) = estimated(1000, 1_000_000, mean, 42);
        let want = 1_000_000.0 * 1000.0 / mean as f64;
        assert!((samples as f64 / want - 1.0).abs() < 0.1, "{samples} samples, about {want} wanted");
        // Allocations far above the mean are (nearly) always sampled.
        let (_, _, big) = estimated(64 << 20, 100, mean, 3);
        assert_eq!(big, 100);
        assert_eq!(estimate(0, mean), (0.0, 1.0));
    }
}
