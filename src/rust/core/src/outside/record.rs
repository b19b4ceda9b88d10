//! Sampling another process from outside: at each tick every thread is
//! stopped for as long as it takes to read it (as for a dump), and its
//! stacks become records in the profiler's own format (see
//! `profile::sampler`), so that the profile is built, printed and written
//! exactly as an in-process one: R's main thread's R frames with native
//! frames in place, other threads under `[thread N]`.

use super::dump::{native_walk, read_chain, stack_of};
use super::ptrace::{task_ids, thread_name, Stopped};
use super::target::{self, MapsLine, TargetR};
use crate::error::{Error, Result};
use crate::interleave;
use crate::memory::{Memory, Process};
use crate::modules::ModuleMap;
use crate::profile::collect::{Collected, TRUNCATED_NATIVE, TRUNCATED_R, WORKER};
use crate::profile::labels::Labels;
use crate::profile::sampler::{EXACT_IP, IP_MASK, NATIVE, R, SNAPSHOT, TID_SHIFT};
use crate::profile::session::Finished;
use crate::r::heap::{self as rheap, Symbols};
use crate::unwind::walk::{Frame, Modules, Snapshot};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// A recording of process `pid` in progress.
pub struct Recorder {
    pid: i32,
    all_threads: bool,
    idle: bool,
    exe: String,
    /// The modules as last seen (the offset-0 mappings of `/proc/PID/maps`)
    /// and the snapshots made of them, the current one last.
    seen: Vec<(usize, usize, String)>,
    maps: Vec<MapsLine>,
    /// (Boxed: the profile's builder takes them so.)
    #[allow(clippy::vec_box)]
    snapshots: Vec<Box<Snapshot>>,
    r: Option<TargetR>,
    syms: Symbols,
    /// The start of R's garbage collector in the process (0: unknown):
    /// its frames become one `<GC>`.
    gc_start: usize,
    labels: Labels,
    /// Labels of calls whose function is a symbol, by symbol (symbols live
    /// as long as the process).
    by_symbol: HashMap<usize, u32>,
    collected: Collected,
    seq: u64,
    started: SystemTime,
    t0: Instant,
    /// Ticks that could not read the process (it was busy in the kernel),
    /// and ticks whose threads were all idle.
    pub missed: u64,
    names: HashMap<i32, String>,
    /// Each thread's CPU time when the recording started.
    cpu_start: Vec<(i32, u64)>,
    /// Each thread's run time at the last sample, and when that was.
    run_ns: HashMap<i32, u64>,
    last_check: Instant,
    /// Why R's frames are not in the samples, if they are not.
    pub note: Option<String>,
}

impl Recorder {
    /// Starts recording process `pid`: its threads' stacks with `threads`
    /// (all, or R's main thread only); with `idle`, threads that are not
    /// running too.
    pub fn start(pid: i32, all_threads: bool, idle: bool) -> Result<Recorder> {
        let exe = super::dump::check_target(pid)?;
        let mut r = Recorder {
            pid,
            all_threads,
            idle,
            exe,
            seen: Vec::new(),
            maps: Vec::new(),
            snapshots: Vec::new(),
            r: None,
            syms: Symbols::default(),
            gc_start: 0,
            labels: Labels::new(),
            by_symbol: HashMap::new(),
            collected: Collected::default(),
            seq: 0,
            started: SystemTime::now(),
            t0: Instant::now(),
            missed: 0,
            names: HashMap::new(),
            cpu_start: thread_cpu(pid),
            run_ns: HashMap::new(),
            last_check: Instant::now(),
            note: None,
        };
        // Run times now, before the first stop wakes sleeping threads.
        r.running_threads();
        // The first look: refusals and a process that is not there show
        // now, as errors.
        let stopped = Stopped::stop(pid)?;
        r.refresh_modules()?;
        drop(stopped);
        Ok(r)
    }

    /// Re-reads the process's mappings; a new snapshot when its modules
    /// changed.
    fn refresh_modules(&mut self) -> Result<()> {
        let text = std::fs::read_to_string(format!("/proc/{}/maps", self.pid))
            .map_err(|e| Error::NoProcess(format!("process {} cannot be read any more ({e})", self.pid)))?;
        let maps = target::parse_maps(&text);
        let seen: Vec<(usize, usize, String)> = maps
            .iter()
            .filter(|m| m.offset == 0 && !m.path.is_empty())
            .map(|m| (m.start, m.end, m.path.clone()))
            .collect();
        // An exiting process (a zombie) has no mappings left: it is gone,
        // and its last modules stay the ones its samples are named by.
        if seen.is_empty() {
            return Err(Error::NoProcess(format!("process {} has exited", self.pid)));
        }
        let changed = seen != self.seen;
        self.maps = maps;
        if !changed && !self.snapshots.is_empty() {
            return Ok(());
        }
        self.seen = seen;
        let mem = Process { pid: self.pid };
        let map = Arc::new(ModuleMap::new(target::modules(&self.maps, &mem, &self.exe)));
        let r_home = target::environment_value(self.pid, "R_HOME");
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
        if let Some(r) = &self.r {
            self.syms = r.symbols(&mem);
        }
        let interp = self
            .r
            .as_ref()
            .and_then(|r| map.module(r.libr).segments.iter().find(|s| s.exec))
            .map_or(0, |s| s.start);
        let snap = Snapshot::of(Modules::of_process(map, interp, &mem));
        self.gc_start = self.r.as_ref().and_then(|r| gc_start(r, &snap, &mem)).unwrap_or(0);
        self.snapshots.push(Box::new(snap));
        Ok(())
    }

