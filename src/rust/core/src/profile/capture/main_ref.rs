//! R's main thread's last sample as other threads' handlers see it: its
//! number, R's innermost context record when it was taken (0: not kept)
//! and when. Written by R's main thread only (its signal handler, or its
//! allocation hook with that handler held off), read by any thread's
//! signal handler. The three words are published under a sequence lock:
//! read one by one, a reader could take the number of one sample with the
//! record of the next (both handlers fire together when two threads start
//! burning CPU together), and show a thread under a sample of R code
//! taken before the call that started it. Async-signal-safe: atomics only,
//! a bounded number of tries.

use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};

/// One published sample of R's main thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MainSample {
    pub seq: u64,
    /// R's innermost context record then; 0: the sample was not kept.
    pub context: usize,
    pub taken_ns: u64,
}

#[derive(Debug, Default)]
pub(crate) struct MainRef {
    /// Odd while the writer is between its stores.
    version: AtomicU64,
    seq: AtomicU64,
    context: AtomicUsize,
    taken_ns: AtomicU64,
}

/// How many times a reader tries before it gives up on a writer stopped
/// between its stores (preempted in its handler).
const TRIES: usize = 4;

impl MainRef {
    pub(crate) const fn new() -> MainRef {
        MainRef {
            version: AtomicU64::new(0),
            seq: AtomicU64::new(0),
            context: AtomicUsize::new(0),
            taken_ns: AtomicU64::new(0),
        }
    }

    /// The number the next sample of R's main thread takes.
    pub(crate) fn next_seq(&self) -> u64 {
        self.seq.load(Ordering::Acquire) + 1
    }

    /// Publishes a sample (the one writer only).
    pub(crate) fn publish(&self, sample: MainSample) {
        let v = self.version.load(Ordering::Relaxed);
        self.version.store(v.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        self.seq.store(sample.seq, Ordering::Relaxed);
        self.context.store(sample.context, Ordering::Relaxed);
        self.taken_ns.store(sample.taken_ns, Ordering::Relaxed);
        self.version.store(v.wrapping_add(2), Ordering::Release);
    }

    /// The last published sample, all three words of the same one; None
    /// when the writer stayed between its stores through every try.
    pub(crate) fn read(&self) -> Option<MainSample> {
        for _ in 0..TRIES {
            let before = self.version.load(Ordering::Acquire);
            if before % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let sample = MainSample {
                seq: self.seq.load(Ordering::Relaxed),
                context: self.context.load(Ordering::Relaxed),
                taken_ns: self.taken_ns.load(Ordering::Relaxed),
            };
            fence(Ordering::Acquire);
            if self.version.load(Ordering::Relaxed) == before {
                return Some(sample);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::{MainRef, MainSample};
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn a_reader_never_takes_one_samples_number_with_anothers_record() {
        // Each published sample's words are derived from its number, so
        // a mixed read shows.
        let shared = MainRef::new();
        let done = AtomicBool::new(false);
        let of = |seq: u64| MainSample { seq, context: (seq as usize) * 8, taken_ns: seq * 10 };
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for seq in 1..=300_000 {
                    shared.publish(of(seq));
                }
                done.store(true, Ordering::Release);
            });
            let (mut read, mut last) = (0u64, 0u64);
            while !done.load(Ordering::Acquire) || read == 0 {
                if let Some(s) = shared.read() {
                    assert_eq!(s, of(s.seq), "a read mixed two samples");
                    assert!(s.seq >= last, "a read went back in time");
                    last = s.seq;
                    read += 1;
                }
            }
            assert!(read > 0);
        });
        assert_eq!(shared.read(), Some(of(300_000)));
        assert_eq!(shared.next_seq(), 300_001);
    }

    #[test]
    fn nothing_published_reads_as_sample_zero_not_kept() {
        let shared = MainRef::new();
        assert_eq!(shared.read(), Some(MainSample { seq: 0, context: 0, taken_ns: 0 }));
        assert_eq!(shared.next_seq(), 1);
    }
}
