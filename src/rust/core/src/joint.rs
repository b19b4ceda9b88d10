//! The joint capture: the native stack, R's context chain read and
//! validated against R's own view of its frames, and their placement; and
//! the diagnostics and learning probes that read the chain the same way.
//!
//! Every function here is called on R's main thread by the glue, which
//! passes the [`Facts`] gathered when winch loaded and, where the chain is
//! validated, `sys.frames()`/`sys.calls()` of an R caller further out. The
//! chain is read as seen from the capturing frame (`Facts::live_memory`).

use crate::error::{Error, Result};
use crate::interleave::{self, NFrame, NativeStack, RFrameAt};
use crate::memory::Objects;
use crate::r::context::{self as rcontext, RContext};
use crate::r::heap::{self, Head};
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
use crate::r::learn;
use crate::r::{layout as rlayout, Facts};
use crate::trace::{self, NativeTrace};
use crate::unwind::Backend;
use crate::view::{self, Class, Known};

/// Where the native frames sit among R's frames (see [`Joint::placement`]).
pub use crate::interleave::Placement;

/// A native stack with its frames classified, and the live part of the C
/// stack as seen from the capturing frame.
pub struct Native {
    pub trace: NativeTrace,
    pub classes: Vec<Class>,
    pub(crate) stack_lo: usize,
    pub(crate) stack_hi: usize,
}

/// Captures and classifies the native stack. `here` is the address of a
/// local variable of the caller: the live stack starts there.
pub fn native(
    backend: Backend,
    here: usize,
    known: impl Fn(&crate::modules::ModuleMap) -> Known,
) -> Result<Native> {
    let trace = trace::capture(backend)?;
    let modules: Vec<Option<usize>> = trace.frames.iter().map(|f| f.module).collect();
    let classes = view::classify(&trace.map, &modules, known(&trace.map), trace.truncated.is_none());
    let (stack_lo, stack_hi) = crate::stack::live_range(here)
        .ok_or_else(|| Error::Unavailable("not running on the thread's own stack".into()))?;
    Ok(Native { trace, classes, stack_lo, stack_hi })
}

impl Native {
    fn placement_frames(&self) -> Vec<NFrame> {
        self.trace
            .frames
            .iter()
            .zip(&self.classes)
            .map(|(f, c)| NFrame { lo: f.lo, foreign: c.is_code() })
            .collect()
    }

    /// The stack as placement sees it, with `frames` from
    /// [`Native::placement_frames`].
    fn stack<'a>(&self, frames: &'a [NFrame]) -> NativeStack<'a> {
        NativeStack {
            frames,
            stack_lo: self.stack_lo,
            stack_hi: self.stack_hi,
            truncated: self.trace.truncated.is_some(),
        }
    }
}

pub struct Joint {
    pub native: Native,
    pub placement: Placement,
    /// Why the context chain was not used, if it was not.
    pub fallback_reason: Option<Error>,
}

/// Captures the native stack and places it among R's frames. `frames` and
/// `calls` are `sys.frames()` and `sys.calls()` as seen by an R caller
/// further out; R frames deeper than those (winch's own R code) are placed
/// too, with higher numbers.
#[inline(never)]
pub fn capture(
    facts: &Facts,
    backend: Backend,
    frames: &[usize],
    calls: &[usize],
    use_contexts: bool,
) -> Result<Joint> {
    let local = 0u8;
    let native = native(backend, std::hint::black_box(&local) as *const u8 as usize, known(facts))?;
    let nframes = native.placement_frames();
    let placed = if use_contexts {
        contexts(facts, native.stack_lo, frames, calls).and_then(|ctx| {
            let stack = native.stack(&nframes);
            let range = (native.stack_lo, native.stack_hi);
            let at: Vec<RFrameAt> =
                ctx.iter().map(|c| RFrameAt { ctx: c.addr, runner: c.runner(range) }).collect();
            interleave::place(&stack, &at)
        })
    } else {
        Err(Error::Unavailable("reading R's context chain is turned off (option winch.use_contexts)".into()))
    };
    let (placement, fallback_reason) = match placed {
        Ok(p) => (p, None),
        Err(why) => (interleave::fallback(&nframes, frames.len()), Some(why)),
    };
    Ok(Joint { native, placement, fallback_reason })
}

