//! Each thread's own account of its CPU time, kept by its CPU samples: how
//! many intervals a sample stands for, and whether it stands for the
//! kernel's time.
//!
//! **Intervals.** A timer on a thread's CPU clock is checked by the kernel
//! at its tick and its signal delivered when the thread next returns to
//! its own code; on a busy machine the signal comes rarely (a thread
//! burning 0.1 s of CPU among four busy processes got 2 to 8 signals for
//! 50 intervals), expirations in between are counted as overruns only
//! when the signal is delivered, and those after the last delivery are
//! lost when the timer is deleted (one profile in twelve had no sample at
//! all). So a sample stands for the thread's CPU time since its last
//! sample (its CPU clock, read in the handler), in whole intervals, the
//! remainder carried; and the collector arms the watch of a thread whose
//! clock has run well ahead of its last sample (see [`Accounts::behind`]
//! and `watches`). A signal that finds less than an interval to stand for
//! takes no sample.
//!
//! **Kernel time.** The same signal comes on the way back from a system
//! call when the thread was in one, so a sample cannot tell the kernel's
//! time from the thread's own: spinning in `sched_yield()` put 7.6 % of an
//! OpenBLAS run's samples on `__GI_sched_yield`, where `perf` counts 1.2 %
//! in the kernel. Each sample reads the thread's user and system time
//! (`getrusage(RUSAGE_THREAD)`) and adds the system share of the time
//! since its last sample, times its intervals; when the shares add up to
//! a whole sample, that sample is the kernel's: `[kernel]` innermost,
//! under where the thread was. So the kernel's share of the samples is the
//! kernel's own count of the thread's system time.
//!
//! A thread's account is a cell of a fixed table, by thread id, taken with
//! a try-lock (async-signal-safe: atomics and system calls only). A thread
//! whose cell another holds (ids equal modulo the table's size), or that
//! finds it busy, falls back to the timer's own count and attributes no
//! kernel time: never another thread's time.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

/// Cells in the table (threads sampled at once with distinct cells).
const CELLS: usize = 1024;

/// A share of one interval, in millionths.
const WHOLE: u64 = 1_000_000;

/// User time not read yet (an account opened by the collector, which
/// cannot read another thread's user and system time).
const UNKNOWN: u64 = u64::MAX;

#[derive(Default)]
struct Cell {
    busy: AtomicBool,
    tid: AtomicI32,
    /// The thread's CPU clock up to which its samples stand for its time.
    cpu_ns: AtomicU64,
    user_us: AtomicU64,
    system_us: AtomicU64,
    /// The system share added up and not yet given to a sample, in
    /// millionths of an interval.
    carry: AtomicU64,
}

/// What a sample stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Weight {
    /// Intervals (0: none, take no sample).
    pub intervals: u64,
    /// The kernel's time.
    pub kernel: bool,
}

/// The accounts of one session's threads (a CPU profile's).
pub struct Accounts {
    cells: Box<[Cell]>,
    interval_ns: u64,
}

impl Accounts {
    pub fn new(interval_ns: u64) -> Accounts {
        Accounts { cells: (0..CELLS).map(|_| Cell::default()).collect(), interval_ns: interval_ns.max(1) }
    }

    fn cell(&self, tid: i32) -> &Cell {
        &self.cells[tid.unsigned_abs() as usize % CELLS]
    }

    /// What the sample thread `tid` (the calling thread) is taking stands
    /// for, its clocks reading `usage` (see [`Usage::now`]; None: they
    /// could not be read); `timer` is what the timer's signal says (its
    /// expirations), used for a thread's first sample and when its account
    /// cannot be used. Async-signal-safe.
    pub fn weigh(&self, tid: i32, timer: u64, usage: Option<&Usage>) -> Weight {
        let Some(u) = usage else {
            return Weight { intervals: timer, kernel: false };
        };
        self.account(tid, timer, u.cpu_ns, u.user_us, u.system_us)
    }

