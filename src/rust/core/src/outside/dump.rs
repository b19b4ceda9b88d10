//! The joint stack of every thread of another process, read while it is
//! stopped: native frames walked with the same unwind rules as in-process
//! over the target's memory, R's context chain read from the target's R,
//! and R's frames placed among the native ones by where their records lie
//! on the stack, as `winch_sys_calls()` places them.

use super::ptrace::{self, Unstopped};
use super::target::{self, TargetR};
use crate::error::{Error, Result};
use crate::interleave::{self, NFrame, NativeStack, Placement, RFrameAt};
use crate::memory::{Memory, Process};
use crate::modules::ModuleMap;
use crate::procfs::{self, Proc};
use crate::r::context::RContext;
use crate::r::heap as rheap;
use crate::trace::{NativeFrame, NativeTrace};
use crate::unwind::walk::{End, Frame, Modules, Snapshot};
use crate::unwind::Backend;
use crate::view::{self, Class, Known};
use std::sync::Arc;

/// Most native frames walked per thread.
const MAX_FRAMES: usize = 4096;
/// Most R frames read.
const MAX_R_FRAMES: usize = 100_000;
/// Most bytes of a thread's stack copied.
const MAX_STACK: usize = 64 << 20;

/// One thread of a dump.
pub struct ThreadDump {
    pub tid: i32,
    pub name: String,
    /// Its native frames, innermost first, and their classes.
    pub trace: NativeTrace,
    /// The start of each frame's function from the target's unwind tables
    /// (absolute; 0 where none covers it).
    pub starts: Vec<usize>,
    pub classes: Vec<Class>,
    /// R's main thread: the R calls (outermost first, as source text; None
    /// where a call could not be written), their labels, and where the
    /// native frames go among them.
    pub r: Option<RFrames>,
    /// Why the thread was not read (it did not stop), if so: it has no
    /// frames then.
    pub note: Option<String>,
}

pub struct RFrames {
    pub calls: Vec<Option<String>>,
    pub labels: Vec<String>,
    pub placement: Placement,
    /// Why the native frames could not be placed (they are listed after
    /// the R calls, unplaced), if so.
    pub fallback: Option<String>,
}

pub struct Dump {
    pub pid: i32,
    pub map: Arc<ModuleMap>,
    pub(crate) r: Option<TargetR>,
    /// Why R's frames are not shown, for an R process whose R could not
    /// be read.
    pub note: Option<String>,
    pub threads: Vec<ThreadDump>,
    /// R's registered native routines there (absolute address, name).
    pub routines: Vec<(usize, String)>,
}

impl Dump {
    /// The version of the target's R, if it was read.
    pub fn r_version(&self) -> Option<crate::r::RVersion> {
        self.r.as_ref().map(|r| r.version)
    }
}

/// Dumps process `pid`: stops it, reads every thread (those that stopped:
/// the others are listed with the reason), lets it go on.
pub fn dump(pid: i32) -> Result<Dump> {
    let exe = check_target(pid)?;
    ptrace::with_stopped(pid, |stopped| {
        let maps = procfs::parse_maps(
            &procfs::read_maps(Proc::Pid(pid)).map_err(|e| Error::Io(format!("/proc/{pid}/maps: {e}")))?,
        );
        let ranges = maps.iter().map(|m| (m.start, m.end)).collect();
        let src = Source {
            pid,
            exe,
            maps,
            ranges,
            threads: &stopped.threads,
            unstopped: &stopped.unstopped,
            mem: Process { pid },
            r_home: procfs::environment_value(Proc::Pid(pid), "R_HOME"),
        };
        Ok(read(&src))
    })?
}

/// Checks that process `pid` is another process that can be read; its
/// executable's path.
pub(super) fn check_target(pid: i32) -> Result<String> {
    // SAFETY: getpid has no preconditions.
    if pid == unsafe { libc::getpid() } {
        return Err(Error::BadArgument(
            "that is this R process: use winch_sys_calls() or winch_trace_back() to see its own stack".into(),
        ));
    }
    if !procfs::exists(pid) {
        return Err(Error::NoProcess(format!("there is no process {pid}")));
    }
    if procfs::stat(Proc::Pid(pid), None).is_some_and(|s| s.kernel_thread()) {
        return Err(Error::BadArgument(format!(
            "process {pid} ({}) is a kernel thread: it has no user memory or stack to read",
            procfs::comm(Proc::Pid(pid), pid)
        )));
    }
    procfs::exe(Proc::Pid(pid)).map_err(|e| match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) if super::ptrace::exiting(pid) => {
            Error::NoProcess(format!("process {pid} has exited"))
        }
        Some(libc::EACCES) | Some(libc::EPERM) => Error::Permission(super::ptrace::permission_advice(pid)),
        Some(libc::ENOENT) => Error::NoProcess(format!("process {pid} has exited (or is a zombie)")),
        _ => Error::Io(format!("/proc/{pid}/exe: {e}")),
    })
}

