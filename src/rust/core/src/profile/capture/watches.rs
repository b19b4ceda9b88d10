//! Each sampled thread's watch: a one-shot timer on the monotonic clock
//! whose signal takes the sample the thread is owed, at a point where it
//! found the thread running, never where the scheduler had stopped it.
//!
//! A signal reaches a thread where it runs its own code next. A thread
//! that was stopped by the scheduler (its slice spent, most often on its
//! way out of a system call, where its time is accounted) takes a signal
//! sent meanwhile there: on a busy machine a burn reading its CPU clock now
//! and then had 15 % of its samples (up to 63 % in one profile) on
//! `__vdso_clock_gettime`, where it spent 1.5 %. Such a sample is not
//! taken; the thread's watch is armed instead, a little ahead
//! ([`Watches::ahead_ns`]), and its signal takes the sample if it came on
//! time and the thread ran for most of that while ([`found_running`]):
//! it interrupted the thread where it was, not where it resumed. A watch
//! that came late (the thread waited for a CPU) tries again, a few times
//! ([`TRIES`]); one that came on time to a thread that did not run (it
//! slept, and the signal woke it) does not. Then the time stays owed to
//! the thread's next sample: a sleeping thread is woken by its watch once
//! at most each time it is armed.
//!
//! Two things arm a watch: a timer's signal at the end of a system call on
//! a thread preempted since its last signal (it counts the involuntary
//! switches), unless its sample is the kernel's time (see `account`: that
//! time was spent there), and the collector,
//! for a thread on a CPU or ready for one whose samples have fallen well
//! behind its CPU clock (the kernel checks a thread's CPU timer only at its
//! ticks: among busy processes a thread may run for tens of milliseconds
//! between its timer's signals, and what it owes when it returns from the
//! profiled code is lost).
//!
//! The table is indexed by thread id (a fixed table: async-signal-safe,
//! atomics and the timer's system call only). The collector makes and
//! deletes the timers and is the only one to claim or free a cell, and
//! deletes a timer only once no handler is arming it; a thread whose cell
//! another thread holds has no watch and takes its samples where its
//! signals find it.

use super::clock;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Cells in the table (threads watched at once with distinct cells).
const CELLS: usize = 1024;

/// A cell's timer when it has none.
const NO_TIMER: usize = usize::MAX;

/// The watch's signals after the one that armed it that may each come late
/// and arm it again.
pub const TRIES: u32 = 3;

/// How late a watch's signal may come and still be taken for one that
/// found the thread on a CPU (it comes within microseconds then); at least
/// twice the monotonic clock's resolution (where timers have only the
/// kernel's tick, every signal is that late). Shared with forked
/// children's watches (see `children`).
pub fn on_time_ns() -> u64 {
    ON_TIME_NS.max(2 * clock::resolution_ns(libc::CLOCK_MONOTONIC))
}
pub const ON_TIME_NS: u64 = 100_000;

/// Whether a watch's signal due at `due_ns` and handled at `now_ns` came
/// on time (within `within_ns`).
pub fn on_time(due_ns: u64, now_ns: u64, within_ns: u64) -> bool {
    now_ns.saturating_sub(due_ns) <= within_ns
}

/// Whether a watch armed `ahead_ns` before it was due, when the thread's
/// CPU clock read `armed_cpu_ns`, found the thread running: its signal
/// came on time (within `within_ns` of `due_ns`) and the thread ran for
/// all of that while but `within_ns` (its CPU clock reads `cpu_ns`). A
/// thread woken by the signal from a sleep, or given a CPU after waiting
/// for one, did not.
pub fn found_running(
    (due_ns, ahead_ns, armed_cpu_ns): (u64, u64, u64),
    now_ns: u64,
    cpu_ns: u64,
    within_ns: u64,
) -> bool {
    on_time(due_ns, now_ns, within_ns) && cpu_ns.saturating_sub(armed_cpu_ns) + within_ns >= ahead_ns
}

/// What a thread's signal does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Takes the sample.
    Take,
    /// Takes none: the watch is armed, its signal will.
    Wait,
    /// Takes none: the time stays owed to the thread's next sample.
    Skip,
}

