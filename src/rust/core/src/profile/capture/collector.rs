//! The collector thread of a session: every poll it empties the rings into
//! the session's `Collected` (each sample marked certain or not, see
//! `snapshots`), follows modules loaded and unloaded (a new snapshot, and
//! the hooks of the new modules), and with timers for every thread finds
//! new threads (see `threads`); in a CPU profile it asks a thread whose
//! CPU clock runs well ahead of its samples for one (see `account`). It
//! returns what it knows of them when the session stops.

use super::clock::{self, read_clock};
use super::shared::{Session, Trigger};
use super::threads::Threads;
use crate::modules::Generation;
use crate::profile::collect::Thread;
use crate::profile::record;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the collector looks for new threads, empties the rings and
/// checks the loaded modules.
const POLL: std::time::Duration = std::time::Duration::from_millis(2);

/// What the collector found when it stops: the threads it sampled, and
/// the CPU time it used itself (nanoseconds: the profiler's, not the
/// profiled code's).
pub type Found = (Vec<Thread>, u64);

/// Starts the collector thread of `session` (None if it could not start:
/// the samples are then collected when the session stops).
pub fn spawn(session: &Arc<Session>) -> Option<std::thread::JoinHandle<Found>> {
    let s = session.clone();
    std::thread::Builder::new()
        .name("winch-profile".into())
        .spawn(move || {
            crate::stack::block_signals();
            let mut buf = Vec::new();
            let mut threads = match s.trigger {
                Trigger::Timer { clock, interval_ns } if !s.slots.is_empty() => {
                    Some(Threads::new(s.signal, clock, interval_ns, vec![s.main_tid, clock::gettid()]))
                }
                _ => None,
            };
            let mut poked = HashMap::new();
            while !s.stop.load(Ordering::Acquire) {
                if let Some(t) = threads.as_mut() {
                    t.poll();
                }
                poke_behind(&s, threads.as_ref(), &mut poked);
                if let Ok(mut watch) = s.relatives.try_lock() {
                    if let Some(w) = watch.as_mut() {
                        w.look(Instant::now());
                    }
                }
                let generation = collect(&s, &mut buf);
                refresh(&s, generation);
                std::thread::sleep(POLL);
            }
            let found = threads.map(Threads::stop).unwrap_or_default();
            collect(&s, &mut buf);
            (found, read_clock(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or(0))
        })
        .ok()
}

/// Asks each sampled thread whose CPU clock has run two intervals and two
/// of the kernel's ticks (8 ms at HZ = 250) ahead of its samples for one,
/// at most once in that time: its timer's signals are not coming (see
/// `account`). Only a thread on a CPU now (see [`on_cpu`]): a sleeping
/// one would be woken where it waits (an OpenMP worker in libgomp's futex
/// wait), and its sample, standing for the work it did before, put all of
/// it there (libgomp 61 % of a loaded data.table run's samples where perf
/// counted 54 %). Its time is owed to its next sample, when it runs again.
fn poke_behind(s: &Session, threads: Option<&Threads>, poked: &mut HashMap<i32, Instant>) {
    let (Some(accounts), Trigger::Timer { interval_ns, .. }) = (s.accounts.as_ref(), s.trigger) else {
        return;
    };
    let lag_ns = 2 * interval_ns + 8_000_000;
    let main = std::iter::once((s.main_tid, clock::cpu_clock(s.main_tid)));
    for (tid, clock) in main.chain(threads.into_iter().flat_map(Threads::live)) {
        let Some(now) = read_clock(clock) else { continue };
        accounts.open(tid, now);
        if accounts.behind(tid, now, lag_ns)
            && poked.get(&tid).is_none_or(|at| at.elapsed() >= Duration::from_nanos(lag_ns))
            && on_cpu(clock, now)
        {
            super::handler::poke(s, tid);
            poked.insert(tid, Instant::now());
        }
    }
}

/// Whether the thread whose CPU clock is `clock`, read as `then` a moment
/// ago, is on a CPU now: its clock moved since. Not one ready for a CPU
/// and waiting for it: a signal reaches a thread where it was stopped,
/// and on a busy machine the scheduler stops a thread most often on its
/// way out of a system call (where its time is accounted and its slice
/// found spent), so such samples all fell there (a burn reading its CPU
/// clock now and then among busy processes: a third of its samples on
/// `__vdso_clock_gettime`, where it spent a few percent).
fn on_cpu(clock: libc::clockid_t, then: u64) -> bool {
    read_clock(clock).is_some_and(|t| t > then)
}

/// A new snapshot if modules were loaded or unloaded (the loader's
/// generation is now `generation`), and the GOT hooks told (new modules'
/// threads and allocations hooked, see `got::hookset`).
fn refresh(s: &Session, generation: Generation) {
    let Some(map) = s.snapshots.refresh(generation) else { return };
    crate::got::hookset::modules_changed(&map);
}

/// Takes the samples written so far, each marked certain or not (see
/// `snapshots`); returns the loader's generation read.
pub fn collect(s: &Session, buf: &mut Vec<u64>) -> Generation {
    // Every sample written before the heads read here was taken before the
    // generation is read.
    let head = s.ring.head();
    let heads: Vec<usize> = s.slots.rings().map(|r| r.head()).collect();
    let generation = crate::modules::loader_generation();
    let certain = s.snapshots.certain(generation);
    let mut c = s.collected.lock().unwrap_or_else(|e| e.into_inner());
    let creators = if s.slots.is_empty() { Vec::new() } else { super::spawn::creators() };
    let creator = |tid: u32| creators.iter().find(|&&(t, _)| t as u32 == tid).map(|&(_, c)| c as u64);
    let mut absorb = |rec: &[u64]| {
        let index = record::origin_of(rec).map(|o| o.snapshot);
        c.absorb_with(rec, index.is_none_or(|i| certain.get(i as usize) != Some(&true)), &creator);
    };
    s.ring.drain_to(head, buf, &mut absorb);
    for (ring, &h) in s.slots.rings().zip(&heads) {
        ring.drain_to(h, buf, &mut absorb);
    }
    if let Some(children) = &s.children {
        s.parent.lock().unwrap_or_else(|e| e.into_inner()).collect(children, &mut c, &certain, buf);
    }
    c.settle_pending(false);
    generation
}

/// At the end of the session: the children still running are kept with
/// what they reported so far.
pub fn close_children(s: &Session) {
    if let Some(children) = &s.children {
        let mut c = s.collected.lock().unwrap_or_else(|e| e.into_inner());
        s.parent.lock().unwrap_or_else(|e| e.into_inner()).close(children, &mut c);
    }
}
