//! A `fork()` child (`parallel::mclapply`) of a process with a running
//! session: the child has no timer (POSIX timers are not inherited) and,
//! through a `pthread_atfork` handler, no active session and no hooks'
//! state of the parent, so it is never sampled and can start a session of
//! its own. (The child's copy of the parent's `Running` refers to a timer
//! and a collector thread that do not exist there: see
//! `Running::inherited` and `Running::forget`.)

use super::handler::ACTIVE;

extern "C" fn in_child() {
    // No session, no handler running (the child's one thread called fork()
    // outside any handler), and the hooks forget the parent's state.
    ACTIVE.forget_in_child();
    super::spawn::forget_in_child();
    super::alloc::hook::forget_in_child();
}

/// Registers the child's handler, once per process.
pub fn register() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    crate::fork::register_once(&ONCE, None, None, Some(in_child));
}
