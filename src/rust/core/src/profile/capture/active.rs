//! Which session the sampling code runs for, and the protocol that lets a
//! session end while handlers may still be running on other threads.
//!
//! A handler (the signal handler, or the allocation hook's sampler) counts
//! itself in before it reads the published session and out when it is
//! done; stopping clears the published session first and then waits for
//! the count to fall to zero (both sequentially consistent). So a handler
//! either sees no session, or is waited for: the session is never freed
//! under a handler. Entering and leaving are two atomic operations:
//! async-signal-safe, no lock, no allocation.

use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// The published session of type `T` and the handlers running now.
pub struct Active<T> {
    session: AtomicPtr<T>,
    running: AtomicUsize,
}

impl<T> Default for Active<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Active<T> {
    pub const fn new() -> Active<T> {
        Active { session: AtomicPtr::new(std::ptr::null_mut()), running: AtomicUsize::new(0) }
    }

    /// Runs `f` with the published session, counted as a running handler;
    /// None (and `f` not run) when none is published. Async-signal-safe.
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(&T) -> R) -> Option<R> {
        // Counted before the session is read (see the module's comment).
        self.running.fetch_add(1, Ordering::SeqCst);
        let p = self.session.load(Ordering::SeqCst);
        // SAFETY: a published session stays alive until `retract` has seen
        // the count at 0 after clearing it, and we are counted.
        let out = unsafe { p.as_ref() }.map(f);
        self.running.fetch_sub(1, Ordering::SeqCst);
        out
    }

    /// Whether a session is published.
    pub fn is_published(&self) -> bool {
        !self.session.load(Ordering::Acquire).is_null()
    }

    /// Publishes `session`: handlers use it from now on. The caller keeps
    /// it alive until [`retract`](Active::retract) returns.
    pub fn publish(&self, session: *const T) {
        self.session.store(session as *mut T, Ordering::SeqCst);
    }

    /// Withdraws the published session without waiting (see
    /// [`wait_idle`](Active::wait_idle)).
    pub fn clear(&self) {
        self.session.store(std::ptr::null_mut(), Ordering::SeqCst);
    }

    /// Waits until no handler runs. After [`clear`](Active::clear), no
    /// handler uses the session any more when this returns. (A handler
    /// preempted on another thread needs a core to finish: yields.)
    pub fn wait_idle(&self) {
        while self.running.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
    }

    /// Withdraws the published session and waits until no handler uses it.
    pub fn retract(&self) {
        self.clear();
        self.wait_idle();
    }

    /// In a `fork()` child: no session (the child has no timer, and the
    /// parent's session is not the child's), and no handler running (the
    /// child's one thread called `fork()` outside any handler; handlers of
    /// the parent's other threads do not exist here). Async-signal-safe.
    pub fn forget_in_child(&self) {
        self.session.store(std::ptr::null_mut(), Ordering::SeqCst);
        self.running.store(0, Ordering::SeqCst);
    }

    /// In a `fork()` child: no handler running (the child's one thread
    /// called `fork()` outside any handler; handlers of the parent's other
    /// threads do not exist here); the published session stays.
    /// Async-signal-safe.
    pub fn reset_in_child(&self) {
        self.running.store(0, Ordering::SeqCst);
    }

    /// Handlers running now (tests).
    #[cfg(test)]
    fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn nothing_runs_without_a_published_session() {
        let a: Active<u32> = Active::new();
        assert_eq!(a.with(|&v| v), None);
        assert!(!a.is_published());
        let v = 7u32;
        a.publish(&v);
        assert!(a.is_published());
        assert_eq!(a.with(|&v| v + 1), Some(8));
        assert_eq!(a.running(), 0, "a handler counts itself out");
        a.retract();
        assert_eq!(a.with(|&v| v), None);
    }

    #[test]
    fn retracting_waits_for_a_handler_that_saw_the_session() {
        let a: Arc<Active<u32>> = Arc::new(Active::new());
        let session = Box::new(5u32);
        a.publish(&*session);
        let inside = Arc::new(AtomicBool::new(false));
        let release = Arc::new(AtomicBool::new(false));
        let handler = {
            let (a, inside, release) = (a.clone(), inside.clone(), release.clone());
            std::thread::spawn(move || {
                a.with(|&v| {
                    inside.store(true, Ordering::SeqCst);
                    while !release.load(Ordering::SeqCst) {
                        std::thread::yield_now();
                    }
                    v
                })
            })
        };
        while !inside.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        let retracted = Arc::new(AtomicBool::new(false));
        let stopper = {
            let (a, retracted) = (a.clone(), retracted.clone());
            std::thread::spawn(move || {
                a.retract();
                retracted.store(true, Ordering::SeqCst);
            })
        };
        // The stop cannot finish while the handler uses the session...
        std::thread::sleep(Duration::from_millis(50));
        assert!(!retracted.load(Ordering::SeqCst), "retract returned under a running handler");
        // ...and a handler arriving now finds none.
        assert_eq!(a.with(|&v| v), None);
        release.store(true, Ordering::SeqCst);
        assert_eq!(handler.join().unwrap(), Some(5));
        stopper.join().unwrap();
        assert!(retracted.load(Ordering::SeqCst));
        drop(session); // only now: nothing can read it
    }

    #[test]
    fn a_fork_child_forgets_the_parents_handlers() {
        let a: Active<u32> = Active::new();
        let v = 1u32;
        a.publish(&v);
        // As if the parent had a handler running on another thread when
        // it forked: the child has no such thread.
        a.running.fetch_add(1, Ordering::SeqCst);
        a.forget_in_child();
        assert!(!a.is_published());
        assert_eq!(a.running(), 0);
        a.wait_idle(); // returns at once
    }
}
