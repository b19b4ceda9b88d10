//! Where samples are taken: the signal handler (a timer's tick, on the
//! thread whose clock expired; a thread's watch, see `watches`; or a
//! request for a reference sample on R's main thread) and the allocation
//! hook's sampler (on the allocating thread). Both take R's main thread's
//! samples into the session's own buffers and ring, and other threads'
//! samples through one function, [`sample_other_thread`], into a free
//! slot.
//!
//! Everything here is async-signal-safe: no allocation, no lock, no R API;
//! system calls only `clock_gettime`, `process_vm_readv` (another thread's
//! stack), `tgkill` (asking R's main thread for a reference sample),
//! `gettid`, the thread's CPU clock and `getrusage` (see `account`), and
//! `timer_settime` (its watch, see `watches`).

use super::super::compose::Moment;
use super::super::labels;
use super::super::record::{self, Entry, Flags};
use super::account::Usage;
use super::active::Active;
use super::clock::{gettid, now_ns, MIN_INTERVAL_NS, WATCH};
use super::main_ref::MainSample;
use super::sample::{sample, Sink, Tick};
use super::shared::Session;
use super::watches::Verdict;
use super::worker::{sample_worker, Extra, ThreadId};
use crate::memory::Memory;
use crate::unwind::walk::Snapshot;
use std::sync::atomic::Ordering;

/// What a sample that stands for the kernel's time starts with.
const KERNEL_HEAD: [u64; 1] = [Entry::r(labels::KERNEL)];

/// What a timer's sample of the calling thread `tid` stands for, its
/// timer saying `weight` and its clocks reading `usage`, and what it
/// carries: in a CPU profile, the intervals of the thread's account and
/// `[kernel]` when it is the kernel's time (see `account`). 0 intervals:
/// no sample.
fn weighed(s: &Session, timer: bool, tid: i32, weight: u64, usage: Option<&Usage>) -> (u64, Extra<'static>) {
    let Some(accounts) = s.accounts.as_ref().filter(|_| timer) else { return (weight, Extra::NONE) };
    let w = accounts.weigh(tid, weight, usage);
    (w.intervals, if w.kernel { Extra { head: &KERNEL_HEAD, ..Extra::NONE } } else { Extra::NONE })
}

/// Whether a CPU profile's timer's or watch's signal takes its sample here,
/// on thread `tid` with its clocks reading `usage`: only where it found
/// the thread running (see `watches`). Other signals do.
fn found_running(s: &Session, kind: Kind, tid: i32, usage: Option<&Usage>, now_ns: u64, ip: usize) -> bool {
    let (Some(watches), Some(u)) = (s.watches.as_ref(), usage) else { return kind != Kind::Watch };
    let verdict = match kind {
        // (Left for later only if the thread's account keeps it owed.)
        Kind::Timer => watches.timer_signal(tid, u.cpu_ns, u.preempted, || {
            at_system_call(ip) && s.accounts.as_ref().is_some_and(|a| a.owns(tid) && !a.kernel_due(tid, u))
        }),
        Kind::Watch => watches.watch_signal(tid, now_ns, u.cpu_ns, u.preempted),
        Kind::Other => Verdict::Take,
    };
    verdict == Verdict::Take
}

/// The session samples are taken for (see `active`).
pub(super) static ACTIVE: Active<Session> = Active::new();

/// The interrupted registers `(ip, sp, bp)` of a signal's context.
///
/// # Safety
/// `uctx` is the kernel's `ucontext_t` for the signal being handled.
unsafe fn interrupted(uctx: *mut libc::c_void) -> (usize, usize, usize) {
    // SAFETY: the kernel passes a ucontext_t; on x86_64 Linux its general
    // registers are in uc_mcontext.gregs.
    unsafe {
        let g = &(*(uctx as *const libc::ucontext_t)).uc_mcontext.gregs;
        (
            g[libc::REG_RIP as usize] as usize,
            g[libc::REG_RSP as usize] as usize,
            g[libc::REG_RBP as usize] as usize,
        )
    }
}

