//! The cost of one sample, measured without a timer or a signal: the
//! sampler run on the caller's own stack, many times in a row (for
//! `bench/profile.R`).

use super::super::compose::{Moment, RFacts, Scratch};
use super::super::record::Flags;
use super::clock::now_ns as now;
use super::ring::Ring;
use super::sample::{sample, Sink, Tick};
use super::worker::Extra;
use crate::unwind::walk::Snapshot;

/// Nanoseconds per sample (median, 99th percentile) and the entries a
/// sample had.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cost {
    pub median_ns: f64,
    pub p99_ns: f64,
    pub entries: usize,
}

/// Samples the caller's stack `n` times as the signal handler would, with
/// `thrash_mb` MB written between samples (a workload evicting winch's data
/// from the CPU's caches). Must run on R's main thread.
#[inline(never)]
pub fn sample_cost(facts: &RFacts, n: usize, thrash_mb: usize) -> Cost {
    let n = n.max(1);
    let snap = Snapshot::take(facts.base.interpreter_addr);
    let mut scratch = Scratch::default();
    let ring = Ring::new(1 << 16);
    let mut buf = Vec::new();
    let mut times = Vec::with_capacity(n);
    let mut entries = 0;
    let mut junk = vec![0u8; thrash_mb << 20];
    for k in 0..n {
        for b in junk.iter_mut().step_by(64) {
            *b = b.wrapping_add(k as u8);
        }
        std::hint::black_box(&junk);
        let regs = crate::unwind::registers();
        let t0 = now();
        let tick = Tick { weight: 1, flags: Flags::NONE, started_ns: t0 };
        let at = Moment { snapshot: &snap, index: 0, seq: 0, context: 0, fork: &[] };
        let out = sample(regs, tick, at, Extra::NONE, facts, &mut scratch, Sink::Ring(&ring));
        times.push(now() - t0);
        entries = out.frames;
        ring.drain(&mut buf, |_| {});
    }
    times.sort_unstable();
    let q = |p: f64| times[((p * n as f64).ceil() as usize).clamp(1, n) - 1] as f64;
    Cost { median_ns: q(0.5), p99_ns: q(0.99), entries }
}
