//! One sample of a thread other than R's main thread, taken in the timer's
//! signal handler on that thread: its native stack only, walked from the
//! interrupted registers over a copy of its own stack. The R stack it is
//! shown under is the main thread's (see `collect`): the record names the
//! main thread's last sample and the innermost R context record of this
//! moment, so the two can be joined when both are collected.
//!
//! The thread's stack bounds are not known in a signal handler (asking
//! glibc takes a lock), so the stack is read through the kernel
//! (`process_vm_readv` of this process), a page at a time from the
//! interrupted stack pointer up, as far as the walk needs: a read past the
//! end of the stack fails instead of faulting. Async-signal-safe: buffers
//! preallocated, no lock, system calls only `process_vm_readv` and
//! `clock_gettime`.

use super::super::compose::Moment;
use super::super::record::{Entry, Flags, Header, Origin, Prefix, Writer, PREFIX};
use super::clock::now_ns;
use super::ring::Ring;
use super::sample::{Outcome, Tick};
use crate::unwind::walk::{Caches, End, Frame, Sizes};
use std::cell::Cell;

/// Frames of another thread's sample at most.
const MAX_FRAMES: usize = 1024;
/// Bytes of another thread's stack read at most (deeper stacks are
/// truncated and say so).
const STACK_BYTES: usize = 256 << 10;
const PAGE: usize = 4096;
/// Pages copied per system call.
const CHUNK_PAGES: usize = 4;

/// Buffers of one sampling slot.
pub struct WorkerScratch {
    frames: Box<[Frame]>,
    record: Box<[u64]>,
    caches: Caches,
    stack: Box<[u8]>,
}

impl Default for WorkerScratch {
    fn default() -> WorkerScratch {
        let mut s = WorkerScratch {
            frames: vec![Frame::default(); MAX_FRAMES].into_boxed_slice(),
            record: vec![0; PREFIX + MAX_FRAMES].into_boxed_slice(),
            caches: Caches::new(Sizes::THREADS),
            stack: vec![0; STACK_BYTES].into_boxed_slice(),
        };
        crate::memory::prefault(&mut s.frames);
        crate::memory::prefault(&mut s.record);
        crate::memory::prefault(&mut s.stack);
        s
    }
}

/// The stack from `base` up, copied on demand into `buf`.
struct StackCopy<'a> {
    pid: libc::pid_t,
    base: usize,
    buf: &'a mut [u8],
    copied: Cell<usize>,
    /// The copy reached memory that cannot be read (the stack's end).
    ended: Cell<bool>,
}

impl StackCopy<'_> {
    /// Copies up to `want` bytes from `base`; false if they cannot all be
    /// had.
    fn reach(&self, want: usize) -> bool {
        while self.copied.get() < want {
            if self.ended.get() || self.copied.get() >= self.buf.len() {
                return false;
            }
            let from = self.base + self.copied.get();
            let mut remote = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; CHUNK_PAGES];
            let mut at = from;
            let mut total = 0;
            for r in remote.iter_mut() {
                let page_end = (at / PAGE + 1) * PAGE;
                let len = (page_end - at).min(self.buf.len() - self.copied.get() - total);
                if len == 0 {
                    break;
                }
                *r = libc::iovec { iov_base: at as *mut libc::c_void, iov_len: len };
                at += len;
                total += len;
            }
            let iovs = remote.iter().take_while(|r| r.iov_len > 0).count();
            let local = libc::iovec {
                // SAFETY: the destination lies inside `buf` (total bytes
                // from `copied`, bounded by its length above).
                iov_base: unsafe { self.buf.as_ptr().add(self.copied.get()) } as *mut libc::c_void,
                iov_len: total,
            };
            // SAFETY: the kernel checks the remote ranges; the local one is
            // inside `buf`, which nothing else touches meanwhile.
            let n = unsafe { libc::process_vm_readv(self.pid, &local, 1, remote.as_ptr(), iovs as _, 0) };
            if n <= 0 {
                self.ended.set(true);
                return false;
            }
            self.copied.set(self.copied.get() + n as usize);
            if (n as usize) < total {
                self.ended.set(true);
            }
        }
        true
    }

    fn word(&self, addr: usize) -> Option<usize> {
        let off = addr.checked_sub(self.base)?;
        if !addr.is_multiple_of(8) || !self.reach(off.checked_add(8)?) {
            return None;
        }
        let b = self.buf.get(off..off + 8)?;
        Some(usize::from_ne_bytes(b.try_into().ok()?))
    }
}