/// The value a queued or timer signal carries (`si_value`'s int: at offset
/// 24 on Linux, after the sender's pid and uid or the timer's id and
/// overrun).
///
/// # Safety
/// `info` is the kernel's `siginfo_t` for the signal being handled.
unsafe fn value(info: *const libc::siginfo_t) -> i32 {
    // SAFETY: `info` points to a siginfo_t, at least 128 bytes long.
    unsafe { std::ptr::read_unaligned((info as *const u8).add(24) as *const i32) }
}

/// Whether the thread interrupted at `ip` was at a system call's end (or
/// about to make it again, restarted): the instruction before `ip`, or the
/// one at it, is the system call instruction. Read through the kernel
/// (async-signal-safe; an unreadable address is a no, never a fault), each
/// side on its own (`ip` may be the first address of a mapping, or the
/// last instruction's end).
fn at_system_call(ip: usize) -> bool {
    let is = |at: usize| {
        let mut b = [0u8; SYSCALL.len()];
        crate::memory::read(at, &mut b) && b == SYSCALL
    };
    !SYSCALL.is_empty() && ip >= SYSCALL.len() && (is(ip - SYSCALL.len()) || is(ip))
}
/// `syscall`.
#[cfg(target_arch = "x86_64")]
const SYSCALL: [u8; 2] = [0x0f, 0x05];
/// `svc #0`.
#[cfg(target_arch = "aarch64")]
const SYSCALL: [u8; 4] = [0x01, 0x00, 0x00, 0xd4];
/// Not known: no system call's end is recognised.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const SYSCALL: [u8; 0] = [];

/// What sent a signal.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The sampling timer.
    Timer,
    /// A thread's watch (see `watches`, and `children` for a forked
    /// child's).
    Watch,
    /// Another thread's handler asking R's main thread for a reference
    /// sample.
    Other,
}

/// What sent a signal, and the timer's expirations it stands for (1 and
/// those that happened while it was pending; a watch's: none, the time
/// its thread's account says is owed).
///
/// # Safety
/// `info` is the kernel's `siginfo_t` for the signal being handled.
unsafe fn expirations(info: *mut libc::siginfo_t) -> (Kind, u64) {
    // SAFETY: `info` points to a siginfo_t.
    if unsafe { (*info).si_code } != libc::SI_TIMER {
        return (Kind::Other, 1);
    }
    // SAFETY: `info` points to a siginfo_t.
    if unsafe { value(info) } == WATCH {
        return (Kind::Watch, 0);
    }
    // Timer expirations while this signal was pending (si_overrun: the int
    // after si_tid at the start of the union, for SI_TIMER signals).
    // SAFETY: `info` points to a siginfo_t; offsets of the timer fields.
    let overrun =
        unsafe { std::ptr::read_unaligned((info as *const u8).add(20) as *const libc::c_int).max(0) as u64 };
    (Kind::Timer, 1 + overrun)
}

/// The signal handler: one sample of the thread it runs on.
pub(super) extern "C" fn on_signal(_sig: libc::c_int, info: *mut libc::siginfo_t, uctx: *mut libc::c_void) {
    // SAFETY: errno is thread-local; saved and restored around the sample.
    let saved_errno = unsafe { *libc::__errno_location() };
    let start = now_ns();
    // SAFETY: `info` and `uctx` are the kernel's for this signal.
    ACTIVE.with(|s| unsafe { tick(s, info, uctx, start) });
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved_errno };
}

