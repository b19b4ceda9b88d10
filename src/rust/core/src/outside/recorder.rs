//! Sampling another process from outside: at each tick every thread is
//! stopped for as long as it takes to read it (as for a dump), and its
//! stacks become records in the profiler's own format (see
//! `profile::record`, composed by `profile::compose`), so that the profile is built, printed and written
//! exactly as an in-process one: R's main thread's R frames with native
//! frames in place, other threads under `[thread N]`.

use super::dump::{native_walk, stack_into, Behind};
use super::ptrace::{self, task_ids, Stopped};
use super::running::{Chosen, Running};
use super::target::{self, TargetR};
use crate::error::{Error, Result};
use crate::memory::{Memory, Process, Ranges};
use crate::modules::ModuleMap;
use crate::procfs::{self, Mapping, Proc};
use crate::profile::collect::Collected;
use crate::profile::collect::Finished;
use crate::profile::compose::{self, LineFacts, LoopSymbols, Moment, RFacts, Reads, Region, Scratch};
use crate::profile::labels;
use crate::profile::record::{self, Entry, Flags, Header, Origin, Prefix};
use crate::r::{gc, learn};
use crate::unwind::walk::{Frame, Modules, Snapshot};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// How long the mappings read last are trusted when the executable ones
/// kept their size (see `Recorder::refresh_modules`).
const MAPS_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// How a process is recorded.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Its threads' stacks (all, or R's main thread only), and with `idle`
    /// threads that are not running too.
    pub threads: (bool, bool),
    /// Loops as frames, and source positions.
    pub how: (bool, bool),
    /// An address in this session's R (see `learn::moved`), 0 for none.
    pub own_r: usize,
    /// The time between ticks the recording is driven at.
    pub interval_ns: u64,
}

/// The modules recordings read last, with their unwind tables: of
/// process `pid` started at `start` (clock ticks after boot), mapped as
/// `seen` says. Reading them takes milliseconds of CPU time, and a
/// profile reads each worker of a cluster anew, while a cluster usually
/// lives through many profiles: one whose mappings are unchanged takes
/// them again. At most [`MODULES_KEPT`], those of processes still running.
struct KnownModules {
    pid: i32,
    start: u64,
    seen: Vec<(usize, usize, String)>,
    modules: Arc<Modules>,
}

static KNOWN_MODULES: std::sync::Mutex<Vec<KnownModules>> = std::sync::Mutex::new(Vec::new());
const MODULES_KEPT: usize = 8;

/// The modules read before of process `pid` (started at `start`) mapped
/// as `seen` says.
fn known_modules(pid: i32, start: Option<u64>, seen: &[(usize, usize, String)]) -> Option<Arc<Modules>> {
    let known = KNOWN_MODULES.lock().unwrap_or_else(|e| e.into_inner());
    let k = known.iter().find(|k| k.pid == pid && Some(k.start) == start && k.seen == seen)?;
    Some(k.modules.clone())
}

/// Keeps `modules` for [`known_modules`], with those of other processes
/// that still run (the newest [`MODULES_KEPT`]).
fn keep_modules(pid: i32, start: Option<u64>, seen: &[(usize, usize, String)], modules: Arc<Modules>) {
    let Some(start) = start else { return };
    let mut known = KNOWN_MODULES.lock().unwrap_or_else(|e| e.into_inner());
    known.retain(|k| k.pid != pid && procfs::start_ticks(k.pid) == Some(k.start));
    if known.len() >= MODULES_KEPT {
        known.remove(0);
    }
    known.push(KnownModules { pid, start, seen: seen.to_vec(), modules });
}

