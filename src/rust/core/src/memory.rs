//! The one memory interface: everything winch reads of a process (R's
//! context records and objects, stacks, unwind tables) goes through
//! [`Memory`], whatever the source:
//!
//! * [`Own`]: this process, fault-free (through the kernel where it allows);
//! * [`Live`]: this process seen from the capturing thread: its live stack
//!   and R's node stack in place, the rest fault-free;
//! * [`Ranges`]: this process from a signal handler: in place, only inside
//!   ranges checked beforehand (no allocation, no system call);
//! * [`Objects`]: R objects of this process, in place (live objects only);
//! * [`Process`]: another process, through `process_vm_readv`;
//! * `Image` (tests): bytes at addresses held in memory, the synthetic
//!   images tests build.
//!
//! Loaded images are file-backed mappings: if a library's file is truncated
//! on disk, touching a page past the new end raises SIGBUS, even for pages R
//! never uses. Everything winch reads from loaded images (program headers,
//! notes, unwind tables) and from R's heap is therefore copied through
//! `process_vm_readv` on our own pid, which reports such pages as an error.

use std::sync::atomic::{AtomicU8, Ordering};

#[cfg(test)]
mod image;
mod paged;
mod sources;
#[cfg(test)]
pub use image::{Counted, Image};
pub use paged::Paged;
pub use sources::{stack_word, Live, Objects, Own, Process, Ranges};

/// Reads a process's memory. Implementations decide what may be read and
/// how; a read that cannot be done returns false, never faults.
pub trait Memory {
    /// Fills `buf` from `addr`; false if any byte is unreadable.
    fn read(&self, addr: usize, buf: &mut [u8]) -> bool;

    /// The word at `addr`.
    fn word(&self, addr: usize) -> Option<usize> {
        let mut b = [0u8; std::mem::size_of::<usize>()];
        self.read(addr, &mut b).then(|| usize::from_ne_bytes(b))
    }

    /// The C `int` at `addr`.
    fn int(&self, addr: usize) -> Option<i32> {
        let mut b = [0u8; 4];
        self.read(addr, &mut b).then(|| i32::from_ne_bytes(b))
    }

    /// `out.len()` bytes at `addr` (a string's bytes).
    fn bytes(&self, addr: usize, out: &mut [u8]) -> Option<()> {
        self.read(addr, out).then_some(())
    }

    /// Whether each read has a fixed cost worth saving (a system call):
    /// readers of records then read a whole record at once rather than
    /// field by field.
    fn bulk(&self) -> bool {
        false
    }

    /// `len` bytes at `addr` seen where they are, when this memory reads in
    /// place and may read all of them: one check for a whole record instead
    /// of one per field. The bytes must not change while the view is used
    /// (the signal handlers read R's memory while R's thread is stopped).
    fn in_place(&self, _addr: usize, _len: usize) -> Option<&[u8]> {
        None
    }

    /// Reads each of `ranges` (address, length) into its part of `buf`
    /// (the ranges' bytes laid end to end); `ok[i]` says whether range `i`
    /// was read whole. Sources whose reads are system calls read many
    /// ranges per call.
    fn read_scattered(&self, ranges: &[(usize, usize)], buf: &mut [u8], ok: &mut [bool]) {
        read_each(self, ranges, buf, ok)
    }
}

/// [`Memory::read_scattered`] one range at a time through `mem.read`.
pub fn read_each<M: Memory + ?Sized>(mem: &M, ranges: &[(usize, usize)], buf: &mut [u8], ok: &mut [bool]) {
    let mut at = 0;
    for (i, &(addr, len)) in ranges.iter().enumerate() {
        ok[i] = buf.get_mut(at..at + len).is_some_and(|b| mem.read(addr, b));
        at += len;
    }
}

impl<M: Memory + ?Sized> Memory for &M {
    fn read(&self, addr: usize, buf: &mut [u8]) -> bool {
        (**self).read(addr, buf)
    }
    fn word(&self, addr: usize) -> Option<usize> {
        (**self).word(addr)
    }
    fn int(&self, addr: usize) -> Option<i32> {
        (**self).int(addr)
    }
    fn bulk(&self) -> bool {
        (**self).bulk()
    }
    fn in_place(&self, addr: usize, len: usize) -> Option<&[u8]> {
        (**self).in_place(addr, len)
    }
    fn read_scattered(&self, ranges: &[(usize, usize)], buf: &mut [u8], ok: &mut [bool]) {
        (**self).read_scattered(ranges, buf, ok)
    }
}

