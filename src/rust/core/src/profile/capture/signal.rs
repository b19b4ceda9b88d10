//! The sampling signal: a real-time signal nobody else handles, its
//! handler installed for the session and its old disposition restored
//! after it, with no signal lost or delivered to the wrong handler.
//!
//! Stopping blocks the signal on the stopping thread, ignores it for a
//! moment (which discards one pending on any other thread), consumes one
//! still pending on the stopping thread, waits until no handler runs, and
//! restores the old disposition and the thread's mask.

use super::active::Active;

/// A real-time signal nobody handles: the highest one whose disposition is
/// the default.
pub fn free_signal() -> Option<libc::c_int> {
    let (lo, hi) = (libc::SIGRTMIN(), libc::SIGRTMAX());
    (lo..=hi).rev().find(|&sig| {
        // SAFETY: queries the disposition into `old`.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: as above; a null new action only reads.
        let ok = unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } == 0;
        ok && old.sa_sigaction == libc::SIG_DFL
    })
}

/// The handler of a sampling signal.
pub type Handler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);

/// Installs `handler` for `signal`; the disposition it replaced.
pub fn install(signal: libc::c_int, handler: Handler) -> Option<libc::sigaction> {
    // SAFETY: a zeroed sigaction is a valid value to fill in.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = handler as *const () as usize;
    // SA_RESTART keeps system calls the signal interrupts going.
    action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
    // SAFETY: an empty mask: the signal itself stays blocked in its handler.
    unsafe { libc::sigemptyset(&mut action.sa_mask) };
    // SAFETY: as above.
    let mut old_action: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: installs `handler`, which the caller made async-signal-safe.
    (unsafe { libc::sigaction(signal, &action, &mut old_action) } == 0).then_some(old_action)
}

/// Restores a disposition saved by [`install`].
pub fn restore(signal: libc::c_int, old: &libc::sigaction) {
    // SAFETY: a disposition the kernel gave us for this signal.
    unsafe { libc::sigaction(signal, old, std::ptr::null_mut()) };
}

/// Blocks `signal` on the calling thread; the mask before.
pub fn block(signal: libc::c_int) -> libc::sigset_t {
    // SAFETY: changes this thread's mask only; `set` and `old_mask` are
    // locals filled before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signal);
        let mut old_mask: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old_mask);
        old_mask
    }
}

/// With sampling stopped (the session withdrawn from `active`, nothing
/// sends the signal any more, the signal blocked on this thread with
/// `old_mask` saved): discards a signal still pending, waits for handlers
/// still running on other threads, and restores the signal's disposition
/// `old` and this thread's mask.
pub fn quiet<T>(signal: libc::c_int, old: &libc::sigaction, old_mask: libc::sigset_t, active: &Active<T>) {
    // SAFETY: ignoring the signal discards one still pending on any
    // thread (POSIX); one pending here is consumed all the same.
    unsafe {
        let mut ignore: libc::sigaction = std::mem::zeroed();
        ignore.sa_sigaction = libc::SIG_IGN;
        libc::sigaction(signal, &ignore, std::ptr::null_mut());
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signal);
        let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        while libc::sigtimedwait(&set, std::ptr::null_mut(), &zero) == signal {}
    }
    active.wait_idle();
    restore(signal, old);
    // SAFETY: restores this thread's saved mask.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old_mask, std::ptr::null_mut()) };
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

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static SEEN: AtomicUsize = AtomicUsize::new(0);

    extern "C" fn count(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
        SEEN.fetch_add(1, Ordering::SeqCst);
    }

    #[test]
    fn a_pending_signal_is_discarded_and_the_old_disposition_comes_back() {
        let sig = free_signal().expect("a free real-time signal");
        let old = install(sig, count).expect("installed");
        // SAFETY: raise sends the signal to this thread; the handler counts.
        unsafe { libc::raise(sig) };
        assert_eq!(SEEN.load(Ordering::SeqCst), 1, "the handler ran");
        // Blocked, then raised: pending when the session stops.
        let mask = block(sig);
        // SAFETY: as above.
        unsafe { libc::raise(sig) };
        let active: Active<u8> = Active::new();
        quiet(sig, &old, mask, &active);
        assert_eq!(SEEN.load(Ordering::SeqCst), 1, "the pending signal was discarded, not handled");
        // The default disposition is back (so the signal is free again),
        // and the thread's mask is as before.
        assert_eq!(free_signal(), Some(sig));
        // SAFETY: reads this thread's mask.
        let blocked = unsafe {
            let mut now: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut now);
            libc::sigismember(&now, sig) == 1
        };
        assert!(!blocked, "the mask is restored");
    }
}