/// A recording of process `pid` in progress.
pub struct Recorder {
    pid: i32,
    /// When it started (clock ticks after boot; see `KnownModules`).
    start_ticks: Option<u64>,
    all_threads: bool,
    idle: bool,
    /// Show loops as frames; record source positions.
    with_loops: bool,
    lines: bool,
    /// This session's R (its load bias and build-id): what it learnt
    /// about itself holds for a target running the same build.
    own_r: Option<(usize, Vec<u8>)>,
    exe: String,
    /// Its command line when the recording started (read again at the
    /// end: a process may exec; kept if it has ended by then).
    command: String,
    /// The modules as last seen (the offset-0 mappings of `/proc/PID/maps`)
    /// and the snapshots made of them, the current one last.
    seen: Vec<(usize, usize, String)>,
    maps: Vec<Mapping>,
    /// (Boxed: the profile's builder takes them so.)
    #[allow(clippy::vec_box)]
    snapshots: Vec<Box<Snapshot>>,
    r: Option<TargetR>,
    /// What R's main thread's samples are read with (None: the process
    /// is not R, or its R cannot be read).
    facts: Option<RFacts>,
    /// The sampler's buffers, and the labels of R frames.
    scratch: Box<Scratch>,
    collected: Collected,
    seq: u64,
    started: SystemTime,
    t0: Instant,
    /// Ticks that sampled no thread: those to sample did not stop in time
    /// (blocked in the kernel, or waiting for a CPU), or were all idle.
    pub missed: u64,
    names: HashMap<i32, String>,
    /// Each thread's CPU time when the recording started.
    cpu_start: Vec<(i32, u64)>,
    /// Which threads to sample at a tick (see `running`).
    running: Running,
    /// Why R's frames are not in the samples, if they are not.
    pub note: Option<String>,
    /// Records handed to the caller instead of collected here (see
    /// [`Recorder::tick_into`]).
    out: Option<Vec<Vec<u64>>>,
    /// The size of its executable mappings when `maps` was last read, and
    /// when (see `refresh_modules`).
    exec_kb: Option<u64>,
    maps_read: Option<Instant>,
    /// R's registered native routines (absolute address, name), read while
    /// the process was stopped, after its modules last changed.
    pub routines: Vec<(usize, String)>,
    routines_stale: bool,
    /// The pages of its memory (outside the copied stack) R's main thread's
    /// last sample read: read in one go at the next (a process running the
    /// same code reads mostly the same objects).
    pages: Vec<usize>,
    /// The buffer a thread's stack is copied into (kept: see
    /// `dump::stack_into`).
    stack_buf: Vec<u8>,
    /// Who stops the process (winch's tracer process for this process's
    /// descendants, kept running while the recording lasts: see
    /// `ptrace::via_for`).
    via: ptrace::Via,
    _keep: Option<super::helper::Keep>,
}

impl Recorder {
    /// Starts recording process `pid` as `settings` say.
    pub fn start(pid: i32, settings: Settings) -> Result<Recorder> {
        let Settings { threads: (all_threads, idle), how: (with_loops, lines), own_r, interval_ns } =
            settings;
        let exe = super::dump::check_target(pid)?;
        let via = ptrace::via_for(pid);
        let own_r = (own_r != 0)
            .then(|| {
                let map = crate::modules::current();
                let m = map.module(map.module_of(own_r)?);
                Some((m.bias, m.build_id.clone()?))
            })
            .flatten();
        let mut r = Recorder {
            pid,
            start_ticks: procfs::start_ticks(pid),
            all_threads,
            idle,
            with_loops,
            lines,
            own_r,
            exe,
            command: crate::procfs::cmdline(crate::procfs::Proc::Pid(pid)),
            seen: Vec::new(),
            maps: Vec::new(),
            snapshots: Vec::new(),
            r: None,
            facts: None,
            scratch: Box::default(),
            collected: Collected::default(),
            seq: 0,
            started: SystemTime::now(),
            t0: Instant::now(),
            missed: 0,
            names: HashMap::new(),
            cpu_start: thread_cpu(pid),
            running: Running::new(interval_ns),
            note: None,
            out: None,
            exec_kb: None,
            maps_read: None,
            routines: Vec::new(),
            routines_stale: true,
            pages: Vec::new(),
            stack_buf: Vec::new(),
            via,
            _keep: (via == ptrace::Via::Helper).then(super::helper::keep),
        };
        // Run times now, before the first stop wakes sleeping threads.
        r.running.look(pid, !all_threads);
        // The first look: refusals and a process that is not there show
        // now, as errors. Its modules are read before it is stopped, as at
        // every tick (reading them takes milliseconds; a module loaded
        // meanwhile is seen at a later tick), and R's registration table
        // while it is.
        r.refresh_modules()?;
        ptrace::with_stopped_via(pid, via, |_| r.read_routines())?;
        Ok(r)
    }

