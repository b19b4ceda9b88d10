//! A sampling session: what starts samples (a per-thread POSIX timer that
//! sends a real-time signal, or allocations), the state the handler shares
//! with the collector thread, and starting and stopping.
//!
//! Why timers: `timer_create` on the main thread's CPU clock (`"cpu"`) or
//! the monotonic clock (`"elapsed"`), delivered with `SIGEV_THREAD_ID` to
//! that thread only, leaves R's own `SIGPROF` and the process-wide
//! `ITIMER_PROF` alone (so `Rprof()`'s state is untouched), cannot be skewed
//! by other threads' CPU time, and uses a real-time signal nobody else has
//! a handler for (see `signal`). Expirations that happen while a signal is
//! pending are not lost: the kernel counts them (`si_overrun`) and the
//! sample stands for all of them.
//!
//! With every thread sampled, each other thread of the process gets a timer
//! of its own on its own CPU clock, sending the same signal to it alone
//! (see `threads` and `spawn`): no thread is stopped for another's sample.
//! Their samples are taken by the same handler into sampling slots (see
//! `slots`).
//!
//! A memory profile has no timer: the allocation hook samples (see
//! `alloc`); the signal only carries requests for reference samples of R's
//! main thread that other threads' allocations make.
//!
//! Stopping deletes the timers (or unhooks the allocation functions),
//! withdraws the session from the handlers and waits for those running
//! (see `active`), quiets the signal (see `signal`), and hands what was
//! collected over as a [`Finished`].

use super::super::collect::{AllocFigures, Collected, Finished};
use super::super::compose::{RFacts, Scratch};
use super::clock::{self, Clock, MIN_INTERVAL_NS};
use super::handler::{on_allocation, on_signal, ACTIVE};
use super::ring::Ring;
pub use super::shared::{Session, Trigger};
use super::slots::Slots;
use super::snapshots::{self, Snapshots};
use super::{collector, fork, signal};
use crate::error::{Error, Result};
use crate::relatives::watch::Watch;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Ring words (1 MiB): seconds of samples at 1 ms if the collector is slow
/// to run, and small enough to stay in the CPU's caches.
const RING_WORDS: usize = 1 << 17;
/// Sampling slots for the other threads, and each one's ring words.
const SLOTS: usize = 4;
const SLOT_RING_WORDS: usize = 1 << 16;

/// How a session samples: with a timer, its id (deleted at the stop).
enum Sampling {
    Timer(libc::timer_t),
    Allocations,
}

/// A started session, owned by the thread that started it.
pub struct Running {
    session: Arc<Session>,
    sampling: Sampling,
    old_action: libc::sigaction,
    collector: Option<std::thread::JoinHandle<collector::Found>>,
    /// R's main thread's CPU clock at the start.
    main_cpu_start: u64,
    pub trigger: Trigger,
    pub(crate) started: std::time::SystemTime,
    started_mono: std::time::Instant,
    /// The process that started the session (a fork child has another).
    pid: libc::pid_t,
}

// SAFETY: a timer id is a kernel handle valid from any thread of the
// process; the rest is owned data. (Running is used on R's main thread.)
unsafe impl Send for Running {}

/// Whether a session is running in this process.
pub fn active() -> bool {
    ACTIVE.is_published()
}

/// The last session's main scratch, kept for the next session (see
/// `Scratch::reset`).
static SPARE_SCRATCH: Mutex<Option<Box<Scratch>>> = Mutex::new(None);

fn spare_scratch() -> Box<Scratch> {
    match SPARE_SCRATCH.lock().unwrap_or_else(|e| e.into_inner()).take() {
        Some(mut s) => {
            s.reset();
            s
        }
        None => Box::default(),
    }
}

/// Keeps a finished session's last snapshot for the next session (once
/// its profile is built).
pub fn recycle(finished: Finished) {
    // (This process's last: the workers' follow it.)
    let own = finished.own_snapshots();
    let mut kept = finished.snapshots;
    kept.truncate(own);
    snapshots::recycle(kept)
}

/// What a session samples besides R's main thread: the process's other
/// threads, and the children it forks (see `children`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Scope {
    pub threads: bool,
    pub processes: bool,
}