    /// [`weigh`](Self::weigh) with the thread's clocks read: its CPU time
    /// in nanoseconds, and microseconds of user and system time.
    fn account(&self, tid: i32, timer: u64, cpu_ns: u64, user: u64, system: u64) -> Weight {
        let cell = self.cell(tid);
        if cell.busy.swap(true, Ordering::Acquire) {
            return Weight { intervals: timer, kernel: false };
        }
        let mine = cell.tid.load(Ordering::Relaxed) == tid;
        let (last_user, last_system) =
            (cell.user_us.load(Ordering::Relaxed), cell.system_us.load(Ordering::Relaxed));
        cell.tid.store(tid, Ordering::Relaxed);
        cell.user_us.store(user, Ordering::Relaxed);
        cell.system_us.store(system, Ordering::Relaxed);
        let out = if !mine {
            // A thread first seen, or one taking over another's cell: the
            // timer's count, and the account starts here.
            cell.cpu_ns.store(cpu_ns, Ordering::Relaxed);
            cell.carry.store(0, Ordering::Relaxed);
            Weight { intervals: timer, kernel: false }
        } else {
            let from = cell.cpu_ns.load(Ordering::Relaxed);
            let intervals = cpu_ns.saturating_sub(from) / self.interval_ns;
            cell.cpu_ns.store(from + intervals * self.interval_ns, Ordering::Relaxed);
            let mut kernel = false;
            let carry = cell.carry.load(Ordering::Relaxed);
            if let Some((k, carry)) = kernel_share(intervals, (last_user, last_system), (user, system), carry)
            {
                kernel = k;
                cell.carry.store(carry, Ordering::Relaxed);
            }
            Weight { intervals, kernel }
        };
        cell.busy.store(false, Ordering::Release);
        out
    }

    /// Whether thread `tid`'s account is its own and free: a sample it
    /// leaves for later (see `watches`) is then still owed to it.
    /// Async-signal-safe.
    pub fn owns(&self, tid: i32) -> bool {
        let cell = self.cell(tid);
        cell.tid.load(Ordering::Relaxed) == tid && !cell.busy.load(Ordering::Acquire)
    }

    /// Whether a sample thread `tid` (the calling thread) took now, its
    /// clocks reading `u`, would stand for the kernel's time; the account
    /// is left as it is. Async-signal-safe.
    pub fn kernel_due(&self, tid: i32, u: &Usage) -> bool {
        let cell = self.cell(tid);
        if cell.busy.load(Ordering::Acquire) || cell.tid.load(Ordering::Relaxed) != tid {
            return false;
        }
        let intervals = u.cpu_ns.saturating_sub(cell.cpu_ns.load(Ordering::Relaxed)) / self.interval_ns;
        let last = (cell.user_us.load(Ordering::Relaxed), cell.system_us.load(Ordering::Relaxed));
        kernel_share(intervals, last, (u.user_us, u.system_us), cell.carry.load(Ordering::Relaxed))
            .is_some_and(|(kernel, _)| kernel)
    }

    /// Opens the account of thread `tid` at its CPU clock's `cpu_ns` if its
    /// cell is free: its samples stand for its CPU time from here, even if
    /// its timer's first signal never comes. Called by the collector.
    pub fn open(&self, tid: i32, cpu_ns: u64) {
        let cell = self.cell(tid);
        if cell.tid.load(Ordering::Relaxed) != 0 || cell.busy.swap(true, Ordering::Acquire) {
            return;
        }
        if cell.tid.load(Ordering::Relaxed) == 0 {
            cell.cpu_ns.store(cpu_ns, Ordering::Relaxed);
            cell.user_us.store(UNKNOWN, Ordering::Relaxed);
            cell.carry.store(0, Ordering::Relaxed);
            cell.tid.store(tid, Ordering::Relaxed);
        }
        cell.busy.store(false, Ordering::Release);
    }

    /// In a forked child (its `fork()` handler, on its only thread): the
    /// calling thread's account, opened at its clocks now whatever its cell
    /// held in the copy of the parent's table (another thread's account,
    /// or one busy at the fork, which nothing here would ever release).
    /// Its first sample then stands for its CPU time since the fork.
    /// Async-signal-safe.
    pub fn adopt(&self, tid: i32) {
        let Some(Usage { cpu_ns, user_us: user, system_us: system, .. }) = Usage::now() else { return };
        let cell = self.cell(tid);
        cell.tid.store(tid, Ordering::Relaxed);
        cell.cpu_ns.store(cpu_ns, Ordering::Relaxed);
        cell.user_us.store(user, Ordering::Relaxed);
        cell.system_us.store(system, Ordering::Relaxed);
        cell.carry.store(0, Ordering::Relaxed);
        cell.busy.store(false, Ordering::Release);
    }

    /// Whether thread `tid`, whose CPU clock reads `cpu_ns`, is owed a
    /// sample: its account is its own and lags the clock by `lag_ns` or
    /// more (its timer's signals are not coming). Read by the collector.
    pub fn behind(&self, tid: i32, cpu_ns: u64, lag_ns: u64) -> bool {
        let cell = self.cell(tid);
        cell.tid.load(Ordering::Relaxed) == tid
            && cpu_ns.saturating_sub(cell.cpu_ns.load(Ordering::Relaxed)) >= lag_ns
    }
}

