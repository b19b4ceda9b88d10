//! Worker processes read from outside while a profile runs: PSOCK and
//! future `multisession` workers, found through the profiled process's
//! connections (see `relatives`), and children that run another program.
//! Each is recorded as `winch_record()` records a process (see `outside::recorder`): stopped with ptrace for as
//! long as one sample takes, from the collector thread, at the profile's
//! interval of the worker's own CPU time (a waiting worker is not stopped).
//! Its samples become the profile's records, joined to R's main thread's
//! sample as another thread's are, so that the profile shows them under
//! the main thread's dispatching call (`parLapply`) when it is in one.
//!
//! Children of this process that run another program (callr's sessions,
//! `system()`'s programs: `relatives::watch::Watch::programs`) are read
//! the same way, but stopped by winch's tracer process (see
//! `outside::helper`), so that no `waitpid()` of R's (or of a package's:
//! processx, parallel) can take a stop the tracer caused for a child's
//! exit. Workers are not this process's descendants: a thread of its own
//! stops them.

use super::shared::Session;
use crate::modules::ModuleMap;
use crate::outside::recorder::{Recorder, Settings};
use crate::profile::collect::{Collected, Process};
use crate::profile::labels::{self, EXTRA_BASE};
use crate::profile::record::{self, Entry, Flags, Origin, Owner, Prefix};
use crate::unwind::walk::Snapshot;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// At most this many workers are read in one profile (more are left
/// unsampled, and said so).
pub const MAX_WORKERS: usize = 64;

/// Where the snapshot numbers of workers' samples begin until the profile
/// ends (see [`foreign_snapshot`]): the workers' snapshots are then put
/// after the profiled process's and the samples renumbered.
const FOREIGN: u32 = 1 << 30;
/// Snapshot numbers per worker.
const PER_WORKER: u32 = 1 << 16;

/// A worker is read at most once per this many times what a read costs
/// (how long it keeps the worker stopped, and the CPU time the profiler
/// spends on it, which a machine the workers fill takes from them; each
/// the recent median, roughly) of the worker's CPU time: reading costs a
/// worker's work at most about 2 % on any machine, however slow reads are
/// there. Each sample stands for the CPU time since the last (see
/// `outside::running`), so fewer samples are as many seconds.
const COST_SHARE: u64 = 50;
/// ... but at least every this many intervals of its CPU time, whatever a
/// read costs: a read slowed by a busy moment cannot make its worker's
/// next samples so rare that its last seconds go unseen.
const MAX_GAP_INTERVALS: u64 = 16;

/// The temporary number of snapshot `k` of worker `w` (one past a
/// worker's range, or past the workers', names no snapshot: its samples'
/// frames are unknown, never another's).
fn foreign_snapshot(w: usize, k: u32) -> u32 {
    if k >= PER_WORKER || w >= MAX_WORKERS {
        return u32::MAX >> 1;
    }
    FOREIGN + w as u32 * PER_WORKER + k
}

/// One worker being read.
struct Worker {
    pid: i32,
    start_ticks: u64,
    /// Its recorder, once it has run (None before, and once it has ended
    /// or could not be read).
    rec: Option<Recorder>,
    started: bool,
    /// Its labels (ids of its recorder's) as the profile's.
    labels: HashMap<u32, u32>,
    samples: u64,
    command: String,
    /// Its CPU time when first read, and at the latest read.
    cpu_first_s: f64,
    cpu_last_s: f64,
    /// Its snapshots, once it has ended (its recorder let go).
    snapshots: Snapshots,
    /// Why it could not be read, if reading it was refused or failed.
    refused: Option<String>,
    /// Its main thread's time on a CPU at the latest tick (`schedstat`),
    /// and at its latest sample.
    ran_ns: Option<u64>,
    sampled_ran_ns: Option<u64>,
    /// What a read of it costs (see [`COST_SHARE`]): an estimate that
    /// follows the middle of their costs (see `follow_median`).
    cost_ns: u64,
}

/// A worker's snapshots of its modules, and its modules as last seen.
#[allow(clippy::vec_box)]
pub type Snapshots = (Vec<Box<Snapshot>>, Option<Arc<ModuleMap>>);

impl Worker {
    /// Its reading ends: its snapshots are kept for naming its samples.
    fn end(&mut self) {
        self.started = true;
        if let Some(mut r) = self.rec.take() {
            self.snapshots = catch_unwind(AssertUnwindSafe(|| r.take_snapshots())).unwrap_or_default();
        }
    }
}