/// What a sample carries besides its stack: the innermost frames to leave
/// out (those of the code that takes the sample, when it is not a signal
/// handler: the allocation hook), entries to put innermost (`[kernel]`,
/// see `kernel`), and words to end the record with (an allocation's
/// number and bytes).
#[derive(Clone, Copy)]
pub struct Extra<'a> {
    pub skip: &'a dyn Fn(usize) -> bool,
    pub head: &'a [u64],
    pub tail: &'a [u64],
}

impl Extra<'_> {
    /// Nothing left out, nothing added: a timer's sample.
    pub const NONE: Extra<'static> = Extra { skip: &|_| false, head: &[], tail: &[] };
}

/// The sampled thread: the process (whose memory holds its stack) and its
/// kernel id.
#[derive(Clone, Copy, Debug)]
pub struct ThreadId {
    pub pid: libc::pid_t,
    pub tid: i32,
}

/// Takes one sample of the calling thread (not R's main thread) from the
/// interrupted registers, as a record of its native frames pushed to
/// `ring`: at `at` (the number of R's main thread's sample to join, and the
/// innermost context record of R at this moment, see `collect`), with the
/// tick's weight and flags and `extra`'s frames left out and words added.
pub fn sample_worker(
    regs: (usize, usize, usize),
    tick: Tick,
    at: Moment,
    extra: Extra,
    thread: ThreadId,
    s: &mut WorkerScratch,
    ring: &Ring,
) -> Outcome {
    let Moment { snapshot: snap, index, seq: link, context, .. } = at;
    let ThreadId { pid, tid } = thread;
    let stack = StackCopy {
        pid,
        base: regs.1 & !7,
        buf: &mut s.stack,
        copied: Cell::new(0),
        ended: Cell::new(false),
    };
    let (n, end) = snap.walk_with(&mut s.caches, regs, |a| stack.word(a), &mut s.frames);
    let mut flags = Flags::WORKER | tick.flags;
    if end != End::Outermost {
        flags |= Flags::TRUNCATED_NATIVE;
    }
    let mut w = Writer::new(&mut s.record);
    for &word in extra.head {
        w.push(word);
    }
    // Frames of the sampler's own caller left out (an allocation hook).
    let first = s.frames[..n].iter().position(|f| !(extra.skip)(f.ip)).unwrap_or(n);
    for (i, f) in s.frames[..n].iter().enumerate().skip(first) {
        w.push(Entry::native(f.ip, i == 0));
    }
    for &word in extra.tail {
        w.push(word);
    }
    let spent = now_ns().saturating_sub(tick.started_ns);
    let origin = Origin::thread(index, tid as u32);
    let header = Header { flags, weight: tick.weight, handler_ns: spent };
    let pushed = ring.push(w.finish(Prefix { header, origin, link, context }));
    Outcome { flags, frames: n, pushed, outside: false }
}

#[cfg(all(test, target_arch = "x86_64", target_os = "linux"))]
mod tests {
    use super::*;
    use crate::unwind::walk::Snapshot;

    #[test]
    fn a_stack_copy_reads_what_is_mapped_and_stops_at_the_end() {
        // A buffer of 3 pages whose last page is made unreadable.
        // SAFETY: a fresh anonymous mapping of our own.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                3 * PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        } as usize;
        assert_ne!(base, libc::MAP_FAILED as usize);
        for k in 0..(2 * PAGE / 8) {
            // SAFETY: inside the first two pages of the mapping.
            unsafe { *((base + 8 * k) as *mut usize) = k };
        }
        // SAFETY: the third page of the mapping.
        unsafe { libc::mprotect((base + 2 * PAGE) as *mut libc::c_void, PAGE, libc::PROT_NONE) };
        let mut buf = vec![0u8; 8 * PAGE];
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        let start = base + 16;
        let c = StackCopy { pid, base: start, buf: &mut buf, copied: Cell::new(0), ended: Cell::new(false) };
        assert_eq!(c.word(start), Some(2));
        assert_eq!(c.word(base + PAGE + 8), Some(PAGE / 8 + 1), "across a page");
        assert_eq!(c.word(base + 2 * PAGE - 8), Some(2 * PAGE / 8 - 1));
        assert_eq!(c.word(base + 2 * PAGE), None, "the unreadable page");
        assert_eq!(c.word(base + 8), None, "below the copy's start");
        assert_eq!(c.word(start + 3), None, "unaligned");
        // SAFETY: unmaps the mapping made above.
        unsafe { libc::munmap(base as *mut libc::c_void, 3 * PAGE) };
    }

