//! A value published for readers that may not lock: signal handlers and
//! GOT hooks read the current edition with one atomic load, while the
//! thread that builds editions replaces it.
//!
//! Three owners publish this way: the profiler's module snapshots, throw
//! capture's walk tables and the crash report's tables. Each edition
//! remembers the loader generation it was built for (to tell when modules
//! changed since) and its number in order of publishing. A replaced
//! edition is retired, never freed at once (a reader may be inside it);
//! when retired editions may be freed is the owner's rule, stated where it
//! frees them:
//!
//! * the profiler keeps every edition until the session ends, then takes
//!   them all in order ([`Published::take_all`]): samples carry the number
//!   of the edition they were taken with;
//! * throw capture frees retired tables at top level on R's main thread,
//!   where the hook does not run ([`Published::free_retired`]);
//! * the crash report frees them at the next publish when no report is
//!   being written.
//!
//! Reading is safe; freeing is `unsafe`, with the promise that no reader
//! still holds what is freed.

use crate::modules::Generation;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Mutex, MutexGuard};

/// One published value and what it was built for.
#[derive(Debug)]
pub struct Edition<T> {
    pub value: T,
    /// The loader's generation (see `modules::loader_generation`) when the
    /// value was built.
    pub generation: Generation,
    /// Whether the value holds exactly the modules of `generation` (see
    /// `modules::Loaded`).
    pub exact: bool,
    /// 0 for the first edition published (since the last
    /// [`Published::take_all`]), then one more for each.
    pub number: u32,
}

impl<T> Edition<T> {
    /// Whether it was built for the loader's generation `now`, exactly.
    pub fn exactly_at(&self, now: Generation) -> bool {
        self.exact && self.generation == now
    }
}

/// The current edition of a value, and those retired but not freed yet.
pub struct Published<T> {
    /// The current edition (null: none), from `Box::into_raw`.
    current: AtomicPtr<Edition<T>>,
    /// Replaced editions, oldest first. Boxed: a reader may still hold one,
    /// so it must not move.
    #[allow(clippy::vec_box)]
    retired: Mutex<Vec<Box<Edition<T>>>>,
    /// (generation, exact) of every edition published, by number.
    keys: Mutex<Vec<(Generation, bool)>>,
    /// Readers share `&T` across threads, and editions are freed on any
    /// thread: `Published<T>` is `Sync` only if `T` is `Send + Sync`.
    _values: PhantomData<T>,
}

impl<T> Default for Published<T> {
    fn default() -> Published<T> {
        Published::new()
    }
}

fn lock<V>(m: &Mutex<V>) -> MutexGuard<'_, V> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<T> Published<T> {
    pub const fn new() -> Published<T> {
        Published {
            current: AtomicPtr::new(std::ptr::null_mut()),
            retired: Mutex::new(Vec::new()),
            keys: Mutex::new(Vec::new()),
            _values: PhantomData,
        }
    }

    /// The current edition, if any. One atomic load: async-signal-safe and
    /// lock-free. The reference stays valid until the owner frees retired
    /// editions (the `unsafe` functions below), which it does only where no
    /// reader can hold one.
    pub fn current(&self) -> Option<&Edition<T>> {
        // SAFETY: a non-null pointer came from `Box::into_raw` in `publish`
        // and is freed only by `free_retired`, `take_all` or `drop`, whose
        // callers promise that no reader holds it.
        unsafe { self.current.load(Ordering::SeqCst).as_ref() }
    }

    /// Publishes `value`, built for the loader's `generation` (`exact`:
    /// holding exactly its modules), and retires the edition it replaces.
    /// Returns the new edition's number. (The swap is sequentially
    /// consistent: an owner may pair it with a reader's flag, see the crash
    /// report.)
    pub fn publish(&self, value: T, generation: Generation, exact: bool) -> u32 {
        let mut keys = lock(&self.keys);
        let number = keys.len() as u32;
        keys.push((generation, exact));
        let fresh = Box::into_raw(Box::new(Edition { value, generation, exact, number }));
        let old = self.current.swap(fresh, Ordering::SeqCst);
        if !old.is_null() {
            // SAFETY: `old` came from Box::into_raw and is no longer
            // published; it is kept (not freed) for readers still in it.
            lock(&self.retired).push(unsafe { Box::from_raw(old) });
        }
        number
    }

    /// (generation, exact) of every edition published, by number.
    pub fn keys(&self) -> Vec<(Generation, bool)> {
        lock(&self.keys).clone()
    }

    /// Editions retired and not freed yet.
    #[cfg(test)]
    pub fn retired(&self) -> usize {
        lock(&self.retired).len()
    }

    /// Frees the retired editions (the current one stays).
    ///
    /// # Safety
    /// No reader may still hold a reference to a retired edition.
    pub unsafe fn free_retired(&self) {
        let freed = std::mem::take(&mut *lock(&self.retired));
        drop(freed);
    }

    /// Unpublishes the current edition and hands over every edition, the
    /// retired ones and the current one, in order of their numbers;
    /// numbering starts again at 0.
    ///
    /// # Safety
    /// No reader may hold a reference to any edition, or take one from
    /// now on until the next `publish`.
    pub unsafe fn take_all(&self) -> Vec<Box<Edition<T>>> {
        let mut keys = lock(&self.keys);
        let mut all = std::mem::take(&mut *lock(&self.retired));
        let last = self.current.swap(std::ptr::null_mut(), Ordering::SeqCst);
        if !last.is_null() {
            // SAFETY: came from Box::into_raw, no longer published; the
            // caller promises no reader holds it.
            all.push(unsafe { Box::from_raw(last) });
        }
        keys.clear();
        all.sort_by_key(|e| e.number);
        all
    }

    /// [`take_all`](Published::take_all), dropped.
    ///
    /// # Safety
    /// As for `take_all`.
    pub unsafe fn clear(&self) {
        // SAFETY: the caller's promise.
        drop(unsafe { self.take_all() });
    }
}