/// What the workers read add to a finished profile.
#[derive(Default)]
pub struct Read {
    /// Each worker's snapshots, with its modules as last seen.
    pub snapshots: Vec<Snapshots>,
    pub processes: Vec<Process>,
    /// The workers that could not be read (pid, start time), and why.
    pub refused: Vec<(i32, u64, String)>,
}

/// The workers of a profile, read from its collector thread.
pub struct Traced {
    settings: Settings,
    workers: Vec<Worker>,
    /// Label texts already given an id of the profile's.
    texts: HashMap<String, u32>,
    buf: Vec<Vec<u64>>,
}

impl Traced {
    pub fn new(interval_ns: u64, with_loops: bool, lines: bool, own_r: usize) -> Traced {
        let settings = Settings { threads: (false, false), how: (with_loops, lines), own_r, interval_ns };
        Traced { settings, workers: Vec::new(), texts: HashMap::new(), buf: Vec::new() }
    }

    /// How often the workers' samples are taken.
    pub fn every(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.settings.interval_ns)
    }

    /// Takes on the workers in `workers` (pid, start time, CPU time when
    /// the profile's watch first saw it) not known yet: each is read from
    /// when it first runs (an idle worker is never stopped; see `tick`).
    /// Its CPU time counts from when the watch first saw it, so that what
    /// one found late (a cluster made inside the profile is found up to a
    /// second after it starts) used before it was read is unseen, not
    /// lost.
    pub fn adopt(&mut self, workers: &[(i32, u64, f64)]) {
        for &(pid, start_ticks, seen_s) in workers {
            let known = self.workers.iter().any(|w| w.pid == pid && w.start_ticks == start_ticks);
            if known || self.workers.len() >= MAX_WORKERS {
                continue;
            }
            let cpu_first_s = seen_s.clamp(0.0, cpu_s(pid));
            self.workers.push(Worker {
                pid,
                start_ticks,
                rec: None,
                started: false,
                labels: HashMap::new(),
                samples: 0,
                command: crate::procfs::cmdline(crate::procfs::Proc::Pid(pid)),
                cpu_first_s,
                cpu_last_s: cpu_first_s,
                snapshots: Snapshots::default(),
                ran_ns: ran_ns(pid),
                sampled_ran_ns: None,
                cost_ns: 0,
                refused: None,
            });
        }
    }

    /// Takes a sample of every worker that ran since its last one (one
    /// that runs for the first time is read first: its modules, which takes
    /// a moment), each joined to R's main thread's sample `link` says
    /// (given R's innermost context record now): into `c`.
    pub fn tick(&mut self, s: &Session, c: &mut Collected) {
        for w in 0..self.workers.len() {
            let worker = &mut self.workers[w];
            if worker.started && worker.rec.is_none() {
                continue;
            }
            // The pid is another process's now (the worker ended): never
            // stopped (it could be one of R's own children).
            let Some(cpu) = look(worker.pid).filter(|l| l.0 == worker.start_ticks).map(|l| l.1) else {
                worker.end();
                continue;
            };
            // (Its CPU time at every tick, sampled or not: what a worker
            // that ends between two samples used after the last is unseen,
            // not lost.)
            if worker.rec.is_some() {
                worker.cpu_last_s = cpu.max(worker.cpu_last_s);
            }
            // A worker that has not run since its last look is not stopped
            // (an idle cluster costs a `schedstat` read a tick).
            let ran = ran_ns(worker.pid);
            if ran.is_some() && ran == worker.ran_ns {
                continue;
            }
            worker.ran_ns = ran;
            // Not yet read again: it has not run for COST_SHARE times what
            // a read costs (nor for an interval) since its last.
            let gap = gap_ns(worker.cost_ns, self.settings.interval_ns);
            if let (Some(now), Some(then)) = (ran, worker.sampled_ran_ns) {
                if now.saturating_sub(then) < gap {
                    continue;
                }
            }
            if !worker.started {
                worker.started = true;
                // (Refused, by Yama's ptrace_scope or a container without
                // CAP_SYS_PTRACE, or gone: it stays unsampled, and the
                // profile says so, see `relatives`. A panic of the reader
                // ends this worker's reading, not the collector.)
                let (pid, settings) = (worker.pid, self.settings);
                match catch_unwind(AssertUnwindSafe(|| Recorder::start(pid, settings))) {
                    Ok(Ok(r)) => worker.rec = Some(r),
                    Ok(Err(e)) => worker.refused = Some(e.to_string()),
                    Err(_) => worker.refused = Some("reading it failed (a defect of winch's)".into()),
                }
                continue;
            }
            let Some(rec) = worker.rec.as_mut() else { continue };
            let mut buf = std::mem::take(&mut self.buf);
            buf.clear();
            let cpu0 = profiler_cpu_ns();
            let read = catch_unwind(AssertUnwindSafe(|| rec.tick_into(&mut buf)));
            let spent = profiler_cpu_ns().saturating_sub(cpu0);
            if !matches!(read, Ok(Ok(_))) {
                // Ended (or no longer readable): what it gave is kept, and
                // what its samples are named with.
                worker.end();
            } else {
                // (Not the first read's: it reads what later ones find
                // ready, R's registration table, the pages R's objects are
                // on, one at a time.)
                let first = worker.sampled_ran_ns.is_none();
                worker.sampled_ran_ns = ran;
                if !first {
                    let stopped: u64 =
                        buf.iter().filter_map(|r| record::split(r)).map(|(p, _)| p.header.handler_ns).sum();
                    worker.cost_ns = follow_median(worker.cost_ns, stopped + spent);
                }
                let context = super::handler::main_context(s);
                for r in &buf {
                    let link = super::handler::link_to_main(s, context, super::clock::now_ns());
                    self.absorb(w, r, link, context as u64, c);
                }
            }
            self.buf = buf;
        }
    }

    /// One record of worker `w` into `c`: made a worker process's sample
    /// (its snapshot numbered as `foreign_snapshot` says, its labels the
    /// profile's) joined to R's main thread's sample `link`.
    fn absorb(&mut self, w: usize, r: &[u64], link: u64, context: u64, c: &mut Collected) {
        let Some((prefix, entries)) = record::split(r) else { return };
        let worker = &mut self.workers[w];
        let Some(rec) = worker.rec.as_ref() else { return };
        let mut out = Vec::with_capacity(r.len());
        let mut header = prefix.header;
        header.flags = header.flags | Flags::PROCESS | Flags::WORKER;
        let pid = worker.pid as u32;
        let origin = Origin::child(foreign_snapshot(w, prefix.origin.snapshot), pid);
        out.extend_from_slice(&Prefix { header, origin, link, context }.encode());
        let (texts, labels) = (&mut self.texts, &mut worker.labels);
        let mut map = |id: u32| -> u32 {
            if id < labels::FIXED_COUNT {
                return id;
            }
            if let Some(&m) = labels.get(&id) {
                return m;
            }
            let text = rec.label(id);
            let m = *texts.entry(text.to_string()).or_insert_with(|| {
                c.extra_labels.push(text.to_string());
                EXTRA_BASE + c.extra_labels.len() as u32 - 1
            });
            labels.insert(id, m);
            m
        };
        for &e in entries {
            out.push(match Entry::decode(e) {
                Entry::R { label, owner } => {
                    let owner = match owner {
                        Owner::Frame(o) => Owner::Frame(map(o)),
                        other => other,
                    };
                    Entry::r_owned(map(label), owner)
                }
                Entry::Pos { file, line } => Entry::pos(map(file), line),
                _ => e,
            });
        }
        worker.samples += 1;
        c.absorb(&out);
    }

    /// Ends the reading: every worker's snapshots, and what each used.
    pub fn finish(self) -> Read {
        let mut read = Read::default();
        for mut w in self.workers {
            if let Some(why) = w.refused.take() {
                read.refused.push((w.pid, w.start_ticks, why));
            }
            // (One that has ended keeps what it had used at its last read.)
            let last = if w.rec.is_some() { cpu_s(w.pid).max(w.cpu_last_s) } else { w.cpu_last_s };
            let cpu_ns = ((last - w.cpu_first_s).max(0.0) * 1e9) as u64;
            let snapshots = match w.rec.as_mut() {
                Some(r) => r.take_snapshots(),
                None => std::mem::take(&mut w.snapshots),
            };
            read.snapshots.push(snapshots);
            if w.samples > 0 {
                read.processes.push(Process {
                    pid: w.pid as u32,
                    command: w.command,
                    cpu_ns,
                    samples: w.samples,
                    dropped: 0,
                });
            }
        }
        read
    }
}