/// A session not yet published.
fn new_session(
    facts: RFacts,
    interpreter_addr: usize,
    trigger: Trigger,
    scope: Scope,
    signal: libc::c_int,
) -> Arc<Session> {
    let all_threads = scope.threads;
    // (A memory profile's children are not sampled: see `children`.)
    let children =
        (scope.processes && !trigger.is_allocations()).then(super::children::Children::new).flatten();
    // The processes working for this one, watched by the collector (see
    // `relatives::watch`).
    // SAFETY: getpid has no preconditions.
    let relatives = Mutex::new(
        (scope.processes && !trigger.is_allocations()).then(|| Watch::start(unsafe { libc::getpid() })),
    );
    let first = snapshots::first(interpreter_addr);
    let own_code = own_code(&first.map);
    // Other threads' stacks are read through the kernel (see `worker`).
    let slots = if all_threads && crate::memory::available() {
        Slots::new(SLOTS, SLOT_RING_WORDS)
    } else {
        Slots::none()
    };
    Arc::new(Session {
        facts,
        trigger,
        ring: Ring::new(RING_WORDS),
        scratch: UnsafeCell::new(Some(spare_scratch())),
        snapshots: Snapshots::new(first, interpreter_addr),
        // SAFETY: the calling thread's own id.
        main_thread: unsafe { libc::pthread_self() },
        main_tid: clock::gettid(),
        // SAFETY: getpid has no preconditions.
        pid: unsafe { libc::getpid() },
        signal,
        children,
        relatives,
        parent: Mutex::new(Default::default()),
        slots,
        main_ref: super::main_ref::MainRef::new(),
        requested: AtomicBool::new(false),
        requested_ns: AtomicU64::new(0),
        thread_dropped: AtomicU64::new(0),
        forked: AtomicU64::new(0),
        handler_runs: AtomicU64::new(0),
        dropped: AtomicU64::new(0),
        outside: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        collected: Mutex::new(Collected::default()),
        alloc_seq: AtomicU64::new(0),
        own_code,
        main_busy: AtomicBool::new(false),
        accounts: match trigger {
            Trigger::Timer { clock: Clock::Cpu, interval_ns } => {
                Some(super::account::Accounts::new(interval_ns))
            }
            _ => None,
        },
        watches: matches!(trigger, Trigger::Timer { clock: Clock::Cpu, .. })
            .then(super::watches::Watches::new),
    })
}

/// Adds the processes read from outside to the forked children that
/// sampled themselves: a fork that ran another program (processx's,
/// R's `pipe()`) sampled itself until it did, then was read from outside,
/// and is one process: its samples summed, its CPU time the larger
/// account (the outside one counts from when it was first seen). One
/// that took no sample before it ran the program and could not be read
/// after (`refused`) was not sampled: it is left out, to be listed with
/// the processes not sampled, with why.
fn merge_processes(
    children: &mut Vec<crate::profile::collect::Process>,
    read: Vec<crate::profile::collect::Process>,
    refused: &[(i32, u64, String)],
) {
    children.retain(|c| c.samples > 0 || !refused.iter().any(|r| r.0 as u32 == c.pid));
    for p in read {
        match children.iter_mut().find(|c| c.pid == p.pid) {
            Some(c) => {
                c.samples += p.samples;
                c.dropped += p.dropped;
                c.cpu_ns = c.cpu_ns.max(p.cpu_ns);
                // (The program it became names it.)
                c.command = p.command;
            }
            None => children.push(p),
        }
    }
}

/// The range of winch's own code (its library's executable segments).
fn own_code(map: &crate::modules::ModuleMap) -> (usize, usize) {
    let here = own_code as fn(&crate::modules::ModuleMap) -> (usize, usize) as usize;
    map.module_of(here)
        .map(|i| {
            let exec = map.module(i).segments.iter().filter(|s| s.exec);
            let lo = exec.clone().map(|s| s.start).min().unwrap_or(0);
            (lo, exec.map(|s| s.end).max().unwrap_or(0))
        })
        .unwrap_or((0, 0))
}

/// Checks that no profile (winch's or R's) runs, and picks the session's
/// signal.
fn ready_to_start() -> Result<libc::c_int> {
    if active() {
        return Err(Error::Busy("a winch profile is already running".into()));
    }
    if signal::rprof_running() {
        return Err(Error::Busy("R's profiler is running: stop it with `Rprof(NULL)` first".into()));
    }
    let signal = signal::free_signal()
        .ok_or_else(|| Error::Unavailable("no free real-time signal for the sampling timer".into()))?;
    fork::register();
    Ok(signal)
}

