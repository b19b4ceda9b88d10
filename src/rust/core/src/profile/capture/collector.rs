//! The collector thread of a session: every poll it empties the rings into
//! the session's `Collected` (each sample marked certain or not, see
//! `snapshots`), follows modules loaded and unloaded (a new snapshot, and
//! the hooks of the new modules), and with timers for every thread finds
//! new threads (see `threads`); in a CPU profile it gives each thread a
//! watch and arms it for a thread whose CPU clock runs well ahead of its
//! samples (see `watches`). It returns what it knows of them when the
//! session stops.

use super::clock::{self, read_clock};
use super::shared::{Session, Trigger};
use super::threads::Threads;
use super::traced::{self, Traced};
use super::watches::Watches;
use crate::modules::Generation;
use crate::profile::collect::Thread;
use crate::profile::record;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the collector looks for new threads, empties the rings and
/// checks the loaded modules.
const POLL: std::time::Duration = std::time::Duration::from_millis(2);

/// What the collector found when it stops: the threads it sampled, the
/// CPU time it used itself while sampling ran, from its first look to the
/// stop (nanoseconds: the profiler's, not the profiled code's), and the
/// workers it read (see `traced`).
pub type Found = (Vec<Thread>, u64, traced::Read);

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
            let mut watched = Watched::new(&s);
            let mut workers = traced_workers(&s);
            let mut adopted = false;
            // (With the threads it reads workers with: see `traced`.)
            let tracers = || crate::outside::ptrace::TRACERS_CPU_NS.load(Ordering::Relaxed);
            let cpu = || read_clock(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or(0) + tracers();
            let first = cpu();
            while !s.stop.load(Ordering::Acquire) {
                if let Some(t) = threads.as_mut() {
                    t.poll();
                }
                catch_up(&s, threads.as_ref(), &mut watched);
                if let Ok(mut watch) = s.relatives.try_lock() {
                    if let Some(w) = watch.as_mut() {
                        // (What it reads changes only when the watch looks;
                        // its first look was made when it started.)
                        let looked = w.look(Instant::now()) || !adopted;
                        if let (true, Some((t, _))) = (looked, workers.as_mut()) {
                            t.adopt(&w.workers());
                            t.adopt(&w.programs());
                            adopted = true;
                        }
                    }
                }
                let generation = collect(&s, &mut buf);
                refresh(&s, generation);
                if let Some((t, next)) = workers.as_mut() {
                    let now = Instant::now();
                    if now >= *next {
                        *next = now + t.every();
                        let mut c = s.collected.lock().unwrap_or_else(|e| e.into_inner());
                        t.tick(&s, &mut c);
                    }
                }
                std::thread::sleep(POLL);
            }
            let used = cpu().saturating_sub(first);
            drop(watched);
            let found = threads.map(Threads::stop).unwrap_or_default();
            collect(&s, &mut buf);
            let read = workers.map(|(t, _)| t.finish()).unwrap_or_default();
            (found, used, read)
        })
        .ok()
}

/// The reading of the profiled process's workers (see `traced`) and when
/// it next takes their samples: in a CPU profile of a process whose
/// relatives are watched (`processes = "all"`), with R's main thread
/// sampled (its samples are what the workers' are shown under).
fn traced_workers(s: &Session) -> Option<(Traced, Instant)> {
    let Trigger::Timer { clock: clock::Clock::Cpu, interval_ns } = s.trigger else { return None };
    s.relatives.lock().unwrap_or_else(|e| e.into_inner()).as_ref()?;
    let with = (s.facts.with_loops, s.facts.lines.is_some());
    let t = Traced::new(interval_ns, with.0, with.1, s.facts.base.interpreter_addr);
    Some((t, Instant::now()))
}