/// Dumps the process a core file at `path` was made of; `exe` its
/// executable when the core's own record of it is not where it was.
pub fn dump_core(path: &str, exe: Option<&str>) -> Result<Dump> {
    let core = super::core_file::Core::open(path)?;
    let exe = match exe {
        Some(e) => e.to_string(),
        None => core.exe().ok_or_else(|| {
            Error::BadArgument(format!(
                "the core file {path} does not say which executable it ran: give `exe`"
            ))
        })?,
    };
    if !std::path::Path::new(&exe).exists() {
        return Err(Error::BadArgument(format!(
            "the executable of the core file ({exe}) is not there: give `exe`, the path of the program it ran"
        )));
    }
    let mut maps = core.maps();
    // A program moved since: its mappings are read from `exe`.
    if let Some(old) = core.exe().filter(|o| *o != exe) {
        maps.iter_mut().filter(|m| m.path == old).for_each(|m| m.path = exe.clone());
    }
    let pid = core.pid;
    let mut threads = core.threads.clone();
    for t in threads.iter_mut().filter(|t| t.tid == pid) {
        t.name = core.name.clone();
    }
    let ranges = core.ranges();
    let src = Source { pid, exe, maps, ranges, threads: &threads, unstopped: &[], mem: core, r_home: None };
    Ok(read(&src))
}

/// A process to read: stopped, or its core file.
struct Source<'a, M: Memory> {
    pid: i32,
    exe: String,
    maps: Vec<procfs::Mapping>,
    /// Where memory that a stack may lie in is.
    ranges: Vec<(usize, usize)>,
    threads: &'a [super::ptrace::Thread],
    /// Threads that did not stop (none in a core).
    unstopped: &'a [Unstopped],
    mem: M,
    r_home: Option<String>,
}

/// Every thread of `src`, with R's frames on its main thread.
fn read<M: Memory>(src: &Source<M>) -> Dump {
    let (pid, mem) = (src.pid, &src.mem);
    let modules = target::modules(&src.maps, mem, &src.exe);
    let map = Arc::new(ModuleMap::of_other_process(modules));
    let (r, mut note) = match target::find_r(map.modules(), src.r_home.as_deref()) {
        Ok(r) => (r, None),
        Err(e) => (None, Some(e.to_string())),
    };
    let main_unstopped = src.unstopped.iter().find(|u| u.tid == pid);
    if let (Some(u), Some(_)) = (main_unstopped, &r) {
        note = Some(format!("R's main thread was {}", u.why));
    }
    let interp =
        r.as_ref().and_then(|r| map.module(r.libr).segments.iter().find(|s| s.exec)).map_or(0, |s| s.start);
    let snap = Snapshot::of(Modules::of_process(map.clone(), interp, mem));
    let known = Known::at(&map, 0, interp);
    // R's main thread: the process's first (its tid is the pid); none
    // when it did not stop.
    let main = match main_unstopped {
        Some(_) => None,
        None => Some(src.threads.iter().position(|t| t.tid == pid).unwrap_or(0)),
    };
    let mut threads = Vec::new();
    for (k, t) in src.threads.iter().enumerate() {
        let stack = stack_of(&src.ranges, mem, t.regs.1);
        let (frames, end) = walk(&snap, t.regs, &stack);
        let trace = native_trace(&map, &frames, end);
        let starts = frames.iter().take(trace.frames.len()).map(|f| f.start).collect();
        let modules: Vec<Option<usize>> = trace.frames.iter().map(|f| f.module).collect();
        let classes = view::classify(&map, &modules, known, trace.truncated.is_none());
        let r_frames = match &r {
            Some(r) if Some(k) == main => Some(read_r(r, mem, &trace, &classes, &stack)),
            _ => None,
        };
        let name = t.name.clone();
        threads.push(ThreadDump { tid: t.tid, name, trace, starts, classes, r: r_frames, note: None });
    }
    // The main thread first.
    if let Some(main) = main.filter(|&m| m != 0 && m < threads.len()) {
        let m = threads.remove(main);
        threads.insert(0, m);
    }
    if !src.unstopped.is_empty() {
        for u in src.unstopped {
            let trace =
                NativeTrace { backend: Backend::Cfi, map: map.clone(), frames: Vec::new(), truncated: None };
            let (starts, classes) = (Vec::new(), Vec::new());
            let (tid, name, note) = (u.tid, u.name.clone(), Some(u.why.clone()));
            threads.push(ThreadDump { tid, name, trace, starts, classes, r: None, note });
        }
        // In the order of their ids, the main thread first.
        threads.sort_by_key(|t| (t.tid != pid, t.tid));
    }
    let routines = r
        .as_ref()
        .map(|r| super::registration::routines(mem, &map, r.libr, r.dll_info_fns))
        .unwrap_or_default();
    Dump { pid, map, r, note, threads, routines }
}