/// Renumbers the workers' samples' snapshots in `c` now that the workers'
/// snapshots follow the profiled process's `own` ones (`read`'s, in
/// order): the ranges of numbers that are each worker's, with its modules.
pub fn place_snapshots(
    c: &mut Collected,
    own: usize,
    read: &Read,
) -> Vec<(std::ops::Range<usize>, Arc<ModuleMap>)> {
    let mut starts = Vec::with_capacity(read.snapshots.len());
    let mut ranges = Vec::new();
    let mut next = own;
    for (snaps, now) in &read.snapshots {
        starts.push(next);
        if let Some(now) = now {
            ranges.push((next..next + snaps.len(), now.clone()));
        }
        next += snaps.len();
    }
    c.renumber_snapshots(|k| {
        if k < FOREIGN {
            return Some(k);
        }
        let (w, i) = (((k - FOREIGN) / PER_WORKER) as usize, (k - FOREIGN) % PER_WORKER);
        let n = read.snapshots.get(w)?.0.len();
        (i < n as u32).then(|| (starts[w] + i as usize) as u32)
    });
    ranges
}

/// How much CPU time a worker whose reads cost `cost_ns` uses between two
/// samples (see [`COST_SHARE`], [`MAX_GAP_INTERVALS`]).
fn gap_ns(cost_ns: u64, interval_ns: u64) -> u64 {
    COST_SHARE.saturating_mul(cost_ns).clamp(interval_ns, MAX_GAP_INTERVALS.saturating_mul(interval_ns))
}

