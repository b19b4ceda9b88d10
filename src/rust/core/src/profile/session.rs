//! A sampling session: a per-thread POSIX timer that sends a real-time
//! signal to R's main thread, the handler that takes a sample, and the
//! collector thread that empties the ring.
//!
//! Why this mechanism: `timer_create` on the main thread's CPU clock
//! (`"cpu"`) or the monotonic clock (`"elapsed"`), delivered with
//! `SIGEV_THREAD_ID` to that thread only, leaves R's own `SIGPROF` and the
//! process-wide `ITIMER_PROF` alone (so `Rprof()`'s state is untouched),
//! cannot be skewed by other threads' CPU time, and uses a real-time signal
//! nobody else has a handler for. Expirations that happen while a signal is
//! pending are not lost: the kernel counts them (`si_overrun`) and the
//! sample stands for all of them. `SA_RESTART` keeps interrupted system
//! calls going.
//!
//! Stopping deletes the timer, blocks the signal and consumes one still
//! pending, waits until no handler runs, and restores the signal's previous
//! disposition. A `fork()` child (parallel::mclapply) has no timer (POSIX
//! timers are not inherited) and, through a `pthread_atfork` handler, no
//! active session either, so it is never sampled. The child's copy of the
//! parent's `Running` refers to a timer and a collector thread that do not
//! exist there: `Running::inherited` tells, and `Running::forget` lets go of
//! it without touching them, so the child can start a session of its own.

use super::collect::Collected;
use super::ring::Ring;
use super::sampler::{self, RFacts, Scratch};
use crate::error::{Error, Result};
use crate::unwind::walk::Snapshot;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What is sampled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    Cpu,
    Elapsed,
}

/// The shortest interval the timers can honour usefully: the kernel checks
/// CPU-time timers at its tick (often 4 ms); shorter intervals still count
/// correctly through overruns, but a sample costs more than it measures
/// below this.
pub const MIN_INTERVAL_NS: u64 = 1_000_000;

/// Ring words (1 MiB): seconds of samples at 1 ms if the collector is slow
/// to run, and small enough to stay in the CPU's caches.
const RING_WORDS: usize = 1 << 17;

/// A snapshot of loaded modules as the handler uses it: with its number in
/// the session, which every sample taken with it carries.
struct Used {
    snapshot: Box<Snapshot>,
    index: u32,
}

/// A running session. Shared by the handler (through `ACTIVE`), the
/// collector thread and the thread that started it.
///
/// Which modules a sample's addresses belong to is the snapshot's the
/// handler used (it cannot ask the loader). The collector checks the
/// loader's generation before it takes the samples written so far: each is
/// certain when its snapshot still holds exactly the modules loaded then
/// (no module was loaded or unloaded since the snapshot was taken), and is
/// marked [`UNCERTAIN`] otherwise (see `build`). Every snapshot used stays
/// until the profile is built.
///
/// [`UNCERTAIN`]: super::sampler::UNCERTAIN
pub struct Session {
    facts: RFacts,
    ring: Ring,
    /// Used by the handler only (it never runs twice at once).
    scratch: UnsafeCell<Scratch>,
    snapshot: AtomicPtr<Used>,
    /// Snapshots replaced while sampling, in order; handed to `build` when
    /// the session ends. (Boxes: they came from `Box::into_raw` and must
    /// not move.)
    #[allow(clippy::vec_box)]
    retired: Mutex<Vec<Box<Used>>>,
    /// The generation and exactness of each snapshot used, by its number
    /// (the collector's).
    generations: Mutex<Vec<((u64, u64), bool)>>,
    interpreter_addr: usize,
    main_thread: libc::pthread_t,
    pub handler_runs: AtomicU64,
    pub dropped: AtomicU64,
    /// Timer intervals whose sample was outside the profiled code.
    pub outside: AtomicU64,
    stop: AtomicBool,
    collected: Mutex<Collected>,
}

// SAFETY: `scratch` is touched only by the signal handler on the main
// thread, never concurrently (IN_HANDLER), and by `finish` after sampling
// stopped; everything else is atomics, mutexes or immutable.
unsafe impl Sync for Session {}
// SAFETY: as above; the raw pointers are owned snapshots.
unsafe impl Send for Session {}

static ACTIVE: AtomicPtr<Session> = AtomicPtr::new(std::ptr::null_mut());
static IN_HANDLER: AtomicBool = AtomicBool::new(false);