    /// Re-reads the process's mappings; a new snapshot when its modules
    /// changed. Reading `maps` takes the process's lock of its memory and
    /// costs an R process about 0.4 ms: it is read again only when the
    /// size of its executable mappings changed (a library loaded or
    /// unloaded, see `procfs::exec_kb`) or [`MAPS_EVERY`] has passed.
    fn refresh_modules(&mut self) -> Result<()> {
        let exec = procfs::exec_kb(Proc::Pid(self.pid));
        let recent = self.maps_read.is_some_and(|t| t.elapsed() < MAPS_EVERY);
        if exec.is_some() && exec == self.exec_kb && recent && !self.snapshots.is_empty() {
            if super::ptrace::exiting(self.pid) {
                return Err(Error::NoProcess(format!("process {} has exited", self.pid)));
            }
            return Ok(());
        }
        self.exec_kb = exec;
        self.maps_read = Some(Instant::now());
        let text = procfs::read_maps(Proc::Pid(self.pid))
            .map_err(|e| Error::NoProcess(format!("process {} cannot be read any more ({e})", self.pid)))?;
        let maps = procfs::parse_maps(&text);
        let seen: Vec<(usize, usize, String)> = maps
            .iter()
            .filter(|m| m.offset == 0 && !m.path.is_empty())
            .map(|m| (m.start, m.end, m.path.clone()))
            .collect();
        // An exiting process (a zombie) has no mappings left: it is gone,
        // and its last modules stay the ones its samples are named by. One
        // exiting while they were read may have lost some of them (its
        // memory is torn down after its threads are marked exiting, so a
        // look after the read tells): its samples would be named by what
        // was left (in 1 of 3 runs of a test, none at all).
        if seen.is_empty() || super::ptrace::exiting(self.pid) {
            return Err(Error::NoProcess(format!("process {} has exited", self.pid)));
        }
        let changed = seen != self.seen;
        self.maps = maps;
        if !changed && !self.snapshots.is_empty() {
            return Ok(());
        }
        self.seen = seen;
        let mem = Process { pid: self.pid };
        let known = known_modules(self.pid, self.start_ticks, &self.seen);
        let map = match &known {
            Some(m) => m.map.clone(),
            None => Arc::new(ModuleMap::of_other_process(target::modules(&self.maps, &mem, &self.exe))),
        };
        let r_home = procfs::environment_value(Proc::Pid(self.pid), "R_HOME");
        match target::find_r(map.modules(), r_home.as_deref()) {
            Ok(r) => {
                self.note = None;
                self.r = r;
            }
            Err(e) => {
                self.note = Some(e.to_string());
                self.r = None;
            }
        }
        let interp = self
            .r
            .as_ref()
            .and_then(|r| map.module(r.libr).segments.iter().find(|s| s.exec))
            .map_or(0, |s| s.start);
        let snap = match known {
            // (The same mappings, so the same R and interpreter.)
            Some(m) => Snapshot::of_shared(m),
            None => {
                let snap = Snapshot::of(Modules::of_process(map, interp, &mem));
                keep_modules(self.pid, self.start_ticks, &self.seen, snap.shared());
                snap
            }
        };
        self.facts = self.r.as_ref().map(|r| self.facts_of(r, &snap, &mem));
        self.routines_stale = true;
        self.snapshots.push(Box::new(snap));
        Ok(())
    }

    /// Takes one sample of every thread (or of R's main thread). An error
    /// when the process cannot be read any more (it ended).
    pub fn tick(&mut self) -> Result<()> {
        // On the tracer's thread from the look on, so that nothing (a
        // thread to start) comes between the look and the stop.
        let took = ptrace::traced_via(self.pid, self.via, |tracer| {
            // Which threads ran since the last sample (read before they
            // are stopped: then they all show as stopped).
            let running: Option<Vec<Chosen>> =
                (!self.idle).then(|| self.running.look(self.pid, !self.all_threads));
            // The mappings are read before the process is stopped, to keep
            // it stopped for as short a time as can be: a module loaded
            // between the two shows as unknown code in this sample only.
            self.refresh_modules()?;
            let stopped = tracer.stop()?;
            let took = self.sample(&stopped, running.as_deref());
            stopped.finish()?;
            Ok(took)
        })?;
        if took == 0 {
            self.missed += 1;
        }
        Ok(())
    }