/// A copy of the stack a thread runs on: `[lo, hi)` and its bytes.
pub(super) struct Stack {
    lo: usize,
    hi: usize,
    bytes: Vec<u8>,
}

/// A thread's copied stack in front of the rest of its process's memory:
/// reads inside the copy come from it (the stack as the thread left it
/// when it stopped, read once), others from `rest` a page at a time, each
/// page read once (R's objects that one sample reads lie on few pages;
/// each read of another process is a system call). For one look at a
/// stopped process: pages are not read again.
pub(super) struct Behind<'a, M: Memory> {
    stack: &'a Stack,
    rest: crate::memory::Paged<&'a M>,
}

impl<'a, M: Memory> Behind<'a, M> {
    pub(super) fn new(stack: &'a Stack, rest: &'a M) -> Behind<'a, M> {
        Behind { stack, rest: crate::memory::Paged::new(rest) }
    }
}

impl<M: Memory> Memory for Behind<'_, M> {
    fn read(&self, addr: usize, buf: &mut [u8]) -> bool {
        let Some(end) = addr.checked_add(buf.len()) else { return false };
        if let Some(off) = addr.checked_sub(self.stack.lo).filter(|_| end <= self.stack.hi) {
            buf.copy_from_slice(&self.stack.bytes[off..off + buf.len()]);
            return true;
        }
        self.rest.read(addr, buf)
    }
}

impl Stack {
    /// The addresses copied, `[lo, hi)`.
    pub(super) fn range(&self) -> (usize, usize) {
        (self.lo, self.hi)
    }

    fn word(&self, a: usize) -> Option<usize> {
        let off = a.checked_sub(self.lo)?;
        let b = self.bytes.get(off..off.checked_add(8)?)?;
        Some(usize::from_ne_bytes(b.try_into().ok()?))
    }
}

/// Copies the memory range holding `sp` from `sp` (less the red zone) up.
pub(super) fn stack_of(ranges: &[(usize, usize)], mem: &impl Memory, sp: usize) -> Stack {
    let Some(&(start, end)) = ranges.iter().find(|r| r.0 <= sp && sp < r.1) else {
        return Stack { lo: 0, hi: 0, bytes: Vec::new() };
    };
    let lo = sp.saturating_sub(128).max(start) & !7;
    let hi = end.min(lo.saturating_add(MAX_STACK));
    let mut bytes = vec![0u8; hi - lo];
    if !mem.read(lo, &mut bytes) {
        // Page by page: keep what can be read from the low end on.
        let mut got = 0;
        while got < bytes.len() {
            let n = (4096 - (lo + got) % 4096).min(bytes.len() - got);
            if !mem.read(lo + got, &mut bytes[got..got + n]) {
                break;
            }
            got += n;
        }
        bytes.truncate(got);
    }
    let hi = lo + bytes.len();
    Stack { lo, hi, bytes }
}

fn walk(snap: &Snapshot, regs: (usize, usize, usize), stack: &Stack) -> (Vec<Frame>, End) {
    let mut frames = vec![Frame::default(); MAX_FRAMES];
    let (n, end) = snap.walk(regs, |a| stack.word(a), &mut frames);
    frames.truncate(n);
    (frames, end)
}

/// The frames walked from `regs` over `stack`, up to the first that is not
/// code of a module, and why the walk did not reach the outermost frame
/// (None: it did).
pub(super) fn native_walk(
    snap: &Snapshot,
    regs: (usize, usize, usize),
    stack: &Stack,
) -> (Vec<Frame>, Option<String>) {
    let (mut frames, end) = walk(snap, regs, stack);
    if let Some(bad) = frames.iter().position(|f| !snap.map.lookup(f.ip).is_some_and(|h| h.exec)) {
        frames.truncate(bad);
        return (frames, Some("unwinding reached an address that is not code".into()));
    }
    let why = match end {
        End::Outermost => None,
        End::Full => Some(format!("more than {MAX_FRAMES} frames")),
        End::Stopped(why) => Some(why.to_string()),
    };
    (frames, why)
}