/// A started session, owned by the thread that started it.
pub struct Running {
    session: Arc<Session>,
    signal: libc::c_int,
    timer: libc::timer_t,
    old_action: libc::sigaction,
    collector: Option<std::thread::JoinHandle<()>>,
    pub clock: Clock,
    pub interval_ns: u64,
    pub started: std::time::SystemTime,
    started_mono: std::time::Instant,
    /// The process that started the session (a fork child has another).
    pid: libc::pid_t,
}

// SAFETY: `timer` is a kernel timer id, valid from any thread of the
// process; the rest is owned data. (Running is used on R's main thread.)
unsafe impl Send for Running {}

/// What a finished session hands back.
pub struct Finished {
    pub collected: Collected,
    pub labels: super::labels::Labels,
    /// Every snapshot used, by number (the samples name theirs), the last
    /// one last: for placing addresses in modules and function starts.
    pub snapshots: Vec<Box<Snapshot>>,
    pub handler_runs: u64,
    pub dropped: u64,
    pub outside: u64,
    pub duration_ns: u64,
    pub started: std::time::SystemTime,
}

/// Whether a session is running in this process.
pub fn active() -> bool {
    !ACTIVE.load(Ordering::Acquire).is_null()
}

/// Whether R's own profiler (`Rprof()`, event "cpu") has its timer running.
pub fn rprof_running() -> bool {
    // SAFETY: getitimer writes the timer's value into `v`.
    let mut v: libc::itimerval = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let ok = unsafe { libc::getitimer(libc::ITIMER_PROF, &mut v) } == 0;
    ok && (v.it_interval.tv_sec != 0
        || v.it_interval.tv_usec != 0
        || v.it_value.tv_sec != 0
        || v.it_value.tv_usec != 0)
}

extern "C" {
    fn pthread_atfork(
        prepare: Option<extern "C" fn()>,
        parent: Option<extern "C" fn()>,
        child: Option<extern "C" fn()>,
    ) -> libc::c_int;
}

extern "C" fn after_fork_in_child() {
    // The child has no timer; make sure nothing it might receive samples.
    ACTIVE.store(std::ptr::null_mut(), Ordering::Release);
    // The only thread of the child is the one that called fork(), which was
    // not in the handler (a handler running on another thread of the parent
    // does not exist here): stopping a session of the child's own must not
    // wait for it.
    IN_HANDLER.store(false, Ordering::Release);
}

fn register_fork_handler() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a handler that only stores an atomic; glibc
        // removes it if winch's library is unloaded.
        unsafe { pthread_atfork(None, None, Some(after_fork_in_child)) };
    });
}

/// A real-time signal nobody handles: the highest one whose disposition is
/// the default.
fn free_signal() -> Option<libc::c_int> {
    let (lo, hi) = (libc::SIGRTMIN(), libc::SIGRTMAX());
    (lo..=hi).rev().find(|&sig| {
        // SAFETY: queries the disposition into `old`.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: as above; a null new action only reads.
        let ok = unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } == 0;
        ok && old.sa_sigaction == libc::SIG_DFL
    })
}

