//! What the processes working for a profiled process used while the
//! profile ran. The profile's collector thread looks every [`EVERY`] (its
//! descendants as they are then, its workers as found last, looked for
//! every [`WORKERS_EVERY`]: reading the kernel's connection tables takes
//! milliseconds) and each process is remembered with its CPU time when
//! first and last seen, so that one that ends before the profile does is
//! not lost: only its time after the last look is. (No thread of its
//! own: a thread would be one of the profiled process's, and sampled.)

use super::family::{relatives_by, use_of, RelativeUse};
use super::finder::{self, Found};
use crate::procfs;
use std::time::{Duration, Instant};

/// How often the processes are looked at.
pub const EVERY: Duration = Duration::from_millis(100);

/// How often workers are looked for.
pub const WORKERS_EVERY: Duration = Duration::from_secs(1);

/// At most this many processes are remembered (short-lived processes
/// started in a loop are not followed further).
pub const MAX_SEEN: usize = 4096;

/// A process that worked for the watched one.
#[derive(Clone, Debug, PartialEq)]
pub struct Seen {
    pub now: RelativeUse,
    /// Its CPU time when first seen, in seconds: at the watch's first
    /// look; 0 for a process first seen later that started after the
    /// watch did (all of its time is the profile's); at the look that
    /// first saw it for one that started before and was first seen later
    /// (what it used before that look is not known).
    pub first_cpu_s: f64,
    /// It was not there at the latest look: it had ended (a child its
    /// parent waited for is then in the parent's account of its children).
    pub ended: bool,
    /// Why it could not be read, when reading it was tried and failed (the
    /// kernel refused to let this process trace it, ...).
    pub why: Option<String>,
}

impl Seen {
    /// The CPU time it used while watched (up to the last look that saw
    /// it).
    pub fn cpu_s(&self) -> f64 {
        (self.now.cpu_s - self.first_cpu_s).max(0.0)
    }
}

/// The processes working for one process, watched.
pub struct Watch {
    pid: i32,
    /// The workers of each process, as last looked for.
    workers: Found,
    seen: Vec<Seen>,
    /// Of the children seen (pid, start time), whether each is a fork of
    /// the watching process that runs its code still (see `programs`).
    forks: std::collections::HashMap<(i32, u64), bool>,
    /// When the watch started, in clock ticks after boot (0: not known).
    since_ticks: u64,
    next: Instant,
    next_workers: Instant,
}

impl Watch {
    /// Starts watching the processes working for `pid`: a first look now.
    pub fn start(pid: i32) -> Watch {
        let now = Instant::now();
        let since_ticks = procfs::now_ticks().unwrap_or(0);
        // (Drawn before the children it tells apart are forked.)
        crate::fork::mark();
        let mut w = Watch {
            pid,
            workers: Found::new(),
            seen: Vec::new(),
            forks: std::collections::HashMap::new(),
            since_ticks,
            next: now,
            next_workers: now,
        };
        let listing = w.listing(now);
        update(&mut w.seen, listing, u64::MAX);
        w
    }

    /// Looks if it is time to; whether it looked.
    pub fn look(&mut self, now: Instant) -> bool {
        if now < self.next {
            return false;
        }
        let listing = self.listing(now);
        update(&mut self.seen, listing, self.since_ticks);
        true
    }

    /// The workers (not descendants, see `family`) at the latest look:
    /// pid, start time, and CPU time when first seen (see
    /// [`Seen::first_cpu_s`]).
    pub fn workers(&self) -> Vec<(i32, u64, f64)> {
        self.seen
            .iter()
            .filter(|s| !s.ended && s.now.relative.relation == super::family::Relation::Worker)
            .map(|s| (s.now.relative.pid, s.now.start_ticks, s.first_cpu_s))
            .collect()
    }

    /// The children (of the watching process, and of the processes
    /// working for it) at the latest look that run another program than
    /// the watching process's (callr's R sessions, `system()`'s programs,
    /// which sample nothing themselves; a fork of the watching process
    /// made while it was watched does, see `profile::capture::children`):
    /// as [`workers`](Watch::workers) gives them. Only when the watching
    /// process is this one.
    pub fn programs(&mut self) -> Vec<(i32, u64, f64)> {
        // SAFETY: getpid has no preconditions.
        if self.pid != unsafe { libc::getpid() } {
            return Vec::new();
        }
        let forks = &mut self.forks;
        self.seen
            .iter()
            .filter(|s| !s.ended && s.now.relative.relation == super::family::Relation::Child)
            .filter(|s| {
                let key = (s.now.relative.pid, s.now.start_ticks);
                // A fork is looked at again until it runs another program
                // (it runs its parent's code first). One whose memory
                // cannot be read (ending: its memory is let go before it
                // is a zombie) stays what it was: an ending fork is no
                // program to read.
                if forks.get(&key) != Some(&false) {
                    if let Some(fork) = crate::fork::is_fork_of_this(key.0) {
                        forks.insert(key, fork);
                    }
                }
                forks.get(&key) == Some(&false)
            })
            .map(|s| (s.now.relative.pid, s.now.start_ticks, s.first_cpu_s))
            .collect()
    }

    /// A last look, and every process seen.
    pub fn finish(mut self) -> Vec<Seen> {
        let listing = self.listing(Instant::now());
        update(&mut self.seen, listing, self.since_ticks);
        self.seen
    }