/// The modules that decide what views show: winch's own and R's.
pub(crate) fn known(facts: &Facts) -> impl Fn(&crate::modules::ModuleMap) -> Known + '_ {
    |map| Known::at(map, facts.own_addr, facts.interpreter_addr)
}

/// R's whole context chain, innermost first, read as seen from `stack_lo`
/// (an address in the reader's frame).
fn read_chain(facts: &Facts, stack_lo: usize) -> Result<Vec<RContext>> {
    let mem = facts.live_memory(stack_lo);
    let first = crate::memory::Memory::word(&mem, facts.global_context)
        .ok_or_else(|| Error::Unreadable("R_GlobalContext could not be read".into()))?;
    rcontext::read_chain(&mem, first, &facts.layout, 1_000_000)
}

/// Whether R's context chain, read from the caller's frame, holds every
/// record (address, environment) of `contexts` with a non-zero address
/// (false when the chain cannot be read).
#[inline(never)]
pub(crate) fn chain_holds(facts: &Facts, contexts: &[(usize, usize)]) -> bool {
    let local = 0u8;
    match read_chain(facts, std::hint::black_box(&local) as *const u8 as usize) {
        Ok(chain) => contexts
            .iter()
            .filter(|c| c.0 != 0)
            .all(|&(addr, cloenv)| chain.iter().any(|c| c.addr == addr && c.cloenv == cloenv)),
        Err(_) => false,
    }
}

/// The function part of a call object, if `call` is a (live) call.
fn call_head(call: usize) -> Option<usize> {
    match heap::call_head(&Objects, call)? {
        Head::Symbol(f) | Head::Other(f) => Some(f),
    }
}

/// Reads and validates the function contexts of frames 1..=n against
/// `sys.frames()` (`frames`) and `sys.calls()` (`calls`).
fn contexts(facts: &Facts, stack_lo: usize, frames: &[usize], calls: &[usize]) -> Result<Vec<RContext>> {
    let chain = read_chain(facts, stack_lo)?;
    let numbered = rcontext::check_frames(&chain, frames)?;
    // The calls check below shows that the records' `call` fields are where
    // the layout says; once it passed, the environments' check (which still
    // runs) is enough, and callers that need no calls (the rlang hook) spare
    // sys.calls(), which copies every call.
    let skip_calls = calls.is_empty() && !frames.is_empty();
    if skip_calls && !CALLS_CHECKED.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(Error::Inconsistent(
            "sys.calls() is needed until the records' calls have been checked once".into(),
        ));
    }
    if !skip_calls && calls.len() != frames.len() {
        return Err(Error::Inconsistent("sys.calls() and sys.frames() disagree in length".into()));
    }
    // The environments matched, so the layout is right and `call` fields are
    // real R objects; their function parts must be those of sys.calls()
    // (which returns copies of the call cells, sharing their contents).
    for ((k, ctx), &call) in numbered.iter().zip(calls) {
        // Both are live call objects: `ctx.call` of a validated context,
        // `call` an element of sys.calls() held by the caller.
        if call_head(ctx.call) != call_head(call) {
            return Err(Error::Inconsistent(format!("context of frame {k} does not hold sys.call({k})")));
        }
    }
    if !skip_calls && !numbered.is_empty() {
        CALLS_CHECKED.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    Ok(numbered.into_iter().map(|(_, c)| c).collect())
}

