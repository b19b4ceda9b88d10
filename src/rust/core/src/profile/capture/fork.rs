//! A `fork()` child (`parallel::mclapply`) of a process with a running
//! session: the child has no timer (POSIX timers are not inherited) and,
//! through a `pthread_atfork` handler, no active session and no hooks'
//! state of the parent, so it is never sampled and can start a session of
//! its own. (The child's copy of the parent's `Running` refers to a timer
//! and a collector thread that do not exist there: see
//! `Running::inherited` and `Running::forget`.)

use super::handler::ACTIVE;

extern "C" fn in_child() {
    if crate::fork::is_quiet() {
        return;
    }
    // No handler running (the child's one thread called fork() outside any
    // handler), and the hooks forget the parent's state.
    ACTIVE.reset_in_child();
    super::children::reset_in_child();
    super::spawn::forget_in_child();
    super::alloc::hook::forget_in_child();
    // A session that samples its children: this one samples itself (see
    // `children`); otherwise no session.
    if !ACTIVE.with(become_child).unwrap_or(false) {
        ACTIVE.forget_in_child();
    }
}

/// Makes this new child sample itself into a slot of its parent's session
/// `s`: a timer on its own clock, as the parent's main thread has. Whether
/// it does.
fn become_child(s: &super::shared::Session) -> bool {
    let (Some(children), super::shared::Trigger::Timer { clock, interval_ns }) = (&s.children, s.trigger)
    else {
        return false;
    };
    // SAFETY: fork() was called outside the signal handler, and the child's
    // one thread is this one: nothing else uses the scratch now.
    let labels = unsafe { &*s.scratch.get() }.as_ref().map_or(0, |sc| sc.labels.len() as u32);
    let read =
        |out: &mut [(usize, usize)]| super::super::compose::fork_records(&s.facts, &s.facts.ranges, out);
    if super::children::become_child(children, read, labels).is_none() {
        return false;
    }
    let tid = super::clock::gettid();
    // Its samples stand for its CPU time from the fork (see `account`).
    if let Some(accounts) = &s.accounts {
        accounts.adopt(tid);
    }
    let clock_id = match clock {
        super::clock::Clock::Cpu => libc::CLOCK_THREAD_CPUTIME_ID,
        super::clock::Clock::Elapsed => libc::CLOCK_MONOTONIC,
    };
    match super::clock::timer(s.signal, clock_id, tid, interval_ns) {
        Some(t) => {
            super::children::set_timer(t);
            // Its CPU time after its timer's last signal is not lost (see
            // `children`); without a watch, only that is.
            if s.accounts.is_some() {
                if let Some(w) = super::clock::watch(s.signal, tid) {
                    super::children::set_watch(w, 2 * interval_ns);
                }
            }
            true
        }
        None => {
            super::children::leave();
            false
        }
    }
}

/// In the parent after a `fork()`: counted (a memory profile does not
/// sample its children; `summary()` says how many there were).
extern "C" fn in_parent() {
    if crate::fork::is_quiet() {
        return;
    }
    ACTIVE.with(|s| s.forked.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
}

/// Registers the handlers, once per process.
pub fn register() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    crate::fork::register_once(&ONCE, None, Some(in_parent), Some(in_child));
}
