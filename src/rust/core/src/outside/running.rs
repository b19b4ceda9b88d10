//! Which threads an outside recording of CPU time samples at a tick, and
//! how many intervals each sample stands for, from what the kernel says of
//! each thread before the process is stopped: its state (`stat`) and its
//! time on a CPU and waiting for one (`schedstat`).
//!
//! A thread is sampled when it runs at this look (on a CPU, or ready for
//! one), and each look stands for the CPU time the thread used since the
//! last one (the kernel's count, `schedstat`), in intervals: the shares
//! are added up until they make whole intervals. A runnable thread is not
//! always on a CPU: when threads wait for a core, a look stands for less
//! than an interval; when the recording itself waits for a core and looks
//! late, for more. So the samples stand for the CPU time used, whatever the
//! process's share of the cores and however late the looks, and a thread
//! asleep at a look (it may have worked since the last one) is never
//! sampled in its sleep (that time is not counted).
//!
//! Which samples stand for the kernel's time (`[kernel]`, as in-process:
//! see `profile::capture::kernel`) follows each thread's own account of
//! its user and system time (`stat`, in clock ticks, too coarse for one
//! look): of the intervals a thread's samples stand for so far, the
//! system share since the recording began is the kernel's, given to
//! samples in turn as it comes due. A thread that used the CPU for less than a
//! twentieth of the time since the last look is not sampled either: a
//! thread woken by the last sample's stop runs for a moment before it
//! sleeps again.

use super::ptrace::task_ids;
use crate::procfs::{self, Proc, Schedstat, Stat};
use std::collections::HashMap;
use std::time::Instant;

/// What one look found of a thread (None: that file was unreadable).
#[derive(Clone, Copy, Debug)]
pub struct Look {
    pub tid: i32,
    pub stat: Option<Stat>,
    pub sched: Option<Schedstat>,
}

/// A thread to sample at a tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chosen {
    pub tid: i32,
    /// The intervals its sample stands for.
    pub intervals: u64,
    /// The sample stands for the kernel's time.
    pub kernel: bool,
}

/// A thread's user and system ticks when first looked at, the intervals
/// its samples have stood for since, and those given to the kernel.
struct KernelShare {
    first: (u64, u64),
    intervals: u64,
    given: u64,
}

impl KernelShare {
    fn new(s: Stat) -> KernelShare {
        KernelShare { first: (s.utime, s.stime), intervals: 0, given: 0 }
    }

    /// Whether a sample of `w` intervals, now that the thread's `stat` is
    /// `s`, is the kernel's.
    fn due(&mut self, s: Stat, w: u64) -> bool {
        self.intervals += w;
        let user = s.utime.saturating_sub(self.first.0);
        let system = s.stime.saturating_sub(self.first.1);
        if user + system == 0 {
            return false;
        }
        let due = (self.intervals as u128 * system as u128 / (user + system) as u128) as u64;
        let kernel = due >= self.given + w;
        if kernel {
            self.given += w;
        }
        kernel
    }

    /// Undoes a sample of `w` intervals that [`KernelShare::due`] counted
    /// (and gave the kernel if `kernel`) but that was not taken.
    fn undo(&mut self, w: u64, kernel: bool) {
        self.intervals = self.intervals.saturating_sub(w);
        if kernel {
            self.given = self.given.saturating_sub(w);
        }
    }
}

/// What the choice keeps from one look to the next.
pub struct Running {
    /// The recording's interval.
    interval_ns: u64,
    /// Each thread's `schedstat` at the last look.
    last: HashMap<i32, Schedstat>,
    /// Each thread's share of an interval that no sample stands for yet.
    carry: HashMap<i32, f64>,
    /// Each thread's kernel account (see the module's comment).
    kernel: HashMap<i32, KernelShare>,
    last_look: Instant,
}

impl Running {
    /// For a recording sampling every `interval_ns`; the first look's time
    /// is now.
    pub fn new(interval_ns: u64) -> Running {
        Running {
            interval_ns: interval_ns.max(1),
            last: HashMap::new(),
            carry: HashMap::new(),
            kernel: HashMap::new(),
            last_look: Instant::now(),
        }
    }

    /// Gives back a choice that was not sampled: the thread was asleep
    /// when stopped (it went to sleep between the look and the stop), so
    /// its time goes to its next sample, and its kernel account is as if
    /// it had not been chosen (or the next sample would count it twice).
    pub fn give_back(&mut self, c: Chosen) {
        *self.carry.entry(c.tid).or_insert(0.0) += c.intervals as f64;
        if let Some(k) = self.kernel.get_mut(&c.tid) {
            k.undo(c.intervals, c.kernel);
        }
    }

