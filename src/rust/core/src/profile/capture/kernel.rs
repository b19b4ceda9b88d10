//! Which CPU samples stand for the kernel's time, from each thread's own
//! account of it. A timer on a thread's CPU clock signals the thread on its
//! way back to user code, so a sample taken when the thread had been in a
//! system call lands on the call's wrapper (`__GI_sched_yield`), whatever
//! share of the interval the kernel took: spinning in `sched_yield()` put
//! 7.6 % of an OpenBLAS run's samples there, where `perf` counts 1.2 % in
//! the kernel. Instead, each sample reads the thread's user and system time
//! (`getrusage(RUSAGE_THREAD)`, one system call) and adds the system
//! share of the time since its last sample, times the sample's intervals;
//! when the shares add up to a whole sample, that sample is the kernel's:
//! `[kernel]` innermost, under where the thread was (the system call's
//! wrapper, or the instruction that faulted). So the kernel's share of the
//! samples is the kernel's own count of the thread's system time.
//!
//! A thread's last reading is kept in a cell of a fixed table, by thread
//! id, taken with a try-lock (async-signal-safe: atomics only). A thread
//! whose cell another holds (ids equal modulo the table's size), or that
//! finds it busy, attributes nothing this time: never another thread's
//! time.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

/// Cells in the table (threads sampled at once with distinct cells).
const CELLS: usize = 1024;

/// A share of one interval, in millionths.
const WHOLE: u64 = 1_000_000;

#[derive(Default)]
struct Cell {
    busy: AtomicBool,
    tid: AtomicI32,
    user_us: AtomicU64,
    system_us: AtomicU64,
    /// The system share added up and not yet given to a sample, in
    /// millionths of an interval.
    carry: AtomicU64,
}

/// The table of one session.
pub struct KernelTime {
    cells: Box<[Cell]>,
}

impl Default for KernelTime {
    fn default() -> KernelTime {
        KernelTime { cells: (0..CELLS).map(|_| Cell::default()).collect() }
    }
}

impl KernelTime {
    /// Whether the sample of `weight` intervals that thread `tid` (the
    /// calling thread) is taking is the kernel's. Async-signal-safe.
    pub fn sample_is_kernel(&self, tid: i32, weight: u64) -> bool {
        let Some((user, system)) = thread_times() else { return false };
        self.account(tid, weight, user, system)
    }

    /// [`sample_is_kernel`](Self::sample_is_kernel) with the thread's
    /// times read (microseconds of user and system time so far).
    fn account(&self, tid: i32, weight: u64, user: u64, system: u64) -> bool {
        let cell = &self.cells[tid.unsigned_abs() as usize % CELLS];
        if cell.busy.swap(true, Ordering::Acquire) {
            return false;
        }
        let mine = cell.tid.load(Ordering::Relaxed) == tid;
        let (last_user, last_system) =
            (cell.user_us.load(Ordering::Relaxed), cell.system_us.load(Ordering::Relaxed));
        cell.tid.store(tid, Ordering::Relaxed);
        cell.user_us.store(user, Ordering::Relaxed);
        cell.system_us.store(system, Ordering::Relaxed);
        let mut kernel = false;
        if !mine {
            // (A thread first seen, or one taking over another's cell.)
            cell.carry.store(0, Ordering::Relaxed);
        } else {
            let du = user.saturating_sub(last_user);
            let ds = system.saturating_sub(last_system);
            if du + ds > 0 {
                let due = weight.saturating_mul(WHOLE);
                let share = (due as u128 * ds as u128 / (du + ds) as u128) as u64;
                let carry = cell.carry.load(Ordering::Relaxed).saturating_add(share);
                kernel = carry >= due;
                cell.carry.store(if kernel { carry - due } else { carry }, Ordering::Relaxed);
            }
        }
        cell.busy.store(false, Ordering::Release);
        kernel
    }
}

/// The calling thread's user and system time in microseconds (the raw
/// system call: async-signal-safe).
fn thread_times() -> Option<(u64, u64)> {
    // SAFETY: a zeroed rusage is a valid value for the kernel to fill.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into `u`; RUSAGE_THREAD is the caller.
    let r = unsafe { libc::syscall(libc::SYS_getrusage, libc::RUSAGE_THREAD, &mut u as *mut libc::rusage) };
    let us = |t: libc::timeval| t.tv_sec.max(0) as u64 * 1_000_000 + t.tv_usec.max(0) as u64;
    (r == 0).then(|| (us(u.ru_utime), us(u.ru_stime)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_s_share_of_samples_is_the_system_share_of_the_time() {
        let k = KernelTime::default();
        // First sight: nothing to compare with.
        assert!(!k.account(7, 1, 0, 0));
        // A quarter of the time in the kernel at every sample: one sample
        // in four is the kernel's.
        let mut kernel = 0;
        for i in 1..=40u64 {
            if k.account(7, 1, i * 7_500, i * 2_500) {
                kernel += 1;
            }
        }
        assert_eq!(kernel, 10);
        // No system time: none; all system time: every one, whatever its
        // weight.
        assert!(!k.account(7, 1, 400_000, 100_000));
        assert!(k.account(7, 3, 400_000, 130_000));
        // No time passed: nothing changes.
        assert!(!k.account(7, 1, 400_000, 130_000));
    }

    #[test]
    fn a_cell_taken_over_by_another_thread_starts_over() {
        let k = KernelTime::default();
        let other = 7 + CELLS as i32;
        assert!(!k.account(7, 1, 0, 0));
        // The other thread's times are not compared with this one's.
        assert!(!k.account(other, 1, 0, 1_000_000));
        assert!(!k.account(7, 1, 10_000, 1_000_000));
        // Each goes on from its own last reading.
        assert!(k.account(7, 1, 10_000, 1_010_000));
    }

    #[test]
    fn a_busy_cell_attributes_nothing() {
        let k = KernelTime::default();
        assert!(!k.account(7, 1, 0, 0));
        k.cells[7].busy.store(true, Ordering::Relaxed);
        assert!(!k.account(7, 1, 0, 10_000));
        k.cells[7].busy.store(false, Ordering::Relaxed);
        // Its reading was not taken: the next counts from the first.
        assert!(k.account(7, 1, 0, 20_000));
    }

    #[test]
    fn this_thread_s_times_are_read() {
        let (u0, s0) = thread_times().unwrap();
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_millis(30) {
            // System time: many small system calls.
            // SAFETY: getppid has no preconditions.
            unsafe { libc::getppid() };
        }
        let (u1, s1) = thread_times().unwrap();
        assert!(u1 + s1 > u0 + s0, "({u0}, {s0}) then ({u1}, {s1})");
    }
}