#[derive(Default)]
struct Cell {
    tid: AtomicI32,
    timer: AtomicUsize,
    /// When the watch is due (the monotonic clock) and the thread's CPU
    /// clock as it was armed.
    due_ns: AtomicU64,
    armed_cpu_ns: AtomicU64,
    /// Signals of the watch left that may arm it again.
    tries: AtomicU32,
    /// The thread's involuntary switches at its last signal.
    switches: AtomicU64,
    /// Handlers between reading `timer` and arming it: the collector
    /// deletes a timer it took out of the cell only once none is.
    arming: AtomicU32,
}

/// The watches of one session's threads (a CPU profile's).
pub struct Watches {
    cells: Box<[Cell]>,
    on_time_ns: u64,
    ahead_ns: u64,
}

impl Watches {
    pub fn new() -> Watches {
        Watches::with(on_time_ns())
    }

    fn with(on_time_ns: u64) -> Watches {
        let cells =
            (0..CELLS).map(|_| Cell { timer: AtomicUsize::new(NO_TIMER), ..Cell::default() }).collect();
        Watches { cells, on_time_ns, ahead_ns: Watches::ahead_for(on_time_ns) }
    }

    /// How far ahead a watch is armed: well inside the slice of CPU time a
    /// thread just given a CPU holds (a scheduler gives a busy task
    /// milliseconds), and long enough that running for most of it tells a
    /// running thread from one just woken (three times what a signal on
    /// time may take).
    fn ahead_for(on_time_ns: u64) -> u64 {
        (3 * on_time_ns).max(300_000)
    }

    fn cell(&self, tid: i32) -> &Cell {
        &self.cells[tid.unsigned_abs() as usize % CELLS]
    }

    fn mine(&self, tid: i32) -> Option<&Cell> {
        let cell = self.cell(tid);
        (tid != 0 && cell.tid.load(Ordering::Acquire) == tid).then_some(cell)
    }

    /// Makes `timer` thread `tid`'s watch (collector). False if its cell
    /// is another thread's: the caller keeps and deletes the timer.
    pub fn keep(&self, tid: i32, timer: libc::timer_t) -> bool {
        let cell = self.cell(tid);
        if cell.tid.load(Ordering::Acquire) != 0 {
            return false;
        }
        cell.timer.store(timer as usize, Ordering::Relaxed);
        cell.tries.store(0, Ordering::Relaxed);
        cell.switches.store(u64::MAX, Ordering::Relaxed);
        cell.tid.store(tid, Ordering::Release);
        true
    }

    /// Frees thread `tid`'s cell (collector): its timer, if it had one
    /// here, which no handler arms from now on and none is arming (it
    /// waits for those that are), for the caller to delete.
    pub fn forget(&self, tid: i32) -> Option<libc::timer_t> {
        let cell = self.mine(tid)?;
        let timer = cell.timer.swap(NO_TIMER, Ordering::SeqCst);
        while cell.arming.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
        cell.tid.store(0, Ordering::Release);
        (timer != NO_TIMER).then_some(timer as libc::timer_t)
    }

    /// Arms thread `tid`'s watch (collector), the thread's CPU clock
    /// reading `cpu_ns`. False if it has none.
    pub fn arm(&self, tid: i32, cpu_ns: u64) -> bool {
        let Some(cell) = self.mine(tid) else { return false };
        cell.tries.store(TRIES, Ordering::Relaxed);
        self.arm_cell(cell, cpu_ns)
    }

    fn arm_cell(&self, cell: &Cell, cpu_ns: u64) -> bool {
        // (Announced before the timer is read: see `forget`.)
        cell.arming.fetch_add(1, Ordering::SeqCst);
        let timer = cell.timer.load(Ordering::SeqCst);
        let armed = timer != NO_TIMER && {
            cell.armed_cpu_ns.store(cpu_ns, Ordering::Relaxed);
            cell.due_ns.store(clock::now_ns() + self.ahead_ns, Ordering::Relaxed);
            clock::arm_once(timer as libc::timer_t, self.ahead_ns)
        };
        cell.arming.fetch_sub(1, Ordering::SeqCst);
        armed
    }