/// Starts a session on R's main thread (the calling thread): with a timer,
/// R's main thread sampled every `interval_ns` of its `clock` (and with
/// `all_threads` every other thread of the process every `interval_ns` of
/// its own clock); with allocations, allocations of every thread (or of
/// R's main thread) sampled, one per `mean_bytes` on average (see
/// `alloc`), each with its stack taken as a CPU sample's is, on the
/// allocating thread. With `scope.processes`, children forked while a timer
/// samples sample themselves (see `children`).
pub fn start(facts: RFacts, interpreter_addr: usize, trigger: Trigger, scope: Scope) -> Result<Running> {
    let all_threads = scope.threads;
    match trigger {
        Trigger::Timer { interval_ns, .. } if interval_ns < MIN_INTERVAL_NS => {
            return Err(Error::BadArgument(format!(
                "the sampling interval must be at least {} ms",
                MIN_INTERVAL_NS as f64 / 1e6
            )));
        }
        Trigger::Allocations { mean_bytes: 0 } => {
            return Err(Error::BadArgument("the mean bytes between samples must be positive".into()));
        }
        _ => {}
    }
    let signal = ready_to_start()?;
    let session = new_session(facts, interpreter_addr, trigger, scope, signal);
    // R's main thread's account starts now: its samples stand for its CPU
    // time from here, even if its timer's first signal never comes.
    if let Some(accounts) = &session.accounts {
        accounts.weigh(session.main_tid, 0, super::account::Usage::now().as_ref());
    }
    let main_cpu_start = clock::read_clock(clock::cpu_clock(session.main_tid)).unwrap_or(0);
    ACTIVE.publish(Arc::as_ptr(&session));
    let (sampling, old_action) = match trigger {
        Trigger::Timer { clock, interval_ns } => arm_timers(&session, clock, interval_ns, all_threads)?,
        Trigger::Allocations { mean_bytes } => hook_allocations(&session, mean_bytes)?,
    };
    let collector = collector::spawn(&session);
    Ok(Running {
        session,
        sampling,
        old_action,
        collector,
        main_cpu_start,
        trigger,
        started: std::time::SystemTime::now(),
        started_mono: std::time::Instant::now(),
        // SAFETY: getpid has no preconditions.
        pid: unsafe { libc::getpid() },
    })
}

/// The handler, then R's main thread's timer, then the hook that gives
/// threads started from now on their own timers. On failure nothing is
/// left installed and the session is withdrawn.
fn arm_timers(
    session: &Session,
    clock: Clock,
    interval_ns: u64,
    all_threads: bool,
) -> Result<(Sampling, libc::sigaction)> {
    let signal = session.signal;
    let Some(old_action) = signal::install(signal, on_signal) else {
        ACTIVE.retract();
        return Err(Error::Unavailable("could not install the sampling signal's handler".into()));
    };
    let clock_id = match clock {
        Clock::Cpu => libc::CLOCK_THREAD_CPUTIME_ID,
        Clock::Elapsed => libc::CLOCK_MONOTONIC,
    };
    let Some(timer) = clock::timer(signal, clock_id, clock::gettid(), interval_ns) else {
        ACTIVE.retract();
        signal::restore(signal, &old_action);
        return Err(Error::Unavailable("could not create the sampling timer".into()));
    };
    if all_threads && !session.slots.is_empty() {
        super::spawn::install(
            signal,
            clock,
            interval_ns,
            session.facts.base.global_context,
            session.main_tid,
        );
    }
    Ok((Sampling::Timer(timer), old_action))
}

