//! The sources of [`Memory`] for live processes: this one, seen in several
//! ways, and another one.

use super::Memory;

/// Addresses user space can hold on x86_64 Linux (47 bits).
const USER_TOP: usize = 1 << 47;

/// Whether `addr..addr + len` may hold user data at all.
#[inline]
fn plausible(addr: usize, len: usize) -> bool {
    addr >= 4096 && addr.checked_add(len).is_some_and(|e| e <= USER_TOP)
}

/// Copies in place.
///
/// # Safety
/// `addr..addr + buf.len()` must be mapped and readable.
#[inline]
unsafe fn copy_in_place(addr: usize, buf: &mut [u8]) {
    if buf.len() == std::mem::size_of::<usize>() && addr.is_multiple_of(std::mem::align_of::<usize>()) {
        // One aligned load (a word R may be writing is read whole).
        // SAFETY: the caller's contract.
        let w = unsafe { std::ptr::read_volatile(addr as *const usize) };
        buf.copy_from_slice(&w.to_ne_bytes());
    } else {
        // SAFETY: the caller's contract; `buf` is ours.
        unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, buf.as_mut_ptr(), buf.len()) };
    }
}

/// An aligned word of the stack `[lo, hi)`, read in place; None outside
/// it. What unwinders read, in signal handlers and hooks too.
///
/// # Safety
/// `[lo, hi)` must stay mapped while the call runs (a live thread's stack).
#[inline]
pub unsafe fn stack_word((lo, hi): (usize, usize), addr: usize) -> Option<usize> {
    (addr >= lo && addr.is_multiple_of(8) && addr.checked_add(8).is_some_and(|e| e <= hi))
        // SAFETY: an aligned word inside the stack (the caller's contract).
        .then(|| unsafe { std::ptr::read_volatile(addr as *const usize) })
}

/// This process, fault-free: through the kernel where it allows (a damaged
/// pointer is then an error, not a fault), else in place at plausible
/// addresses. Async-signal-safe (one system call per read).
#[derive(Clone, Copy, Debug, Default)]
pub struct Own;

impl Memory for Own {
    #[inline]
    fn read(&self, addr: usize, buf: &mut [u8]) -> bool {
        if super::available() {
            super::read(addr, buf)
        } else {
            Objects.read(addr, buf)
        }
    }

    fn bulk(&self) -> bool {
        true
    }

    fn read_scattered(&self, ranges: &[(usize, usize)], buf: &mut [u8], ok: &mut [bool]) {
        #[cfg(target_os = "linux")]
        if super::available() {
            return super::read_scattered(ranges, buf, ok);
        }
        super::read_each(self, ranges, buf, ok)
    }
}

/// R objects of this process, read in place: only objects alive while the
/// reader runs (those reachable from R's current context records, which R
/// never moves) may be asked for. Null, misaligned and non-user addresses
/// are refused, so a damaged pointer ends a read in the cases that can be
/// detected. Async-signal-safe.
#[derive(Clone, Copy, Debug, Default)]
pub struct Objects;

impl Memory for Objects {
    #[inline]
    fn read(&self, addr: usize, buf: &mut [u8]) -> bool {
        if !plausible(addr, buf.len()) {
            return false;
        }
        // SAFETY: bytes of a live object (see the type's docs).
        unsafe { copy_in_place(addr, buf) };
        true
    }

    #[inline]
    fn word(&self, addr: usize) -> Option<usize> {
        if !plausible(addr, 8) || !addr.is_multiple_of(8) {
            return None;
        }
        // SAFETY: an aligned word of a live object (see the type's docs).
        Some(unsafe { std::ptr::read_volatile(addr as *const usize) })
    }
}

/// This process from a signal handler: in place, and only inside ranges
/// that stay mapped while R runs (checked before sampling: the main
/// thread's stack, R's node stack, R's writable data). No allocation, no
/// system call.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ranges {
    /// The main thread's stack.
    pub stack: (usize, usize),
    /// R's node stack (R >= 4.4 keeps byte-code calls' records there).
    pub node_stack: (usize, usize),
    /// R's writable data (the top-level context), up to four segments.
    pub data: [(usize, usize); 4],
}

impl Ranges {
    /// Whether `addr..addr + len` lies inside one of the ranges.
    #[inline]
    pub fn holds(&self, addr: usize, len: usize) -> bool {
        let Some(end) = addr.checked_add(len) else { return false };
        let inside = |&(lo, hi): &(usize, usize)| addr >= lo && end <= hi;
        inside(&self.stack) || inside(&self.node_stack) || self.data.iter().any(inside)
    }