/// Asks the CPU to start loading the cache line at `addr` (any address:
/// a prefetch never faults). A signal handler's reads depend on one another
/// (a frame's return address gives the next frame), so each would wait for
/// memory in turn; prefetching the addresses the last sample read lets
/// those loads overlap.
#[inline(always)]
pub fn prefetch(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch hint reads nothing architecturally and cannot fault.
    unsafe {
        std::arch::x86_64::_mm_prefetch(addr as *const i8, std::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

/// Touches every page of `v`, so that the kernel maps them now and not in
/// a signal handler (fresh zeroed allocations are mapped on first use).
pub fn prefault<T: Copy>(v: &mut [T]) {
    let step = (4096 / std::mem::size_of::<T>().max(1)).max(1);
    for i in (0..v.len()).step_by(step) {
        let p = &mut v[i] as *mut T;
        // SAFETY: `p` points into `v`; rewrites the element's own value.
        unsafe { std::ptr::write_volatile(p, std::ptr::read_volatile(p)) };
    }
}

/// Copies `buf.len()` bytes from `addr` of this process; false if any byte
/// is unreadable (or the kernel refuses the call).
pub fn read(addr: usize, buf: &mut [u8]) -> bool {
    read_from(own_pid(), addr, buf)
}

#[cfg(target_os = "linux")]
fn own_pid() -> i32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() }
}

#[cfg(not(target_os = "linux"))]
fn own_pid() -> i32 {
    0
}

/// [`Memory::read_scattered`] from this process: up to 1024 ranges per
/// system call. The kernel stops at the first range it cannot read; the
/// call is made again from the range after it.
#[cfg(target_os = "linux")]
pub fn read_scattered(ranges: &[(usize, usize)], buf: &mut [u8], ok: &mut [bool]) {
    read_scattered_from(own_pid(), ranges, buf, ok)
}

/// [`read_scattered`] from process `pid`.
#[cfg(target_os = "linux")]
pub fn read_scattered_from(pid: i32, ranges: &[(usize, usize)], buf: &mut [u8], ok: &mut [bool]) {
    const BATCH: usize = 1024;
    let mut starts = Vec::with_capacity(ranges.len());
    let mut at = 0usize;
    for &(_, len) in ranges {
        starts.push(at);
        at += len;
    }
    if at > buf.len() || ok.len() < ranges.len() {
        ok.iter_mut().for_each(|o| *o = false);
        return;
    }
    let mut first = 0;
    while first < ranges.len() {
        let last = (first + BATCH).min(ranges.len());
        let mut local = Vec::with_capacity(last - first);
        let mut remote = Vec::with_capacity(last - first);
        for i in first..last {
            let (addr, len) = ranges[i];
            local.push(libc::iovec {
                iov_base: buf[starts[i]..].as_mut_ptr() as *mut libc::c_void,
                iov_len: len,
            });
            remote.push(libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: len });
        }
        // SAFETY: the kernel checks the remote ranges; each local one is a
        // part of `buf` (checked above to hold them all).
        let n = unsafe {
            libc::process_vm_readv(
                pid,
                local.as_ptr(),
                local.len() as _,
                remote.as_ptr(),
                remote.len() as _,
                0,
            )
        };
        // Ranges read whole, in order, then the one that failed.
        let mut got = usize::try_from(n).unwrap_or(0);
        let mut i = first;
        while i < last && got >= ranges[i].1 {
            ok[i] = true;
            got -= ranges[i].1;
            i += 1;
        }
        if i < last {
            ok[i] = false;
            i += 1;
        }
        first = i;
    }
}

/// Copies `buf.len()` bytes from `addr` of process `pid`.
#[cfg(target_os = "linux")]
fn read_from(pid: i32, addr: usize, buf: &mut [u8]) -> bool {
    if buf.is_empty() {
        return true;
    }
    if addr.checked_add(buf.len()).is_none() {
        return false;
    }
    let local = libc::iovec { iov_base: buf.as_mut_ptr() as *mut libc::c_void, iov_len: buf.len() };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
    // SAFETY: the kernel checks the remote range; the local one is `buf`.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    n == buf.len() as isize
}

#[cfg(not(target_os = "linux"))]
fn read_from(_pid: i32, _addr: usize, _buf: &mut [u8]) -> bool {
    false
}

/// A copy of `len` bytes at `addr`, if all are readable.
pub fn copy(addr: usize, len: usize) -> Option<Vec<u8>> {
    let mut v = vec![0u8; len];
    read(addr, &mut v).then_some(v)
}

