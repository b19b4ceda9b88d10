//! One sample of R's main thread, taken in the signal handler: composed
//! in place (see [`compose`](super::super::compose)) and pushed to the
//! session's ring.

use super::super::compose::{compose, RFacts, Reads, Scratch};
use super::super::record::{self, Flags, PREFIX};
use super::ring::Ring;
use crate::unwind::walk::Snapshot;

/// What a sample found, for the caller's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub flags: Flags,
    pub frames: usize,
    pub pushed: bool,
    /// Taken outside the profiled code (see [`Region`]): not pushed.
    pub outside: bool,
}

/// Takes one sample from the interrupted registers `(ip, sp, bp)` with
/// snapshot number `index` and pushes it to `ring` with `weight` (timer
/// expirations it stands for), as R's main thread's sample number `seq`
/// taken while R's innermost context record was at `context`, with
/// header flags `flags`.
#[allow(clippy::too_many_arguments)]
pub fn sample(
    regs: (usize, usize, usize),
    (weight, flags): (u64, Flags),
    started_ns: u64,
    now_ns: impl Fn() -> u64,
    (snap, index): (&Snapshot, u32),
    (seq, context): (u64, u64),
    r: &RFacts,
    s: &mut Scratch,
    ring: &Ring,
) -> Outcome {
    s.prefetch(r);
    // R's objects in place; its records and the stack in place, inside the
    // ranges where R keeps them.
    let mem = Reads { heap: &crate::memory::Objects, chain: &r.ranges };
    let made = compose(regs, flags, (snap, index), (seq, context), r, &mem, s);
    if made.outside {
        return Outcome { flags: made.flags, frames: 0, pushed: false, outside: true };
    }
    let spent = now_ns().saturating_sub(started_ns);
    let rec = s.record(made.len);
    record::write_prefix(rec, made.prefix(weight, spent));
    let pushed = ring.push(rec);
    Outcome { flags: made.flags, frames: made.len - PREFIX, pushed, outside: false }
}