    /// Takes one sample as [`tick`](Recorder::tick) does, handing its
    /// records to `out` instead of collecting them (their labels are this
    /// recorder's: see [`label`](Recorder::label)); how many.
    pub fn tick_into(&mut self, out: &mut Vec<Vec<u64>>) -> Result<usize> {
        self.out = Some(std::mem::take(out));
        let r = self.tick();
        *out = self.out.take().unwrap_or_default();
        r.map(|()| out.len())
    }

    /// The text of label `id` of the records handed out.
    pub fn label(&self, id: u32) -> &str {
        self.scratch.labels().text(id)
    }

    /// A record taken: collected here, or handed out.
    fn keep(&mut self, rec: &[u64]) {
        match self.out.as_mut() {
            Some(out) => out.push(rec.to_vec()),
            None => self.collected.absorb(rec),
        }
    }

    /// The snapshots of the process's modules made so far (records name
    /// theirs by number), and its modules as last seen.
    #[allow(clippy::vec_box)]
    pub fn take_snapshots(&mut self) -> (Vec<Box<Snapshot>>, Option<Arc<ModuleMap>>) {
        let now = self.snapshots.last().map(|s| s.map.clone());
        (std::mem::take(&mut self.snapshots), now)
    }

    /// The process's command line when the recording started.
    pub fn command(&self) -> &str {
        &self.command
    }

    /// Samples the threads of `stopped` (those `running` names, with the
    /// intervals it gives, `[kernel]` innermost where it says; all, one
    /// interval each, when None): how many.
    fn sample(&mut self, stopped: &Stopped, running: Option<&[Chosen]>) -> u64 {
        // A sample's cost: from the stop on (the process runs before).
        let started = stopped.started;
        self.seq += 1;
        self.read_routines();
        let index = self.snapshots.len() - 1;
        let mem = Process { pid: self.pid };
        // Where a thread's stack may lie (its stack is copied from there):
        // read again if one is outside the mappings last read (a stack
        // grown since, a thread started since).
        let inside = |sp: usize| self.maps.iter().any(|m| m.start <= sp && sp < m.end);
        let read = |t: &&super::ptrace::Thread| self.all_threads || t.tid == self.pid;
        if !stopped.threads.iter().filter(read).all(|t| inside(t.regs.1)) {
            if let Ok(text) = procfs::read_maps(Proc::Pid(self.pid)) {
                self.maps = procfs::parse_maps(&text);
            }
        }
        let ranges: Vec<(usize, usize)> = self.maps.iter().map(|m| (m.start, m.end)).collect();
        let mut took = 0;
        for t in &stopped.threads {
            let main = t.tid == self.pid;
            if !main && !self.all_threads {
                continue;
            }
            // The intervals this sample stands for (elapsed time: one).
            let (weight, kernel) = match running {
                // A thread seen running that was asleep in a system call
                // when stopped (on a busy machine, a thread that works and
                // sleeps in turn often is): its time was not spent there.
                Some(r) => match r.iter().find(|x| x.tid == t.tid) {
                    Some(c) if t.waiting => {
                        self.running.give_back(*c);
                        continue;
                    }
                    Some(c) => (c.intervals.min(Header::MAX_WEIGHT), c.kernel),
                    None => continue,
                },
                None => (1, false),
            };
            let head: &[u64] = if kernel { &[Entry::r(labels::KERNEL)] } else { &[] };
            if !self.names.contains_key(&t.tid) || self.seq.is_multiple_of(100) {
                self.names.insert(t.tid, t.name.clone());
            }
            let snap = &self.snapshots[index];
            let stack = stack_into(&ranges, &mem, t.regs.1, std::mem::take(&mut self.stack_buf));
            let spent = || started.elapsed().as_nanos().min(u32::MAX as u128) as u64;
            if let (true, Some(facts)) = (main, self.facts.as_mut()) {
                // As the in-process sampler composes a sample, over the
                // copied stack and the process's memory.
                facts.ranges.stack = stack.range();
                let behind = Behind::new(&stack, &mem);
                behind.prefetch(&self.pages);
                let context = behind.word(facts.base.global_context).unwrap_or(0) as u64;
                let reads = Reads { heap: &behind, chain: &behind };
                let at = Moment { snapshot: snap, index: index as u32, seq: self.seq, context, fork: &[] };
                let made = compose::compose(t.regs, Flags::NONE, at, facts, &reads, &mut self.scratch);
                self.pages = behind.pages();
                drop(behind);
                self.stack_buf = stack.into_bytes();
                let len = self.scratch.splice_head(made.len, record::PREFIX, head);
                let rec = self.scratch.record(len);
                record::write_prefix(rec, made.prefix(weight, spent()));
                // (Copied only when handed out: see `keep`.)
                match self.out.as_mut() {
                    Some(out) => out.push(rec.to_vec()),
                    None => self.collected.absorb(rec),
                }
                took += 1;
                continue;
            }
            let (frames, end) = native_walk(snap, t.regs, &stack);
            self.stack_buf = stack.into_bytes();
            let truncated = if end.is_none() { Flags::NONE } else { Flags::TRUNCATED_NATIVE };
            // Native frames only: R's main thread of a process whose R
            // cannot be read (or that is not R), and other threads.
            let (kind, tid) = if main { (Flags::NONE, 0) } else { (Flags::WORKER, t.tid as u32) };
            let prefix = Prefix {
                header: Header { flags: kind | truncated, weight, handler_ns: spent() },
                origin: Origin::thread(index as u32, tid),
                link: self.seq,
                context: 0,
            };
            let mut rec = prefix.encode().to_vec();
            rec.extend(head);
            rec.extend(
                frames
                    .iter()
                    .enumerate()
                    .filter(|(_, f)| !is_interp(snap, f))
                    .map(|(i, f)| Entry::native(f.ip, i == 0)),
            );
            self.keep(&rec);
            took += 1;
        }
        took
    }

