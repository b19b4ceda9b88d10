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
//! With every thread sampled, each other thread of the process gets a timer
//! of its own on its own CPU clock, sending the same signal to it alone
//! (see `threads`): no thread is stopped for another's sample. Their
//! samples are taken by the same handler, into one of a few sampling slots
//! (buffers and a ring each, taken by whichever thread's handler finds one
//! free; a sample that finds none is counted as dropped).
//!
//! Stopping deletes the timers, blocks the signal and consumes one still
//! pending on the main thread, ignores the signal for a moment (which
//! discards one pending on any other thread), waits until no handler runs,
//! and restores the signal's previous disposition. A `fork()` child (parallel::mclapply) has no timer (POSIX
//! timers are not inherited) and, through a `pthread_atfork` handler, no
//! active session either, so it is never sampled. The child's copy of the
//! parent's `Running` refers to a timer and a collector thread that do not
//! exist there: `Running::inherited` tells, and `Running::forget` lets go of
//! it without touching them, so the child can start a session of its own.

use super::super::collect::{AllocFigures, Collected, Finished, Thread};
use super::super::compose::{self as sampler, RFacts, Scratch};
use super::super::record::{self, Entry, Flags, PREFIX};
use super::clock::{self, now_ns, Clock, MIN_INTERVAL_NS};
use super::ring::Ring;
use super::threads::{self, Threads};
use super::worker::{self, WorkerScratch};
use crate::error::{Error, Result};
use crate::unwind::walk::Snapshot;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Ring words (1 MiB): seconds of samples at 1 ms if the collector is slow
/// to run, and small enough to stay in the CPU's caches.
const RING_WORDS: usize = 1 << 17;
/// Sampling slots for the other threads, and each one's ring words.
const SLOTS: usize = 4;
const SLOT_RING_WORDS: usize = 1 << 16;
/// How often the collector looks for new threads, empties the rings and
/// checks the loaded modules.
const POLL: std::time::Duration = std::time::Duration::from_millis(2);

/// What the handler of another thread's sample takes: buffers and a ring,
/// used by one handler at a time (`busy`).
struct Slot {
    busy: AtomicBool,
    scratch: UnsafeCell<WorkerScratch>,
    ring: Ring,
}

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
/// [`UNCERTAIN`]: super::super::compose::UNCERTAIN
pub struct Session {
    facts: RFacts,
    ring: Ring,
    /// Used by the handler only (it never runs twice at once).
    scratch: UnsafeCell<Option<Box<Scratch>>>,
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
    main_tid: i32,
    pid: libc::pid_t,
    signal: libc::c_int,
    /// Sampling slots of the other threads (empty: R's main thread only).
    slots: Box<[Slot]>,
    /// The number of R's main thread's last sample, and the address of R's
    /// innermost context record then.
    main_seq: AtomicU64,
    main_context: AtomicUsize,
    /// Another thread asked the main thread for a sample (not yet taken),
    /// and when the last such request was made.
    requested: AtomicBool,
    requested_ns: AtomicU64,
    interval_ns: u64,
    /// Other threads' samples lost (no free slot, or a full ring).
    pub thread_dropped: AtomicU64,
    pub handler_runs: AtomicU64,
    pub dropped: AtomicU64,
    /// Timer intervals whose sample was outside the profiled code.
    pub outside: AtomicU64,
    stop: AtomicBool,
    collected: Mutex<Collected>,
    /// A memory profile: the mean bytes between samples (None: a timer
    /// samples), the last allocation sample's number, and the code of
    /// winch's own library (the hook's frames, left out of samples).
    alloc: Option<u64>,
    alloc_seq: AtomicU64,
    own_code: (usize, usize),
    /// A memory profile's sample of R's main thread is using `scratch`:
    /// the signal handler (a reference sample another thread asked for)
    /// leaves it alone then.
    main_busy: AtomicBool,
}