    /// Whether `addr` is on the main thread's stack.
    #[inline]
    pub fn on_stack(&self, addr: usize) -> bool {
        addr >= self.stack.0 && addr < self.stack.1
    }
}

impl Memory for Ranges {
    #[inline]
    fn read(&self, addr: usize, buf: &mut [u8]) -> bool {
        if !self.holds(addr, buf.len()) {
            return false;
        }
        // SAFETY: inside a range that stays mapped (see the type's docs).
        unsafe { copy_in_place(addr, buf) };
        true
    }

    #[inline]
    fn word(&self, addr: usize) -> Option<usize> {
        self.holds(addr, 8).then(|| {
            // SAFETY: inside a range that stays mapped (see the type's docs).
            unsafe { std::ptr::read_volatile(addr as *const usize) }
        })
    }

    #[inline]
    fn int(&self, addr: usize) -> Option<i32> {
        self.holds(addr, 4).then(|| {
            // SAFETY: as for `word`.
            unsafe { std::ptr::read_volatile(addr as *const i32) }
        })
    }
    #[inline]
    fn in_place(&self, addr: usize, len: usize) -> Option<&[u8]> {
        self.holds(addr, len).then(|| {
            // SAFETY: inside a range that stays mapped (see the type's docs).
            unsafe { std::slice::from_raw_parts(addr as *const u8, len) }
        })
    }
}

/// This process seen from the capturing thread: direct reads on the live
/// part of the current thread's stack and on R's node stack (where R >= 4.4
/// keeps the records of byte-code calls), kernel copies elsewhere. Where the
/// kernel refuses those copies (a seccomp profile), `fallback` ranges,
/// writable data of R's own library (where R keeps its top-level context),
/// are read directly; anything else is then unreadable and placement falls
/// back.
pub struct Live {
    /// [stack_lo, stack_hi): the live part of the current thread's stack, or
    /// an empty range when the reader is not on its thread's stack.
    pub stack_lo: usize,
    pub stack_hi: usize,
    /// Heap memory that stays mapped while R runs (R's node stack, allocated
    /// once at start-up and never freed).
    pub always: Vec<(usize, usize)>,
    pub fallback: Vec<(usize, usize)>,
}

impl Live {
    /// The memory of the calling thread, seen from address `here` in the
    /// caller's frame.
    pub fn new(here: usize, always: Vec<(usize, usize)>, fallback: Vec<(usize, usize)>) -> Live {
        let (stack_lo, stack_hi) = crate::stack::live_range(here).unwrap_or((0, 0));
        Live { stack_lo, stack_hi, always, fallback }
    }
}

impl Memory for Live {
    #[inline]
    fn read(&self, addr: usize, buf: &mut [u8]) -> bool {
        let Some(end) = addr.checked_add(buf.len()) else { return false };
        let direct = |lo: usize, hi: usize| addr >= lo && end <= hi;
        if direct(self.stack_lo, self.stack_hi) || self.always.iter().any(|&(lo, hi)| direct(lo, hi)) {
            // SAFETY: the live part of our stack, or a range that stays
            // mapped (see the fields' docs).
            unsafe { copy_in_place(addr, buf) };
            return true;
        }
        if super::available() {
            return super::read(addr, buf);
        }
        if self.fallback.iter().any(|&(lo, hi)| direct(lo, hi)) {
            // SAFETY: writable data of a loaded module (see the type's docs).
            unsafe { copy_in_place(addr, buf) };
            return true;
        }
        false
    }

    fn bulk(&self) -> bool {
        true
    }
}

/// Another process (or this one), read through `process_vm_readv`, or,
/// where the kernel refuses that call (a seccomp profile: see
/// [`super::available`]), through `/proc/PID/mem`: needs the right to
/// trace it (the same user, and ptrace's access mode). Each read is one
/// system call.
#[derive(Clone, Copy, Debug)]
pub struct Process {
    pub pid: i32,
}

impl Memory for Process {
    #[inline]
    fn read(&self, addr: usize, buf: &mut [u8]) -> bool {
        if super::available() {
            super::read_from(self.pid, addr, buf)
        } else {
            read_proc_mem(self.pid, addr, buf)
        }
    }

    fn bulk(&self) -> bool {
        true
    }

