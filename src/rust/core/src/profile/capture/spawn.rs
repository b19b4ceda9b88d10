//! Threads started while a profile of every thread runs, seen from their
//! first instruction: every loaded module's GOT slots of `pthread_create`
//! point to [`hooked_create`] for the profile's duration (a family of the
//! GOT hook set, `got::hookset`, as throw capture's is), which starts the
//! thread in [`launch`]; there the new
//! thread arms its own sampling timer before its start routine runs, and
//! hands the timer to the collector (see `threads`). Polling
//! `/proc/self/task` finds the threads started some other way (`clone`
//! directly, a module loaded after the last scan) within one poll. Each
//! thread started while R's main thread is in an R call, by it or by a
//! thread started so, records that call (R's innermost context record
//! then): `collect` and `build` show its samples under that call.
//!
//! The registry of new threads is locked only by ordinary code (a new
//! thread's start, the collector, the session's start and stop), never in
//! a signal handler. A timer is made only while the registry is open, under
//! its lock, and the session's stop closes it and deletes the timers it
//! still holds: no timer outlives the session. In a `fork()` child nothing
//! is hooked any more (`forget_in_child`), so a child never takes the lock
//! a parent's thread may have held.

use super::clock::{self, Clock};
use crate::got::hookset::{Family, Find, Hook, Options};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

type StartRoutine = unsafe extern "C-unwind" fn(*mut libc::c_void) -> *mut libc::c_void;
type Create = unsafe extern "C" fn(
    *mut libc::pthread_t,
    *const libc::pthread_attr_t,
    StartRoutine,
    *mut libc::c_void,
) -> libc::c_int;

/// The real `pthread_create`.
static REAL: AtomicUsize = AtomicUsize::new(0);

/// `pthread_create` of glibc 2.34 on (in libc) and of older glibcs (in
/// libpthread): modules built against either call it.
static HOOKS: [Hook; 2] = [
    Hook::new("pthread_create", "GLIBC_2.34", hooked_create as *const (), &REAL),
    Hook::new("pthread_create", "GLIBC_2.2.5", hooked_create as *const (), &REAL),
];
static FAMILY: Family = Family::new("new threads", &HOOKS, Find::Global);
/// Whether new threads arm a timer (a profile of every thread runs).
static ON: AtomicBool = AtomicBool::new(false);
/// Whether this process installed the hook (and must take it out).
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// Where R keeps its innermost context record (`&R_GlobalContext`), and R's
/// main thread's kernel id: a thread started by R's main thread remembers
/// the R call running then.
static CONTEXT_ADDR: AtomicUsize = AtomicUsize::new(0);
static MAIN_TID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
/// Which profile hooked the threads started since (one more each
/// `install`): a thread started by a thread of an earlier profile does not
/// take its starter's R call.
static GENERATION: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The R call (context record) that started the calling thread, and
    /// the profile it was started in (0: not known): the threads it starts
    /// take it (a pool created by a thread the call started is the call's
    /// work too).
    static STARTED_BY: std::cell::Cell<(usize, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// When R's main thread last started a thread (`clock::now_ns`): a sample
/// of R's main thread taken before it cannot show where that thread was
/// started (see `handler::link_to_main`).
static LAST_START_NS: AtomicU64 = AtomicU64::new(0);

/// When R's main thread last started a thread while hooked (0: never);
/// async-signal-safe.
pub fn last_start_ns() -> u64 {
    LAST_START_NS.load(Ordering::Acquire)
}

/// A timer id, handed between threads.
#[derive(Debug)]
pub struct Timer(pub libc::timer_t);
// SAFETY: a kernel timer id, valid on any thread of the process.
unsafe impl Send for Timer {}

struct Registry {
    /// The running session's signal, clock and interval (None: closed).
    open: Option<(libc::c_int, Clock, u64)>,
    /// Threads started since the collector last looked, with their timers.
    new: Vec<(i32, Timer)>,
    /// Threads started while R's main thread was in an R call, by it or by
    /// a thread started so, with R's innermost context record then (the R
    /// call that started them).
    creators: Vec<(i32, usize)>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry { open: None, new: Vec::new(), creators: Vec::new() });

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

struct Launch {
    start: StartRoutine,
    arg: *mut libc::c_void,
    /// R's innermost context record when R's main thread started it, or
    /// its starter's (0: not known).
    creator: usize,
    /// The profile it was started in.
    generation: u64,
}

/// The R call a thread started by another thread takes: its starter's,
/// `(record, generation)`, if started in the running profile (`now`).
fn inherited(starter: (usize, u64), now: u64) -> usize {
    let (record, generation) = starter;
    if generation == now {
        record
    } else {
        0
    }
}

/// What modules call instead of `pthread_create` while hooked.
///
/// # Safety
/// The contract of `pthread_create`.
unsafe extern "C" fn hooked_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: StartRoutine,
    arg: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: REAL holds the real pthread_create before any slot points
    // here (filled by the hook set before it rewrites a slot, never
    // cleared).
    let real: Create = unsafe { std::mem::transmute::<usize, Create>(REAL.load(Ordering::Acquire)) };
    if !ON.load(Ordering::Acquire) {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real(thread, attr, start, arg) };
    }
    let context = CONTEXT_ADDR.load(Ordering::Acquire);
    let generation = GENERATION.load(Ordering::Acquire);
    let creator = if clock::gettid() == MAIN_TID.load(Ordering::Acquire) {
        // `&R_GlobalContext`, read on R's main thread, which alone writes it.
        let record =
            if context != 0 { crate::memory::Memory::word(&crate::memory::Own, context) } else { None };
        if record.is_some_and(|r| r != 0) {
            LAST_START_NS.store(clock::now_ns(), Ordering::Release);
        }
        record.unwrap_or(0)
    } else {
        // Another thread: the call that started it, if this profile's.
        inherited(STARTED_BY.with(|c| c.get()), generation)
    };
    let launch = Box::into_raw(Box::new(Launch { start, arg, creator, generation }));
    // SAFETY: `launch` runs `start(arg)` on the new thread and owns `launch`.
    let rc = unsafe { real(thread, attr, launch_thread, launch as *mut libc::c_void) };
    if rc != 0 {
        // SAFETY: no thread was started: the box is still ours.
        drop(unsafe { Box::from_raw(launch) });
    }
    rc
}