/// Whether a sample standing for `intervals`, its thread's user and system
/// time reading `now` and `last` at its last sample (microseconds), is the
/// kernel's, and the system share carried on (see above). None: no share
/// to add (no time, or the times at the last sample not known).
fn kernel_share(intervals: u64, last: (u64, u64), now: (u64, u64), carry: u64) -> Option<(bool, u64)> {
    let du = now.0.saturating_sub(last.0);
    let ds = now.1.saturating_sub(last.1);
    if last.0 == UNKNOWN || du + ds == 0 || intervals == 0 {
        return None;
    }
    let due = intervals.saturating_mul(WHOLE);
    let share = (due as u128 * ds as u128 / (du + ds) as u128) as u64;
    let carry = carry.saturating_add(share);
    let kernel = carry >= due;
    Some((kernel, if kernel { carry - due } else { carry }))
}

/// The calling thread's clocks, as a sample reads them.
#[derive(Clone, Copy, Debug)]
pub struct Usage {
    /// Its CPU time (nanoseconds), and user and system time (microseconds).
    pub cpu_ns: u64,
    pub user_us: u64,
    pub system_us: u64,
    /// The times the scheduler switched it out involuntarily (preempted).
    pub preempted: u64,
}

impl Usage {
    /// The calling thread's clocks now (async-signal-safe: its CPU clock
    /// and the raw `getrusage(RUSAGE_THREAD)` system call).
    pub fn now() -> Option<Usage> {
        let cpu_ns = thread_cpu_ns()?;
        // SAFETY: a zeroed rusage is a valid value for the kernel to fill.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: getrusage writes into `u`; RUSAGE_THREAD is the caller.
        let r =
            unsafe { libc::syscall(libc::SYS_getrusage, libc::RUSAGE_THREAD, &mut u as *mut libc::rusage) };
        let us = |t: libc::timeval| t.tv_sec.max(0) as u64 * 1_000_000 + t.tv_usec.max(0) as u64;
        (r == 0).then(|| Usage {
            cpu_ns,
            user_us: us(u.ru_utime),
            system_us: us(u.ru_stime),
            preempted: u.ru_nivcsw.max(0) as u64,
        })
    }
}