/// # Safety
/// In the signal handler, for signal `info`/`uctx`.
unsafe fn tick(s: &Session, info: *mut libc::siginfo_t, uctx: *mut libc::c_void, start: u64) {
    let main = s.on_main_thread();
    if !main && s.slots.is_empty() {
        return; // only R's main thread is sampled
    }
    // SAFETY: the caller's.
    let regs = unsafe { interrupted(uctx) };
    // SAFETY: the caller's.
    let (kind, weight) = unsafe { expirations(info) };
    let timer = kind != Kind::Other;
    let Some((snapshot, index)) = s.snapshot() else { return };
    let context = s.facts.ranges.word(s.facts.base.global_context).unwrap_or(0);
    let tid = if main { s.main_tid } else { gettid() };
    // A CPU sample reads the thread's clocks once: its account and watch
    // use them.
    let usage = if timer && s.accounts.is_some() { Usage::now() } else { None };
    // A forked child sampling itself: its main thread only.
    if let Some(slot) = super::children::current() {
        // A watch's signal that waited for the child to get a CPU takes no
        // sample (see `children`).
        let late = kind == Kind::Watch && !super::children::watch_on_time(start);
        if main && !late {
            // (The child's own id: `main_tid` is its parent's.)
            let (weight, extra) = weighed(s, timer, gettid(), weight, usage.as_ref());
            if weight > 0 {
                let tick = Tick { weight, flags: Flags::PROCESS, started_ns: start };
                child_tick(s, slot, regs, tick, (snapshot, index), context, extra);
            }
        }
        if main {
            super::children::rewatch(late);
        }
        return;
    }
    s.handler_runs.fetch_add(1, Ordering::Relaxed);
    if !found_running(s, kind, tid, usage.as_ref(), start, regs.0) {
        return;
    }
    if !main {
        let (weight, extra) = weighed(s, timer, tid, weight, usage.as_ref());
        if weight > 0 {
            let tick = Tick { weight, flags: Flags::NONE, started_ns: start };
            sample_other_thread(s, tid, regs, tick, (snapshot, index), context, extra);
        }
        return;
    }
    // A signal from another thread's handler (not the timer) asks for a
    // sample to show that thread's samples under: it counts no time.
    let flags = if timer { Flags::NONE } else { Flags::REFERENCE };
    if !timer {
        s.requested.store(false, Ordering::Release);
    }
    if s.main_busy.load(Ordering::Acquire) {
        return; // inside an allocation's sample (see `Session::main_busy`)
    }
    let seq = s.main_ref.next_seq();
    // SAFETY: only the main thread's handler uses `scratch` while the
    // session runs, and it does not nest (the signal is blocked in it).
    let Some(scratch) = (unsafe { &mut *s.scratch.get() }).as_deref_mut() else { return };
    let (weight, extra) = weighed(s, timer, tid, weight, usage.as_ref());
    if timer && weight == 0 {
        return;
    }
    let tick = Tick { weight, flags, started_ns: start };
    let at = Moment { snapshot, index, seq, context: context as u64, fork: &[] };
    let out = sample(regs, tick, at, extra, &s.facts, scratch, Sink::Ring(&s.ring));
    // Other threads' samples may be shown under this one only if it was
    // kept (see `link_to_main`) and can anchor them.
    let joinable = out.pushed && out.flags.anchors_threads();
    s.main_ref.publish(MainSample { seq, context: if joinable { context } else { 0 }, taken_ns: start });
    if out.outside {
        s.outside.fetch_add(weight, Ordering::Relaxed);
    } else if !out.pushed && timer {
        s.dropped.fetch_add(weight, Ordering::Relaxed);
    }
}

/// A forked child's sample of itself (its main thread), into its slot of
/// its parent's session (see `children`).
fn child_tick(
    s: &Session,
    slot: usize,
    regs: (usize, usize, usize),
    tick: Tick,
    (snapshot, index): (&Snapshot, u32),
    context: usize,
    extra: Extra,
) {
    let Some(children) = &s.children else { return };
    if super::children::stopped(children) {
        return;
    }
    // SAFETY: only the main thread's handler uses `scratch` while the
    // session runs, and it does not nest (the signal is blocked in it).
    let Some(scratch) = (unsafe { &mut *s.scratch.get() }).as_deref_mut() else { return };
    let seq = s.main_ref.next_seq();
    s.main_ref.publish(MainSample { seq, context: 0, taken_ns: tick.started_ns });
    let at = Moment { snapshot, index, seq, context: context as u64, fork: super::children::fork_records() };
    sample(regs, tick, at, extra, &s.facts, scratch, Sink::Child(children, slot));
}