/// A new thread's start: arms its timer, then runs its start routine.
/// `C-unwind`, and nothing to drop while the routine runs, so that a
/// `pthread_exit()` or a cancellation (forced unwinding) passes through.
unsafe extern "C-unwind" fn launch_thread(p: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: `p` is the box `hooked_create` made for this thread.
    let Launch { start, arg, creator, generation } = *unsafe { Box::from_raw(p as *mut Launch) };
    STARTED_BY.with(|c| c.set((creator, generation)));
    if ON.load(Ordering::Acquire) {
        arm_self(creator);
    }
    // SAFETY: the routine and argument the creator gave.
    unsafe { start(arg) }
}

/// An address inside the function new threads start in while hooked (for
/// leaving its frame out of their stacks: it is thread-start plumbing).
pub fn launch_address() -> usize {
    launch_thread as StartRoutine as usize
}

/// Gives the calling (new) thread a sampling timer, if the registry is
/// open, and records it for the collector.
fn arm_self(creator: usize) {
    let tid = clock::gettid();
    let mut r = registry();
    let Some((signal, clock, interval_ns)) = r.open else { return };
    if creator != 0 {
        r.creators.push((tid, creator));
    }
    let clock_id = match clock {
        Clock::Cpu => libc::CLOCK_THREAD_CPUTIME_ID,
        Clock::Elapsed => libc::CLOCK_MONOTONIC,
    };
    if let Some(t) = clock::timer(signal, clock_id, tid, interval_ns) {
        r.new.push((tid, Timer(t)));
    }
}