    /// Ends the recording: what the profile is built from.
    pub fn finish(mut self) -> Finished {
        self.collected.settle_pending(true);
        // CPU time while recording (a thread gone by now: unknown, 0).
        let threads_cpu = thread_cpu(self.pid);
        let at = |v: &[(i32, u64)], tid: i32| v.iter().find(|t| t.0 == tid).map(|t| t.1);
        let cpu = |tid: i32| match at(&threads_cpu, tid) {
            Some(end) => end.saturating_sub(at(&self.cpu_start, tid).unwrap_or(0)),
            None => 0,
        };
        let threads = self
            .collected
            .thread_order
            .iter()
            .map(|&tid| crate::profile::collect::Thread {
                tid: tid as i32,
                name: self.names.get(&(tid as i32)).cloned().unwrap_or_default(),
                cpu_ns: cpu(tid as i32),
                started: false,
                ended: false,
            })
            .collect();
        let modules_now = self.snapshots.last().map(|s| s.map.clone());
        Finished {
            pid: self.pid,
            command: Some(crate::procfs::cmdline(crate::procfs::Proc::Pid(self.pid)))
                .filter(|c| !c.is_empty())
                .unwrap_or_else(|| std::mem::take(&mut self.command)),
            modules_now,
            launch_module: None,
            collected: self.collected,
            labels: self.scratch.take_labels(),
            snapshots: self.snapshots,
            handler_runs: self.seq,
            dropped: 0,
            outside: 0,
            duration_ns: self.t0.elapsed().as_nanos() as u64,
            started: self.started,
            all_threads: self.all_threads,
            threads,
            main_tid: self.pid,
            main_name: self
                .names
                .get(&self.pid)
                .cloned()
                .unwrap_or_else(|| procfs::comm(Proc::Pid(self.pid), self.pid)),
            main_cpu_ns: cpu(self.pid),
            collector_cpu_ns: None,
            relatives: Vec::new(),
            elsewhere: Vec::new(),
            thread_dropped: 0,
            forked: 0,
            alloc: None,
        }
    }
}