/// One sample of the calling thread `tid`, not R's main thread, taken while R's
/// innermost context record was `context`: into a free slot, joined to R's
/// main thread's sample (see [`link_to_main`]). Whether it was kept; a
/// sample not kept (no free slot, a full ring) is counted as dropped.
fn sample_other_thread(
    s: &Session,
    tid: i32,
    regs: (usize, usize, usize),
    tick: Tick,
    (snapshot, index): (&Snapshot, u32),
    context: usize,
    extra: Extra,
) -> bool {
    let Some(mut slot) = s.slots.take() else {
        s.thread_dropped.fetch_add(tick.weight, Ordering::Relaxed);
        return false;
    };
    let seq = link_to_main(s, context, tick.started_ns);
    let at = Moment { snapshot, index, seq, context: context as u64, fork: &[] };
    let thread = ThreadId { pid: s.pid, tid };
    let (scratch, ring) = slot.parts();
    let out = sample_worker(regs, tick, at, extra, thread, scratch, ring);
    drop(slot);
    if !out.pushed {
        s.thread_dropped.fetch_add(tick.weight, Ordering::Relaxed);
    }
    out.pushed
}

/// R's innermost context record now, as another thread reads it (0: not
/// readable).
pub(super) fn main_context(s: &Session) -> usize {
    s.facts.ranges.word(s.facts.base.global_context).unwrap_or(0)
}

/// The number of R's main thread's sample another thread's sample, taken
/// while R's innermost context record was `context`, is to be shown under:
/// the main thread's last sample if it may stand for where the main thread
/// is now (see [`reusable`]); otherwise the next, which it asks for (at
/// most one request in flight, at most one an interval) when the main
/// thread's timer may not fire soon (it counts CPU time, and the main
/// thread may be waiting for this one; in a memory profile it has no
/// timer). Also for a worker process's sample, taken by the collector
/// thread (see `traced`).
pub(super) fn link_to_main(s: &Session, context: usize, start: u64) -> u64 {
    // (Not read whole: the main thread is publishing its next sample,
    // which is the one to ask for.)
    let last =
        s.main_ref.read().unwrap_or(MainSample { seq: s.main_ref.next_seq() - 1, context: 0, taken_ns: 0 });
    if reusable((last.context, last.taken_ns), context, super::spawn::last_start_ns()) {
        return last.seq;
    }
    let seq = last.seq;
    let every = s.trigger.interval_ns().unwrap_or(MIN_INTERVAL_NS);
    let since = start.saturating_sub(s.requested_ns.load(Ordering::Relaxed));
    // A request unanswered for four intervals was lost (the kernel may
    // refuse to queue a signal): another may go, or no thread would ever
    // be joined again.
    let lost = since >= 4 * every;
    if since >= every
        && (s.requested.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed).is_ok() || lost)
    {
        s.requested.store(true, Ordering::Release);
        s.requested_ns.store(start, Ordering::Relaxed);
        // SAFETY: tgkill to R's main thread of this process; the signal is
        // ours and handled.
        let sent = unsafe { libc::syscall(libc::SYS_tgkill, s.pid, s.main_tid, s.signal) };
        if sent != 0 {
            s.requested.store(false, Ordering::Release);
        }
    }
    seq + 1
}

/// Whether R's main thread's last sample, taken at `last.1` while R's
/// innermost context record was `last.0` (0: the sample was not kept),
/// shows where it is while R's innermost record is `context`: the same
/// record, and no thread started by R's main thread since the sample
/// (`last_start`, in the same clock). The record alone does not say: a
/// sample taken as the main thread ran R code of the call that then
/// started a thread (the same record) has none of the native frames the
/// thread is shown under, and a loop calling that function again makes a
/// record at the same address each time: every later thread would be shown
/// under that one sample, at the root.
fn reusable(last: (usize, u64), context: usize, last_start: u64) -> bool {
    let (last_context, taken_ns) = last;
    last_context != 0 && last_context == context && taken_ns >= last_start
}

/// A sampled allocation of `size` bytes (the allocation hook's `OnSample`,
/// on the allocating thread): its stack as a record; the sample's number
/// (0: not taken).
pub(super) fn on_allocation(size: usize, _block: usize) -> u64 {
    ACTIVE.with(|s| if s.trigger.is_allocations() { allocation(s, size) } else { 0 }).unwrap_or(0)
}