/// Whether a capture has checked the context records' calls against
/// sys.calls() in this process.
static CALLS_CHECKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Reads R's context chain and checks it against `sys.frames()` (`frames`)
/// and `sys.calls()` (`calls`) of an R caller further out.
#[inline(never)]
pub fn validate_chain(facts: &Facts, frames: &[usize], calls: &[usize]) -> Result<()> {
    let local = 0u8;
    contexts(facts, std::hint::black_box(&local) as *const u8 as usize, frames, calls).map(|_| ())
}

/// Checks the layout of R objects before the profiler reads them: the label
/// read here of each call in `probes` (live calls) must be the one in
/// `expected` (as `Rprof()` writes it, computed by R for the same call).
pub fn validate_labels(facts: &Facts, probes: &[usize], expected: &[Option<String>]) -> Result<()> {
    for (call, want) in probes.iter().zip(expected) {
        let mut buf = heap::Buf::default();
        let head = match heap::call_head(&Objects, *call) {
            Some(Head::Symbol(s)) | Some(Head::Other(s)) => s,
            None => return Err(Error::Inconsistent("a probe call could not be read".into())),
        };
        heap::label(&Objects, &facts.symbols, head, &mut buf);
        if Some(String::from_utf8_lossy(buf.as_bytes()).as_ref()) != want.as_deref() {
            return Err(Error::Inconsistent(format!(
                "R objects are laid out differently than winch expects (label {:?}, expected {:?})",
                String::from_utf8_lossy(buf.as_bytes()),
                want
            )));
        }
    }
    Ok(())
}

/// The best unwinding backend here, for the learning probes.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn best_backend() -> Result<Backend> {
    Backend::best().ok_or_else(|| Error::Unavailable("no unwinding backend works here".into()))
}

/// Learns which native function of R runs an AST loop of `kind`: called
/// from inside such a loop, it finds the frame that holds the loop's record
/// (see `learn::learn_loop`).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub fn learn_loop(facts: &Facts, kind: learn::LoopKind) -> Result<()> {
    let ip = innermost_loop_owner(facts, best_backend()?)?;
    learn::learn_loop(facts, kind, ip)
}

/// Learns R's instructions from `opcodes` the first time they are given,
/// and where R's byte-code interpreter loop keeps its program counter:
/// called from byte code, it looks at the records made while byte code ran
/// and at the native frames holding their loop slots (see
/// `learn::learn_bc_frames`).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub fn learn_bc(facts: &Facts, opcodes: Option<learn::Opcodes>) -> Result<()> {
    learn::learn_ops(opcodes)?;
    let seen = loop_slots(facts, best_backend()?)?;
    learn::learn_bc_frames(&seen)
}

/// The instruction pointer of the native frame that holds the innermost
/// loop record on the C stack (an AST loop running now), as a return
/// address.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[inline(never)]
fn innermost_loop_owner(facts: &Facts, backend: Backend) -> Result<usize> {
    let local = 0u8;
    let native = native(backend, std::hint::black_box(&local) as *const u8 as usize, known(facts))?;
    let chain = read_chain(facts, native.stack_lo)?;
    let nframes = native.placement_frames();
    let stack = native.stack(&nframes);
    let ctx = chain
        .iter()
        .find(|c| c.callflag == rlayout::CTXT_LOOP && c.addr >= native.stack_lo && c.addr < native.stack_hi)
        .ok_or_else(|| Error::Inconsistent("no loop record on the C stack".into()))?;
    match interleave::owner(&stack, ctx.addr) {
        interleave::Owner::Frame(i) if i > 0 => Ok(native.trace.frames[i].ip),
        _ => Err(Error::Inconsistent("the loop record's frame was not found".into())),
    }
}