/// The handler (for the reference samples other threads' allocations ask
/// R's main thread for; no timer sends the signal), then the allocation
/// hooks. On failure nothing is left installed and the session is
/// withdrawn.
fn hook_allocations(session: &Session, mean_bytes: u64) -> Result<(Sampling, libc::sigaction)> {
    let old_action = signal::install(session.signal, on_signal);
    let hooked = match old_action {
        Some(_) => super::alloc::hook::install(mean_bytes, on_allocation),
        None => 0,
    };
    match old_action {
        Some(old) if hooked > 0 => Ok((Sampling::Allocations, old)),
        _ => {
            super::alloc::hook::uninstall();
            ACTIVE.retract();
            if let Some(old) = old_action {
                // (No signal was asked for: nothing hooked ran.)
                signal::restore(session.signal, &old);
            }
            Err(Error::Unavailable("no allocation function could be hooked in the loaded libraries".into()))
        }
    }
}

impl Running {
    /// Whether this is a copy of a session that another process started:
    /// in a `fork()` child, the parent's session, whose timer and collector
    /// thread do not exist here.
    pub fn inherited(&self) -> bool {
        // SAFETY: getpid has no preconditions.
        self.pid != unsafe { libc::getpid() }
    }

    /// Lets go of a session inherited through `fork()` (see `inherited`):
    /// gives the signal back its disposition from before the parent's
    /// session (the child's copy of the handler), and nothing else. The
    /// timer id and the collector thread are the parent's: deleting or
    /// joining them here would act on nothing, or on something of the
    /// child's with the same id. The rest is left unfreed: a collector of
    /// the parent may have held the session's locks at the fork.
    pub fn forget(self) {
        debug_assert!(self.inherited());
        // A child sampling itself stops: its timer deleted (a signal it
        // sent already is consumed, not delivered with the disposition
        // restored), and no session is published any more.
        let signal = self.session.signal;
        let old_mask = signal::block(signal);
        super::children::leave();
        ACTIVE.forget_in_child();
        signal::quiet(signal, &self.old_action, old_mask, &ACTIVE);
        std::mem::forget(self);
    }