fn allocation(s: &Session, size: usize) -> u64 {
    let start = now_ns();
    let regs = crate::unwind::registers();
    let Some((snapshot, index)) = s.snapshot() else { return 0 };
    let (lo, hi) = s.own_code;
    let own = |ip: usize| ip >= lo && ip < hi;
    let n = s.alloc_seq.fetch_add(1, Ordering::AcqRel) + 1;
    s.handler_runs.fetch_add(1, Ordering::Relaxed);
    let tick = Tick { weight: 1, flags: Flags::ALLOC, started_ns: start };
    let tail = record::alloc_tail(n, size as u64);
    let extra = Extra { skip: &own, head: &[], tail: &tail };
    let kept = if s.on_main_thread() {
        // (A reference sample another thread asks for, by signal, leaves
        // the scratch alone meanwhile.)
        s.main_busy.store(true, Ordering::Release);
        let kept = main_allocation(s, regs, tick, (snapshot, index), extra);
        s.main_busy.store(false, Ordering::Release);
        kept
    } else if s.slots.is_empty() {
        false // R's main thread only
    } else {
        // Joined to R's main thread's stack as another thread's CPU sample is.
        let context = s.facts.ranges.word(s.facts.base.global_context).unwrap_or(0);
        sample_other_thread(s, gettid(), regs, tick, (snapshot, index), context, extra)
    };
    if kept {
        n
    } else {
        0
    }
}

/// An allocation's sample on R's main thread: composed as a CPU sample
/// is, the hook's own frames (`extra.skip`) left out and the allocation's
/// number and bytes (`extra.tail`) at its end. Whether it was kept.
fn main_allocation(
    s: &Session,
    regs: (usize, usize, usize),
    tick: Tick,
    (snapshot, index): (&Snapshot, u32),
    extra: Extra,
) -> bool {
    // SAFETY: only R's main thread uses `scratch` in a memory profile (the
    // signal handler not while `main_busy` is set), once at a time (the
    // hook does not sample inside a sample).
    let Some(scratch) = (unsafe { &mut *s.scratch.get() }).as_deref_mut() else { return false };
    let seq = s.main_ref.next_seq();
    let context = s.facts.ranges.word(s.facts.base.global_context).unwrap_or(0);
    let at = Moment { snapshot, index, seq, context: context as u64, fork: &[] };
    let out = sample(regs, tick, at, extra, &s.facts, scratch, Sink::Ring(&s.ring));
    if out.outside {
        s.outside.fetch_add(tick.weight, Ordering::Relaxed);
    } else if !out.pushed {
        s.dropped.fetch_add(tick.weight, Ordering::Relaxed);
    }
    // Other threads' samples may be shown under this one only if kept.
    s.main_ref.publish(MainSample {
        seq,
        context: if out.pushed { context } else { 0 },
        taken_ns: tick.started_ns,
    });
    out.pushed
}

#[cfg(test)]
mod tests {
    use super::reusable;

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_thread_is_at_a_system_call_s_end_when_the_instruction_before_is_syscall() {
        static CODE: [u8; 6] = [0x90, 0x90, 0x0f, 0x05, 0x90, 0x90];
        let at = |i: usize| super::at_system_call(CODE.as_ptr() as usize + i);
        assert!(at(4), "just after it: the system call returned there");
        assert!(at(2), "at it: restarted");
        assert!(!at(1) && !at(5));
        assert!(!super::at_system_call(16) && !super::at_system_call(0), "unreadable: no");
    }

    #[test]
    fn a_main_sample_stands_for_other_threads_only_if_kept_in_their_record_and_after_the_last_start() {
        let (c, other) = (0x7000_usize, 0x7100_usize);
        assert!(reusable((c, 500), c, 400), "same record, taken after the last thread start");
        assert!(reusable((c, 500), c, 0), "no thread started through the hook");
        assert!(!reusable((c, 500), other, 400), "R's innermost record changed since");
        assert!(!reusable((0, 500), 0, 0), "the last sample was not kept (0), even for a 0 record");
        // The record is the same but R's main thread started a thread after
        // the sample: the sample (R code of the starting call) does not show
        // where the thread was started; a new one is asked for.
        assert!(!reusable((c, 500), c, 600));
    }
}
