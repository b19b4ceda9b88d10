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
//! sampled in its sleep (that time is not counted). A thread that used the CPU for less than a
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

/// What the choice keeps from one look to the next.
pub struct Running {
    /// The recording's interval.
    interval_ns: u64,
    /// Each thread's `schedstat` at the last look.
    last: HashMap<i32, Schedstat>,
    /// Each thread's share of an interval that no sample stands for yet.
    carry: HashMap<i32, f64>,
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
            last_look: Instant::now(),
        }
    }

    /// Looks at every thread of process `pid` now: the threads to sample,
    /// with the intervals each sample stands for.
    pub fn look(&mut self, pid: i32) -> Vec<(i32, u64)> {
        let now = Instant::now();
        let elapsed_ns = now.duration_since(self.last_look).as_nanos() as u64;
        self.last_look = now;
        let looks: Vec<Look> = task_ids(pid)
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
    pub fn choose(&mut self, elapsed_ns: u64, looks: &[Look]) -> Vec<(i32, u64)> {
        let mut out = Vec::new();
        for l in looks {
            // Kept whatever the state: the next look's shares count from
            // this one.
            let before = l.sched.and_then(|s| self.last.insert(l.tid, s));
            if l.stat.is_none_or(|s| !s.running()) {
                continue;
            }
            let share = match (l.sched, before) {
                (Some(now), Some(then)) => {
                    let ran = now.run_ns.saturating_sub(then.run_ns);
                    if ran.saturating_mul(20) < elapsed_ns {
                        continue;
                    }
                    ran as f64 / self.interval_ns as f64
                }
                _ => 1.0, // not known: one interval
            };
            let carry = self.carry.entry(l.tid).or_insert(0.0);
            *carry += share;
            let intervals = carry.floor();
            if intervals >= 1.0 {
                *carry -= intervals;
                out.push((l.tid, intervals as u64));
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

    #[test]
    fn running_threads_are_sampled_sleeping_and_gone_ones_not() {
        let mut r = Running::new(10 * MS);
        let gone = Look { tid: 4, stat: None, sched: None };
        let first = [look(1, 'R', Some((0, 0))), look(2, 'S', Some((0, 0))), look(3, 'D', None), gone];
        // The first look knows no earlier times: one interval a running
        // thread.
        assert_eq!(r.choose(10 * MS, &first), [(1, 1)]);
        // Without contention (no waiting), each running look is one.
        let second = [look(1, 'R', Some((10 * MS, 0))), look(2, 'S', Some((4 * MS, 0)))];
        assert_eq!(r.choose(10 * MS, &second), [(1, 1)]);
        // The sleeper worked between the looks, but sleeps at this one.
        assert_eq!(r.choose(10 * MS, &[look(2, 'S', Some((9 * MS, 0)))]), []);
        // A running thread whose times are unreadable: one interval.
        assert_eq!(r.choose(10 * MS, &[look(5, 'R', None)]), [(5, 1)]);
    }

    #[test]
    fn under_contention_a_look_stands_for_the_share_on_a_cpu() {
        let mut r = Running::new(10 * MS);
        assert_eq!(r.choose(10 * MS, &[look(1, 'R', Some((0, 0)))]), [(1, 1)]);
        // Half the time on a CPU, half waiting: half an interval a look,
        // one sample every other look.
        assert_eq!(r.choose(10 * MS, &[look(1, 'R', Some((5 * MS, 5 * MS)))]), []);
        assert_eq!(r.choose(10 * MS, &[look(1, 'R', Some((10 * MS, 10 * MS)))]), [(1, 1)]);
        // A quarter: one sample in four looks.
        let mut taken = 0;
        for i in 1..=8u64 {
            let (ran, waited) = (10 * MS + i * 5 * MS / 2, 10 * MS + i * 15 * MS / 2);
            let made = r.choose(10 * MS, &[look(1, 'R', Some((ran, waited)))]);
            taken += made.iter().map(|m| m.1).sum::<u64>();
        }
        assert_eq!(taken, 2);
    }

    #[test]
    fn a_late_look_stands_for_all_the_cpu_time_used_since_the_last() {
        // The recording waited for a core: 25 ms between looks, all of it
        // on a CPU for the thread. Two intervals, then three (the half
        // carried), as the thread's 50 ms of CPU time make five.
        let mut r = Running::new(10 * MS);
        assert_eq!(r.choose(10 * MS, &[look(1, 'R', Some((0, 0)))]), [(1, 1)]);
        assert_eq!(r.choose(25 * MS, &[look(1, 'R', Some((25 * MS, 0)))]), [(1, 2)]);
        assert_eq!(r.choose(25 * MS, &[look(1, 'R', Some((50 * MS, 0)))]), [(1, 3)]);
    }

    #[test]
    fn a_thread_that_barely_ran_is_not_sampled() {
        let mut r = Running::new(10 * MS);
        assert_eq!(r.choose(10 * MS, &[look(1, 'R', Some((0, 0)))]), [(1, 1)]);
        // Less than a twentieth of the 20 ms since the last look on a CPU
        // (woken by the last stop): not sampled, its time not carried
        // (0.96 of an interval next, not 1.01).
        assert_eq!(r.choose(20 * MS, &[look(1, 'R', Some((MS / 2, 0)))]), []);
        assert_eq!(r.choose(10 * MS, &[look(1, 'R', Some((MS / 2 + 96 * MS / 10, 0)))]), []);
        // A twentieth is counted: 0.96 and 0.1 make one.
        assert_eq!(r.choose(20 * MS, &[look(1, 'R', Some((MS / 2 + 106 * MS / 10, 0)))]), [(1, 1)]);
    }

    #[test]
    fn this_process_threads_are_looked_at() {
        let mut r = Running::new(10 * MS);
        let pid = std::process::id() as i32;
        // This thread runs as it looks (its stat says R).
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() };
        let chosen = r.look(pid);
        assert!(chosen.iter().any(|&(t, n)| t == me && n == 1), "{chosen:?}");
        assert_eq!(Running::new(10 * MS).look(i32::MAX), []);
    }
}
