//! Sampling slots of the threads other than R's main thread: a few sets of
//! buffers, each with a ring of its own, taken by whichever thread's
//! handler finds one free. Any number of threads may be sampled at the
//! same moment, each on its own thread; a sample that finds every slot
//! taken is not taken (the caller counts it as dropped). Taking and giving
//! back a slot is one atomic swap and one store: async-signal-safe.

use super::ring::Ring;
use super::worker::WorkerScratch;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};

/// One slot: buffers and a ring, used by one handler at a time (`busy`).
struct Slot {
    busy: AtomicBool,
    scratch: UnsafeCell<WorkerScratch>,
    ring: Ring,
}

/// The slots of a session (none: only R's main thread is sampled).
pub struct Slots {
    slots: Box<[Slot]>,
}

// SAFETY: a slot's scratch is touched only by the holder of its `busy`
// flag (one `Taken` at a time, see `take`); the ring is a single-producer
// ring whose producer is that holder and whose consumer is the collector.
unsafe impl Sync for Slots {}
// SAFETY: as above; the buffers are owned data.
unsafe impl Send for Slots {}

/// A slot taken by a handler: given back when dropped.
pub struct Taken<'a> {
    slot: &'a Slot,
}

impl Slots {
    /// `count` slots whose rings hold `ring_words` words each.
    pub fn new(count: usize, ring_words: usize) -> Slots {
        let slots = (0..count)
            .map(|_| Slot {
                busy: AtomicBool::new(false),
                scratch: UnsafeCell::new(WorkerScratch::default()),
                ring: Ring::new(ring_words),
            })
            .collect();
        Slots { slots }
    }

    /// No slots.
    pub fn none() -> Slots {
        Slots { slots: Box::new([]) }
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// A free slot, taken for the caller alone until the result is dropped;
    /// None if every slot is taken.
    #[inline]
    pub fn take(&self) -> Option<Taken<'_>> {
        self.slots.iter().find(|s| !s.busy.swap(true, Ordering::Acquire)).map(|slot| Taken { slot })
    }

    /// Each slot's ring (the collector's side).
    pub fn rings(&self) -> impl Iterator<Item = &Ring> {
        self.slots.iter().map(|s| &s.ring)
    }
}

impl Taken<'_> {
    /// The slot's buffers and ring, for one sample.
    #[inline]
    pub fn parts(&mut self) -> (&mut WorkerScratch, &Ring) {
        // SAFETY: the slot's `busy` flag is ours (set in `take`, cleared
        // only when this is dropped), so nothing else touches its scratch.
        (unsafe { &mut *self.slot.scratch.get() }, &self.slot.ring)
    }
}

impl Drop for Taken<'_> {
    #[inline]
    fn drop(&mut self) {
        self.slot.busy.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::{Arc, Barrier};

    #[test]
    fn a_slot_is_one_handlers_until_given_back() {
        let slots = Slots::new(2, 64);
        let a = slots.take().expect("a free slot");
        let b = slots.take().expect("a second free slot");
        assert!(slots.take().is_none(), "every slot is taken: the sample is dropped");
        drop(a);
        let mut c = slots.take().expect("the slot given back is free again");
        let (_, ring) = c.parts();
        assert!(ring.push(&[1, 2, 3]));
        drop((b, c));
        let drained: usize = slots.rings().map(|r| r.drain(&mut Vec::new(), |_| {})).sum();
        assert_eq!(drained, 1, "what the holder pushed is in its slot's ring");
        assert!(Slots::none().take().is_none() && Slots::none().is_empty());
    }

    #[test]
    fn threads_sampled_at_once_never_share_a_slot() {
        // Many threads take and give back slots as fast as they can; each
        // marks its slot's ring while it holds it, and checks nobody else
        // did meanwhile.
        let slots = Arc::new(Slots::new(3, 1 << 12));
        let holders: Arc<Vec<AtomicUsize>> = Arc::new((0..3).map(|_| AtomicUsize::new(0)).collect());
        let start = Arc::new(Barrier::new(8));
        let taken = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let (slots, holders, start, taken) =
                    (slots.clone(), holders.clone(), start.clone(), taken.clone());
                std::thread::spawn(move || {
                    start.wait();
                    for _ in 0..5_000 {
                        let Some(mut slot) = slots.take() else { continue };
                        let (_, ring) = slot.parts();
                        let i = slots.rings().position(|r| std::ptr::eq(r, ring)).unwrap();
                        assert_eq!(holders[i].swap(t + 1, Ordering::SeqCst), 0, "slot {i} held twice");
                        std::hint::spin_loop();
                        assert_eq!(holders[i].swap(0, Ordering::SeqCst), t + 1);
                        taken.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(taken.load(Ordering::Relaxed) > 0);
        assert!(holders.iter().all(|h| h.load(Ordering::SeqCst) == 0));
        let all: Vec<_> = (0..3).filter_map(|_| slots.take()).collect();
        assert_eq!(all.len(), 3, "every slot was given back");
    }
}
