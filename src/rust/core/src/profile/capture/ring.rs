//! A single-producer, single-consumer ring of 64-bit words, allocated once:
//! the signal handler writes samples into it, a collector thread reads them
//! out. Neither side allocates, locks or waits; when the ring is full the
//! producer's record is refused (and counted by the caller).
//!
//! A record is a length word followed by that many words. The producer
//! writes the words first and publishes them with one release store of the
//! head; the consumer reads up to the head it acquired and frees the space
//! with one release store of the tail.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

pub struct Ring {
    words: Box<[AtomicU64]>,
    mask: usize,
    /// Total words ever written (producer) and read (consumer).
    head: AtomicUsize,
    tail: AtomicUsize,
}

impl Ring {
    /// A ring of at least `capacity` words (rounded up to a power of two).
    pub fn new(capacity: usize) -> Ring {
        let n = capacity.max(2).next_power_of_two();
        Ring {
            words: (0..n).map(|_| AtomicU64::new(0)).collect(),
            mask: n - 1,
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
        }
    }

    pub fn capacity(&self) -> usize {
        self.words.len()
    }

    /// Producer: appends one record; false if it does not fit now.
    /// Async-signal-safe.
    pub fn push(&self, record: &[u64]) -> bool {
        let need = record.len() + 1;
        let head = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Acquire);
        if need > self.capacity() - head.wrapping_sub(tail) {
            return false;
        }
        self.words[head & self.mask].store(record.len() as u64, Ordering::Relaxed);
        for (k, &w) in record.iter().enumerate() {
            self.words[head.wrapping_add(1 + k) & self.mask].store(w, Ordering::Relaxed);
        }
        self.head.store(head.wrapping_add(need), Ordering::Release);
        true
    }

    /// Consumer: hands every record available now to `f`, in order; returns
    /// how many there were.
    pub fn drain(&self, buf: &mut Vec<u64>, f: impl FnMut(&[u64])) -> usize {
        self.drain_to(self.head(), buf, f)
    }

    /// Consumer: where the records written so far end (for [`drain_to`]).
    ///
    /// [`drain_to`]: Ring::drain_to
    pub fn head(&self) -> usize {
        self.head.load(Ordering::Acquire)
    }

    /// Consumer: hands the records written before `head` (a value of
    /// [`head`](Ring::head)) to `f`, in order; those written since stay.
    pub fn drain_to(&self, head: usize, buf: &mut Vec<u64>, mut f: impl FnMut(&[u64])) -> usize {
        let mut tail = self.tail.load(Ordering::Relaxed);
        let mut n = 0;
        while tail != head {
            let len = self.words[tail & self.mask].load(Ordering::Relaxed) as usize;
            buf.clear();
            buf.extend(
                (0..len).map(|k| self.words[tail.wrapping_add(1 + k) & self.mask].load(Ordering::Relaxed)),
            );
            tail = tail.wrapping_add(len + 1);
            f(buf);
            n += 1;
        }
        self.tail.store(tail, Ordering::Release);
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn records_come_out_in_order_and_a_full_ring_refuses() {
        let r = Ring::new(8);
        assert_eq!(r.capacity(), 8);
        assert!(r.push(&[1, 2, 3]));
        assert!(r.push(&[4]));
        assert!(!r.push(&[5, 6]), "4 + 2 + 3 words do not fit in 8");
        let mut buf = Vec::new();
        let mut seen = Vec::new();
        assert_eq!(r.drain(&mut buf, |rec| seen.push(rec.to_vec())), 2);
        assert_eq!(seen, vec![vec![1, 2, 3], vec![4]]);
        // Space is free again, and records wrap around the end.
        for i in 0..10u64 {
            assert!(r.push(&[i, i * 10]));
            let mut got = Vec::new();
            r.drain(&mut buf, |rec| got.push(rec.to_vec()));
            assert_eq!(got, vec![vec![i, i * 10]]);
        }
        assert!(r.push(&[]), "an empty record is one word");
    }

    #[test]
    fn records_written_after_a_head_stay_for_later() {
        let r = Ring::new(16);
        assert!(r.push(&[1, 2]));
        let head = r.head();
        assert!(r.push(&[3]));
        let mut buf = Vec::new();
        let mut seen = Vec::new();
        assert_eq!(r.drain_to(head, &mut buf, |rec| seen.push(rec.to_vec())), 1);
        assert_eq!(seen, vec![vec![1, 2]]);
        assert_eq!(r.drain(&mut buf, |rec| seen.push(rec.to_vec())), 1);
        assert_eq!(seen, vec![vec![1, 2], vec![3]]);
    }

    #[test]
    fn a_concurrent_consumer_sees_every_accepted_record_once() {
        let r = Arc::new(Ring::new(64));
        let producer = {
            let r = r.clone();
            std::thread::spawn(move || {
                let mut accepted = 0u64;
                for i in 0..100_000u64 {
                    if r.push(&[i, !i, i.wrapping_mul(3)]) {
                        accepted += 1;
                    }
                }
                accepted
            })
        };
        let mut buf = Vec::new();
        let mut got = 0u64;
        let mut last = None;
        let mut ok = true;
        loop {
            let done = producer.is_finished();
            r.drain(&mut buf, |rec| {
                ok &= rec.len() == 3 && rec[1] == !rec[0] && rec[2] == rec[0].wrapping_mul(3);
                ok &= last.is_none_or(|l| rec[0] > l);
                last = Some(rec[0]);
                got += 1;
            });
            if done && r.head.load(Ordering::Acquire) == r.tail.load(Ordering::Acquire) {
                break;
            }
        }
        assert!(ok, "records torn or out of order");
        assert_eq!(got, producer.join().unwrap());
    }
}