impl<T> Drop for Published<T> {
    fn drop(&mut self) {
        // SAFETY: owned exclusively: no reader can hold an edition.
        unsafe { self.clear() };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(adds: u64, subs: u64) -> Generation {
        Generation { adds, subs }
    }
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    /// Counts the values alive, to see when editions are freed.
    struct Counted(u32, Arc<AtomicUsize>);
    impl Counted {
        fn new(n: u32, alive: &Arc<AtomicUsize>) -> Counted {
            alive.fetch_add(1, Ordering::SeqCst);
            Counted(n, alive.clone())
        }
    }
    impl Drop for Counted {
        fn drop(&mut self) {
            self.1.fetch_sub(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn publishing_retires_the_replaced_edition_until_it_is_freed() {
        let alive = Arc::new(AtomicUsize::new(0));
        let p: Published<Counted> = Published::new();
        assert!(p.current().is_none());
        assert_eq!(p.publish(Counted::new(10, &alive), g(3, 1), true), 0);
        let first: *const Edition<Counted> = p.current().unwrap();
        assert_eq!(p.publish(Counted::new(11, &alive), g(4, 1), false), 1);
        // The first is retired, not freed: a reader holding it reads on.
        // SAFETY: retired editions are alive until freed below.
        assert_eq!(unsafe { &*first }.value.0, 10);
        assert_eq!((p.retired(), alive.load(Ordering::SeqCst)), (1, 2));
        let now = p.current().unwrap();
        assert_eq!((now.value.0, now.number, now.generation, now.exact), (11, 1, g(4, 1), false));
        // SAFETY: nothing reads the retired edition any more.
        unsafe { p.free_retired() };
        assert_eq!((p.retired(), alive.load(Ordering::SeqCst)), (0, 1));
        assert_eq!(p.current().unwrap().value.0, 11, "the current edition stays");
        drop(p);
        assert_eq!(alive.load(Ordering::SeqCst), 0, "dropping frees the current edition");
    }

    #[test]
    fn every_edition_is_kept_by_number_and_taken_in_order() {
        let p: Published<u32> = Published::new();
        for k in 0..4 {
            p.publish(100 + k, g(k as u64, 0), k != 2);
        }
        assert_eq!(p.keys(), vec![(g(0, 0), true), (g(1, 0), true), (g(2, 0), false), (g(3, 0), true)]);
        // SAFETY: no reader in this test.
        let all = unsafe { p.take_all() };
        let got: Vec<(u32, u32)> = all.iter().map(|e| (e.number, e.value)).collect();
        assert_eq!(got, vec![(0, 100), (1, 101), (2, 102), (3, 103)]);
        assert!(p.current().is_none() && p.keys().is_empty() && p.retired() == 0);
        // Numbering starts again.
        assert_eq!(p.publish(7, g(9, 9), true), 0);
    }

    #[test]
    fn editions_say_which_generation_they_hold() {
        let p: Published<()> = Published::new();
        p.publish((), g(5, 2), true);
        let e = p.current().unwrap();
        assert!(e.exactly_at(g(5, 2)));
        assert!(!e.exactly_at(g(6, 2)), "modules loaded since");
        p.publish((), g(6, 2), false);
        assert!(!p.current().unwrap().exactly_at(g(6, 2)), "not exactly that generation's modules");
    }

    #[test]
    fn a_reader_on_another_thread_always_finds_a_whole_edition() {
        let p = Arc::new(Published::<[u64; 8]>::new());
        p.publish([0; 8], g(0, 0), true);
        let reads = Arc::new(AtomicUsize::new(0));
        let reader = {
            let (p, reads) = (p.clone(), reads.clone());
            std::thread::spawn(move || {
                // Until it has read while the publisher was publishing.
                while reads.load(Ordering::Acquire) < 1000 {
                    let e = p.current().unwrap();
                    assert!(e.value.iter().all(|&w| w == e.value[0]), "a torn edition");
                    reads.fetch_add(1, Ordering::AcqRel);
                }
            })
        };
        let mut k = 1u64;
        while reads.load(Ordering::Acquire) < 1000 {
            p.publish([k; 8], g(k, 0), true);
            k += 1;
        }
        reader.join().unwrap();
        assert_eq!(p.retired() as u64, k - 1, "kept while a reader may hold them");
    }
}