/// The calling thread's CPU time in nanoseconds (async-signal-safe).
fn thread_cpu_ns() -> Option<u64> {
    super::clock::read_clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_sample_stands_for_the_cpu_time_since_the_last_whatever_the_timer_says() {
        let a = Accounts::new(2 * MS);
        // First sight: the timer's count.
        assert_eq!(a.account(7, 3, 100 * MS, 0, 0), Weight { intervals: 3, kernel: false });
        // 5 ms later: two intervals, half a one carried.
        assert_eq!(a.account(7, 1, 105 * MS, 5_000, 0).intervals, 2);
        // A late signal with 40 expirations lost to the kernel: what the
        // clock says, 40 ms and the half carried.
        assert_eq!(a.account(7, 1, 145 * MS, 45_000, 0).intervals, 20);
        // A signal that finds less than an interval: nothing.
        assert_eq!(a.account(7, 9, 145 * MS + MS / 2, 46_000, 0).intervals, 0);
        assert_eq!(a.account(7, 1, 147 * MS, 47_000, 0).intervals, 1);
    }

    #[test]
    fn the_kernel_s_share_of_samples_is_the_system_share_of_the_time() {
        let a = Accounts::new(10 * MS);
        assert!(!a.account(7, 1, 0, 0, 0).kernel);
        // A quarter of the time in the kernel at every sample: one sample
        // in four is the kernel's.
        let mut kernel = 0;
        for i in 1..=40u64 {
            let w = a.account(7, 1, i * 10 * MS, i * 7_500, i * 2_500);
            assert_eq!(w.intervals, 1);
            kernel += w.kernel as u32;
        }
        assert_eq!(kernel, 10);
        // No system time: none; all system time: every one, whatever its
        // intervals.
        assert!(!a.account(7, 1, 410 * MS, 400_000, 100_000).kernel);
        assert_eq!(a.account(7, 1, 440 * MS, 400_000, 130_000), Weight { intervals: 3, kernel: true });
        // No time passed: nothing.
        assert_eq!(a.account(7, 1, 440 * MS, 400_000, 130_000), Weight { intervals: 0, kernel: false });
    }

    #[test]
    fn a_cell_taken_over_by_another_thread_starts_over() {
        let a = Accounts::new(10 * MS);
        let other = 7 + CELLS as i32;
        a.account(7, 1, 0, 0, 0);
        // The other thread's clocks are not compared with this one's.
        assert_eq!(a.account(other, 2, 500 * MS, 0, 1_000_000), Weight { intervals: 2, kernel: false });
        assert_eq!(a.account(7, 1, 10 * MS, 10_000, 0), Weight { intervals: 1, kernel: false });
        // Each goes on from its own last reading.
        assert_eq!(a.account(7, 1, 20 * MS, 10_000, 10_000), Weight { intervals: 1, kernel: true });
        assert!(!a.behind(other, 10_000 * MS, MS), "its cell is 7's now");
    }

    #[test]
    fn whether_a_sample_would_be_the_kernel_s_is_told_without_taking_it() {
        let a = Accounts::new(10 * MS);
        let at = |cpu_ns, user_us, system_us| Usage { cpu_ns, user_us, system_us, preempted: 0 };
        a.account(7, 1, 0, 0, 0);
        // All system time since: the kernel's, asked twice, then taken.
        assert!(a.kernel_due(7, &at(10 * MS, 0, 10_000)));
        assert!(a.kernel_due(7, &at(10 * MS, 0, 10_000)), "asking changed nothing");
        assert_eq!(a.weigh(7, 1, Some(&at(10 * MS, 0, 10_000))), Weight { intervals: 1, kernel: true });
        // All user time since, or less than an interval: not.
        assert!(!a.kernel_due(7, &at(20 * MS, 10_000, 10_000)));
        assert!(!a.kernel_due(7, &at(15 * MS, 0, 15_000)));
        assert!(!a.kernel_due(8, &at(20 * MS, 0, 20_000)), "another thread's cell");
        assert!(a.owns(7) && !a.owns(8) && !a.owns(7 + CELLS as i32));
        a.cells[7].busy.store(true, Ordering::Relaxed);
        assert!(!a.owns(7), "busy");
    }

    #[test]
    fn a_busy_cell_falls_back_to_the_timer() {
        let a = Accounts::new(10 * MS);
        a.account(7, 1, 0, 0, 0);
        a.cells[7].busy.store(true, Ordering::Relaxed);
        assert_eq!(a.account(7, 4, 10 * MS, 0, 10_000), Weight { intervals: 4, kernel: false });
        a.cells[7].busy.store(false, Ordering::Relaxed);
        // Its reading was not taken: the next counts from the first.
        assert_eq!(a.account(7, 1, 20 * MS, 0, 20_000), Weight { intervals: 2, kernel: true });
    }

    #[test]
    fn a_thread_is_behind_when_its_clock_runs_ahead_of_its_samples() {
        let a = Accounts::new(2 * MS);
        assert!(!a.behind(7, 100 * MS, 10 * MS), "never sampled: its timer starts it");
        a.account(7, 1, 100 * MS, 0, 0);
        assert!(!a.behind(7, 109 * MS, 10 * MS));
        assert!(a.behind(7, 110 * MS, 10 * MS));
    }

    #[test]
    fn an_account_opened_by_the_collector_counts_from_there_without_a_kernel_share() {
        let a = Accounts::new(2 * MS);
        a.open(7, 100 * MS);
        assert!(a.behind(7, 112 * MS, 12 * MS), "owed a sample though its timer never fired");
        // Its first sample: the time since, not the timer's count; no
        // kernel share (user and system time not known at the opening).
        assert_eq!(a.account(7, 1, 112 * MS, 5_000, 100_000), Weight { intervals: 6, kernel: false });
        assert_eq!(a.account(7, 1, 114 * MS, 5_000, 102_000), Weight { intervals: 1, kernel: true });
        // A cell in use is not opened again.
        a.open(7, 0);
        assert!(!a.behind(7, 115 * MS, 2 * MS));
    }

    #[test]
    fn a_forked_child_takes_its_cell_whatever_the_parent_left_in_it() {
        let a = Accounts::new(MS);
        let me = super::super::clock::gettid();
        // The parent's copy: another thread's account in the cell, busy
        // (its handler was running when the process forked).
        let other = me + CELLS as i32;
        a.account(other, 1, 0, 0, 0);
        a.cell(me).busy.store(true, Ordering::Relaxed);
        a.adopt(me);
        let opened = a.cell(me).cpu_ns.load(Ordering::Relaxed);
        assert!(opened > 0);
        // Its next sample stands for its time since, not the timer's count.
        let w = a.account(me, 99, opened + 3 * MS, 0, 0);
        assert_eq!(w.intervals, 3);
        assert!(a.behind(me, opened + 13 * MS, 10 * MS));
    }

    #[test]
    fn this_thread_s_clocks_are_read() {
        let a = Usage::now().unwrap();
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_millis(30) {
            // SAFETY: getppid has no preconditions.
            unsafe { libc::getppid() };
        }
        let b = Usage::now().unwrap();
        assert!(b.cpu_ns > a.cpu_ns && b.user_us + b.system_us > a.user_us + a.system_us, "{a:?} then {b:?}");
        assert!(b.preempted >= a.preempted);
    }
}