/// Whether the kernel lets this process read its own memory this way (a
/// seccomp profile may refuse `process_vm_readv`). Checked once. Setting the
/// environment variable `WINCH_NO_PROCESS_VM_READV=1` makes it false (to test
/// the fallbacks).
pub fn available() -> bool {
    static STATE: AtomicU8 = AtomicU8::new(0); // 0 unknown, 1 yes, 2 no
    match STATE.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let probe = [0x5au8; 8];
            let mut out = [0u8; 8];
            let refused = std::env::var_os("WINCH_NO_PROCESS_VM_READV").is_some_and(|v| v == "1");
            let ok =
                !refused && read(std::hint::black_box(&probe) as *const _ as usize, &mut out) && out == probe;
            STATE.store(if ok { 1 } else { 2 }, Ordering::Relaxed);
            ok
        }
    }
}

/// A copy of `len` bytes of a loaded image at `addr`, read as [`Own`]
/// reads: through the kernel when it allows, else in place (which a library
/// truncated on disk would turn into SIGBUS; the caller has checked that
/// the range lies in a readable segment of a loaded module).
///
/// # Safety
/// `addr..addr + len` must lie in a readable mapped segment (what `Own`
/// reads in place when the kernel refuses).
pub unsafe fn copy_loaded(addr: usize, len: usize) -> Option<Vec<u8>> {
    let mut v = vec![0u8; len];
    Own.read(addr, &mut v).then_some(v)
}

/// The mapping of this process that contains `addr`, as `[start, end)`, from
/// `/proc/self/maps` (not async-signal-safe: it allocates and reads a file).
pub fn mapping_containing(addr: usize) -> Option<(usize, usize)> {
    let maps = crate::procfs::read_maps(crate::procfs::Proc::This).ok()?;
    let found = crate::procfs::maps_lines(&maps).find(|l| l.start <= addr && addr < l.end);
    found.map(|l| (l.start, l.end))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn scattered_reads_go_on_past_a_range_that_cannot_be_read() {
        assert!(available());
        let (a, b, c) = (*b"first", *b"second!", *b"third");
        let ranges = [
            (a.as_ptr() as usize, 5),
            (8usize, 4), // never mapped
            (b.as_ptr() as usize, 7),
            (c.as_ptr() as usize, 5),
        ];
        let mut buf = vec![0u8; 21];
        let mut ok = vec![false; 4];
        read_scattered(&ranges, &mut buf, &mut ok);
        assert_eq!(ok, [true, false, true, true]);
        assert_eq!(&buf[..5], b"first");
        assert_eq!(&buf[9..16], b"second!");
        assert_eq!(&buf[16..], b"third");
        // Through the trait's default (one read per range), the same.
        let mut buf2 = vec![0u8; 21];
        let mut ok2 = vec![false; 4];
        Objects.read_scattered(&ranges, &mut buf2, &mut ok2);
        assert_eq!(ok2, [true, false, true, true]);
        assert_eq!(&buf2[16..], b"third");
    }

    #[test]
    fn copies_readable_memory_and_refuses_the_rest() {
        assert!(available());
        let data = vec![1u8, 2, 3, 4, 5];
        assert_eq!(copy(data.as_ptr() as usize, 5), Some(data.clone()));
        assert_eq!(copy(8, 16), None);
        assert_eq!(copy(usize::MAX - 2, 8), None);
        assert_eq!(copy(data.as_ptr() as usize, 0), Some(vec![]));
    }

    #[test]
    fn the_mapping_of_a_heap_block() {
        let block = vec![0u8; 8 << 20];
        let addr = block.as_ptr() as usize + block.len() - 1;
        let (lo, hi) = mapping_containing(addr).unwrap();
        assert!(lo <= block.as_ptr() as usize && addr < hi);
        assert_eq!(mapping_containing(8), None);
    }

    #[test]
    fn a_truncated_file_mapping_is_an_error_not_a_signal() {
        // Map two pages of a file, then truncate the file: the pages are now
        // beyond its end, where a direct read would raise SIGBUS.
        let path = std::env::temp_dir().join(format!("winch-sigbus-{}", std::process::id()));
        std::fs::write(&path, vec![7u8; 8192]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        use std::os::unix::io::AsRawFd;
        // SAFETY: a fresh private read-only mapping of our own file.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), 8192, libc::PROT_READ, libc::MAP_PRIVATE, file.as_raw_fd(), 0)
        };
        assert_ne!(p, libc::MAP_FAILED);
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(0).unwrap();
        assert_eq!(copy(p as usize + 4096, 16), None);
        // SAFETY: unmapping what was mapped above.
        unsafe { libc::munmap(p, 8192) };
        let _ = std::fs::remove_file(&path);
    }
}