// SAFETY: `scratch` is touched only by the signal handler on the main
// thread, never concurrently (the signal is blocked in its own handler),
// and by `finish` after sampling stopped (no handler runs: RUNNING); a
// slot's scratch only by the handler that set its `busy` flag; everything
// else is atomics, mutexes or immutable.
unsafe impl Sync for Session {}
// SAFETY: as above; the raw pointers are owned snapshots.
unsafe impl Send for Session {}

static ACTIVE: AtomicPtr<Session> = AtomicPtr::new(std::ptr::null_mut());
/// Handlers running now, on any thread.
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// A started session, owned by the thread that started it. (A memory
/// profile has no signal and no timer: `signal` 0.)
pub struct Running {
    session: Arc<Session>,
    signal: libc::c_int,
    timer: libc::timer_t,
    old_action: libc::sigaction,
    collector: Option<std::thread::JoinHandle<Vec<Thread>>>,
    /// R's main thread's CPU clock at the start.
    main_cpu_start: u64,
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
    ACTIVE.store(std::ptr::null_mut(), Ordering::SeqCst);
    super::spawn::forget_in_child();
    super::alloc::hook::forget_in_child();
    // The only thread of the child is the one that called fork(), which was
    // not in the handler (handlers running on other threads of the parent
    // do not exist here): stopping a session of the child's own must not
    // wait for them.
    RUNNING.store(0, Ordering::SeqCst);
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

/// The signal handler: one sample of the thread it runs on.
extern "C" fn on_signal(_sig: libc::c_int, info: *mut libc::siginfo_t, uctx: *mut libc::c_void) {
    // SAFETY: errno is thread-local; saved and restored around the sample.
    let saved_errno = unsafe { *libc::__errno_location() };
    let start = now_ns();
    // Counted before ACTIVE is read, and `stop` clears ACTIVE before it
    // waits for the count to fall to 0 (both SeqCst): a handler either sees
    // no session or is waited for.
    RUNNING.fetch_add(1, Ordering::SeqCst);
    let p = ACTIVE.load(Ordering::SeqCst);
    // SAFETY: a non-null ACTIVE points to a session kept alive until `stop`
    // has seen RUNNING at 0 after clearing ACTIVE.
    if let Some(s) = unsafe { p.as_ref() } {
        // SAFETY: `info` and `uctx` are the kernel's for this signal.
        unsafe { take_sample(s, info, uctx, start) };
    }
    RUNNING.fetch_sub(1, Ordering::SeqCst);
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved_errno };
}

