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
    /// What the dump could not read, and why, in words for the user (none:
    /// nothing is missing): a core file cut short, R's state that could not
    /// be read, R's frames of the main thread not read or not placed, a
    /// stack that did not unwind whole. Never silent: a thread without
    /// frames, or R's frames missing, always has its reason here.
    pub notes: Vec<String>,
    pub threads: Vec<ThreadDump>,
    /// R's registered native routines there (absolute address, name).
    pub routines: Vec<(usize, String)>,
}

impl Dump {
    /// The version of the target's R, if it was read.
    pub fn r_version(&self) -> Option<crate::r::RVersion> {
        self.r.as_ref().map(|r| r.version)
    }

    /// The same as R writes it (`"4.2.2"`).
    pub fn r_version_text(&self) -> Option<&str> {
        self.r.as_ref().map(|r| r.version_text.as_str())
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
    let (exe, given) = match exe {
        Some(e) => (e.to_string(), true),
        None => (
            core.exe().ok_or_else(|| {
                Error::BadArgument(format!(
                    "the core file {path} does not say which executable it ran: give `exe`"
                ))
            })?,
            false,
        ),
    };
    if !given && !std::path::Path::new(&exe).exists() {
        return Err(Error::BadArgument(format!(
            "the executable of the core file ({exe}) is not there: give `exe`, the path of the program it ran"
        )));
    }
    let on_disk = exe_build_id(&exe).map_err(|e| match e {
        Error::BadArgument(m) if !given => Error::BadArgument(format!(
            "{m} (the core file names it as its executable): give `exe`, the path of the program it ran"
        )),
        e => e,
    })?;
    let mut maps = core.maps();
    // A program moved since: its mappings are read from `exe`.
    if let Some(old) = core.exe().filter(|o| *o != exe) {
        maps.iter_mut().filter(|m| m.path == old).for_each(|m| m.path = exe.clone());
    }
    if given {
        // The program the process ran, as the core recorded it (its
        // image's build-id note, from the core or from the file the core
        // names): a given `exe` must be that program.
        let ran =
            target::modules(&maps, &core, &exe).into_iter().find(|m| m.is_main).and_then(|m| m.build_id);
        if let (Some(ran), Some(on_disk)) = (ran, on_disk) {
            if ran != on_disk {
                return Err(Error::BadArgument(format!(
                    "`exe` {exe} is not the program the core's process ran: its build-id is {}, the core's {}",
                    hex(&on_disk),
                    hex(&ran)
                )));
            }
        }
    }
    let pid = core.pid;
    let mut threads = core.threads.clone();
    for t in threads.iter_mut().filter(|t| t.tid == pid) {
        t.name = core.name.clone();
    }
    let ranges = core.ranges();
    let damage = core.damage();
    let src = Source { pid, exe, maps, ranges, threads: &threads, unstopped: &[], mem: core, r_home: None };
    let mut d = read(&src);
    // What is missing from the core first: it explains the rest.
    d.notes.splice(0..0, damage);
    Ok(d)
}

/// The build-id of the executable `exe` (None when it has none), after
/// checking that it is an x86_64 ELF program: a regular file (see
/// `crate::files`) of at most [`crate::files::MAX_ELF`] bytes whose header
/// says so. Only its header and notes are read.
fn exe_build_id(exe: &str) -> Result<Option<Vec<u8>>> {
    use object::Object;
    use std::os::unix::fs::FileExt;
    let input = crate::files::open_input(std::path::Path::new(exe), "executable", crate::files::MAX_ELF)?;
    let mut head = [0u8; 20];
    let read = input.file.read_exact_at(&mut head, 0).is_ok();
    let u16_at = |at: usize| u16::from_le_bytes([head[at], head[at + 1]]);
    // ELF64, little-endian, x86_64 (62), an executable (2) or a
    // position-independent one (3).
    if !read || &head[..6] != b"\x7fELF\x02\x01" || u16_at(18) != 62 || !matches!(u16_at(16), 2 | 3) {
        return Err(Error::BadArgument(format!("the executable {exe} is not an x86_64 ELF program")));
    }
    let cache = object::ReadCache::new(input.file);
    let file = object::File::parse(&cache)
        .map_err(|e| Error::BadArgument(format!("the executable {exe} is damaged: {e}")))?;
    Ok(file.build_id().ok().flatten().map(<[u8]>::to_vec))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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
    let mut notes = Vec::new();
    let r = match target::find_r(map.modules(), src.r_home.as_deref()) {
        Ok(r) => r,
        Err(e) => {
            notes.push(format!("R's frames are not shown: {e}"));
            None
        }
    };
    let main_unstopped = src.unstopped.iter().find(|u| u.tid == pid);
    if let (Some(u), Some(_)) = (main_unstopped, &r) {
        notes.push(format!("R's frames are not shown: R's main thread was {}", u.why));
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
    let mut others_cut = 0;
    for (k, t) in src.threads.iter().enumerate() {
        let stack = stack_of(&src.ranges, mem, t.regs.1);
        let (frames, end) = walk(&snap, t.regs, &stack);
        let trace = native_trace(&map, &frames, end, &stack, t.regs.1);
        let starts = frames.iter().take(trace.frames.len()).map(|f| f.start).collect();
        let modules: Vec<Option<usize>> = trace.frames.iter().map(|f| f.module).collect();
        let classes = view::classify(&map, &modules, known, trace.truncated.is_none());
        let r_frames = match &r {
            Some(r) if Some(k) == main => Some(read_r(r, mem, &trace, &classes, &stack)),
            _ => None,
        };
        // What is missing from this thread, said in the dump's note (the
        // main thread's in full, others' counted unless they have nothing).
        if let Some(why) = &trace.truncated {
            match (Some(k) == main, trace.frames.is_empty()) {
                (true, true) => notes.push(format!("the main thread has no frames: {why}")),
                (true, false) => notes.push(format!("the main thread's native stack is cut short: {why}")),
                (false, true) => notes.push(format!("thread {} has no frames: {why}", t.tid)),
                (false, false) => others_cut += 1,
            }
        }
        if let Some(rf) = &r_frames {
            if let Some(why) = &rf.fallback {
                let what = if rf.calls.is_empty() {
                    "R's frames are not shown"
                } else {
                    "the main thread's native frames are listed after R's calls, unplaced"
                };
                notes.push(format!("{what}: {why}"));
            }
        }
        threads.push(ThreadDump {
            tid: t.tid,
            name: t.name.clone(),
            trace,
            starts,
            classes,
            r: r_frames,
            note: None,
        });
    }
    if others_cut > 0 {
        let s = if others_cut == 1 { "" } else { "s" };
        notes
            .push(format!("the native stacks of {others_cut} other thread{s} are cut short (each says why)"));
    }
    // The main thread first.
    if let Some(main) = main.filter(|&m| m != 0 && m < threads.len()) {
        let m = threads.remove(main);
        threads.insert(0, m);
    }
    if !src.unstopped.is_empty() {
        let n = src.unstopped.len();
        let s = if n == 1 { "" } else { "s" };
        notes.push(format!(
            "{n} thread{s} did not stop and {} not read (each says why)",
            if n == 1 { "was" } else { "were" }
        ));
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
    Dump { pid, map, r, notes, threads, routines }
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

impl<M: Memory> Behind<'_, M> {
    /// Reads `pages` (outside the stack) in one go: see [`Paged::prefetch`](crate::memory::Paged::prefetch).
    pub(super) fn prefetch(&self, pages: &[usize]) {
        self.rest.prefetch(pages)
    }

    /// The pages outside the stack read so far.
    pub(super) fn pages(&self) -> Vec<usize> {
        self.rest.pages()
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
    /// Its buffer, for the next copy (see [`stack_into`]).
    pub(super) fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

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
    stack_into(ranges, mem, sp, Vec::new())
}

/// [`stack_of`] into `bytes` (a buffer kept from an earlier copy: a
/// recording copies a stack at every sample, and a fresh buffer of that
/// size is mapped, faulted in and unmapped each time; see
/// [`Stack::into_bytes`]).
pub(super) fn stack_into(
    ranges: &[(usize, usize)],
    mem: &impl Memory,
    sp: usize,
    mut bytes: Vec<u8>,
) -> Stack {
    bytes.clear();
    let Some(&(start, end)) = ranges.iter().find(|r| r.0 <= sp && sp < r.1) else {
        return Stack { lo: 0, hi: 0, bytes };
    };
    let lo = sp.saturating_sub(128).max(start) & !7;
    let hi = end.min(lo.saturating_add(MAX_STACK));
    bytes.resize(hi - lo, 0);
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

/// Why a walk that read a return address of 0 stopped. A complete stack
/// ends at a frame whose unwind rule says it is the outermost (glibc's
/// `_start` and the start of its threads): a 0 read where a caller's
/// address should be is a stack that is zeroed or damaged.
const ZERO_RETURN: &str =
    "a return address of 0 was read where the stack should go on: the stack is zeroed or damaged there";

fn walk(snap: &Snapshot, regs: (usize, usize, usize), stack: &Stack) -> (Vec<Frame>, End) {
    let mut frames = vec![Frame::default(); MAX_FRAMES];
    let (n, end) = judged(|read, out| snap.walk(regs, read, out), |a| stack.word(a), &mut frames);
    frames.truncate(n);
    (frames, end)
}

/// Runs `walk` (a walk reading the stack with the function it is given,
/// writing frames to `out`) over `read`, and tells a walk that ended on a
/// return address of 0 from one that reached the outermost frame.
///
/// The walk reads nothing to step from a frame whose rule makes it the
/// outermost; to step from any other it reads that frame's return address,
/// at or above the frame's stack pointer, while every word read to reach
/// the frame lies below it.
fn judged(
    walk: impl FnOnce(&dyn Fn(usize) -> Option<usize>, &mut [Frame]) -> (usize, End),
    read: impl Fn(usize) -> Option<usize>,
    out: &mut [Frame],
) -> (usize, End) {
    let last_read = std::cell::Cell::new(None);
    let (n, end) = walk(
        &|a| {
            last_read.set(Some(a));
            read(a)
        },
        out,
    );
    let read_past_last = matches!((out[..n].last(), last_read.get()), (Some(f), Some(a)) if a >= f.sp);
    if end == End::Outermost && read_past_last {
        return (n, End::Stopped(ZERO_RETURN));
    }
    (n, end)
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

/// The native frames of a walk from stack pointer `sp` over `stack`, up
/// to the first that is not code of a module, and why the walk did not
/// reach the outermost frame.
fn native_trace(map: &Arc<ModuleMap>, frames: &[Frame], end: End, stack: &Stack, sp: usize) -> NativeTrace {
    let mut out = Vec::with_capacity(frames.len());
    let mut truncated = None;
    for (i, f) in frames.iter().enumerate() {
        if !map.lookup(f.ip).is_some_and(|h| h.exec) {
            truncated = Some(if i == 0 {
                format!("its instruction pointer {:#x} is not in the code of any module read", f.ip)
            } else {
                format!("unwinding reached address {:#x}, which is not code of any loaded module", f.ip)
            });
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
            // Nothing of the stack could be read: that is why.
            End::Stopped(_) if stack.bytes.is_empty() => {
                Some(format!("its stack (at {sp:#x}) is not in the memory that could be read"))
            }
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
    let records = match read_chain(r, mem, (stack.lo, stack.hi)) {
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
/// the top level. R's top-level context is R's own variable, never on the
/// thread's stack (`stack`, the range copied): a record there that ends
/// the chain is a damaged (zeroed) stack read as one.
pub(super) fn read_chain(r: &TargetR, mem: &impl Memory, stack: (usize, usize)) -> Result<Vec<RContext>> {
    let mut out = Vec::new();
    for c in crate::r::Chain::from_global(mem, &r.layout, r.global_context, MAX_R_FRAMES) {
        let c = c.map_err(Error::from)?;
        let top = c.next == 0;
        if top && stack.0 <= c.addr && c.addr < stack.1 {
            return Err(Error::Inconsistent(format!(
                "the chain ends at a record on the stack ({:#x}), not at R's top level: the stack is damaged there",
                c.addr
            )));
        }
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

    /// A walk over made-up code: `f` (0x1000-0x1100, CFA = sp + 16, the
    /// caller's RBP saved at CFA - 16) called from `_start` (0x2000, the
    /// outermost by its rule), over `stack`; frames and how it ended, as
    /// the dump judges it.
    fn walk_made(stack: &Image) -> (Vec<usize>, End) {
        use crate::modules::Module;
        use crate::unwind::rules::{Base, Regs, Rule, SavedBp};
        use crate::unwind::walk::synthetic::{Function, Made};
        use crate::unwind::walk::{Caches, Ended, Modules, Sizes, Visitor};
        use std::ops::ControlFlow;
        let f = Function {
            start: 0x1000,
            end: 0x1100,
            rows: vec![(
                0x1000,
                0x1100,
                Rule::Step { cfa: Base::Sp, cfa_offset: 16, ra_offset: -8, bp: SavedBp::At(-16), start: 0 },
            )],
        };
        let start = Made::uniform(0x2000, 0x3000, 0x1000, Rule::Outermost { start: 0 });
        let m = Modules::synthetic(
            vec![
                (Module::synthetic("/made/f.so", 0x1000, 0x2000, false), Some(Made { functions: vec![f] })),
                (Module::synthetic("/made/exe", 0x2000, 0x3000, true), Some(start)),
            ],
            None,
        );
        struct Collect<'a>(&'a mut [Frame], usize);
        impl Visitor for Collect<'_> {
            type Stop = ();
            fn frame(&mut self, frame: &Frame, _probe: usize) -> ControlFlow<()> {
                let Some(o) = self.0.get_mut(self.1) else { return ControlFlow::Break(()) };
                *o = *frame;
                self.1 += 1;
                ControlFlow::Continue(())
            }
        }
        let mut caches = Caches::new(Sizes::THROWS);
        let mut out = [Frame::default(); 16];
        let (n, end) = judged(
            |read, out| {
                let mut c = Collect(out, 0);
                let regs = Regs { ip: 0x1010, sp: 0x8000, bp: Some(0x8100) };
                let end = match crate::unwind::walk::walk(&m, &mut caches, regs, read, &mut c) {
                    Ended::By(()) => End::Full,
                    Ended::Outermost => End::Outermost,
                    Ended::Stopped(why) => End::Stopped(why),
                };
                (c.1, end)
            },
            |a| stack.word(a),
            &mut out,
        );
        (out[..n].iter().map(|f| f.ip).collect(), end)
    }

    #[test]
    fn a_walk_that_reads_a_zero_return_address_is_cut_short_not_complete() {
        // f at 0x1010 (sp 0x8000) returns to _start at 0x2005: the walk
        // ends there by _start's rule.
        let mut img = Image::new();
        img.put(0x8000, vec![0; 0x40]);
        img.put_word(0x8000, 0x8100); // f's saved RBP
        img.put_word(0x8008, 0x2005); // f's return address
        assert_eq!(walk_made(&img), (vec![0x1010, 0x2005], End::Outermost));
        // The same stack zeroed: f's return address reads 0, which the
        // walker takes for the end; the dump does not.
        let zeroed = {
            let mut img = Image::new();
            img.put(0x8000, vec![0; 0x40]);
            img
        };
        assert_eq!(walk_made(&zeroed), (vec![0x1010], End::Stopped(ZERO_RETURN)));
        // f calling itself with its return address 0 one frame up: cut
        // short after two frames.
        let mut img = Image::new();
        img.put(0x8000, vec![0; 0x40]);
        img.put_word(0x8008, 0x1020);
        assert_eq!(walk_made(&img), (vec![0x1010, 0x1020], End::Stopped(ZERO_RETURN)));
    }

    #[test]
    fn a_core_and_an_executable_must_be_regular_files_and_an_executable_a_program() {
        let dir = std::env::temp_dir().join(format!("winch-dump-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads the NUL-terminated path only.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let random = dir.join("random");
        std::fs::write(
            &random,
            (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect::<Vec<_>>(),
        )
        .unwrap();
        let started = std::time::Instant::now();
        let refused = |r: Result<Dump>| match r {
            Err(Error::BadArgument(m)) => m,
            Err(e) => panic!("expected a BadArgument error, got {e:?}"),
            Ok(_) => panic!("expected a BadArgument error, got a dump"),
        };
        // Nothing waits for a FIFO's writer, or reads a device without end.
        for (path, says) in [
            (fifo.to_str().unwrap(), "a FIFO"),
            ("/dev/zero", "a character device"),
            (dir.to_str().unwrap(), "a directory"),
        ] {
            let m = refused(dump_core(path, None));
            assert!(m.contains("core file") && m.contains(says), "{m}");
            let m = refused(dump_core(random.to_str().unwrap(), Some(path)));
            assert!(m.contains("not an ELF core"), "the core is read first: {m}");
            let m = exe_build_id(path).unwrap_err().to_string();
            assert!(m.contains("executable") && m.contains(says), "{m}");
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "nothing waited");
        let m = exe_build_id(random.to_str().unwrap()).unwrap_err().to_string();
        assert!(m.contains("not an x86_64 ELF program"), "{m}");
        let m = exe_build_id(dir.join("no").join("such").to_str().unwrap()).unwrap_err().to_string();
        assert!(m.contains("does not exist"), "{m}");
        // A program: its build-id (this test's own executable has one).
        let me = std::env::current_exe().unwrap();
        let id = exe_build_id(me.to_str().unwrap()).unwrap();
        assert!(id.is_some_and(|id| id.len() >= 8));
        let _ = std::fs::remove_dir_all(&dir);
    }

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
