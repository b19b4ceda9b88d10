//! The joint capture: native stack, R's context chain, and their placement.

use crate::rstate;
use winch_core::interleave::{self, NFrame, NativeStack, Placement, RFrameAt};
use winch_core::rcontext::{self, Layout, LiveMemory, RContext};
use winch_core::trace::{self, CaptureOptions, NativeTrace};
use winch_core::unwind::Backend;

pub struct Joint {
    pub trace: NativeTrace,
    pub placement: Placement,
    /// Why the context chain was not used, if it was not.
    pub fallback_reason: Option<String>,
}

/// Captures the native stack and places it among R's frames. `frames` and
/// `call_heads` are the environments of `sys.frames()` and the function parts
/// of `sys.calls()` as seen by an R caller further out; R frames deeper than
/// those (winch's own R code) are placed too, with higher numbers.
#[inline(never)]
pub fn capture(
    backend: Backend,
    frames: &[usize],
    call_heads: &[usize],
    use_contexts: bool,
) -> Result<Joint, String> {
    let local = 0u8;
    let stack_lo = std::hint::black_box(&local) as *const u8 as usize;
    let trace =
        trace::capture(&CaptureOptions { backend, self_addr: rstate::self_addr(), main_thread: true })?;
    let is_libr = rstate::libr_predicate(&trace.map);
    let nframes: Vec<NFrame> =
        trace.frames.iter().map(|f| NFrame { lo: f.lo, foreign: !f.module.is_some_and(&is_libr) }).collect();
    drop(is_libr);

    let chain = if use_contexts {
        contexts(stack_lo, frames, call_heads)
    } else {
        Err("reading R's context chain is turned off (option winch.use_contexts)".to_string())
    };
    let placed = chain.and_then(|ctx| {
        let (stack_lo, stack_hi) =
            winch_core::stack::live_range(stack_lo).ok_or("not running on the thread's own stack")?;
        let stack =
            NativeStack { frames: &nframes, stack_lo, stack_hi, truncated: trace.truncated.is_some() };
        let at: Vec<RFrameAt> =
            ctx.iter().map(|c| RFrameAt { ctx: c.addr, runner: c.runner((stack_lo, stack_hi)) }).collect();
        interleave::place(&stack, &at)
    });
    let (placement, fallback_reason) = match placed {
        Ok(p) => (p, None),
        Err(why) => (interleave::fallback(&nframes, frames.len()), Some(why)),
    };
    Ok(Joint { trace, placement, fallback_reason })
}

/// R's whole context chain, innermost first, read as seen from `stack_lo`
/// (an address in the reader's frame).
fn read_chain(stack_lo: usize) -> Result<Vec<RContext>, String> {
    let always: Vec<(usize, usize)> = rstate::node_stack_range().into_iter().collect();
    let mem = LiveMemory::new(stack_lo, always, rstate::libr_data_ranges());
    let version = rstate::r_version().ok_or("R's version is not known (winch was not loaded by R)")?;
    let layout = Layout::for_r(version)
        .ok_or_else(|| format!("R's context layout is unknown for R {}.{}", version.0, version.1))?;
    rcontext::read_chain(&mem, rstate::global_context(), &layout, 1_000_000)
}

/// Reads and validates the function contexts of frames 1..=n.
fn contexts(stack_lo: usize, frames: &[usize], call_heads: &[usize]) -> Result<Vec<RContext>, String> {
    let chain = read_chain(stack_lo)?;
    let numbered = rcontext::check_frames(&chain, frames)?;
    if call_heads.len() != frames.len() {
        return Err("sys.calls() and sys.frames() disagree in length".into());
    }
    // The environments matched, so the layout is right and `call` fields are
    // real R objects; their function parts must be those of sys.calls()
    // (which returns copies of the call cells, sharing their contents).
    for ((k, ctx), &head) in numbered.iter().zip(call_heads) {
        // SAFETY: `call` is the live call object of a validated context.
        if unsafe { rstate::call_head(ctx.call) } != Some(head) {
            return Err(format!("context of frame {k} does not hold sys.call({k})"));
        }
    }
    Ok(numbered.into_iter().map(|(_, c)| c).collect())
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
/// could not be read. A diagnostic; nothing is validated here.
pub fn chain_summary(backend: Backend) -> Result<Vec<ChainEntry>, String> {
    let local = 0u8;
    let stack_lo = std::hint::black_box(&local) as *const u8 as usize;
    let trace =
        trace::capture(&CaptureOptions { backend, self_addr: rstate::self_addr(), main_thread: true })?;
    let (_, stack_hi) =
        winch_core::stack::live_range(stack_lo).ok_or("not running on the thread's own stack")?;
    let chain = read_chain(stack_lo)?;
    let nframes: Vec<NFrame> = trace.frames.iter().map(|f| NFrame { lo: f.lo, foreign: false }).collect();
    let stack = NativeStack { frames: &nframes, stack_lo, stack_hi, truncated: trace.truncated.is_some() };
    let frame_of = |addr: usize| match interleave::owner(&stack, addr) {
        interleave::Owner::Frame(i) => Some(i),
        _ => None,
    };
    let node = rstate::node_stack_range();
    Ok(chain
        .iter()
        .map(|c| ChainEntry {
            callflag: c.callflag,
            on_stack: c.addr >= stack_lo && c.addr < stack_hi,
            on_node_stack: node.is_some_and(|(lo, hi)| c.addr >= lo && c.addr < hi),
            frame: frame_of(c.addr),
            runner_frame: c.runner((stack_lo, stack_hi)).and_then(frame_of),
        })
        .collect())
}