/// CLOCK_MONOTONIC in nanoseconds (async-signal-safe).
pub(crate) fn now_ns() -> u64 {
    // SAFETY: clock_gettime writes into `ts`; async-signal-safe.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The signal handler: one sample of the main thread.
extern "C" fn on_signal(_sig: libc::c_int, info: *mut libc::siginfo_t, uctx: *mut libc::c_void) {
    // SAFETY: errno is thread-local; saved and restored around the sample.
    let saved_errno = unsafe { *libc::__errno_location() };
    let start = now_ns();
    if !IN_HANDLER.swap(true, Ordering::Acquire) {
        let p = ACTIVE.load(Ordering::Acquire);
        // SAFETY: a non-null ACTIVE points to a session kept alive until
        // `stop` has seen IN_HANDLER false after clearing ACTIVE.
        if let Some(s) = unsafe { p.as_ref() } {
            // SAFETY: `info` and `uctx` are the kernel's for this signal.
            unsafe { take_sample(s, info, uctx, start) };
        }
        IN_HANDLER.store(false, Ordering::Release);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved_errno };
}

/// # Safety
/// In the signal handler, with IN_HANDLER held, for signal `info`/`uctx`.
unsafe fn take_sample(s: &Session, info: *mut libc::siginfo_t, uctx: *mut libc::c_void, start: u64) {
    // Only R's main thread is sampled (the timer targets it; any other
    // sender is ignored).
    // SAFETY: pthread_self reads the thread pointer; pthread_equal compares.
    if unsafe { libc::pthread_equal(libc::pthread_self(), s.main_thread) } == 0 {
        return;
    }
    // SAFETY: the kernel passes a ucontext_t; on x86_64 Linux its general
    // registers are in uc_mcontext.gregs.
    let regs = unsafe {
        let g = &(*(uctx as *const libc::ucontext_t)).uc_mcontext.gregs;
        (
            g[libc::REG_RIP as usize] as usize,
            g[libc::REG_RSP as usize] as usize,
            g[libc::REG_RBP as usize] as usize,
        )
    };
    // Timer expirations while this signal was pending (si_overrun: the int
    // after si_tid at the start of the union, for SI_TIMER signals).
    // SAFETY: `info` points to a siginfo_t; offsets of the timer fields.
    let overrun = unsafe {
        if (*info).si_code == libc::SI_TIMER {
            std::ptr::read_unaligned((info as *const u8).add(20) as *const libc::c_int).max(0) as u64
        } else {
            0
        }
    };
    // SAFETY: the snapshot pointer is a live Box owned by the session.
    let Some(used) = (unsafe { s.snapshot.load(Ordering::Acquire).as_ref() }) else { return };
    // SAFETY: only the handler uses `scratch` while the session runs.
    let scratch = unsafe { &mut *s.scratch.get() };
    s.handler_runs.fetch_add(1, Ordering::Relaxed);
    let snap = (&*used.snapshot, used.index);
    let out = sampler::sample(regs, 1 + overrun, start, now_ns, snap, &s.facts, scratch, &s.ring);
    if out.outside {
        s.outside.fetch_add(1 + overrun, Ordering::Relaxed);
    } else if !out.pushed {
        s.dropped.fetch_add(1 + overrun, Ordering::Relaxed);
    }
}

impl Session {
    /// Takes the snapshot of loaded modules anew if modules were loaded or
    /// unloaded: the loader's generation is now `generation` (collector
    /// thread).
    fn refresh(&self, generation: (u64, u64)) {
        // SAFETY: the current snapshot stays alive while the session runs.
        let current = unsafe { &*self.snapshot.load(Ordering::Acquire) };
        if generation == current.snapshot.generation && current.snapshot.exact {
            return;
        }
        let snapshot = Box::new(Snapshot::take(self.interpreter_addr));
        let index = {
            let mut g = self.generations.lock().unwrap_or_else(|e| e.into_inner());
            g.push((snapshot.generation, snapshot.exact));
            (g.len() - 1) as u32
        };
        let fresh = Box::into_raw(Box::new(Used { snapshot, index }));
        let old = self.snapshot.swap(fresh, Ordering::AcqRel);
        // The handler may still be walking the old one, and the samples
        // taken with it are named with it: keep it.
        // SAFETY: `old` came from Box::into_raw and is no longer published.
        self.retired.lock().unwrap_or_else(|e| e.into_inner()).push(unsafe { Box::from_raw(old) });
    }

    /// Takes the samples written so far, each marked certain or not (see
    /// [`Session`]); returns the loader's generation read.
    fn collect(&self, buf: &mut Vec<u64>) -> (u64, u64) {
        // Every sample written before `head` was taken before the
        // generation is read.
        let head = self.ring.head();
        let generation = crate::modules::loader_generation();
        let certain: Vec<bool> = self
            .generations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|&(g, exact)| exact && g == generation)
            .collect();
        let mut c = self.collected.lock().unwrap_or_else(|e| e.into_inner());
        self.ring.drain_to(head, buf, |rec| {
            let index = sampler::snapshot_of(rec);
            c.absorb_as(rec, index.is_none_or(|i| certain.get(i as usize) != Some(&true)));
        });
        generation
    }
}

/// The last session's snapshot, kept for the next session while no module
/// was loaded or unloaded: its caches (rules, functions' rows) are warm, and
/// a profile's first samples do not pay for what the last one computed.
static SPARE: Mutex<Option<Box<Snapshot>>> = Mutex::new(None);