    /// Takes one sample of every thread (or of R's main thread). An error
    /// when the process cannot be read any more (it ended).
    pub fn tick(&mut self) -> Result<()> {
        let started = Instant::now();
        // Which threads ran since the last sample (read before they are
        // stopped: then they all show as stopped).
        let running: Option<Vec<i32>> = (!self.idle).then(|| self.running_threads());
        // The mappings are read before the process is stopped, to keep it
        // stopped for as short a time as can be: a module loaded between
        // the two shows as unknown code in this sample only.
        self.refresh_modules()?;
        let stopped = match Stopped::stop(self.pid) {
            Ok(s) => s,
            Err(Error::Unreadable(_)) => {
                self.missed += 1;
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        self.seq += 1;
        let index = self.snapshots.len() - 1;
        let mem = Process { pid: self.pid };
        let mut took = 0;
        for t in &stopped.threads {
            let main = t.tid == self.pid;
            if !main && !self.all_threads {
                continue;
            }
            if running.as_ref().is_some_and(|r| !r.contains(&t.tid)) {
                continue;
            }
            if !self.names.contains_key(&t.tid) || self.seq.is_multiple_of(100) {
                self.names.insert(t.tid, t.name.clone());
            }
            let snap = &self.snapshots[index];
            let ranges: Vec<(usize, usize)> = self.maps.iter().map(|m| (m.start, m.end)).collect();
            let stack = stack_of(&ranges, &mem, t.regs.1);
            let (frames, end) = native_walk(snap, t.regs, &stack);
            let truncated = if end.is_none() { 0 } else { TRUNCATED_NATIVE };
            let spent = started.elapsed().as_nanos().min(u32::MAX as u128) as u64;
            let record = if main {
                self.main_record(&mem, &frames, truncated, index, spent)
            } else {
                let mut rec = vec![
                    WORKER | truncated | (1 << 8) | (spent << 32),
                    SNAPSHOT | index as u64 | (t.tid as u64) << TID_SHIFT,
                    self.seq,
                    0,
                ];
                let snap = &self.snapshots[index];
                rec.extend(
                    frames.iter().enumerate().filter(|(_, f)| !is_interp(snap, f)).map(|(i, f)| native(i, f)),
                );
                rec
            };
            self.collected.absorb(&record);
            took += 1;
        }
        drop(stopped);
        if took == 0 {
            self.missed += 1;
        }
        Ok(())
    }

    /// R's main thread's record: its R frames with its native frames in
    /// place, innermost first.
    fn main_record(
        &mut self,
        mem: &Process,
        frames: &[Frame],
        truncated: u64,
        index: usize,
        spent: u64,
    ) -> Vec<u64> {
        let mut flags = truncated;
        let sps: Vec<usize> = frames.iter().map(|f| f.sp).collect();
        let n = frames.len();
        // Function records, innermost first, with the native frame each
        // sits in.
        let mut records: Vec<(usize, u32)> = Vec::new();
        let mut context = 0u64;
        if let Some(r) = self.r.clone() {
            match read_chain(&r, mem) {
                Ok(chain) => {
                    context = chain.first().map_or(0, |c| c.addr as u64);
                    let range = (sps.first().copied().unwrap_or(0), usize::MAX);
                    for c in chain.iter().filter(|c| c.is_function()) {
                        let at = match interleave::owner_index(&sps, c.addr) {
                            Some(i) => i,
                            None => match c.runner(range).and_then(|a| interleave::owner_index(&sps, a)) {
                                Some(i) => i,
                                None => interleave::UNKNOWN,
                            },
                        };
                        let label = self.label(mem, c.call);
                        records.push((at, label));
                    }
                    if !interleave::settle_anchors(&mut records, |r| &mut r.0) {
                        flags |= TRUNCATED_R;
                    }
                }
                Err(_) => flags |= TRUNCATED_R,
            }
        }
        let snap = &self.snapshots[index];
        let libr = snap.libr;
        // The program around R: frames further out than R's outermost.
        let host_from = match (truncated == 0, libr) {
            (true, Some(l)) => (0..n).rev().find(|&i| frames[i].module == Some(l)).map_or(n, |i| i + 1),
            _ => n,
        };
        // Inside the garbage collector: its frames become one `<GC>`.
        let gc_at =
            (self.gc_start != 0).then(|| frames.iter().position(|f| f.start == self.gc_start)).flatten();
        let mut rec = vec![flags | (1 << 8) | (spent << 32), SNAPSHOT | index as u64, self.seq, context];
        let mut k = 0;
        #[allow(clippy::needless_range_loop)] // i == n: the records beyond the last frame
        for i in 0..=n {
            while k < records.len() && (records[k].0 <= i || (i == n && records[k].0 >= n)) {
                rec.push(R | records[k].1 as u64);
                k += 1;
            }
            if gc_at == Some(i) {
                rec.push(R | crate::profile::labels::GC as u64);
            } else if gc_at.is_some_and(|g| i < g) {
                // The collector's own frames.
            } else if i < n && i < host_from && !is_interp(snap, &frames[i]) {
                rec.push(native(i, &frames[i]));
            }
        }
        rec
    }

    /// The label id of a call, as `Rprof()` labels it.
    fn label(&mut self, mem: &Process, call: usize) -> u32 {
        let mut buf = rheap::Buf::default();
        match rheap::call_head(mem, call) {
            Some(rheap::Head::Symbol(sym)) => {
                if let Some(&id) = self.by_symbol.get(&sym) {
                    return id;
                }
                rheap::label(mem, &self.syms, sym, &mut buf);
                let id = self.labels.intern(buf.as_bytes());
                self.by_symbol.insert(sym, id);
                id
            }
            Some(rheap::Head::Other(f)) => {
                rheap::label(mem, &self.syms, f, &mut buf);
                self.labels.intern(buf.as_bytes())
            }
            None => crate::profile::labels::ANONYMOUS,
        }
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
            .map(|&tid| crate::profile::threads::Thread {
                tid: tid as i32,
                name: self.names.get(&(tid as i32)).cloned().unwrap_or_default(),
                cpu_ns: cpu(tid as i32),
                started: false,
                ended: false,
            })
            .collect();
        let modules_now = self.snapshots.last().map(|s| s.map.clone());
        Finished {
            modules_now,
            collected: self.collected,
            labels: self.labels,
            snapshots: self.snapshots,
            handler_runs: self.seq,
            dropped: 0,
            outside: 0,
            duration_ns: self.t0.elapsed().as_nanos() as u64,
            started: self.started,
            all_threads: self.all_threads,
            threads,
            main_tid: self.pid,
            main_name: self.names.get(&self.pid).cloned().unwrap_or_else(|| thread_name(self.pid, self.pid)),
            main_cpu_ns: cpu(self.pid),
            thread_dropped: 0,
        }
    }
}

impl Recorder {
    /// The threads that used the CPU for at least a twentieth of the time
    /// since the last sample (their scheduler's run time, in
    /// nanoseconds); where that is not known yet, those running now. A
    /// thread's state alone misleads: a thread woken by the last sample's
    /// stop is running for a moment.
    fn running_threads(&mut self) -> Vec<i32> {
        let now = Instant::now();
        let elapsed = now.duration_since(self.last_check).as_nanos() as u64;
        self.last_check = now;
        let mut out = Vec::new();
        for tid in task_ids(self.pid).unwrap_or_default() {
            let base = format!("/proc/{}/task/{tid}", self.pid);
            let ran = std::fs::read_to_string(format!("{base}/schedstat"))
                .ok()
                .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok());
            let before = ran.and_then(|r| self.run_ns.insert(tid, r));
            let running = match (ran, before) {
                (Some(r), Some(b)) => r.saturating_sub(b) * 20 >= elapsed,
                _ => std::fs::read_to_string(format!("{base}/stat"))
                    .ok()
                    .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with('R')))
                    .unwrap_or(false),
            };
            if running {
                out.push(tid);
            }
        }
        out
    }
}

