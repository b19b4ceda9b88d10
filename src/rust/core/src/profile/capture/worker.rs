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

use super::super::record::{Entry, Flags, Header, Origin, Prefix, Writer, PREFIX};
use super::ring::Ring;
use super::sample::Outcome;
use crate::unwind::walk::{Caches, End, Frame, Sizes, Snapshot};
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

/// Takes one sample of the calling thread (not R's main thread) from the
/// interrupted registers, as a record `[header, snapshot | tid, link,
/// context, native entry...]` pushed to `ring`: `link` the number of R's
/// main thread's sample to join, `context` the innermost context record of
/// R at this moment (see `collect`), `weight` the intervals it stands for,
/// `extra` header flags, and `skip` telling the innermost frames to leave
/// out (those of the code that takes the sample, not a signal handler);
/// `tail`, words to end the record with.
#[allow(clippy::too_many_arguments)]
pub fn sample_worker(
    regs: (usize, usize, usize),
    (weight, extra, skip, tail): (u64, Flags, &dyn Fn(usize) -> bool, &[u64]),
    started_ns: u64,
    now_ns: impl Fn() -> u64,
    (snap, index): (&Snapshot, u32),
    (pid, tid): (libc::pid_t, i32),
    (link, context): (u64, u64),
    s: &mut WorkerScratch,
    ring: &Ring,
) -> Outcome {
    let stack = StackCopy {
        pid,
        base: regs.1 & !7,
        buf: &mut s.stack,
        copied: Cell::new(0),
        ended: Cell::new(false),
    };
    let (n, end) = snap.walk_with(&mut s.caches, regs, |a| stack.word(a), &mut s.frames);
    let mut flags = Flags::WORKER | extra;
    if end != End::Outermost {
        flags |= Flags::TRUNCATED_NATIVE;
    }
    let mut w = Writer::new(&mut s.record);
    // Frames of the sampler's own caller left out (an allocation hook).
    let first = s.frames[..n].iter().position(|f| !skip(f.ip)).unwrap_or(n);
    for (i, f) in s.frames[..n].iter().enumerate().skip(first) {
        w.push(Entry::native(f.ip, i == 0));
    }
    for &word in tail {
        w.push(word);
    }
    let spent = now_ns().saturating_sub(started_ns);
    let origin = Origin { snapshot: index, tid: tid as u32, uncertain: false };
    let header = Header { flags, weight, handler_ns: spent };
    let pushed = ring.push(w.finish(Prefix { header, origin, link, context }));
    Outcome { flags, frames: n, pushed, outside: false }
}

#[cfg(all(test, target_arch = "x86_64", target_os = "linux"))]
mod tests {
    use super::*;

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
            let out = sample_worker(
                regs,
                (1, Flags::NONE, &|_| false, &[]),
                0,
                || 0,
                (&snap, 3),
                (pid, 77),
                (5, 0x1000),
                &mut s,
                &ring,
            );
            let mut rec = Vec::new();
            ring.drain(&mut Vec::new(), |r| rec = r.to_vec());
            (out, rec)
        });
        let (out, rec) = h.join().unwrap();
        assert!(out.pushed && out.frames >= 3, "{out:?}");
        assert!(!out.flags.contains(Flags::TRUNCATED_NATIVE), "walked to the thread's start");
        let (prefix, entries) = crate::profile::record::split(&rec).unwrap();
        assert_eq!(prefix.origin, Origin { snapshot: 3, tid: 77, uncertain: false });
        assert_eq!((prefix.link, prefix.context), (5, 0x1000));
        assert!(prefix.header.flags.contains(Flags::WORKER));
        assert!(entries.iter().all(|&e| Entry::is_native(e)));
        assert!(matches!(Entry::decode(entries[0]), Entry::Native { exact: true, .. }));
    }
}