    /// Whether the processes working for this one are watched (a CPU or
    /// elapsed profile with `processes`; see `relatives::watch`).
    pub fn watches_relatives(&self) -> bool {
        self.session.relatives.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    /// Stops sampling, restores the signal's disposition and returns what
    /// was collected. Call on the thread that started the session.
    pub fn stop(mut self) -> Finished {
        let main_cpu_ns =
            clock::read_clock(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or(0).saturating_sub(self.main_cpu_start);
        let signal = self.session.signal;
        // The signal blocked on this thread first: one generated just
        // before (a tick, or a request for a reference sample) stays
        // pending, and is consumed by `quiet`.
        let old_mask = signal::block(signal);
        // Children stop sampling themselves.
        if let Some(c) = &self.session.children {
            c.stop();
        }
        let alloc = match self.sampling {
            Sampling::Timer(timer) => {
                // SAFETY: our timer, deleted once.
                unsafe { libc::timer_delete(timer) };
                // New threads arm nothing from now on; those that did and
                // the collector has not taken keep no timer. The collector
                // deletes the others' timers as it ends.
                if !self.session.slots.is_empty() {
                    for (_, t) in super::spawn::uninstall() {
                        // SAFETY: a thread's sampling timer, deleted once.
                        unsafe { libc::timer_delete(t.0) };
                    }
                }
                None
            }
            Sampling::Allocations => {
                super::alloc::hook::uninstall();
                Some(())
            }
        };
        self.session.stop.store(true, Ordering::Release);
        let (threads, collector_cpu_ns, workers) =
            self.collector.take().and_then(|c| c.join().ok()).unwrap_or_default();
        ACTIVE.clear();
        signal::quiet(signal, &self.old_action, old_mask, &ACTIVE);
        let figures = alloc.map(|()| self.alloc_figures());
        self.finish(main_cpu_ns, (threads, collector_cpu_ns, workers), figures)
    }

    /// A stopped memory profile's figures: the sampled blocks not freed.
    fn alloc_figures(&self) -> AllocFigures {
        use super::alloc::hook;
        let table = hook::live();
        AllocFigures {
            mean: self.trigger.period(),
            live: table.kept().into_iter().map(|(_, n)| n).collect(),
            allocations: hook::ALLOCATIONS.load(Ordering::Acquire),
            sampled: hook::SAMPLED.load(Ordering::Acquire),
            untracked: table.lost.load(Ordering::Acquire),
        }
    }

    /// What the stopped session collected.
    fn finish(
        self,
        main_cpu_ns: u64,
        (threads, collector_cpu_ns, workers): collector::Found,
        alloc: Option<AllocFigures>,
    ) -> Finished {
        let s = &self.session;
        let mut buf = Vec::new();
        collector::collect(s, &mut buf);
        collector::close_children(s);
        let mut collected = std::mem::take(&mut *s.collected.lock().unwrap_or_else(|e| e.into_inner()));
        collected.settle_pending(true);
        // The workers read from outside: their snapshots after this
        // process's, their rows after its children's.
        let mut snapshots = s.snapshots.take_all();
        let elsewhere = super::traced::place_snapshots(&mut collected, snapshots.len(), &workers);
        let super::traced::Read { snapshots: theirs, processes, refused } = workers;
        snapshots.extend(theirs.into_iter().flat_map(|(snaps, _)| snaps));
        merge_processes(&mut collected.processes, processes, &refused);
        let duration_ns = self.started_mono.elapsed().as_nanos() as u64;
        // SAFETY: sampling has stopped (no handler runs: see `stop`), so
        // nothing else uses the scratch.
        let mut scratch = unsafe { &mut *s.scratch.get() }.take();
        let mut labels = scratch.as_mut().map(|s| s.take_labels()).unwrap_or_default();
        // Labels forked children made (see `children`).
        labels.set_extra(std::mem::take(&mut collected.extra_labels));
        // Kept for the next session.
        *SPARE_SCRATCH.lock().unwrap_or_else(|e| e.into_inner()) = scratch;
        Finished {
            pid: s.pid,
            command: crate::procfs::cmdline(crate::procfs::Proc::This),
            collected,
            labels,
            snapshots,
            handler_runs: s.handler_runs.load(Ordering::Relaxed),
            dropped: s.dropped.load(Ordering::Relaxed),
            outside: s.outside.load(Ordering::Relaxed),
            duration_ns,
            started: self.started,
            all_threads: !s.slots.is_empty(),
            threads,
            main_tid: s.main_tid,
            main_name: crate::procfs::comm(crate::procfs::Proc::This, s.main_tid),
            modules_now: None,
            launch_module: launch_module(),
            main_cpu_ns,
            collector_cpu_ns: Some(collector_cpu_ns),
            relatives: s
                .relatives
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .map(|w| {
                    let mut seen = w.finish();
                    // (Why each worker that could not be read was not.)
                    for s in &mut seen {
                        let (pid, start) = (s.now.relative.pid, s.now.start_ticks);
                        s.why = refused.iter().find(|r| r.0 == pid && r.1 == start).map(|r| r.2.clone());
                    }
                    seen
                })
                .unwrap_or_default(),
            elsewhere,
            thread_dropped: s.thread_dropped.load(Ordering::Relaxed),
            forked: s.forked.load(Ordering::Relaxed),
            alloc,
        }
    }
}

/// The basename of the module whose code new threads start in while the
/// spawn hook is installed (winch's own library).
fn launch_module() -> Option<String> {
    let now = crate::modules::current();
    now.module_of(super::spawn::launch_address()).map(|i| now.module(i).basename().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::collect::Process;

    fn process(pid: u32, command: &str, cpu_ns: u64, samples: u64) -> Process {
        Process { pid, command: command.into(), cpu_ns, samples, dropped: 0 }
    }

    #[test]
    fn a_fork_that_ran_a_program_and_was_read_from_outside_is_one_process() {
        let mut children = vec![process(10, "R", 2_000_000, 1), process(11, "R", 5_000_000, 3)];
        let read = vec![process(11, "sh -c work", 90_000_000, 17), process(12, "worker", 7, 2)];
        merge_processes(&mut children, read, &[]);
        assert_eq!(
            children,
            vec![
                process(10, "R", 2_000_000, 1),
                process(11, "sh -c work", 90_000_000, 20),
                process(12, "worker", 7, 2)
            ]
        );
        // A fork that took no sample and could not be read once it ran a
        // program is not a sampled process (one that took samples is).
        let mut children = vec![process(20, "R", 0, 0), process(21, "R", 3, 2)];
        let refused = [(20, 1, "no".to_string()), (21, 1, "no".to_string())];
        merge_processes(&mut children, Vec::new(), &refused);
        assert_eq!(children, vec![process(21, "R", 3, 2)]);
    }
}
