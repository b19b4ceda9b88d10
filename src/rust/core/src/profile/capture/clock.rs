//! Clocks and timers of the sampled threads: what is sampled ([`Clock`]),
//! the monotonic time a handler reads, a thread's kernel id and CPU clock,
//! and the POSIX timers that send the sampling signal to one thread.
//! Everything here is async-signal-safe but [`timer`].

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

/// CLOCK_MONOTONIC in nanoseconds (async-signal-safe).
pub fn now_ns() -> u64 {
    // SAFETY: clock_gettime writes into `ts`; async-signal-safe.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The CPU clock of thread `tid` of this process: glibc's own encoding of
/// `pthread_getcpuclockid()` (a per-thread scheduler clock), for a thread
/// known only by its kernel id.
pub fn cpu_clock(tid: i32) -> libc::clockid_t {
    ((!(tid as libc::clockid_t)) << 3) | 6
}

/// A clock's reading in nanoseconds (None: the thread has ended).
pub fn read_clock(clock: libc::clockid_t) -> Option<u64> {
    // SAFETY: clock_gettime writes into `ts`.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    (unsafe { libc::clock_gettime(clock, &mut ts) } == 0)
        .then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// The calling thread's kernel id.
pub fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// A timer that sends `signal` to thread `tid` every `interval_ns` of
/// `clock`.
pub fn timer(
    signal: libc::c_int,
    clock: libc::clockid_t,
    tid: i32,
    interval_ns: u64,
) -> Option<libc::timer_t> {
    // SAFETY: a zeroed sigevent is a valid value to fill in.
    let mut ev: libc::sigevent = unsafe { std::mem::zeroed() };
    ev.sigev_notify = libc::SIGEV_THREAD_ID;
    ev.sigev_signo = signal;
    ev.sigev_notify_thread_id = tid;
    // SAFETY: a zeroed timer_t is filled in by timer_create.
    let mut timer: libc::timer_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid clock, event and output pointer.
    if unsafe { libc::timer_create(clock, &mut ev, &mut timer) } != 0 {
        return None;
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
        return None;
    }
    Some(timer)
}