/// Keeps a finished session's last snapshot for the next session.
pub fn recycle(mut snapshots: Vec<Box<Snapshot>>) {
    if let Some(last) = snapshots.pop() {
        *SPARE.lock().unwrap_or_else(|e| e.into_inner()) = Some(last);
    }
}

/// The spare snapshot, if it is still current.
fn spare_snapshot() -> Option<Box<Snapshot>> {
    let spare = SPARE.lock().unwrap_or_else(|e| e.into_inner()).take()?;
    (spare.exact && spare.generation == crate::modules::loader_generation()).then_some(spare)
}

/// Starts sampling R's main thread (the calling thread) every
/// `interval_ns` of `clock`.
pub fn start(facts: RFacts, interpreter_addr: usize, clock: Clock, interval_ns: u64) -> Result<Running> {
    if interval_ns < MIN_INTERVAL_NS {
        return Err(Error::BadArgument(format!(
            "the sampling interval must be at least {} ms",
            MIN_INTERVAL_NS as f64 / 1e6
        )));
    }
    if active() {
        return Err(Error::Busy("a winch profile is already running".into()));
    }
    if rprof_running() {
        return Err(Error::Busy("R's profiler is running: stop it with `Rprof(NULL)` first".into()));
    }
    let signal = free_signal()
        .ok_or_else(|| Error::Unavailable("no free real-time signal for the sampling timer".into()))?;
    register_fork_handler();
    let first = spare_snapshot().unwrap_or_else(|| Box::new(Snapshot::take(interpreter_addr)));
    let generations = Mutex::new(vec![(first.generation, first.exact)]);
    let snapshot = Box::into_raw(Box::new(Used { snapshot: first, index: 0 }));
    let session = Arc::new(Session {
        facts,
        ring: Ring::new(RING_WORDS),
        scratch: UnsafeCell::new(Scratch::default()),
        snapshot: AtomicPtr::new(snapshot),
        retired: Mutex::new(Vec::new()),
        generations,
        interpreter_addr,
        // SAFETY: the calling thread's own id.
        main_thread: unsafe { libc::pthread_self() },
        handler_runs: AtomicU64::new(0),
        dropped: AtomicU64::new(0),
        outside: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        collected: Mutex::new(Collected::default()),
    });
    ACTIVE.store(Arc::as_ptr(&session) as *mut Session, Ordering::Release);

    // The handler, then the timer.
    // SAFETY: a zeroed sigaction is a valid value to fill in.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = on_signal as *const () as usize;
    action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
    // SAFETY: an empty mask: the signal itself stays blocked in its handler.
    unsafe { libc::sigemptyset(&mut action.sa_mask) };
    // SAFETY: as above.
    let mut old_action: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: installs `on_signal`, which is async-signal-safe.
    if unsafe { libc::sigaction(signal, &action, &mut old_action) } != 0 {
        ACTIVE.store(std::ptr::null_mut(), Ordering::Release);
        // SAFETY: never published to the handler (ACTIVE cleared, no timer).
        drop(unsafe { Box::from_raw(snapshot) });
        return Err(Error::Unavailable("could not install the sampling signal's handler".into()));
    }
    let timer = match create_timer(signal, clock, interval_ns) {
        Ok(t) => t,
        Err(e) => {
            ACTIVE.store(std::ptr::null_mut(), Ordering::Release);
            // SAFETY: restores the disposition saved above.
            unsafe { libc::sigaction(signal, &old_action, std::ptr::null_mut()) };
            // SAFETY: no timer exists, ACTIVE is cleared.
            drop(unsafe { Box::from_raw(snapshot) });
            return Err(e);
        }
    };
    let collector = {
        let s = session.clone();
        std::thread::Builder::new()
            .name("winch-profile".into())
            .spawn(move || {
                let mut buf = Vec::new();
                while !s.stop.load(Ordering::Acquire) {
                    let generation = s.collect(&mut buf);
                    s.refresh(generation);
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                s.collect(&mut buf);
            })
            .ok()
    };
    Ok(Running {
        session,
        signal,
        timer,
        old_action,
        collector,
        clock,
        interval_ns,
        started: std::time::SystemTime::now(),
        started_mono: std::time::Instant::now(),
        // SAFETY: getpid has no preconditions.
        pid: unsafe { libc::getpid() },
    })
}

fn create_timer(signal: libc::c_int, clock: Clock, interval_ns: u64) -> Result<libc::timer_t> {
    // SAFETY: a zeroed sigevent is a valid value to fill in.
    let mut ev: libc::sigevent = unsafe { std::mem::zeroed() };
    ev.sigev_notify = libc::SIGEV_THREAD_ID;
    ev.sigev_signo = signal;
    // SAFETY: the calling thread's kernel id.
    ev.sigev_notify_thread_id = unsafe { libc::syscall(libc::SYS_gettid) } as libc::c_int;
    let clock_id = match clock {
        Clock::Cpu => libc::CLOCK_THREAD_CPUTIME_ID,
        Clock::Elapsed => libc::CLOCK_MONOTONIC,
    };
    // SAFETY: a zeroed timer_t is filled in by timer_create.
    let mut timer: libc::timer_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid clock, event and output pointer.
    if unsafe { libc::timer_create(clock_id, &mut ev, &mut timer) } != 0 {
        return Err(Error::Unavailable("could not create the sampling timer".into()));
    }
    let ts = libc::timespec {
        tv_sec: (interval_ns / 1_000_000_000) as _,
        tv_nsec: (interval_ns % 1_000_000_000) as _,
    };
    let spec = libc::itimerspec { it_interval: ts, it_value: ts };
    // SAFETY: arms the timer just created.
    if unsafe { libc::timer_settime(timer, 0, &spec, std::ptr::null_mut()) } != 0 {
        // SAFETY: deletes the timer just created.
        unsafe { libc::timer_delete(timer) };
        return Err(Error::Unavailable("could not arm the sampling timer".into()));
    }
    Ok(timer)
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
        // SAFETY: restores the disposition saved when the session started;
        // the child has no timer for this signal and ACTIVE is cleared
        // (after_fork_in_child), so a stray signal would find no session.
        unsafe { libc::sigaction(self.signal, &self.old_action, std::ptr::null_mut()) };
        std::mem::forget(self);
    }

    /// Stops sampling, restores the signal's disposition and returns what
    /// was collected. Call on the thread that started the session.
    pub fn stop(mut self) -> Finished {
        // SAFETY: deletes our timer; blocking the signal first keeps one
        // generated just before from arriving with the old disposition.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, self.signal);
            let mut old_mask: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old_mask);
            libc::timer_delete(self.timer);
            ACTIVE.store(std::ptr::null_mut(), Ordering::Release);
            // Consume a signal still pending, then restore.
            let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            while libc::sigtimedwait(&set, std::ptr::null_mut(), &zero) == self.signal {}
            libc::sigaction(self.signal, &self.old_action, std::ptr::null_mut());
            libc::pthread_sigmask(libc::SIG_SETMASK, &old_mask, std::ptr::null_mut());
        }
        // No handler can be running on this thread now; one on another
        // thread (ignored signals) would finish quickly.
        while IN_HANDLER.load(Ordering::Acquire) {
            std::hint::spin_loop();
        }
        self.session.stop.store(true, Ordering::Release);
        if let Some(c) = self.collector.take() {
            let _ = c.join();
        }
        let mut buf = Vec::new();
        self.session.collect(&mut buf);
        let duration_ns = self.started_mono.elapsed().as_nanos() as u64;
        let s = &self.session;
        let collected = std::mem::take(&mut *s.collected.lock().unwrap_or_else(|e| e.into_inner()));
        // SAFETY: sampling has stopped: nothing else uses the scratch.
        let labels = std::mem::take(&mut unsafe { &mut *s.scratch.get() }.labels);
        let snap = s.snapshot.swap(std::ptr::null_mut(), Ordering::AcqRel);
        // SAFETY: the last published snapshot, no longer reachable.
        let last = unsafe { Box::from_raw(snap) };
        let mut used = std::mem::take(&mut *s.retired.lock().unwrap_or_else(|e| e.into_inner()));
        used.push(last);
        // Published in order of their numbers: each is at its number.
        used.sort_by_key(|u| u.index);
        let snapshots = used.into_iter().map(|u| u.snapshot).collect();
        Finished {
            collected,
            labels,
            snapshots,
            handler_runs: s.handler_runs.load(Ordering::Relaxed),
            dropped: s.dropped.load(Ordering::Relaxed),
            outside: s.outside.load(Ordering::Relaxed),
            duration_ns,
            started: self.started,
        }
    }
}