    /// The processes working for the watched one now (its workers looked
    /// for again if it is time to).
    fn listing(&mut self, now: Instant) -> Vec<RelativeUse> {
        self.next = now + EVERY;
        if now >= self.next_workers {
            self.next_workers = now + WORKERS_EVERY;
            self.workers = finder::look(self.pid);
        }
        let workers = &self.workers;
        relatives_by(self.pid, |p| finder::still_there(workers.get(&p).map_or(&[], |w| w.as_slice())))
            .into_iter()
            .filter_map(use_of)
            .collect()
    }
}

/// Adds a look's `listing` to `seen`: a process seen before (the same pid
/// and start time) takes its latest CPU time and command (an empty one
/// kept from before: a process that has ended but not been waited for has
/// no command line); another is added (up to [`MAX_SEEN`]) with its CPU
/// time then as its first if it started before `since_ticks` (the watch's
/// start, or `u64::MAX` at its first look), else 0. (One started in the
/// clock tick the watch started in counts as started after: at most a
/// tick too much.) Those not in `listing` have ended.
pub(crate) fn update(seen: &mut Vec<Seen>, listing: Vec<RelativeUse>, since_ticks: u64) {
    for s in seen.iter_mut() {
        s.ended = true;
    }
    for mut now in listing {
        let same =
            |s: &&mut Seen| s.now.relative.pid == now.relative.pid && s.now.start_ticks == now.start_ticks;
        if let Some(s) = seen.iter_mut().find(|s| same(s)) {
            if now.command.is_empty() {
                now.command = std::mem::take(&mut s.now.command);
            }
            s.now = now;
            s.ended = false;
        } else if seen.len() < MAX_SEEN {
            let first_cpu_s = if now.start_ticks < since_ticks { now.cpu_s } else { 0.0 };
            seen.push(Seen { now, first_cpu_s, ended: false, why: None });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::family::{Relation, Relative};
    use super::*;

    fn used(pid: i32, start_ticks: u64, cpu_s: f64) -> RelativeUse {
        RelativeUse {
            relative: Relative { pid, parent: 1, relation: Relation::Worker },
            start_ticks,
            cpu_s,
            command: format!("cmd {pid}"),
        }
    }

    #[test]
    fn each_process_counts_its_time_from_when_it_was_first_seen() {
        let mut seen = Vec::new();
        // At the start (tick 110): 11 had used 1 s, 12 2 s.
        update(&mut seen, vec![used(11, 100, 1.0), used(12, 100, 2.0)], u64::MAX);
        // Later: 11 at 1.5 s; 12 has ended; 13 started (0.25 s); 14,
        // started before the watch did, first seen now at 3 s.
        update(&mut seen, vec![used(11, 100, 1.5), used(13, 120, 0.25), used(14, 105, 3.0)], 110);
        // Later still: 11 has ended; 13 at 0.5 s; 14 at 3.5 s; 11's pid
        // reused by another process (0.75 s).
        update(&mut seen, vec![used(13, 120, 0.5), used(14, 105, 3.5), used(11, 130, 0.75)], 110);
        let got: Vec<(i32, u64, f64)> =
            seen.iter().map(|s| (s.now.relative.pid, s.now.start_ticks, s.cpu_s())).collect();
        assert_eq!(
            got,
            vec![(11, 100, 0.5), (12, 100, 0.0), (13, 120, 0.5), (14, 105, 0.5), (11, 130, 0.75)]
        );
        assert_eq!(seen[2].now.command, "cmd 13");
        // 11 (the first) and 12 were not at the last look: ended.
        let ended: Vec<bool> = seen.iter().map(|s| s.ended).collect();
        assert_eq!(ended, vec![true, true, false, false, false]);
    }

    #[test]
    fn a_process_seen_without_a_command_line_keeps_the_one_it_had() {
        // (Ended, not yet waited for: its cmdline file is empty.)
        let mut seen = Vec::new();
        update(&mut seen, vec![used(11, 100, 1.0)], 0);
        let mut zombie = used(11, 100, 1.5);
        zombie.command = String::new();
        update(&mut seen, vec![zombie], 0);
        assert_eq!(seen[0].now.command, "cmd 11");
        assert_eq!(seen[0].cpu_s(), 1.5);
        assert!(!seen[0].ended);
    }

    #[test]
    fn at_most_max_seen_processes_are_remembered() {
        let mut seen = Vec::new();
        update(&mut seen, (0..MAX_SEEN as i32 + 10).map(|p| used(p, 1, 1.0)).collect(), 0);
        assert_eq!(seen.len(), MAX_SEEN);
    }

    #[test]
    fn a_child_that_ended_before_the_end_keeps_the_time_it_was_seen_with() {
        // A shell that counts (CPU time of its own), then sleeps 0.3 s and
        // ends: watched while it runs, it is remembered after it ended.
        let script = "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; sleep 0.3";
        let mut watch = Watch::start(std::process::id() as i32);
        let mut child = std::process::Command::new("sh").args(["-c", script]).spawn().unwrap();
        let pid = child.id() as i32;
        let deadline = Instant::now() + Duration::from_secs(60);
        while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
            watch.look(Instant::now());
            std::thread::sleep(Duration::from_millis(10));
        }
        child.wait().unwrap();
        let seen = watch.finish();
        if crate::procfs::children(crate::procfs::Proc::This).is_none() {
            eprintln!("skipped: this kernel has no task/*/children files");
            return;
        }
        let me = seen.iter().find(|s| s.now.relative.pid == pid).expect("the child was seen");
        assert_eq!(me.now.relative.relation, Relation::Child);
        // (Started after the first look: all of its time.)
        assert_eq!(me.first_cpu_s, 0.0);
        assert!(me.cpu_s() > 0.0, "{}", me.cpu_s());
        assert!(me.ended);
    }
}