    /// A timer's signal on thread `tid` (the calling thread), whose CPU
    /// clock reads `cpu_ns` and which was switched out involuntarily
    /// `switches` times so far: its sample is taken here unless the thread
    /// was preempted since its last signal and a sample here would be
    /// `misplaced` (asked only then: the signal found it at a system
    /// call's end, where it may be only because the scheduler stopped it
    /// there, and the sample is not the kernel's, whose place that is):
    /// its watch takes the sample then. (A thread preempted anywhere else,
    /// by the tick or at another CPU's request, was stopped at whatever it
    /// was doing: a sample there is as good as any, and taking it keeps its
    /// time where it was spent.) Async-signal-safe.
    pub fn timer_signal(
        &self,
        tid: i32,
        cpu_ns: u64,
        switches: u64,
        misplaced: impl FnOnce() -> bool,
    ) -> Verdict {
        let Some(cell) = self.mine(tid) else { return Verdict::Take };
        let before = cell.switches.swap(switches, Ordering::Relaxed);
        if before == switches || before == u64::MAX || !misplaced() {
            return Verdict::Take;
        }
        cell.tries.store(TRIES, Ordering::Relaxed);
        if self.arm_cell(cell, cpu_ns) {
            Verdict::Wait
        } else {
            Verdict::Take
        }
    }