/// Hooks `pthread_create` in every loaded module (the hook set's rule:
/// not winch's own, not the C library's) and opens the registry. Returns
/// the slots patched. `context_addr` is `&R_GlobalContext`, `main_tid` R's
/// main thread's kernel id. Modules loaded later are hooked when the
/// collector (or anyone) tells the hook set (`hookset::modules_changed`).
pub fn install(
    signal: libc::c_int,
    clock: Clock,
    interval_ns: u64,
    context_addr: usize,
    main_tid: i32,
) -> usize {
    CONTEXT_ADDR.store(context_addr, Ordering::Release);
    MAIN_TID.store(main_tid, Ordering::Release);
    GENERATION.fetch_add(1, Ordering::AcqRel);
    FAMILY.resolve();
    if REAL.load(Ordering::Acquire) == 0 {
        return 0;
    }
    // In a fork() child, a lock may be held by a thread of the parent that
    // does not exist here: then threads are found by listing only.
    let Ok(mut r) = REGISTRY.try_lock() else { return 0 };
    let open = move || {
        r.open = Some((signal, clock, interval_ns));
        r.new.clear();
        r.creators.clear();
        drop(r);
        INSTALLED.store(true, Ordering::Release);
        ON.store(true, Ordering::Release);
    };
    FAMILY.try_install(Options::default(), open).unwrap_or(0)
}

/// The R call (its context record) that started each thread R's main
/// thread started during the profile, directly or through threads it
/// started, by kernel id.
pub fn creators() -> Vec<(i32, usize)> {
    registry().creators.clone()
}

/// The threads started since the last call, with their timers.
pub fn take_new() -> Vec<(i32, Timer)> {
    std::mem::take(&mut registry().new)
}

/// Gives the slots back their values and closes the registry: returns the
/// timers of threads the collector has not taken yet, to delete.
pub fn uninstall() -> Vec<(i32, Timer)> {
    ON.store(false, Ordering::Release);
    if !INSTALLED.swap(false, Ordering::AcqRel) {
        return Vec::new();
    }
    FAMILY.uninstall();
    let mut r = registry();
    r.open = None;
    std::mem::take(&mut r.new)
}

/// In a `fork()` child: new threads arm nothing (the child's slots still
/// point to the hook, which then only calls the real function).
pub fn forget_in_child() {
    ON.store(false, Ordering::Release);
    INSTALLED.store(false, Ordering::Release);
    FAMILY.forget_in_child();
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_thread_takes_its_starters_call_only_within_the_same_profile() {
        assert_eq!(inherited((0x7000, 3), 3), 0x7000);
        assert_eq!(inherited((0x7000, 2), 3), 0, "started in an earlier profile");
        assert_eq!(inherited((0, 3), 3), 0, "the starter's call not known");
    }

    #[test]
    fn threads_started_through_the_hook_run_and_arm_a_timer() {
        // The hook function itself, called as a module's slot would.
        FAMILY.resolve();
        assert_eq!(REAL.load(Ordering::Acquire), crate::got::versioned_symbol("pthread_create", "").unwrap());
        {
            let mut r = registry();
            // A signal nobody sends; a timer that never fires in the test.
            r.open = Some((libc::SIGRTMAX(), Clock::Cpu, 3_600_000_000_000));
            r.new.clear();
        }
        ON.store(true, Ordering::Release);
        unsafe extern "C-unwind" fn body(arg: *mut libc::c_void) -> *mut libc::c_void {
            // SAFETY: the test passes a pointer to an i32.
            unsafe { *(arg as *mut i32) = super::clock::gettid() };
            arg
        }
        let mut tid: i32 = 0;
        let mut t: libc::pthread_t = 0;
        // SAFETY: a thread running `body` on `tid`, joined below.
        let rc = unsafe {
            hooked_create(&mut t, std::ptr::null(), body, &mut tid as *mut i32 as *mut libc::c_void)
        };
        assert_eq!(rc, 0);
        let mut ret: *mut libc::c_void = std::ptr::null_mut();
        // SAFETY: the thread just started.
        unsafe { libc::pthread_join(t, &mut ret) };
        assert_eq!(ret, &mut tid as *mut i32 as *mut libc::c_void, "the routine's value comes back");
        ON.store(false, Ordering::Release);
        INSTALLED.store(true, Ordering::Release);
        let new = uninstall();
        assert_eq!(new.iter().map(|(t, _)| *t).collect::<Vec<_>>(), vec![tid]);
        for (_, timer) in new {
            // SAFETY: the timer made for the thread, deleted once.
            unsafe { libc::timer_delete(timer.0) };
        }
        assert!(registry().open.is_none(), "closed: nothing arms a timer any more");
    }
}