/// The CPU time of this thread and of the tracer threads so far.
fn profiler_cpu_ns() -> u64 {
    super::clock::read_clock(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or(0)
        + crate::outside::ptrace::TRACERS_CPU_NS.load(std::sync::atomic::Ordering::Relaxed)
}

/// The next estimate of the middle of a series of times after `x`: a step
/// towards it of a 16th of the estimate (at least 1 µs), so that a few
/// slow reads (a machine busy for a moment) move it little, while it
/// settles on the median of a steady series.
fn follow_median(est: u64, x: u64) -> u64 {
    if est == 0 {
        return x;
    }
    let step = (est / 16).max(1000);
    if x > est {
        est + step.min(x - est)
    } else {
        est - step.min(est - x)
    }
}

/// The time process `pid`'s main thread has run (its `schedstat`), None
/// when not known.
fn ran_ns(pid: i32) -> Option<u64> {
    crate::procfs::schedstat(crate::procfs::Proc::Pid(pid), pid).map(|s| s.run_ns)
}

/// When process `pid` started (see `procfs::start_ticks`) and its CPU time
/// so far in seconds, from one read of its `stat`; None when gone.
fn look(pid: i32) -> Option<(u64, f64)> {
    let (start, st) = crate::procfs::start_and_stat(pid)?;
    Some((start, st.cpu_ticks() as f64 / crate::procfs::clock_ticks() as f64))
}

/// A process's CPU time so far (user and system), in seconds; 0 when gone.
fn cpu_s(pid: i32) -> f64 {
    let hz = crate::procfs::clock_ticks() as f64;
    crate::procfs::stat(crate::procfs::Proc::Pid(pid), None).map_or(0.0, |st| st.cpu_ticks() as f64 / hz)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_look_reads_start_and_cpu_time_at_once() {
        let me = std::process::id() as i32;
        let (start, cpu) = look(me).unwrap();
        assert_eq!(Some(start), crate::procfs::start_ticks(me));
        assert!(cpu >= 0.0 && cpu <= cpu_s(me) + 1e-9);
        assert!(look(i32::MAX).is_none(), "no such process");
    }

    #[test]
    fn a_worker_is_read_at_most_once_per_fifty_reads_cost_and_at_least_every_sixteen_intervals() {
        const MS: u64 = 1_000_000;
        assert_eq!(gap_ns(0, 5 * MS), 5 * MS, "not known yet: every interval");
        assert_eq!(gap_ns(MS / 20, 5 * MS), 5 * MS, "cheap reads: every interval");
        assert_eq!(gap_ns(MS, 5 * MS), 50 * MS);
        assert_eq!(gap_ns(20 * MS, 5 * MS), 80 * MS, "a slow read: at most 16 intervals");
        assert_eq!(gap_ns(u64::MAX, u64::MAX), u64::MAX);
    }

    #[test]
    fn the_stop_estimate_settles_on_the_median_and_outliers_move_it_little() {
        // Reads of 200 µs with one in five of 5 ms (a busy moment).
        let mut est = 0;
        for i in 0..400u64 {
            est = follow_median(est, if i % 5 == 4 { 5_000_000 } else { 200_000 });
        }
        assert!((190_000..=260_000).contains(&est), "{est}");
        // From the first read, and down again.
        assert_eq!(follow_median(0, 300_000), 300_000);
        let mut est = 5_000_000;
        for _ in 0..200 {
            est = follow_median(est, 100_000);
        }
        assert_eq!(est, 100_000);
    }

    #[test]
    fn workers_snapshots_follow_the_profiled_processes() {
        assert_eq!(foreign_snapshot(0, 0), FOREIGN);
        assert_eq!(foreign_snapshot(2, 3), FOREIGN + 2 * PER_WORKER + 3);
    }
}