/// The watches the collector made (see `watches`): each thread's timer,
/// when it was last armed for the thread being behind, and the threads
/// for which none could be made (their cell another's, or no timer).
/// Every timer is deleted when sampling stops, or if the collector ends
/// otherwise (dropped).
struct Watched {
    session: Arc<Session>,
    timers: HashMap<i32, libc::timer_t>,
    armed: HashMap<i32, Instant>,
    failed: HashSet<i32>,
}

impl Watched {
    fn new(session: &Arc<Session>) -> Watched {
        Watched {
            session: session.clone(),
            timers: HashMap::new(),
            armed: HashMap::new(),
            failed: HashSet::new(),
        }
    }

    /// Whether thread `tid` has a watch: made if it has none and none
    /// could not be made before.
    fn ensure(&mut self, watches: &Watches, tid: i32) -> bool {
        if self.timers.contains_key(&tid) {
            return true;
        }
        if self.failed.contains(&tid) {
            return false;
        }
        let made = clock::watch(self.session.signal, tid);
        match made {
            Some(timer) if watches.keep(tid, timer) => {
                self.timers.insert(tid, timer);
                true
            }
            _ => {
                if let Some(timer) = made {
                    // SAFETY: the timer just made, not kept.
                    unsafe { libc::timer_delete(timer) };
                }
                self.failed.insert(tid);
                false
            }
        }
    }

    /// Deletes the watches of threads not in `live`.
    fn retain(&mut self, live: &HashSet<i32>) {
        let Some(watches) = self.session.watches.as_ref() else { return };
        self.failed.retain(|t| live.contains(t));
        let gone: Vec<i32> = self.timers.keys().copied().filter(|t| !live.contains(t)).collect();
        for tid in gone {
            // (Out of the table, and armed by no handler, first.)
            watches.forget(tid);
            if let Some(timer) = self.timers.remove(&tid) {
                // SAFETY: our timer, no longer in the table, deleted once.
                unsafe { libc::timer_delete(timer) };
            }
            self.armed.remove(&tid);
        }
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.retain(&HashSet::new());
    }
}

/// Gives each sampled thread a watch, and arms it for one whose CPU clock
/// has run two intervals and two of the kernel's ticks (8 ms at HZ = 250)
/// ahead of its samples, at most once in that time: its timer's signals
/// are not coming (see `account`). Only for a thread on a CPU or ready
/// for one: a sleeping one would be woken where it waits (an OpenMP worker
/// in libgomp's futex wait), and its sample, standing for the work it did
/// before, put all of it there (libgomp 61 % of a loaded data.table run's
/// samples where perf counted 54 %). Its time is owed to its next sample,
/// when it runs again. The watch takes the sample once it finds the thread
/// running (see `watches`).
fn catch_up(s: &Session, threads: Option<&Threads>, watched: &mut Watched) {
    let (Some(accounts), Some(watches), Trigger::Timer { interval_ns, .. }) =
        (s.accounts.as_ref(), s.watches.as_ref(), s.trigger)
    else {
        return;
    };
    let lag_ns = 2 * interval_ns + 8_000_000;
    let main = std::iter::once((s.main_tid, clock::cpu_clock(s.main_tid)));
    let live: Vec<(i32, libc::clockid_t)> = main.chain(threads.into_iter().flat_map(Threads::live)).collect();
    watched.retain(&live.iter().map(|&(tid, _)| tid).collect());
    for (tid, clock) in live {
        let Some(now) = read_clock(clock) else { continue };
        accounts.open(tid, now);
        // Every thread has its watch before it falls behind: its timer's
        // signals use it too.
        if watched.ensure(watches, tid)
            && accounts.behind(tid, now, lag_ns)
            && watched.armed.get(&tid).is_none_or(|at| at.elapsed() >= Duration::from_nanos(lag_ns))
            && crate::procfs::stat(crate::procfs::Proc::This, Some(tid)).is_some_and(|st| st.running())
            && watches.arm(tid, now)
        {
            watched.armed.insert(tid, Instant::now());
        }
    }
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