impl Recorder {
    /// What R's main thread's samples are read with: R's variables in the
    /// target, and what this session learnt about its own R where the
    /// target runs the same build (loops named by kind, byte code's
    /// loops); otherwise AST loops are `[loop]` and byte code's are not
    /// seen. R's symbols for `while`, `repeat` and `filename` are not
    /// exported: they are told by name (see `r::sexp::is_symbol`).
    fn facts_of(&self, r: &TargetR, snap: &Snapshot, mem: &Process) -> RFacts {
        let libr = snap.map.module(r.libr);
        let learnt = match (&self.own_r, &libr.build_id) {
            (Some((bias, id)), Some(target)) if id == target => learn::moved(libr.bias.wrapping_sub(*bias)),
            _ => learn::Moved::default(),
        };
        let srcfile = if r.srcfile_var == 0 { 0 } else { mem.word(r.srcfile_var).unwrap_or(0) };
        let options = compose::Options {
            with_loops: self.with_loops,
            loop_symbols: Some(LoopSymbols::default()),
            lines: (self.lines && srcfile != 0)
                .then_some(LineFacts { srcfile_sym: srcfile, filename_sym: 0 }),
            keep_libr: false,
            region: Region::All,
        };
        let gc_start = gc::gc_start(mem, r.r_gc, gc::function_start_in(snap, r.libr)).unwrap_or(0);
        RFacts::assemble(r.facts(mem), Ranges::default(), learnt, gc_start, options)
    }

    /// Reads R's registration table (the process stopped) if the modules
    /// changed since it was read.
    fn read_routines(&mut self) {
        let (Some(r), Some(snap)) = (&self.r, self.snapshots.last()) else { return };
        if self.routines_stale {
            // (Page by page: the table is many small objects, each read
            // a system call otherwise, while the process is stopped.)
            let mem = crate::memory::Paged::new(Process { pid: self.pid });
            self.routines = super::registration::routines(&mem, &snap.map, r.libr, r.dll_info_fns);
            self.routines_stale = false;
        }
    }
}

fn is_interp(snap: &Snapshot, f: &Frame) -> bool {
    f.module.is_some_and(|m| snap.interpreter.get(m).copied().unwrap_or(false))
}

/// CPU time used so far by each thread of `pid`, in nanoseconds (utime +
/// stime of its `stat`, in clock ticks).
fn thread_cpu(pid: i32) -> Vec<(i32, u64)> {
    let hz = procfs::clock_ticks();
    task_ids(pid)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|tid| {
            Some((tid, procfs::stat(Proc::Pid(pid), Some(tid))?.cpu_ticks() * 1_000_000_000 / hz))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recordings_of_a_process_whose_mappings_are_unchanged_share_its_modules() {
        let settings =
            Settings { threads: (false, false), how: (false, false), own_r: 0, interval_ns: 10_000_000 };
        let mut a = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let mut b = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        // (Once each sleeps: its loader has mapped everything by then.)
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        let asleep = |c: &std::process::Child| {
            procfs::stat(Proc::Pid(c.id() as i32), None).is_some_and(|s| s.state == 'S')
        };
        while !(asleep(&a) && asleep(&b)) && Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let modules = |pid: i32| Recorder::start(pid, settings).map(|r| r.snapshots[0].shared());
        let result = (|| -> Result<_> {
            let (pa, pb) = (a.id() as i32, b.id() as i32);
            Ok((modules(pa)?, modules(pa)?, modules(pb)?))
        })();
        for c in [&mut a, &mut b] {
            c.kill().ok();
            c.wait().ok();
        }
        match result {
            Err(Error::Permission(why)) => eprintln!("skipped: tracing is not allowed here ({why})"),
            Err(e) => panic!("{e}"),
            Ok((first, again, other)) => {
                assert!(Arc::ptr_eq(&first, &again), "read once");
                assert!(!Arc::ptr_eq(&first, &other), "another process's are its own");
                assert!(first.map.modules().iter().any(|m| m.path.contains("libc")));
            }
        }
    }
}