    /// Looks at every thread of process `pid` now (with `main_only`, at
    /// its main thread: a recording of R's main thread lists no threads):
    /// the threads to sample, with the intervals each sample stands for
    /// and whether it is the kernel's.
    pub fn look(&mut self, pid: i32, main_only: bool) -> Vec<Chosen> {
        let now = Instant::now();
        let elapsed_ns = now.duration_since(self.last_look).as_nanos() as u64;
        self.last_look = now;
        let tids = if main_only { Ok(vec![pid]) } else { task_ids(pid) };
        let looks: Vec<Look> = tids
            .unwrap_or_default()
            .into_iter()
            .map(|tid| Look {
                tid,
                sched: procfs::schedstat(Proc::Pid(pid), tid),
                stat: procfs::stat(Proc::Pid(pid), Some(tid)),
            })
            .collect();
        self.choose(elapsed_ns, &looks)
    }

    /// The choice of [`Running::look`], from what it found, `elapsed_ns`
    /// after the last look.
    pub fn choose(&mut self, elapsed_ns: u64, looks: &[Look]) -> Vec<Chosen> {
        let mut out = Vec::new();
        for l in looks {
            // Kept whatever the state: the next look's shares count from
            // this one.
            let before = l.sched.and_then(|s| self.last.insert(l.tid, s));
            let ran = match (l.sched, before) {
                (Some(now), Some(then)) => Some(now.run_ns.saturating_sub(then.run_ns)),
                _ => None,
            };
            // The CPU time used since the last look is carried, whether or
            // not this look samples the thread: a thread asleep now (it
            // worked, then slept) or one that barely ran (woken by the last
            // stop) is not sampled, but its time goes to its next sample.
            let carry = self.carry.entry(l.tid).or_insert(0.0);
            *carry += ran.map_or(0.0, |r| r as f64 / self.interval_ns as f64);
            if l.stat.is_none_or(|s| !s.running()) || ran.is_some_and(|r| r.saturating_mul(20) < elapsed_ns) {
                continue;
            }
            if ran.is_none() {
                *carry += 1.0; // not known: one interval
            }
            let intervals = carry.floor();
            if intervals >= 1.0 {
                *carry -= intervals;
                let kernel = match l.stat {
                    Some(s) => self
                        .kernel
                        .entry(l.tid)
                        .or_insert_with(|| KernelShare::new(s))
                        .due(s, intervals as u64),
                    None => false,
                };
                out.push(Chosen { tid: l.tid, intervals: intervals as u64, kernel });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A look at thread `tid` from the text of its `stat` (in `state`) and
    /// `schedstat` (`run` and `wait` ns; None: no file).
    fn look(tid: i32, state: char, sched: Option<(u64, u64)>) -> Look {
        let stat = format!("{tid} (worker (1)) {state} 1 1 1 0 -1 4194560 12 0 0 0 5 3 0 0 20 0 4 0 100");
        let sched = sched.map(|(run, wait)| format!("{run} {wait} 17\n"));
        Look { tid, stat: Stat::parse(&stat), sched: sched.as_deref().and_then(Schedstat::parse) }
    }

    const MS: u64 = 1_000_000;

    /// A look at running thread 1 that has run `ran` ns, with `user` and
    /// `system` clock ticks in its `stat`.
    fn at(ran: u64, (user, system): (u64, u64)) -> Look {
        let stat = format!("1 (w) R 1 1 1 0 -1 4194560 12 0 0 0 {user} {system} 0 0 20 0 4 0 100");
        Look { tid: 1, stat: Stat::parse(&stat), sched: Schedstat::parse(&format!("{ran} 0 1\n")) }
    }

    /// A user-time sample of thread `tid` standing for `n` intervals.
    fn c(tid: i32, n: u64) -> Chosen {
        Chosen { tid, intervals: n, kernel: false }
    }

    #[test]
    fn running_threads_are_sampled_sleeping_and_gone_ones_not() {
        let mut r = Running::new(10 * MS);
        let gone = Look { tid: 4, stat: None, sched: None };
        let first = [look(1, 'R', Some((0, 0))), look(2, 'S', Some((0, 0))), look(3, 'D', None), gone];
        // The first look knows no earlier times: one interval a running
        // thread.
        assert_eq!(r.choose(10 * MS, &first), [c(1, 1)]);
        // Without contention (no waiting), each running look is one.
        let second = [look(1, 'R', Some((10 * MS, 0))), look(2, 'S', Some((4 * MS, 0)))];
        assert_eq!(r.choose(10 * MS, &second), [c(1, 1)]);
        // The sleeper worked between the looks, but sleeps at this one:
        // not sampled in its sleep; its 9 ms go to its next sample.
        assert_eq!(r.choose(10 * MS, &[look(2, 'S', Some((9 * MS, 0)))]), []);
        assert_eq!(r.choose(10 * MS, &[look(2, 'R', Some((12 * MS, 0)))]), [c(2, 1)]);
        // A running thread whose times are unreadable: one interval.
        assert_eq!(r.choose(10 * MS, &[look(5, 'R', None)]), [c(5, 1)]);
    }

    #[test]
    fn under_contention_a_look_stands_for_the_share_on_a_cpu() {
        let mut r = Running::new(10 * MS);
        assert_eq!(r.choose(10 * MS, &[look(1, 'R', Some((0, 0)))]), [c(1, 1)]);
        // Half the time on a CPU, half waiting: half an interval a look,
        // one sample every other look.
        assert_eq!(r.choose(10 * MS, &[look(1, 'R', Some((5 * MS, 5 * MS)))]), []);
        assert_eq!(r.choose(10 * MS, &[look(1, 'R', Some((10 * MS, 10 * MS)))]), [c(1, 1)]);
        // A quarter: one sample in four looks.
        let mut taken = 0;
        for i in 1..=8u64 {
            let (ran, waited) = (10 * MS + i * 5 * MS / 2, 10 * MS + i * 15 * MS / 2);
            let made = r.choose(10 * MS, &[look(1, 'R', Some((ran, waited)))]);
            taken += made.iter().map(|m| m.intervals).sum::<u64>();
        }
        assert_eq!(taken, 2);
    }

    #[test]
    fn a_late_look_stands_for_all_the_cpu_time_used_since_the_last() {
        // The recording waited for a core: 25 ms between looks, all of it
        // on a CPU for the thread. Two intervals, then three (the half
        // carried), as the thread's 50 ms of CPU time make five.
        let mut r = Running::new(10 * MS);
        assert_eq!(r.choose(10 * MS, &[look(1, 'R', Some((0, 0)))]), [c(1, 1)]);
        assert_eq!(r.choose(25 * MS, &[look(1, 'R', Some((25 * MS, 0)))]), [c(1, 2)]);
        assert_eq!(r.choose(25 * MS, &[look(1, 'R', Some((50 * MS, 0)))]), [c(1, 3)]);
    }

    #[test]
    fn samples_are_the_kernel_s_in_the_system_share_of_the_thread_s_ticks() {
        let mut r = Running::new(10 * MS);
        // The first look knows no share yet.
        assert_eq!(r.choose(10 * MS, &[at(0, (100, 50))]), [c(1, 1)]);
        // Then a quarter of the thread's ticks are system time: one sample
        // in four is the kernel's, as its share comes due.
        let mut kernel = Vec::new();
        for i in 1..=40u64 {
            let made = r.choose(10 * MS, &[at(i * 10 * MS, (100 + 3 * i, 50 + i))]);
            assert_eq!(made.len(), 1);
            if made[0].kernel {
                kernel.push(i);
            }
        }
        assert_eq!(kernel.len(), 10, "{kernel:?}");
        assert_eq!(kernel[0], 3, "due once four intervals are sampled");
    }

    #[test]
    fn a_choice_given_back_leaves_the_kernel_share_as_it_was() {
        // As above (a quarter of the ticks are system time), but every
        // other choice is given back (the thread was found asleep at the
        // stop): its intervals come with the next, which stands for two.
        let mut r = Running::new(10 * MS);
        assert_eq!(r.choose(10 * MS, &[at(0, (100, 50))]), [c(1, 1)]);
        let (mut kernel, mut all) = (0, 0);
        for i in 1..=40u64 {
            let made = r.choose(10 * MS, &[at(i * 10 * MS, (100 + 3 * i, 50 + i))]);
            assert_eq!(made.len(), 1);
            if i % 2 == 1 {
                r.give_back(made[0]);
                continue;
            }
            assert_eq!(made[0].intervals, 2);
            all += made[0].intervals;
            if made[0].kernel {
                kernel += made[0].intervals;
            }
        }
        // A quarter of the 40 intervals sampled, as without give-backs
        // (counted twice, the share would come due twice as often).
        assert_eq!(all, 40);
        assert_eq!(kernel, 10, "{kernel} of {all}");
    }

    #[test]
    fn a_thread_that_barely_ran_is_not_sampled() {
        let mut r = Running::new(10 * MS);
        assert_eq!(r.choose(10 * MS, &[look(1, 'R', Some((0, 0)))]), [c(1, 1)]);
        // Less than a twentieth of the 20 ms since the last look on a CPU
        // (woken by the last stop): not sampled, its time carried (0.05,
        // then 0.96 make one).
        assert_eq!(r.choose(20 * MS, &[look(1, 'R', Some((MS / 2, 0)))]), []);
        assert_eq!(r.choose(10 * MS, &[look(1, 'R', Some((MS / 2 + 96 * MS / 10, 0)))]), [c(1, 1)]);
    }

    #[test]
    fn this_process_threads_are_looked_at() {
        let mut r = Running::new(10 * MS);
        let pid = std::process::id() as i32;
        // This thread runs as it looks (its stat says R).
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() };
        let chosen = r.look(pid, false);
        assert!(chosen.iter().any(|c| c.tid == me && c.intervals == 1), "{chosen:?}");
        assert_eq!(Running::new(10 * MS).look(i32::MAX, false), []);
        assert_eq!(Running::new(10 * MS).look(i32::MAX, true), []);
        // The main thread only (the test's harness waits there): this
        // running thread is not looked at.
        let mut m = Running::new(10 * MS);
        let main = m.look(pid, true);
        assert!(main.iter().all(|c| c.tid == pid), "{main:?}");
    }
}