    fn read_scattered(&self, ranges: &[(usize, usize)], buf: &mut [u8], ok: &mut [bool]) {
        #[cfg(target_os = "linux")]
        if super::available() {
            return super::read_scattered_from(self.pid, ranges, buf, ok);
        }
        super::read_each(self, ranges, buf, ok)
    }
}

/// The open `/proc/PID/mem` of the process read last (kept: opening it is
/// the costly part).
static PROC_MEM: std::sync::Mutex<Option<(i32, std::fs::File)>> = std::sync::Mutex::new(None);

/// Reads `buf.len()` bytes at `addr` of process `pid` from its
/// `/proc/PID/mem` (not async-signal-safe: it may open the file).
pub fn read_proc_mem(pid: i32, addr: usize, buf: &mut [u8]) -> bool {
    use std::os::unix::fs::FileExt;
    if buf.is_empty() {
        return true;
    }
    if addr.checked_add(buf.len()).is_none_or(|e| e > USER_TOP) {
        return false;
    }
    let mut open = PROC_MEM.lock().unwrap_or_else(|e| e.into_inner());
    // Twice at most: a file kept from a process that has ended (its pid
    // since reused) reads nothing, and is opened again.
    for fresh in [false, true] {
        if fresh || open.as_ref().is_none_or(|(p, _)| *p != pid) {
            *open = crate::procfs::open_mem(pid).ok().map(|f| (pid, f));
        }
        let Some((_, file)) = open.as_ref() else { return false };
        if file.read_exact_at(buf, addr as u64).is_ok() {
            return true;
        }
    }
    false
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn every_source_reads_a_heap_block_or_refuses() {
        let heap = Box::new([0x5au8; 64]);
        let at = heap.as_ptr() as usize;
        let live = Live { stack_lo: 1, stack_hi: 2, always: Vec::new(), fallback: Vec::new() };
        // SAFETY: getpid has no preconditions.
        let me = Process { pid: unsafe { libc::getpid() } };
        let ranges = Ranges { data: [(at, at + 64), (0, 0), (0, 0), (0, 0)], ..Ranges::default() };
        let sources: [&dyn Memory; 5] = [&live, &Own, &Objects, &me, &ranges];
        for m in sources {
            let mut buf = [0u8; 64];
            assert!(m.read(at, &mut buf));
            assert_eq!(buf, [0x5a; 64]);
            assert_eq!(m.word(at), Some(0x5a5a_5a5a_5a5a_5a5a));
            assert!(!m.read(8, &mut buf), "address 8 must be unreadable, not a crash");
            assert!(!m.read(usize::MAX - 4, &mut buf));
        }
        assert!(!ranges.read(at + 60, &mut [0u8; 8]), "past the range's end");
        assert_eq!(Objects.word(at + 1), None, "misaligned");
    }

    #[test]
    fn another_process_is_read_through_the_kernel() {
        // A child that is a copy of this process: its memory holds the same
        // bytes at the same address until it exits.
        let value = Box::new(0x1234_5678_9abc_def0usize);
        let at = &*value as *const usize as usize;
        // SAFETY: the child only sleeps and exits; it never returns here.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // SAFETY: the child process: sleep, then leave without running
            // the test harness's code.
            unsafe {
                libc::sleep(5);
                libc::_exit(0)
            }
        }
        let word = Process { pid }.word(at);
        // Through /proc/PID/mem, the way taken where the kernel refuses
        // process_vm_readv: the same bytes; an unmapped address is refused.
        let mut b = [0u8; 8];
        let by_file = read_proc_mem(pid, at, &mut b).then(|| usize::from_ne_bytes(b));
        let unmapped = read_proc_mem(pid, 8, &mut b);
        // SAFETY: ending and reaping our own child.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
        // A kernel that refuses process_vm_readv (seccomp) refuses both.
        if crate::memory::available() {
            assert_eq!(word, Some(0x1234_5678_9abc_def0));
        }
        assert_eq!(by_file, Some(0x1234_5678_9abc_def0));
        assert!(!unmapped);
        // The process has ended: its file reads nothing.
        assert!(!read_proc_mem(pid, at, &mut b));
    }

    #[test]
    fn objects_refuse_bad_addresses() {
        assert_eq!(Objects.word(0), None);
        assert_eq!(Objects.word(4097), None);
        assert_eq!(Objects.word(usize::MAX - 7), None);
        let x = Box::new(0x1234usize);
        assert_eq!(Objects.word(&*x as *const usize as usize), Some(0x1234));
    }
}