/// The start of the target's garbage collector: the target of `R_gc`'s
/// first call, if that is a function start of R's library.
fn gc_start(r: &TargetR, snap: &Snapshot, mem: &impl Memory) -> Option<usize> {
    let mut code = [0u8; 48];
    if r.r_gc == 0 || !mem.read(r.r_gc, &mut code) {
        return None;
    }
    let target = crate::r::learn::first_call_target(r.r_gc, &code)?;
    (snap.map.module_of(target) == Some(r.libr) && snap.function_start(target) == Some(target))
        .then_some(target)
}

fn is_interp(snap: &Snapshot, f: &Frame) -> bool {
    f.module.is_some_and(|m| snap.interpreter.get(m).copied().unwrap_or(false))
}

fn native(i: usize, f: &Frame) -> u64 {
    NATIVE | if i == 0 { EXACT_IP } else { 0 } | (f.ip as u64 & IP_MASK)
}

/// CPU time used so far by each thread of `pid`, in nanoseconds (utime +
/// stime of its `stat`, in clock ticks).
fn thread_cpu(pid: i32) -> Vec<(i32, u64)> {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    task_ids(pid)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|tid| {
            let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            // Fields after the name: state is 0; utime 11, stime 12.
            let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
            Some((tid, ticks * 1_000_000_000 / hz))
        })
        .collect()
}