    #[test]
    fn another_threads_sample_walks_its_whole_stack() {
        let h = std::thread::spawn(|| {
            let snap = Snapshot::take(0);
            let mut s = WorkerScratch::default();
            let ring = Ring::new(1 << 14);
            let regs = crate::unwind::registers();
            // SAFETY: getpid has no preconditions.
            let pid = unsafe { libc::getpid() };
            let tick = Tick { weight: 1, flags: Flags::NONE, started_ns: 0 };
            let at = Moment { snapshot: &snap, index: 3, seq: 5, context: 0x1000, fork: &[] };
            let thread = ThreadId { pid, tid: 77 };
            let out = sample_worker(regs, tick, at, Extra::NONE, thread, &mut s, &ring);
            let mut rec = Vec::new();
            ring.drain(&mut Vec::new(), |r| rec = r.to_vec());
            (out, rec)
        });
        let (out, rec) = h.join().unwrap();
        assert!(out.pushed && out.frames >= 3, "{out:?}");
        assert!(!out.flags.contains(Flags::TRUNCATED_NATIVE), "walked to the thread's start");
        let (prefix, entries) = crate::profile::record::split(&rec).unwrap();
        assert_eq!(prefix.origin, Origin::thread(3, 77));
        assert_eq!((prefix.link, prefix.context), (5, 0x1000));
        assert!(prefix.header.flags.contains(Flags::WORKER));
        assert!(entries.iter().all(|&e| Entry::is_native(e)));
        assert!(matches!(Entry::decode(entries[0]), Entry::Native { exact: true, .. }));
    }

    /// Samples the calling thread with `extra`, at weight 3 and with the
    /// allocation flag, into a ring of `ring_words`; the outcome and the
    /// record taken.
    fn sample_here(extra: Extra, ring_words: usize) -> (Outcome, Vec<u64>, Vec<u64>) {
        let snap = Snapshot::take(0);
        let mut s = WorkerScratch::default();
        let ring = Ring::new(ring_words);
        let regs = crate::unwind::registers();
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        let tick = Tick { weight: 3, flags: Flags::ALLOC, started_ns: now_ns() };
        let at = Moment { snapshot: &snap, index: 0, seq: 1, context: 0, fork: &[] };
        // The same stack without anything left out, for comparison.
        let all = {
            let mut all = WorkerScratch::default();
            let r = Ring::new(1 << 14);
            sample_worker(regs, tick, at, Extra::NONE, ThreadId { pid, tid: 1 }, &mut all, &r);
            let mut rec = Vec::new();
            r.drain(&mut Vec::new(), |x| rec = x.to_vec());
            rec
        };
        let out = sample_worker(regs, tick, at, extra, ThreadId { pid, tid: 1 }, &mut s, &ring);
        let mut rec = Vec::new();
        ring.drain(&mut Vec::new(), |x| rec = x.to_vec());
        (out, rec, all)
    }

    #[test]
    fn the_samplers_own_frames_are_left_out_and_its_words_added() {
        let h = std::thread::spawn(|| {
            // Leave out the innermost frame (this function's caller's code
            // is `sample_here`, whatever its address): every ip equal to
            // the first frame's.
            let (_, _, all) = sample_here(Extra::NONE, 1 << 14);
            let innermost = crate::profile::record::split(&all).unwrap().1[0];
            let skip_ip = Entry::ip_of(innermost).unwrap();
            let skip = move |ip: usize| ip == skip_ip;
            let tail = crate::profile::record::alloc_tail(42, 4096);
            let (out, rec, all) = sample_here(Extra { skip: &skip, head: &[], tail: &tail }, 1 << 14);
            (out, rec, all, skip_ip)
        });
        let (out, rec, all, skip_ip) = h.join().unwrap();
        assert!(out.pushed);
        let (prefix, entries) = crate::profile::record::split(&rec).unwrap();
        assert_eq!(prefix.header.weight, 3);
        assert!(prefix.header.flags.contains(Flags::ALLOC | Flags::WORKER));
        let (stack, (number, bytes)) = crate::profile::record::split_alloc_tail(entries).unwrap();
        assert_eq!((number, bytes), (42, 4096));
        assert!(stack.iter().all(|&e| Entry::ip_of(e) != Some(skip_ip)), "the left-out frame is gone");
        let whole = crate::profile::record::split(&all).unwrap().1;
        assert_eq!(stack, &whole[1..], "the rest of the stack is kept as it was");
    }

    #[test]
    fn a_sample_that_does_not_fit_is_not_pushed() {
        let h = std::thread::spawn(|| sample_here(Extra::NONE, 8));
        let (out, rec, _) = h.join().unwrap();
        assert!(
            !out.pushed && rec.is_empty(),
            "a full ring refuses the record: the caller counts it dropped"
        );
        assert!(out.frames >= 3);
    }
}