fn native_trace(map: &Arc<ModuleMap>, frames: &[Frame], end: End) -> NativeTrace {
    let mut out = Vec::with_capacity(frames.len());
    let mut truncated = None;
    for (i, f) in frames.iter().enumerate() {
        if !map.lookup(f.ip).is_some_and(|h| h.exec) {
            truncated = Some(format!(
                "unwinding reached address {:#x}, which is not code of any loaded module",
                f.ip
            ));
            break;
        }
        out.push(NativeFrame {
            ip: f.ip,
            lo: f.sp,
            module: f.module.or_else(|| map.module_of(f.ip)),
            probe: if i == 0 { f.ip } else { f.ip.wrapping_sub(1) },
        });
    }
    if truncated.is_none() {
        truncated = match end {
            End::Outermost => None,
            End::Full => Some(format!("more than {MAX_FRAMES} frames")),
            End::Stopped(why) => Some(format!("unwinding stopped ({why})")),
        };
    }
    NativeTrace { backend: Backend::Cfi, map: map.clone(), frames: out, truncated }
}

/// R's frames of the main thread, and where its native frames go.
fn read_r(r: &TargetR, mem: &impl Memory, trace: &NativeTrace, classes: &[Class], stack: &Stack) -> RFrames {
    let nframes: Vec<NFrame> =
        trace.frames.iter().zip(classes).map(|(f, c)| NFrame { lo: f.lo, foreign: c.is_code() }).collect();
    let fallback = |why: String, calls: Vec<Option<String>>, labels: Vec<String>| RFrames {
        placement: interleave::fallback(&nframes, calls.len()),
        calls,
        labels,
        fallback: Some(why),
    };
    let records = match read_chain(r, mem) {
        Ok(c) => c,
        Err(e) => {
            return fallback(format!("R's context chain could not be read: {e}"), Vec::new(), Vec::new())
        }
    };
    // Function records, outermost first (sys.calls()'s order).
    let functions: Vec<RContext> = records.iter().rev().filter(|c| c.is_function()).copied().collect();
    let syms = r.symbols(mem);
    let mut calls = Vec::with_capacity(functions.len());
    let mut labels = Vec::with_capacity(functions.len());
    for c in &functions {
        calls.push(super::deparse::call_text(mem, c.call));
        let mut b = rheap::Buf::default();
        let label = match rheap::call_head(mem, c.call) {
            Some(rheap::Head::Symbol(f)) | Some(rheap::Head::Other(f)) => {
                rheap::label(mem, &syms, f, &mut b);
                String::from_utf8_lossy(b.as_bytes()).into_owned()
            }
            None => "<Anonymous>".to_string(),
        };
        labels.push(label);
    }
    let range = (stack.lo, stack.hi);
    let at: Vec<RFrameAt> =
        functions.iter().map(|c| RFrameAt { ctx: c.addr, runner: c.runner(range) }).collect();
    let ns = NativeStack {
        frames: &nframes,
        stack_lo: stack.lo,
        stack_hi: stack.hi,
        truncated: trace.truncated.is_some(),
    };
    match interleave::place(&ns, &at) {
        Ok(placement) => RFrames { calls, labels, placement, fallback: None },
        Err(e) => fallback(format!("the native frames could not be placed among R's: {e}"), calls, labels),
    }
}

/// R's whole context chain, innermost first; an error unless it reaches
/// the top level.
pub(super) fn read_chain(r: &TargetR, mem: &impl Memory) -> Result<Vec<RContext>> {
    let mut out = Vec::new();
    for c in crate::r::Chain::from_global(mem, &r.layout, r.global_context, MAX_R_FRAMES) {
        let c = c.map_err(|b| Error::Inconsistent(format!("{b:?}")))?;
        let top = c.next == 0;
        out.push(c);
        if top {
            return Ok(out);
        }
    }
    Err(Error::Inconsistent("the chain does not reach the top level".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{Counted, Image};
    use std::cell::Cell;

    #[test]
    fn reads_behind_a_copied_stack_come_from_the_copy_or_from_pages_read_once() {
        let mut img = Image::new();
        img.put(0x10000, (0..2 * 4096).map(|i| (i % 251) as u8).collect());
        let mem = Counted(img, Cell::new(0));
        let stack = Stack { lo: 0x7000, hi: 0x7010, bytes: (1..=16).collect() };
        let b = Behind::new(&stack, &mem);
        assert_eq!(b.word(0x7008), Some(usize::from_ne_bytes([9, 10, 11, 12, 13, 14, 15, 16])));
        assert_eq!(mem.1.get(), 0, "the stack is the copy's");
        // Across the end of a page: both pages, each read once.
        let mut buf = [0u8; 16];
        assert!(b.read(0x10ff8, &mut buf));
        let want: Vec<u8> = (0xff8..0x1008).map(|i| (i % 251) as u8).collect();
        assert_eq!(&buf[..], &want[..]);
        assert!(b.read(0x10010, &mut buf[..8]));
        assert_eq!(mem.1.get(), 2);
        // An unreadable page: refused.
        assert!(!b.read(0x30000, &mut buf[..8]));
        assert!(!b.read(0x30008, &mut buf[..8]));
    }
}