/// Whether R's own profiler (`Rprof()`) is running, from the context chain
/// of a call of `method`, an `Ops` method that R dispatched to from `+`
/// evaluated by the AST interpreter: R gives builtins such as `+` a record
/// of their own only while its profiler runs. (R's flag is not exported,
/// and with `event = "elapsed"` R >= 4.4 arms no timer.)
#[inline(never)]
pub fn r_profiling(facts: &Facts, method: usize) -> Result<bool> {
    let local = 0u8;
    let chain = read_chain(facts, std::hint::black_box(&local) as *const u8 as usize)?;
    let i = chain
        .iter()
        .position(|c| c.is_function() && c.callfun == method)
        .ok_or_else(|| Error::Inconsistent("the record of the profiler probe was not found".into()))?;
    match chain.get(i + 1) {
        Some(c) if c.callflag == rlayout::CTXT_BUILTIN => Ok(true),
        Some(c) if c.is_function() => Ok(false),
        _ => Err(Error::Inconsistent("the profiler probe was not called from `+`".into())),
    }
}

/// For every function record made while byte code ran whose loop slot
/// (`bcpc`) lies on the C stack: the start of the native function holding
/// the slot (the interpreter loop) and how far below that frame's CFA the
/// slot is.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[inline(never)]
fn loop_slots(facts: &Facts, backend: Backend) -> Result<Vec<(usize, usize)>> {
    let local = 0u8;
    let native = native(backend, std::hint::black_box(&local) as *const u8 as usize, known(facts))?;
    let chain = read_chain(facts, native.stack_lo)?;
    let nframes = native.placement_frames();
    let stack = native.stack(&nframes);
    let snap = crate::unwind::walk::Snapshot::take(facts.interpreter_addr);
    let frames = &native.trace.frames;
    let mut out = Vec::new();
    for c in chain.iter().filter(|c| c.is_function()) {
        let Some(slot) = c.runner((native.stack_lo, native.stack_hi)) else { continue };
        let interleave::Owner::Frame(i) = interleave::owner(&stack, slot) else { continue };
        let (Some(frame), Some(caller)) = (frames.get(i), frames.get(i + 1)) else { continue };
        let probe = if i == 0 { frame.ip } else { frame.ip - 1 };
        if let (Some(start), Some(offset)) = (snap.function_start(probe), caller.lo.checked_sub(slot)) {
            out.push((start, offset));
        }
    }
    Ok(out)
}

/// One record of the context chain, for diagnostics.
pub struct ChainEntry {
    pub callflag: i32,
    /// The record is on the C stack, or on R's node stack.
    pub on_stack: bool,
    pub on_node_stack: bool,
    /// The native frame owning the record, and the one owning its runner
    /// (the interpreter loop's program-counter slot), if any.
    pub frame: Option<usize>,
    pub runner_frame: Option<usize>,
}

/// The whole context chain as read from memory, innermost first, or why it
/// could not be read. A diagnostic; nothing is validated here. Frames are
/// numbered from the innermost frame R's code can see (the first one that is
/// not winch's capture).
#[inline(never)]
pub fn chain_summary(facts: &Facts, backend: Backend) -> Result<Vec<ChainEntry>> {
    let local = 0u8;
    let native = native(backend, std::hint::black_box(&local) as *const u8 as usize, known(facts))?;
    let chain = read_chain(facts, native.stack_lo)?;
    let nframes = native.placement_frames();
    let first = native.classes.iter().position(|c| !c.capture).unwrap_or(0);
    let stack = native.stack(&nframes);
    let frame_of = |addr: usize| match interleave::owner(&stack, addr) {
        interleave::Owner::Frame(i) => i.checked_sub(first),
        _ => None,
    };
    let node = facts.node_stack;
    let range = (native.stack_lo, native.stack_hi);
    Ok(chain
        .iter()
        .map(|c| ChainEntry {
            callflag: c.callflag,
            on_stack: c.addr >= range.0 && c.addr < range.1,
            on_node_stack: node.is_some_and(|(lo, hi)| c.addr >= lo && c.addr < hi),
            frame: frame_of(c.addr),
            runner_frame: c.runner(range).and_then(frame_of),
        })
        .collect())
}
