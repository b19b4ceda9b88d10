//! One sample of R's main thread, taken in the signal handler: composed
//! in place (see [`compose`](super::super::compose)) and pushed to the
//! session's ring.

use super::super::compose::{compose, Moment, RFacts, Reads, Scratch};
use super::super::record::{self, Flags, PREFIX};
use super::clock::now_ns;
use super::ring::Ring;

/// What a tick knows before any stack is read: the timer expirations (or
/// allocations) its sample stands for, the sample's header flags, and when
/// the tick began (for the sample's cost).
#[derive(Clone, Copy, Debug)]
pub struct Tick {
    pub weight: u64,
    pub flags: Flags,
    pub started_ns: u64,
}

/// What a sample found, for the caller's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub flags: Flags,
    pub frames: usize,
    pub pushed: bool,
    /// Taken outside the profiled code (see `compose::Region`): not pushed.
    pub outside: bool,
}

/// Takes one sample of R's main thread from the interrupted registers
/// `(ip, sp, bp)` at `at` and pushes it to `ring`.
pub fn sample(
    regs: (usize, usize, usize),
    tick: Tick,
    at: Moment,
    r: &RFacts,
    s: &mut Scratch,
    ring: &Ring,
) -> Outcome {
    s.prefetch(r);
    // R's objects in place; its records and the stack in place, inside the
    // ranges where R keeps them.
    let mem = Reads { heap: &crate::memory::Objects, chain: &r.ranges };
    let made = compose(regs, tick.flags, at, r, &mem, s);
    if made.outside {
        return Outcome { flags: made.flags, frames: 0, pushed: false, outside: true };
    }
    let spent = now_ns().saturating_sub(tick.started_ns);
    let rec = s.record(made.len);
    record::write_prefix(rec, made.prefix(tick.weight, spent));
    let pushed = ring.push(rec);
    Outcome { flags: made.flags, frames: made.len - PREFIX, pushed, outside: false }
}
