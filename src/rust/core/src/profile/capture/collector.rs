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
/// the CPU time it used itself while sampling ran, from its first look to
/// the stop (nanoseconds: the profiler's, not the profiled code's).
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
            let one_cpu = one_cpu();
            let cpu = || read_clock(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or(0);
            let first = cpu();
            while !s.stop.load(Ordering::Acquire) {
                if let Some(t) = threads.as_mut() {
                    t.poll();
                }
                poke_behind(&s, threads.as_ref(), &mut poked, one_cpu);
                if let Ok(mut watch) = s.relatives.try_lock() {
                    if let Some(w) = watch.as_mut() {
                        w.look(Instant::now());
                    }
                }
                let generation = collect(&s, &mut buf);
                refresh(&s, generation);
                std::thread::sleep(POLL);
            }
            let used = cpu().saturating_sub(first);
            let found = threads.map(Threads::stop).unwrap_or_default();
            collect(&s, &mut buf);
            (found, used)
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
/// (With `one_cpu`, the process's threads share one CPU with the collector
/// and are never on it while the collector looks: one running or ready for
/// the CPU is asked, as /proc says.)
fn poke_behind(s: &Session, threads: Option<&Threads>, poked: &mut HashMap<i32, Instant>, one_cpu: bool) {
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
            && if one_cpu {
                crate::procfs::stat(crate::procfs::Proc::This, Some(tid)).is_some_and(|st| st.running())
            } else {
                on_cpu(clock, now)
            }
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
/// `__vdso_clock_gettime`, where it spent a few percent). A thread on the
/// collector's own CPU is not running while it looks: it is asked at a
/// later look, from another CPU, or its timer's signal comes.
fn on_cpu(clock: libc::clockid_t, then: u64) -> bool {
    read_clock(clock).is_some_and(|t| t > then)
}

/// Whether the calling thread may run on one CPU only (its affinity: a
/// `taskset`, a container's cpuset).
fn one_cpu() -> bool {
    // SAFETY: a zeroed cpu_set_t is a valid, empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: sched_getaffinity writes at most the size given into `set`.
    let ok = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } == 0;
    // SAFETY: `set` is a valid cpu_set_t.
    ok && unsafe { libc::CPU_COUNT(&set) } <= 1
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicI32};

    /// Binds the calling thread to CPU `cpu`; false if it may not run there.
    fn bind(cpu: usize) -> bool {
        // SAFETY: a zeroed cpu_set_t is a valid, empty set; CPU_SET adds
        // `cpu`; sched_setaffinity binds the calling thread only.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
        }
    }

    /// The first two CPUs this process may run on.
    fn two_cpus() -> Option<(usize, usize)> {
        // SAFETY: a zeroed cpu_set_t is a valid, empty set, which
        // sched_getaffinity fills.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
            return None;
        }
        // SAFETY: `set` is a valid cpu_set_t.
        let mut cpus = (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) });
        Some((cpus.next()?, cpus.next()?))
    }

    /// Of 50 looks, 1 ms apart, from CPU `from`, how many find the thread
    /// running `work` on CPU `on` on a CPU (None: the threads could not be
    /// bound).
    fn looks_on_cpu(work: fn(&AtomicBool), on: usize, from: usize) -> Option<usize> {
        let (tid, stop) = (Arc::new(AtomicI32::new(0)), Arc::new(AtomicBool::new(false)));
        let (t, s) = (tid.clone(), stop.clone());
        let worker = std::thread::spawn(move || {
            t.store(if bind(on) { clock::gettid() } else { -1 }, Ordering::Release);
            work(&s);
        });
        let looker = std::thread::spawn(move || {
            while tid.load(Ordering::Acquire) == 0 {
                std::thread::yield_now();
            }
            let tid = tid.load(Ordering::Acquire);
            if tid < 0 || !bind(from) {
                return None;
            }
            let clock = clock::cpu_clock(tid);
            Some(
                (0..50)
                    .filter(|_| {
                        std::thread::sleep(Duration::from_millis(1));
                        on_cpu(clock, read_clock(clock).unwrap())
                    })
                    .count(),
            )
        });
        let on = looker.join().unwrap();
        stop.store(true, Ordering::Release);
        worker.join().unwrap();
        on
    }

    #[test]
    fn a_thread_is_on_a_cpu_when_it_runs_there_not_when_it_sleeps() {
        // (The one looking runs on another CPU: a thread on the looker's
        // own CPU is never running while it looks.)
        let Some((a, b)) = two_cpus() else {
            eprintln!("skipped: this process may run on one CPU only");
            return;
        };
        let spin = looks_on_cpu(|stop| while !stop.load(Ordering::Acquire) {}, a, b);
        let sleep = looks_on_cpu(
            |stop| {
                while !stop.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(5));
                }
            },
            a,
            b,
        );
        let (Some(spin), Some(sleep)) = (spin, sleep) else {
            eprintln!("skipped: threads cannot be bound to CPUs here");
            return;
        };
        // (On a busy machine the spinning thread waits for its CPU now and
        // then; the sleeping one may be caught awake.)
        assert!(spin >= 5, "spinning: on a CPU at {spin} of 50 looks");
        assert!(sleep <= 3, "sleeping: on a CPU at {sleep} of 50 looks");
    }

    #[test]
    fn a_thread_bound_to_one_cpu_says_so() {
        let one = std::thread::spawn(|| bind(0).then(one_cpu)).join().unwrap();
        assert_ne!(one, Some(false));
    }
}
