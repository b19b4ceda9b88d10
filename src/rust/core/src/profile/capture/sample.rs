//! One sample of R's main thread, taken in the signal handler (or the
//! allocation hook): composed in place (see
//! [`compose`](super::super::compose)) and pushed to the session's ring, or
//! to a forked child's slot.

use super::super::compose::{compose, Moment, RFacts, Reads, Scratch};
use super::super::record::{self, Entry, Flags, PREFIX};
use super::children::Children;
use super::clock::now_ns;
use super::ring::Ring;
use super::worker::Extra;

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

/// Where a sample's record goes: the session's ring, or the slot of a
/// forked child sampling itself (with the labels its R entries name: the
/// parent cannot read the child's table).
#[derive(Clone, Copy)]
pub enum Sink<'a> {
    Ring(&'a Ring),
    Child(&'a Children, usize),
}

/// Takes one sample of R's main thread from the registers `(ip, sp, bp)`
/// (the interrupted ones, or the allocation hook's) at `at`, with what it
/// carries besides its stack (`extra`: the hook's own frames left out, an
/// allocation's words at its end), and hands it to `sink`.
pub fn sample(
    regs: (usize, usize, usize),
    tick: Tick,
    at: Moment,
    extra: Extra,
    r: &RFacts,
    s: &mut Scratch,
    sink: Sink,
) -> Outcome {
    s.prefetch(r);
    // R's objects in place; its records and the stack in place, inside the
    // ranges where R keeps them.
    let mem = Reads { heap: &crate::memory::Objects, chain: &r.ranges };
    let made = compose(regs, tick.flags, at, r, &mem, s);
    if made.outside {
        return Outcome { flags: made.flags, frames: 0, pushed: false, outside: true };
    }
    let len = s.append(made.len, extra.tail);
    // The sampler's own frames (innermost, before any R frame) left out,
    // `extra.head` put innermost.
    let rec = s.record(len);
    let first = (PREFIX..rec.len())
        .find(|&k| Entry::ip_of(rec[k]).is_none_or(|ip| !(extra.skip)(ip)))
        .unwrap_or(rec.len());
    let len = s.splice_head(len, first, extra.head);
    let (rec, labels) = s.record_and_labels(len);
    let spent = now_ns().saturating_sub(tick.started_ns);
    record::write_prefix(rec, made.prefix(tick.weight, spent));
    let pushed = match sink {
        Sink::Ring(ring) => ring.push(rec),
        Sink::Child(children, slot) => super::children::push_sample(children, slot, rec, labels),
    };
    Outcome { flags: made.flags, frames: made.len.saturating_sub(first), pushed, outside: false }
}