/// # Safety
/// In the signal handler, for signal `info`/`uctx`.
unsafe fn take_sample(s: &Session, info: *mut libc::siginfo_t, uctx: *mut libc::c_void, start: u64) {
    // SAFETY: pthread_self reads the thread pointer; pthread_equal compares.
    let main = unsafe { libc::pthread_equal(libc::pthread_self(), s.main_thread) } != 0;
    if !main && s.slots.is_empty() {
        return; // only R's main thread is sampled
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
    // SAFETY: `info` points to a siginfo_t.
    let timer = unsafe { (*info).si_code } == libc::SI_TIMER;
    // Timer expirations while this signal was pending (si_overrun: the int
    // after si_tid at the start of the union, for SI_TIMER signals).
    // SAFETY: `info` points to a siginfo_t; offsets of the timer fields.
    let overrun = unsafe {
        if timer {
            std::ptr::read_unaligned((info as *const u8).add(20) as *const libc::c_int).max(0) as u64
        } else {
            0
        }
    };
    // SAFETY: the snapshot pointer is a live Box owned by the session.
    let Some(used) = (unsafe { s.snapshot.load(Ordering::Acquire).as_ref() }) else { return };
    let snap = (&*used.snapshot, used.index);
    let context = crate::memory::Memory::word(&s.facts.ranges, s.facts.base.global_context).unwrap_or(0);
    s.handler_runs.fetch_add(1, Ordering::Relaxed);
    if main {
        // A signal from another thread's handler (not the timer) asks for a
        // sample to show that thread's samples under: it counts no time.
        let flags = if timer { Flags::NONE } else { Flags::REFERENCE };
        if !timer {
            s.requested.store(false, Ordering::Release);
        }
        if s.main_busy.load(Ordering::Acquire) {
            return; // inside an allocation's sample (see `main_busy`)
        }
        let seq = s.main_seq.load(Ordering::Relaxed) + 1;
        // SAFETY: only the main thread's handler uses `scratch` while the
        // session runs, and it does not nest (the signal is blocked in it).
        let Some(scratch) = (unsafe { &mut *s.scratch.get() }).as_deref_mut() else { return };
        let out = super::sample::sample(
            regs,
            (1 + overrun, flags),
            start,
            now_ns,
            snap,
            (seq, context as u64),
            &s.facts,
            scratch,
            &s.ring,
        );
        s.main_context.store(context, Ordering::Release);
        s.main_seq.store(seq, Ordering::Release);
        if out.outside {
            s.outside.fetch_add(1 + overrun, Ordering::Relaxed);
        } else if !out.pushed && timer {
            s.dropped.fetch_add(1 + overrun, Ordering::Relaxed);
        }
        return;
    }
    let link = worker_link(s, context, start);
    let Some(slot) = s.slots.iter().find(|x| !x.busy.swap(true, Ordering::Acquire)) else {
        s.thread_dropped.fetch_add(1 + overrun, Ordering::Relaxed);
        return;
    };
    // SAFETY: the slot is ours until `busy` is cleared.
    let scratch = unsafe { &mut *slot.scratch.get() };
    let tid = clock::gettid();
    let out = worker::sample_worker(
        regs,
        (1 + overrun, Flags::NONE, &|_| false, &[]),
        start,
        now_ns,
        snap,
        (s.pid, tid),
        (link, context as u64),
        scratch,
        &slot.ring,
    );
    slot.busy.store(false, Ordering::Release);
    if !out.pushed {
        s.thread_dropped.fetch_add(1 + overrun, Ordering::Relaxed);
    }
}

/// The number of R's main thread's sample another thread's sample, taken
/// while R's innermost context record was `context`, is to be shown under:
/// the main thread's last sample if R's innermost context record is still
/// the one it saw; otherwise the next, which it asks for (at most one
/// request in flight, at most one an interval) when the main thread's
/// timer may not fire soon (it counts CPU time, and the main thread may be
/// waiting for this one; in a memory profile it has no timer).
fn worker_link(s: &Session, context: usize, start: u64) -> u64 {
    let seq = s.main_seq.load(Ordering::Acquire);
    if s.main_context.load(Ordering::Acquire) == context {
        return seq;
    }
    let every = if s.alloc.is_some() { MIN_INTERVAL_NS } else { s.interval_ns };
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
        // Every GOT hook family installed (the allocation or thread hooks
        // among them) hooks the new modules.
        crate::got::hookset::modules_changed(&snapshot.map);
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
        let heads: Vec<usize> = self.slots.iter().map(|x| x.ring.head()).collect();
        let generation = crate::modules::loader_generation();
        let certain: Vec<bool> = self
            .generations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|&(g, exact)| exact && g == generation)
            .collect();
        let mut c = self.collected.lock().unwrap_or_else(|e| e.into_inner());
        let creators = if self.slots.is_empty() { Vec::new() } else { super::spawn::creators() };
        let creator = |tid: u32| creators.iter().find(|&&(t, _)| t as u32 == tid).map(|&(_, c)| c as u64);
        let mut absorb = |rec: &[u64]| {
            let index = record::origin_of(rec).map(|o| o.snapshot);
            c.absorb_with(rec, index.is_none_or(|i| certain.get(i as usize) != Some(&true)), &creator);
        };
        self.ring.drain_to(head, buf, &mut absorb);
        for (slot, &h) in self.slots.iter().zip(&heads) {
            slot.ring.drain_to(h, buf, &mut absorb);
        }
        c.settle_pending(false);
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

/// The spare snapshot, if it is still current.
fn spare_snapshot() -> Option<Box<Snapshot>> {
    let spare = SPARE.lock().unwrap_or_else(|e| e.into_inner()).take()?;
    (spare.exact && spare.generation == crate::modules::loader_generation()).then_some(spare)
}

/// A session not yet published, with its first snapshot (published by
/// the session: freed by the caller only if the session never runs).
fn new_session(
    facts: RFacts,
    interpreter_addr: usize,
    interval_ns: u64,
    all_threads: bool,
    signal: libc::c_int,
    alloc: Option<u64>,
) -> (Arc<Session>, *mut Used) {
    let first = spare_snapshot().unwrap_or_else(|| Box::new(Snapshot::take(interpreter_addr)));
    let own_code = own_code(&first.map);
    let generations = Mutex::new(vec![(first.generation, first.exact)]);
    let snapshot = Box::into_raw(Box::new(Used { snapshot: first, index: 0 }));
    // Other threads' stacks are read through the kernel (see `worker`).
    let all_threads = all_threads && crate::memory::available();
    let slots: Box<[Slot]> = if all_threads {
        (0..SLOTS)
            .map(|_| Slot {
                busy: AtomicBool::new(false),
                scratch: UnsafeCell::new(WorkerScratch::default()),
                ring: Ring::new(SLOT_RING_WORDS),
            })
            .collect()
    } else {
        Box::new([])
    };
    let session = Arc::new(Session {
        facts,
        ring: Ring::new(RING_WORDS),
        scratch: UnsafeCell::new(Some(spare_scratch())),
        snapshot: AtomicPtr::new(snapshot),
        retired: Mutex::new(Vec::new()),
        generations,
        interpreter_addr,
        // SAFETY: the calling thread's own id.
        main_thread: unsafe { libc::pthread_self() },
        main_tid: clock::gettid(),
        // SAFETY: getpid has no preconditions.
        pid: unsafe { libc::getpid() },
        signal,
        slots,
        main_seq: AtomicU64::new(0),
        main_context: AtomicUsize::new(0),
        requested: AtomicBool::new(false),
        requested_ns: AtomicU64::new(0),
        interval_ns,
        thread_dropped: AtomicU64::new(0),
        handler_runs: AtomicU64::new(0),
        dropped: AtomicU64::new(0),
        outside: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        collected: Mutex::new(Collected::default()),
        alloc,
        alloc_seq: AtomicU64::new(0),
        own_code,
        main_busy: AtomicBool::new(false),
    });
    (session, snapshot)
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

/// Starts sampling R's main thread (the calling thread) every
/// `interval_ns` of `clock`, and with `all_threads` every other thread of
/// the process every `interval_ns` of its own clock.
pub fn start(
    facts: RFacts,
    interpreter_addr: usize,
    clock: Clock,
    interval_ns: u64,
    all_threads: bool,
) -> Result<Running> {
    if interval_ns < MIN_INTERVAL_NS {
        return Err(Error::BadArgument(format!(
            "the sampling interval must be at least {} ms",
            MIN_INTERVAL_NS as f64 / 1e6
        )));
    }
    let signal = ready_to_start()?;
    let (session, snapshot) = new_session(facts, interpreter_addr, interval_ns, all_threads, signal, None);
    let main_tid = session.main_tid;
    let main_cpu_start = clock::read_clock(clock::cpu_clock(main_tid)).unwrap_or(0);
    ACTIVE.store(Arc::as_ptr(&session) as *mut Session, Ordering::SeqCst);

    // The handler, then the timer.
    let Some(old_action) = install_handler(signal) else {
        ACTIVE.store(std::ptr::null_mut(), Ordering::SeqCst);
        // SAFETY: never published to the handler (ACTIVE cleared, no timer).
        drop(unsafe { Box::from_raw(snapshot) });
        return Err(Error::Unavailable("could not install the sampling signal's handler".into()));
    };
    let timer = match create_timer(signal, clock, interval_ns) {
        Ok(t) => t,
        Err(e) => {
            ACTIVE.store(std::ptr::null_mut(), Ordering::SeqCst);
            // SAFETY: restores the disposition saved above.
            unsafe { libc::sigaction(signal, &old_action, std::ptr::null_mut()) };
            // SAFETY: no timer exists, ACTIVE is cleared.
            drop(unsafe { Box::from_raw(snapshot) });
            return Err(e);
        }
    };
    // Threads started from now on arm their own timers as they start.
    if all_threads {
        super::spawn::install(signal, clock, interval_ns, facts.base.global_context, main_tid);
    }
    let collector = spawn_collector(&session, clock, interval_ns);
    Ok(Running {
        session,
        signal,
        timer,
        old_action,
        collector,
        main_cpu_start,
        clock,
        interval_ns,
        started: std::time::SystemTime::now(),
        started_mono: std::time::Instant::now(),
        // SAFETY: getpid has no preconditions.
        pid: unsafe { libc::getpid() },
    })
}

/// The collector thread: empties the rings every poll, follows modules
/// loaded and unloaded, and (with timers for every thread) finds new
/// threads; returns what it knows of them when the session stops.
fn spawn_collector(
    session: &Arc<Session>,
    clock: Clock,
    interval_ns: u64,
) -> Option<std::thread::JoinHandle<Vec<Thread>>> {
    let s = session.clone();
    std::thread::Builder::new()
        .name("winch-profile".into())
        .spawn(move || {
            crate::stack::block_signals();
            let mut buf = Vec::new();
            let mut threads = (!s.slots.is_empty() && s.alloc.is_none())
                .then(|| Threads::new(s.signal, clock, interval_ns, vec![s.main_tid, clock::gettid()]));
            while !s.stop.load(Ordering::Acquire) {
                if let Some(t) = threads.as_mut() {
                    t.poll();
                }
                let generation = s.collect(&mut buf);
                s.refresh(generation);
                std::thread::sleep(POLL);
            }
            let found = threads.map(Threads::stop).unwrap_or_default();
            s.collect(&mut buf);
            found
        })
        .ok()
}

/// Checks that no profile (winch's or R's) runs, and picks the session's
/// signal.
fn ready_to_start() -> Result<libc::c_int> {
    if active() {
        return Err(Error::Busy("a winch profile is already running".into()));
    }
    if rprof_running() {
        return Err(Error::Busy("R's profiler is running: stop it with `Rprof(NULL)` first".into()));
    }
    let signal = free_signal()
        .ok_or_else(|| Error::Unavailable("no free real-time signal for the sampling timer".into()))?;
    register_fork_handler();
    Ok(signal)
}

/// Starts a memory profile: allocations of every thread (or of R's main
/// thread) sampled, one per `mean` bytes on average (see `alloc`), each
/// with its stack taken as a CPU sample's is, on the allocating thread.
pub fn start_alloc(facts: RFacts, interpreter_addr: usize, mean: u64, all_threads: bool) -> Result<Running> {
    if mean == 0 {
        return Err(Error::BadArgument("the mean bytes between samples must be positive".into()));
    }
    // (The signal: for the reference samples of R's main thread that other
    // threads' allocations ask for; no timer sends it.)
    let signal = ready_to_start()?;
    let (session, snapshot) = new_session(facts, interpreter_addr, mean, all_threads, signal, Some(mean));
    ACTIVE.store(Arc::as_ptr(&session) as *mut Session, Ordering::SeqCst);
    let old_action = install_handler(signal);
    let hooked = match old_action {
        Some(_) => super::alloc::hook::install(mean, alloc_sample),
        None => 0,
    };
    if hooked == 0 {
        super::alloc::hook::uninstall();
        ACTIVE.store(std::ptr::null_mut(), Ordering::SeqCst);
        while RUNNING.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
        if let Some(old) = old_action {
            // SAFETY: restores the disposition saved above (no signal was
            // asked for: nothing hooked ran).
            unsafe { libc::sigaction(signal, &old, std::ptr::null_mut()) };
        }
        // SAFETY: never published again (ACTIVE cleared, no sampler runs).
        drop(unsafe { Box::from_raw(snapshot) });
        return Err(Error::Unavailable(
            "no allocation function could be hooked in the loaded libraries".into(),
        ));
    }
    let old_action = old_action.unwrap_or_else(|| {
        // SAFETY: a zeroed sigaction is a valid value (unreachable: hooked
        // is 0 without a handler).
        unsafe { std::mem::zeroed() }
    });
    let collector = spawn_collector(&session, Clock::Cpu, mean);
    let main_cpu_start = clock::read_clock(clock::cpu_clock(session.main_tid)).unwrap_or(0);
    Ok(Running {
        session,
        signal,
        timer: std::ptr::null_mut(),
        old_action,
        collector,
        main_cpu_start,
        clock: Clock::Cpu,
        // (The mean bytes between samples: the profile's "interval".)
        interval_ns: mean,
        started: std::time::SystemTime::now(),
        started_mono: std::time::Instant::now(),
        // SAFETY: getpid has no preconditions.
        pid: unsafe { libc::getpid() },
    })
}

/// A sampled allocation of `size` bytes (the hook's `OnSample`, on the
/// allocating thread): its stack as a record; the sample's number (0: not
/// taken).
fn alloc_sample(size: usize, _block: usize) -> u64 {
    // As the signal handler: counted before ACTIVE is read (see `stop`).
    RUNNING.fetch_add(1, Ordering::SeqCst);
    let p = ACTIVE.load(Ordering::SeqCst);
    // SAFETY: a non-null ACTIVE points to a session kept alive until `stop`
    // has seen RUNNING at 0 after clearing ACTIVE.
    let n = match unsafe { p.as_ref() } {
        Some(s) if s.alloc.is_some() => take_alloc_sample(s, size),
        _ => 0,
    };
    RUNNING.fetch_sub(1, Ordering::SeqCst);
    n
}

fn take_alloc_sample(s: &Session, size: usize) -> u64 {
    let start = now_ns();
    let regs = crate::unwind::registers();
    // SAFETY: the snapshot pointer is a live Box owned by the session.
    let Some(used) = (unsafe { s.snapshot.load(Ordering::Acquire).as_ref() }) else { return 0 };
    let snap = (&*used.snapshot, used.index);
    let (lo, hi) = s.own_code;
    let own = |ip: usize| ip >= lo && ip < hi;
    let n = s.alloc_seq.fetch_add(1, Ordering::AcqRel) + 1;
    s.handler_runs.fetch_add(1, Ordering::Relaxed);
    // SAFETY: pthread_self reads the thread pointer; pthread_equal compares.
    let main = unsafe { libc::pthread_equal(libc::pthread_self(), s.main_thread) } != 0;
    if main {
        // (A reference sample another thread asks for, by signal, leaves
        // the scratch alone meanwhile.)
        s.main_busy.store(true, Ordering::Release);
        let n = take_main_alloc_sample(s, regs, snap, (n, size), start, &own);
        s.main_busy.store(false, Ordering::Release);
        return n;
    }
    if s.slots.is_empty() {
        return 0; // R's main thread only
    }
    let Some(slot) = s.slots.iter().find(|x| !x.busy.swap(true, Ordering::Acquire)) else {
        s.thread_dropped.fetch_add(1, Ordering::Relaxed);
        return 0;
    };
    // SAFETY: the slot is ours until `busy` is cleared.
    let scratch = unsafe { &mut *slot.scratch.get() };
    // Joined to R's main thread's stack as another thread's CPU sample is.
    let context = crate::memory::Memory::word(&s.facts.ranges, s.facts.base.global_context).unwrap_or(0);
    let link = worker_link(s, context, start);
    let info = record::alloc_tail(n, size as u64);
    let out = worker::sample_worker(
        regs,
        (1, Flags::ALLOC, &own, &info),
        start,
        now_ns,
        snap,
        (s.pid, clock::gettid()),
        (link, context as u64),
        scratch,
        &slot.ring,
    );
    slot.busy.store(false, Ordering::Release);
    if out.pushed {
        n
    } else {
        s.thread_dropped.fetch_add(1, Ordering::Relaxed);
        0
    }
}

/// An allocation's sample on R's main thread (number `n`, `size` bytes):
/// composed as a CPU sample is, with the allocation's number and bytes at
/// its end. Its number, or 0 if not taken.
fn take_main_alloc_sample(
    s: &Session,
    regs: (usize, usize, usize),
    snap: (&crate::unwind::walk::Snapshot, u32),
    (n, size): (u64, usize),
    start: u64,
    own: &dyn Fn(usize) -> bool,
) -> u64 {
    // SAFETY: only R's main thread uses `scratch` in a memory profile (the
    // signal handler not while `main_busy` is set), once at a time (the
    // hook does not sample inside a sample).
    let Some(scratch) = (unsafe { &mut *s.scratch.get() }).as_deref_mut() else { return 0 };
    let seq = s.main_seq.fetch_add(1, Ordering::AcqRel) + 1;
    let context = crate::memory::Memory::word(&s.facts.ranges, s.facts.base.global_context).unwrap_or(0);
    let mem = sampler::Reads { heap: &crate::memory::Objects, chain: &s.facts.ranges };
    let made = sampler::compose(regs, Flags::ALLOC, snap, (seq, context as u64), &s.facts, &mem, scratch);
    if made.outside {
        s.outside.fetch_add(1, Ordering::Relaxed);
        return 0;
    }
    let len = scratch.append(made.len, &record::alloc_tail(n, size as u64));
    let rec = scratch.record(len);
    // The hook's own frames (innermost, before any R frame) left out.
    let first =
        (PREFIX..rec.len()).find(|&k| Entry::ip_of(rec[k]).is_none_or(|ip| !own(ip))).unwrap_or(rec.len());
    rec.copy_within(first.., PREFIX);
    let len = rec.len() - (first - PREFIX);
    let spent = now_ns().saturating_sub(start);
    record::write_prefix(rec, made.prefix(1, spent));
    if !s.ring.push(&rec[..len]) {
        s.dropped.fetch_add(1, Ordering::Relaxed);
        return 0;
    }
    s.main_context.store(context, Ordering::Release);
    n
}

/// Installs `on_signal` for `signal`; the disposition it replaced.
fn install_handler(signal: libc::c_int) -> Option<libc::sigaction> {
    // SAFETY: a zeroed sigaction is a valid value to fill in.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = on_signal as *const () as usize;
    action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
    // SAFETY: an empty mask: the signal itself stays blocked in its handler.
    unsafe { libc::sigemptyset(&mut action.sa_mask) };
    // SAFETY: as above.
    let mut old_action: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: installs `on_signal`, which is async-signal-safe.
    (unsafe { libc::sigaction(signal, &action, &mut old_action) } == 0).then_some(old_action)
}

/// The main thread's timer (the calling thread's).
fn create_timer(signal: libc::c_int, clock: Clock, interval_ns: u64) -> Result<libc::timer_t> {
    let clock_id = match clock {
        Clock::Cpu => libc::CLOCK_THREAD_CPUTIME_ID,
        Clock::Elapsed => libc::CLOCK_MONOTONIC,
    };
    clock::timer(signal, clock_id, clock::gettid(), interval_ns)
        .ok_or_else(|| Error::Unavailable("could not create the sampling timer".into()))
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
        let main_cpu_ns =
            clock::read_clock(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or(0).saturating_sub(self.main_cpu_start);
        if self.session.alloc.is_some() {
            return self.stop_alloc(main_cpu_ns);
        }
        // The signal blocked on this thread, then our timer deleted:
        // blocking first keeps one generated just before from arriving with
        // the old disposition.
        let old_mask = self.block_signal();
        // SAFETY: our timer, deleted once.
        unsafe { libc::timer_delete(self.timer) };
        // New threads arm nothing from now on; those that did and the
        // collector has not taken keep no timer. The collector deletes the
        // others' timers as it ends.
        if !self.session.slots.is_empty() {
            for (_, t) in super::spawn::uninstall() {
                // SAFETY: a thread's sampling timer, deleted once.
                unsafe { libc::timer_delete(t.0) };
            }
        }
        self.session.stop.store(true, Ordering::Release);
        let threads = self.collector.take().and_then(|c| c.join().ok()).unwrap_or_default();
        ACTIVE.store(std::ptr::null_mut(), Ordering::SeqCst);
        self.quiet_signal(old_mask);
        self.finish(main_cpu_ns, threads, None)
    }

    /// Stops a memory profile: the slots get their values back, and the
    /// sampled blocks not freed are read.
    fn stop_alloc(mut self, main_cpu_ns: u64) -> Finished {
        use super::alloc::hook;
        // The signal blocked here first: a reference sample asked for from
        // now on stays pending, and is consumed below.
        let old_mask = self.block_signal();
        hook::uninstall();
        self.session.stop.store(true, Ordering::Release);
        let threads = self.collector.take().and_then(|c| c.join().ok()).unwrap_or_default();
        ACTIVE.store(std::ptr::null_mut(), Ordering::SeqCst);
        self.quiet_signal(old_mask);
        let table = hook::live();
        let figures = AllocFigures {
            mean: self.session.alloc.unwrap_or(0),
            live: table.kept().into_iter().map(|(_, n)| n).collect(),
            allocations: hook::ALLOCATIONS.load(Ordering::Acquire),
            sampled: hook::SAMPLED.load(Ordering::Acquire),
            untracked: table.lost.load(Ordering::Acquire),
        };
        self.finish(main_cpu_ns, threads, Some(figures))
    }

    /// Blocks the session's signal on this thread; the mask before.
    fn block_signal(&self) -> libc::sigset_t {
        // SAFETY: changes this thread's mask only; `set` and `old_mask` are
        // locals filled before use.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, self.signal);
            let mut old_mask: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old_mask);
            old_mask
        }
    }

    /// With sampling stopped (ACTIVE cleared, nothing sends the signal any
    /// more, the signal blocked on this thread with `old_mask` saved):
    /// discards a signal still pending, waits for handlers (and allocation
    /// samples) still running on other threads, and restores the signal's
    /// disposition and this thread's mask.
    fn quiet_signal(&self, old_mask: libc::sigset_t) {
        // SAFETY: ignoring the signal discards one still pending on any
        // thread (POSIX); one pending here is consumed all the same.
        unsafe {
            let mut ignore: libc::sigaction = std::mem::zeroed();
            ignore.sa_sigaction = libc::SIG_IGN;
            libc::sigaction(self.signal, &ignore, std::ptr::null_mut());
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, self.signal);
            let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            while libc::sigtimedwait(&set, std::ptr::null_mut(), &zero) == self.signal {}
        }
        // A handler preempted on another thread needs a core to finish.
        while RUNNING.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
        // SAFETY: restores the saved disposition and this thread's mask.
        unsafe {
            libc::sigaction(self.signal, &self.old_action, std::ptr::null_mut());
            libc::pthread_sigmask(libc::SIG_SETMASK, &old_mask, std::ptr::null_mut());
        }
    }

    /// What the stopped session collected.
    fn finish(self, main_cpu_ns: u64, threads: Vec<Thread>, alloc: Option<AllocFigures>) -> Finished {
        let mut buf = Vec::new();
        self.session.collect(&mut buf);
        self.session.collected.lock().unwrap_or_else(|e| e.into_inner()).settle_pending(true);
        let duration_ns = self.started_mono.elapsed().as_nanos() as u64;
        let s = &self.session;
        let collected = std::mem::take(&mut *s.collected.lock().unwrap_or_else(|e| e.into_inner()));
        // SAFETY: sampling has stopped: nothing else uses the scratch.
        let mut scratch = unsafe { &mut *s.scratch.get() }.take();
        let labels = scratch.as_mut().map(|s| s.take_labels()).unwrap_or_default();
        // Kept for the next session.
        *SPARE_SCRATCH.lock().unwrap_or_else(|e| e.into_inner()) = scratch;
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
            all_threads: !s.slots.is_empty(),
            threads,
            main_tid: s.main_tid,
            main_name: threads::comm(s.main_tid),
            modules_now: None,
            launch_module: launch_module(),
            main_cpu_ns,
            thread_dropped: s.thread_dropped.load(Ordering::Relaxed),
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
