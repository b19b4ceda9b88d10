//! Locks for winch's process-wide caches that never deadlock on re-entry.
//!
//! A capture can be re-entered on the same thread (from a signal handler, or
//! if R ever longjmps out of one and starts another). Waiting for a lock the
//! thread itself holds would hang R forever, so re-entry gets `None` and the
//! caller does without the cache. Other threads simply wait their turn.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

thread_local! {
    static MARKER: u8 = const { 0 };
}

/// A per-thread nonzero identifier: the address of a thread-local.
fn thread_token() -> usize {
    MARKER.with(|m| m as *const u8 as usize)
}

/// A mutex that knows which thread holds it.
pub struct ReentryLock<T> {
    mutex: Mutex<T>,
    owner: AtomicUsize,
}

/// The guard: clears the owner when dropped.
pub struct Guard<'a, T> {
    guard: MutexGuard<'a, T>,
    owner: &'a AtomicUsize,
}

impl<T> ReentryLock<T> {
    pub const fn new(value: T) -> ReentryLock<T> {
        ReentryLock { mutex: Mutex::new(value), owner: AtomicUsize::new(0) }
    }

    /// Locks, waiting for other threads; None if this thread already holds it.
    pub fn lock(&self) -> Option<Guard<'_, T>> {
        let me = thread_token();
        if self.owner.load(Ordering::Acquire) == me {
            return None;
        }
        let guard = self.mutex.lock().unwrap_or_else(|e| e.into_inner());
        self.owner.store(me, Ordering::Release);
        Some(Guard { guard, owner: &self.owner })
    }
}

impl<T> std::ops::Deref for Guard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> std::ops::DerefMut for Guard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

impl<T> Drop for Guard<'_, T> {
    fn drop(&mut self) {
        self.owner.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn reentry_is_refused_other_threads_wait() {
        let lock = Arc::new(ReentryLock::new(0u32));
        let g = lock.lock().unwrap();
        assert!(lock.lock().is_none(), "same thread must not wait for itself");
        let other = {
            let lock = lock.clone();
            std::thread::spawn(move || {
                let mut g = lock.lock().expect("another thread waits, then gets it");
                *g += 1;
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        drop(g);
        other.join().unwrap();
        assert_eq!(*lock.lock().unwrap(), 1);
    }
}
