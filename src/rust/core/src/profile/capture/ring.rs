//! A single-producer, single-consumer ring of 64-bit words, allocated once:
//! the signal handler writes samples into it, a collector thread reads them
//! out. Neither side allocates, locks or waits; when the ring is full the
//! producer's record is refused (and counted by the caller).
//!
//! A record is a length word followed by that many words. The producer
//! writes the words first and publishes them with one release store of the
//! head; the consumer reads up to the head it acquired and frees the space
//! with one release store of the tail.

//!
//! The ring lives in a mapping of its own: private to the process, or
//! shared with the processes it forks ([`Ring::shared`]): a forked child's
//! samples go into a shared ring that the parent's collector reads (see
//! `children`). Its head and tail are at the start of the mapping, the
//! words after them.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The start of a ring's mapping.
#[repr(C)]
struct Header {
    /// Total words ever written (producer) and read (consumer).
    head: AtomicUsize,
    tail: AtomicUsize,
}

pub struct Ring {
    /// The mapping: a `Header`, then `mask + 1` words.
    base: std::ptr::NonNull<u8>,
    bytes: usize,
    mask: usize,
}

// SAFETY: every access to the mapping goes through atomics; the mapping is
// owned by the ring and unmapped once, when it is dropped.
unsafe impl Send for Ring {}
// SAFETY: as above.
unsafe impl Sync for Ring {}

impl Ring {
    /// A ring of at least `capacity` words (rounded up to a power of two),
    /// private to this process.
    pub fn new(capacity: usize) -> Ring {
        // (Populated now, so that the signal handler's first pushes do not
        // fault pages in.)
        Ring::mapped(capacity, libc::MAP_PRIVATE | libc::MAP_POPULATE)
            .expect("the ring's memory could not be mapped")
    }

    /// A ring shared with the children this process forks from now on;
    /// None if the memory could not be mapped. Its pages are made as a
    /// child first writes them: a profile maps rings for many children
    /// (see `children`), most of which never fork, and populating them
    /// all took 5 ms of every profile's start.
    pub fn shared(capacity: usize) -> Option<Ring> {
        Ring::mapped(capacity, libc::MAP_SHARED)
    }

    fn mapped(capacity: usize, flags: libc::c_int) -> Option<Ring> {
        let n = capacity.max(2).next_power_of_two();
        let bytes = std::mem::size_of::<Header>() + n * std::mem::size_of::<AtomicU64>();
        // SAFETY: a fresh anonymous mapping, zero-filled (a zeroed Header
        // and zeroed words are valid atomics).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                flags | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        Some(Ring { base: std::ptr::NonNull::new(p as *mut u8)?, bytes, mask: n - 1 })
    }

    #[inline]
    fn header(&self) -> &Header {
        // SAFETY: the mapping starts with a Header (zeroed: valid atomics)
        // and lives as long as `self`.
        unsafe { &*(self.base.as_ptr() as *const Header) }
    }

    #[inline]
    fn word(&self, at: usize) -> &AtomicU64 {
        // SAFETY: `at & mask` is below the number of words the mapping
        // holds after its Header, which is 8-aligned.
        unsafe {
            let words = self.base.as_ptr().add(std::mem::size_of::<Header>()) as *const AtomicU64;
            &*words.add(at & self.mask)
        }
    }

    pub fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// Producer: appends one record; false if it does not fit now.
    /// Async-signal-safe.
    pub fn push(&self, record: &[u64]) -> bool {
        let need = record.len() + 1;
        let head = self.header().head.load(Ordering::Relaxed);
        let tail = self.header().tail.load(Ordering::Acquire);
        if need > self.capacity() - head.wrapping_sub(tail) {
            return false;
        }
        self.word(head).store(record.len() as u64, Ordering::Relaxed);
        for (k, &w) in record.iter().enumerate() {
            self.word(head.wrapping_add(1 + k)).store(w, Ordering::Relaxed);
        }
        self.header().head.store(head.wrapping_add(need), Ordering::Release);
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
        self.header().head.load(Ordering::Acquire)
    }

    /// Consumer: hands the records written before `head` (a value of
    /// [`head`](Ring::head)) to `f`, in order; those written since stay.
    pub fn drain_to(&self, head: usize, buf: &mut Vec<u64>, mut f: impl FnMut(&[u64])) -> usize {
        let mut tail = self.header().tail.load(Ordering::Relaxed);
        let mut n = 0;
        while tail != head {
            let len = self.word(tail).load(Ordering::Relaxed) as usize;
            // A length past what was written (a shared ring damaged by a
            // child that crashed into it): the rest is dropped, never read
            // past the head.
            if len >= head.wrapping_sub(tail) {
                tail = head;
                break;
            }
            buf.clear();
            buf.extend((0..len).map(|k| self.word(tail.wrapping_add(1 + k)).load(Ordering::Relaxed)));
            tail = tail.wrapping_add(len + 1);
            f(buf);
            n += 1;
        }
        self.header().tail.store(tail, Ordering::Release);
        n
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `mapped`, unmapped once; no reference
        // into it outlives `self`.
        unsafe { libc::munmap(self.base.as_ptr() as *mut libc::c_void, self.bytes) };
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
    fn a_shared_ring_is_read_by_the_parent_of_the_child_that_wrote_it() {
        let r = Ring::shared(64).unwrap();
        // SAFETY: the child only pushes to the ring and leaves with _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let ok = r.push(&[7, 8, 9]) && r.push(&[10]);
            // SAFETY: ends the child without the parent's exit handlers.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: our child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert_eq!(status, 0);
        let mut seen = Vec::new();
        r.drain(&mut Vec::new(), |rec| seen.push(rec.to_vec()));
        assert_eq!(seen, vec![vec![7, 8, 9], vec![10]]);
        // A private ring is not shared: what a child writes stays its own.
        let private = Ring::new(64);
        // SAFETY: as above.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            private.push(&[1]);
            // SAFETY: as above.
            unsafe { libc::_exit(0) };
        }
        // SAFETY: our child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(private.drain(&mut Vec::new(), |_| {}), 0);
    }

    #[test]
    fn a_damaged_length_drops_the_rest_instead_of_reading_past_the_head() {
        let r = Ring::new(16);
        assert!(r.push(&[1, 2]));
        r.word(0).store(1000, Ordering::Relaxed);
        let mut n = 0;
        assert_eq!(r.drain(&mut Vec::new(), |_| n += 1), 0);
        assert!(r.push(&[3]), "the ring is usable again");
        assert_eq!(r.drain(&mut Vec::new(), |rec| assert_eq!(rec, [3])), 1);
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
            if done && r.header().head.load(Ordering::Acquire) == r.header().tail.load(Ordering::Acquire) {
                break;
            }
        }
        assert!(ok, "records torn or out of order");
        assert_eq!(got, producer.join().unwrap());
    }
}