    /// Thread `tid`'s watch's signal, handled at `now_ns` (the monotonic
    /// clock) with the thread's CPU clock reading `cpu_ns` and `switches`
    /// involuntary switches: the sample is taken if the watch found the
    /// thread running; if it came late, the watch is armed again while it
    /// has tries left; if it came on time to a thread that did not run
    /// (asleep: the signal woke it), it is not. Async-signal-safe.
    pub fn watch_signal(&self, tid: i32, now_ns: u64, cpu_ns: u64, switches: u64) -> Verdict {
        let Some(cell) = self.mine(tid) else { return Verdict::Skip };
        let armed =
            (cell.due_ns.load(Ordering::Relaxed), self.ahead_ns, cell.armed_cpu_ns.load(Ordering::Relaxed));
        if found_running(armed, now_ns, cpu_ns, self.on_time_ns) {
            cell.switches.store(switches, Ordering::Relaxed);
            return Verdict::Take;
        }
        let left = cell.tries.load(Ordering::Relaxed);
        if left == 0 || on_time(armed.0, now_ns, self.on_time_ns) {
            return Verdict::Skip;
        }
        cell.tries.store(left - 1, Ordering::Relaxed);
        if self.arm_cell(cell, cpu_ns) {
            Verdict::Wait
        } else {
            Verdict::Skip
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1_000;

    #[test]
    fn a_watch_finds_a_thread_running_only_if_it_ran_through_its_while_and_came_on_time() {
        let armed = (1_000 * US, 300 * US, 50_000 * US);
        // On time, and 300 µs of CPU in 300 µs: running.
        assert!(found_running(armed, 1_010 * US, 50_300 * US, 100 * US));
        // 220 µs of CPU (a short preemption): still.
        assert!(found_running(armed, 1_010 * US, 50_220 * US, 100 * US));
        // Woken from a sleep by the signal: on time, no CPU time since.
        assert!(!found_running(armed, 1_020 * US, 50_005 * US, 100 * US));
        // Given a CPU after waiting for one: late.
        assert!(!found_running(armed, 3_000 * US, 50_300 * US, 100 * US));
        assert!(on_time(1_000 * US, 1_100 * US, 100 * US) && !on_time(1_000 * US, 1_101 * US, 100 * US));
        assert!(on_time(1_000 * US, 900 * US, 0), "early (clocks read apart) is on time");
        // Timers of the kernel's tick (4 ms): 3 ms late is on time.
        assert!(on_time(1_000 * US, 4_000 * US, 8_000 * US));
    }

    /// A watch timer for the calling thread, whose signal (the last
    /// real-time one) is blocked on it: a signal it sends stays pending
    /// until the test's thread ends, and is then discarded.
    fn timer() -> libc::timer_t {
        let sig = libc::SIGRTMAX();
        // SAFETY: a set built from an empty one; blocks `sig` on the
        // calling thread only.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        }
        clock::watch(sig, clock::gettid()).expect("a timer")
    }

    #[test]
    fn a_timer_signal_is_taken_unless_the_thread_was_preempted_since_its_last() {
        let w = Watches::with(100 * US);
        let me = clock::gettid();
        let syscall = || true;
        assert_eq!(w.timer_signal(me, 0, 5, syscall), Verdict::Take, "no watch: where it is");
        let t = timer();
        assert!(w.keep(me, t));
        assert_eq!(w.timer_signal(me, 0, 5, syscall), Verdict::Take, "its first signal");
        assert_eq!(w.timer_signal(me, 0, 5, || panic!("not asked")), Verdict::Take, "not preempted since");
        assert_eq!(
            w.timer_signal(me, 0, 6, syscall),
            Verdict::Wait,
            "preempted since, at a system call's end"
        );
        assert_eq!(w.timer_signal(me, 0, 6, syscall), Verdict::Take);
        assert_eq!(w.timer_signal(me, 0, 7, || false), Verdict::Take, "preempted elsewhere: where it is");
        assert_eq!(w.forget(me).map(|x| x as usize), Some(t as usize));
        assert_eq!(w.timer_signal(me, 0, 8, syscall), Verdict::Take, "forgotten");
        // SAFETY: the timer made above, deleted once.
        unsafe { libc::timer_delete(t) };
    }

    #[test]
    fn a_late_watch_tries_again_then_leaves_the_time_owed_one_that_woke_its_thread_does_not() {
        let w = Watches::with(100 * US);
        let me = clock::gettid();
        let t = timer();
        assert!(w.keep(me, t));
        assert!(w.arm(me, 10_000 * US));
        let due = w.cell(me).due_ns.load(Ordering::Relaxed);
        // Late: armed again, TRIES times, then the time stays owed.
        for _ in 0..TRIES {
            assert_eq!(w.watch_signal(me, due + 5_000 * US, 10_000 * US, 0), Verdict::Wait);
        }
        assert_eq!(w.watch_signal(me, due + 5_000 * US, 10_000 * US, 0), Verdict::Skip);
        // On time to a thread that did not run (it slept): not again.
        assert!(w.arm(me, 10_000 * US));
        let due = w.cell(me).due_ns.load(Ordering::Relaxed);
        assert_eq!(w.watch_signal(me, due + 10 * US, 10_000 * US + 5 * US, 0), Verdict::Skip);
        // Armed again by the collector: on time and running, taken.
        assert!(w.arm(me, 10_000 * US));
        let due = w.cell(me).due_ns.load(Ordering::Relaxed);
        assert_eq!(w.watch_signal(me, due + 10 * US, 10_000 * US + w.ahead_ns, 3), Verdict::Take);
        // Its involuntary switches then are its last signal's.
        assert_eq!(w.timer_signal(me, 0, 3, || true), Verdict::Take);
        w.forget(me);
        // SAFETY: the timer made above, deleted once.
        unsafe { libc::timer_delete(t) };
    }

    #[test]
    fn a_cell_is_one_thread_s_until_the_collector_frees_it() {
        let w = Watches::with(100 * US);
        let other = 7 + CELLS as i32;
        let t = timer();
        assert!(w.keep(7, t));
        assert!(!w.keep(other, t), "another's cell");
        assert!(!w.arm(other, 0));
        assert_eq!(w.watch_signal(other, 0, 0, 0), Verdict::Skip, "no watch: nothing owed here");
        assert!(w.forget(other).is_none());
        assert!(w.forget(7).is_some());
        assert!(w.keep(other, t));
        assert!(w.forget(other).is_some());
        // SAFETY: the timer made above, deleted once.
        unsafe { libc::timer_delete(t) };
    }

    #[test]
    fn a_timer_is_given_back_for_deleting_only_once_no_handler_is_arming_it() {
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        let w = Arc::new(Watches::with(100 * US));
        let t = timer();
        assert!(w.keep(7, t));
        // A handler between reading the timer and arming it.
        w.cell(7).arming.store(1, Ordering::SeqCst);
        let done = Arc::new(AtomicBool::new(false));
        let (w2, d2) = (w.clone(), done.clone());
        let forgetting = std::thread::spawn(move || {
            let timer = w2.forget(7).map(|x| x as usize);
            d2.store(true, Ordering::SeqCst);
            timer
        });
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!done.load(Ordering::SeqCst), "it waits for the handler");
        assert!(!w.arm(7, 0), "and no handler arms it any more");
        w.cell(7).arming.store(0, Ordering::SeqCst);
        assert_eq!(forgetting.join().unwrap(), Some(t as usize));
        // SAFETY: the timer made above, deleted once.
        unsafe { libc::timer_delete(t) };
    }

    #[test]
    fn a_watch_is_armed_well_ahead_of_a_signal_s_lateness() {
        assert_eq!(Watches::ahead_for(100 * US), 300 * US);
        assert_eq!(Watches::ahead_for(4_000 * US), 12_000 * US, "a clock of ticks only");
    }
}
