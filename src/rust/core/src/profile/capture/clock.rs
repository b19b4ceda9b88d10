//! Clocks and timers of the sampled threads: what is sampled ([`Clock`]),
//! the monotonic time a handler reads, a thread's kernel id and CPU clock,
//! and the POSIX timers that send the sampling signal to one thread.
//! Everything here is async-signal-safe but [`timer`] and [`watch`].

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

/// The resolution of clock `clock` in nanoseconds (0 if unknown).
/// Async-signal-safe.
pub fn resolution_ns(clock: libc::clockid_t) -> u64 {
    // SAFETY: a zeroed timespec is a valid value for the kernel to fill.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: clock_getres writes into `ts`.
    if unsafe { libc::clock_getres(clock, &mut ts) } != 0 {
        return 0;
    }
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
    let timer = create(signal, clock, tid, 0)?;
    if !set(timer, interval_ns, interval_ns) {
        // SAFETY: deletes the timer just created.
        unsafe { libc::timer_delete(timer) };
        return None;
    }
    Some(timer)
}

/// What a watch timer's signal carries (its `si_value`), which tells it
/// from the sampling timer's (whose value is 0).
pub const WATCH: i32 = 0x5749_4e57;

/// A timer that sends `signal` to thread `tid` once, `ns` of monotonic
/// time after each [`arm_once`], carrying [`WATCH`]: a thread's watch,
/// which takes a sample where the thread runs (see `watches`, and
/// `children` for a forked child's). Created disarmed.
pub fn watch(signal: libc::c_int, tid: i32) -> Option<libc::timer_t> {
    create(signal, libc::CLOCK_MONOTONIC, tid, WATCH)
}

/// (Re)arms `timer` to fire once, `ns` from now. Async-signal-safe.
pub fn arm_once(timer: libc::timer_t, ns: u64) -> bool {
    set(timer, ns, 0)
}

fn create(signal: libc::c_int, clock: libc::clockid_t, tid: i32, value: i32) -> Option<libc::timer_t> {
    // SAFETY: a zeroed sigevent is a valid value to fill in.
    let mut ev: libc::sigevent = unsafe { std::mem::zeroed() };
    ev.sigev_notify = libc::SIGEV_THREAD_ID;
    ev.sigev_signo = signal;
    ev.sigev_notify_thread_id = tid;
    ev.sigev_value = libc::sigval { sival_ptr: value as usize as *mut libc::c_void };
    // SAFETY: a zeroed timer_t is filled in by timer_create.
    let mut timer: libc::timer_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid clock, event and output pointer.
    (unsafe { libc::timer_create(clock, &mut ev, &mut timer) } == 0).then_some(timer)
}

/// Arms `timer` to fire `first_ns` from now, then every `every_ns` (0:
/// once).
fn set(timer: libc::timer_t, first_ns: u64, every_ns: u64) -> bool {
    let ts =
        |ns: u64| libc::timespec { tv_sec: (ns / 1_000_000_000) as _, tv_nsec: (ns % 1_000_000_000) as _ };
    let spec = libc::itimerspec { it_interval: ts(every_ns), it_value: ts(first_ns) };
    // SAFETY: arms a timer this process created and has not deleted.
    unsafe { libc::timer_settime(timer, 0, &spec, std::ptr::null_mut()) == 0 }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The next `signal` (blocked) within `ms`: its code and value.
    fn wait(signal: libc::c_int, ms: i64) -> Option<(i32, i32)> {
        // SAFETY: a set built from an empty one; sigtimedwait fills `info`.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, signal);
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let timeout = libc::timespec { tv_sec: 0, tv_nsec: ms * 1_000_000 };
            (libc::sigtimedwait(&set, &mut info, &timeout) == signal).then(|| {
                (
                    info.si_code,
                    std::ptr::read_unaligned((&info as *const _ as *const u8).add(24) as *const i32),
                )
            })
        }
    }

    #[test]
    fn a_watch_fires_once_per_arming_with_its_value() {
        let signal = libc::SIGRTMIN() + 7;
        // Blocked on this test's thread only; the timers send it there.
        super::super::signal::block(signal);
        let w = watch(signal, gettid()).unwrap();
        assert_eq!(wait(signal, 30), None, "created disarmed");
        assert!(arm_once(w, 2_000_000));
        assert_eq!(wait(signal, 200), Some((libc::SI_TIMER, WATCH)));
        assert_eq!(wait(signal, 30), None, "once per arming");
        // Re-armed before it fires: it fires later, once.
        assert!(arm_once(w, 40_000_000));
        assert!(arm_once(w, 5_000_000));
        assert_eq!(wait(signal, 200), Some((libc::SI_TIMER, WATCH)));
        assert_eq!(wait(signal, 60), None);
        // A sampling timer's signal carries 0.
        let t = timer(signal, libc::CLOCK_MONOTONIC, gettid(), 1_000_000).unwrap();
        assert_eq!(wait(signal, 200), Some((libc::SI_TIMER, 0)));
        // SAFETY: the timers made here, deleted once; then nothing pending
        // is left for another test (the signal is blocked on this thread).
        unsafe {
            libc::timer_delete(t);
            libc::timer_delete(w);
        }
        while wait(signal, 0).is_some() {}
    }
}
