//! One sample, taken inside the timer's signal handler: the native stack
//! walked from the interrupted registers, R's context chain read in place,
//! both merged exactly as `interleave` places them, R frames labelled, and
//! the result written to the ring as one record.
//!
//! Everything here is async-signal-safe: no allocation (all buffers are
//! preallocated in [`Scratch`]), no lock, no system call but
//! `clock_gettime`. Reads of R's context records are checked against the
//! ranges where R keeps them (the C stack, R's node stack, R's own data);
//! reads of R objects go through `rheap`.
//!
//! A record is `[header, entry...]`, entries innermost first:
//! * header: `flags | weight << 8 | handler_ns << 32`;
//! * a native frame: `NATIVE | ip` (`| EXACT_IP` for the interrupted one);
//! * an R frame: `R | label id`;
//! * a loop: `R | label id` of `[for]`, `[while]`, `[repeat]` or `[loop]`;
//! * under line profiling, after an R entry whose position is known:
//!   `POS | file label id << 32 | line`.

use super::collect::{TRUNCATED_NATIVE, TRUNCATED_R};
use super::labels::{self, Labels};
use super::ring::Ring;
use crate::interleave;
use crate::memory::{Memory, Objects, Ranges};
use crate::r::bcode::{self, BcSymbols, LoopPath, OpTable};
use crate::r::heap as rheap;
use crate::r::layout::CTXT_LOOP;
use crate::unwind::walk::{End, Frame, Snapshot};

pub const NATIVE: u64 = 1 << 62;
pub const R: u64 = 2 << 62;
pub const TAG: u64 = 3 << 62;
/// After an R entry, under line profiling: `POS | file << 32 | line`, the
/// file a label id.
pub const POS: u64 = 3 << 62;
/// On a native entry: the ip is the interrupted instruction, not a return
/// address.
pub const EXACT_IP: u64 = 1 << 60;
/// The bits of a native entry that hold the ip.
pub const IP_MASK: u64 = (1 << 56) - 1;

/// Frames and contexts a sample holds at most.
pub const MAX_FRAMES: usize = 4096;
pub const MAX_CONTEXTS: usize = 8192;

pub use crate::r::learn::LoopStarts;

/// What finding the loops of byte code needs: the symbols, and the native
/// functions that run R's byte-code interpreter loop with where each keeps
/// its program counter (bytes below the frame's CFA), learnt by watching
/// them (see the glue's calibration).
#[derive(Clone, Copy, Debug, Default)]
pub struct BcFacts {
    pub syms: BcSymbols,
    pub loop_frames: [(usize, usize); 2],
    /// R's instructions (None: byte code's loops are not known).
    pub ops: Option<&'static OpTable>,
}

/// Which samples, and which of their frames, are the profiled code's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Region {
    /// Every sample, whole.
    #[default]
    All,
    /// What runs under the function record of `callfun` called from the
    /// environment `sysparent` (the record and those further out are left
    /// out); samples without that record are left out.
    Under { callfun: usize, sysparent: usize },
    /// Samples taken while no record of `callfun` runs.
    Outside { callfun: usize },
}

/// What reading R frames' source positions needs besides the [`Facts`]
/// (R's current srcref, its marker for byte code, NULL).
///
/// [`Facts`]: crate::r::Facts
#[derive(Clone, Copy, Debug, Default)]
pub struct LineFacts {
    /// The symbols `srcfile` and `filename`.
    pub srcfile_sym: usize,
    pub filename_sym: usize,
}

/// What the handler knows about R, prepared (and checked) before sampling.
#[derive(Clone, Copy, Debug)]
pub struct RFacts {
    /// The facts about the running R (where its chain is, its symbols).
    pub base: crate::r::Facts,
    /// Where R's context records may be read in place.
    pub ranges: Ranges,
    pub loops: Option<LoopStarts>,
    /// How to find byte-code positions (None: byte code's loops and lines
    /// are not known).
    pub bc: Option<BcFacts>,
    /// Record R frames' source positions (None: no).
    pub lines: Option<LineFacts>,
    /// Show loops as frames.
    pub with_loops: bool,
    /// The profiled code's samples and frames: not the profiler's own.
    pub region: Region,
}

/// Buffers of the handler.
pub struct Scratch {
    frames: Box<[Frame]>,
    /// The frames' stack pointers, for finding owners by binary search.
    sps: Box<[usize]>,
    ctx: Box<[Ctx]>,
    record: Box<[u64]>,
    pub labels: Labels,
    label: rheap::Buf,
    memo: Memo,
    bodies: bcode::BodyTables,
    files: Box<[(usize, usize, u32)]>,
}

/// The descriptions (label, loops, position) of the last sample's R
/// frames, outermost first: the outer part of R's stack rarely changes
/// between samples, and a frame with the same [`FrameKey`] has the same
/// description. Checking the key reads a few words instead of the call,
/// the symbol, the body, its tables and the label cache (which a busy
/// workload pushes out of the CPU's caches between samples).
struct Memo {
    last: [Box<[Seen]>; 2],
    len: [usize; 2],
    which: usize,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Seen {
    key: FrameKey,
    label: u32,
    loops: LoopPath,
    outer_loops: LoopPath,
    pos: Option<(u32, u32)>,
}

/// What an R frame's description depends on: the record (its address,
/// call and function), the call's function symbol (0: not a symbol: never
/// reused), the function's body, and what tells where it is now (the
/// inner record's body and position, or the loop's program counter, and
/// the srcref in effect), and where it was called from when that was not
/// its caller's body (the code and the position there).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct FrameKey {
    addr: usize,
    call: usize,
    symbol: usize,
    callfun: usize,
    body: usize,
    from_body: usize,
    pc: usize,
    srcref: usize,
    caller_code: usize,
    caller_pc: usize,
}

impl Default for Memo {
    fn default() -> Memo {
        let buf = || {
            let mut b = vec![Seen::default(); MAX_CONTEXTS].into_boxed_slice();
            crate::memory::prefault(&mut b);
            b
        };
        Memo { last: [buf(), buf()], len: [0, 0], which: 0 }
    }
}

impl Default for Scratch {
    fn default() -> Scratch {
        let mut s = Scratch {
            frames: vec![Frame::default(); MAX_FRAMES].into_boxed_slice(),
            sps: vec![0; MAX_FRAMES].into_boxed_slice(),
            ctx: vec![Ctx::default(); MAX_CONTEXTS].into_boxed_slice(),
            record: vec![0; 1 + MAX_FRAMES + 2 * MAX_CONTEXTS].into_boxed_slice(),
            labels: Labels::new(),
            label: rheap::Buf::default(),
            memo: Memo::default(),
            bodies: bcode::BodyTables::default(),
            files: vec![(0, 0, 0); 1024].into_boxed_slice(),
        };
        crate::memory::prefault(&mut s.frames);
        crate::memory::prefault(&mut s.sps);
        crate::memory::prefault(&mut s.ctx);
        crate::memory::prefault(&mut s.record);
        s
    }
}

/// A context record that becomes a frame of the sample.
#[derive(Clone, Copy, Debug, Default)]
struct Ctx {
    /// The label id (for loops: the loop's label).
    label: u32,
    /// The record's address and call (function records).
    addr: usize,
    call: usize,
    /// The native frame index it sits right before (innermost first), or
    /// `usize::MAX` for "after every native frame".
    anchor: usize,
    /// A loop record (needs its owner's function start).
    is_loop: bool,
    owner: usize,
    /// Byte-code facts of function records (see `RContext`).
    on_stack: bool,
    callfun: usize,
    bcintactive: bool,
    bcbody: usize,
    bcpc: usize,
    relpc: isize,
    /// The srcref saved by the oldest record newer than this one that is
    /// not a loop's (None: no such record).
    srcref_in: Option<usize>,
    /// The loops of its function around where it is now.
    loops: LoopPath,
    /// The loops around where it was called, in code that is not its
    /// caller's function body (a loop the JIT compiled at top level, a
    /// promise, `eval()` of byte code).
    outer_loops: LoopPath,
    /// Its source position now: (file label id, line).
    pos: Option<(u32, u32)>,
}

/// What a sample found, for the caller's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub flags: u64,
    pub frames: usize,
    pub pushed: bool,
    /// Taken outside the profiled code (see [`Region`]): not pushed.
    pub outside: bool,
}

/// Takes one sample from the interrupted registers `(ip, sp, bp)` and
/// pushes it to `ring` with `weight` (timer expirations it stands for).
#[allow(clippy::too_many_arguments)]
pub fn sample(
    regs: (usize, usize, usize),
    weight: u64,
    started_ns: u64,
    now_ns: impl Fn() -> u64,
    snap: &Snapshot,
    r: &RFacts,
    s: &mut Scratch,
    ring: &Ring,
) -> Outcome {
    let mut flags = 0;
    prefetch_last_contexts(&s.memo, r.base.layout.call);
    let read_stack = |a: usize| r.ranges.stack_word(a);
    // A signal that arrived while R ran on another stack (a signal
    // handler's alternate stack): no native frames, R's chain only.
    let (n, end) = if r.ranges.on_stack(regs.1) {
        snap.walk(regs, read_stack, &mut s.frames)
    } else {
        (0, End::Stopped("not on the main thread's stack"))
    };
    if end != End::Outermost {
        flags |= TRUNCATED_NATIVE;
    }
    let complete = end == End::Outermost;
    for i in 0..n {
        s.sps[i] = s.frames[i].sp;
    }
    let (nctx, cut) = match read_contexts(r, &s.sps[..n], complete, &mut s.ctx) {
        Some(Chain { outside: true, .. }) => {
            return Outcome { flags, frames: 0, pushed: false, outside: true };
        }
        Some(Chain { len: k, consistent, cut, outside: false }) => {
            if !consistent {
                flags |= TRUNCATED_R;
            }
            let mut d = Describe {
                labels: &mut s.labels,
                buf: &mut s.label,
                bodies: &mut s.bodies,
                files: &mut s.files,
            };
            describe_frames(r, &s.frames[..n], &mut s.ctx[..k], &mut d, &mut s.memo);
            (k, cut)
        }
        None => {
            flags |= TRUNCATED_R;
            (0, usize::MAX)
        }
    };

    // Native frames of R's interpreter are left out (the R frames stand for
    // them), and so is the program around it: frames further out than the
    // interpreter's outermost frame, on a complete stack.
    let module = |i: usize| s.frames[i].module;
    let is_interp = |i: usize| module(i).is_some_and(|m| snap.interpreter.get(m).copied().unwrap_or(false));
    let host_from = match (complete, snap.libr) {
        (true, Some(libr)) => (0..n).rev().find(|&i| module(i) == Some(libr)).map_or(n, |i| i + 1),
        _ => n,
    };

    let mut len = 1;
    let mut k = 0; // next context (innermost first)
    let push = |rec: &mut [u64], len: &mut usize, w: u64| {
        if let Some(slot) = rec.get_mut(*len) {
            *slot = w;
            *len += 1;
        }
    };
    'merge: for i in 0..=n {
        while k < nctx && (s.ctx[k].anchor <= i || (i == n && s.ctx[k].anchor >= n)) {
            if k == cut {
                break 'merge; // the frames of the profiler's caller
            }
            let c = s.ctx[k];
            let label = if c.is_loop { loop_label(r, &s.frames, c.owner) } else { c.label };
            // A function's byte-code loops, innermost first, then itself.
            let pos = c.pos.map(|(file, line)| POS | (file as u64) << 32 | line as u64);
            for j in (0..c.loops.len()).rev() {
                push(&mut s.record, &mut len, R | loop_kind_label(c.loops.get(j)) as u64);
                if let Some(p) = pos {
                    push(&mut s.record, &mut len, p);
                }
            }
            if !c.is_loop || r.with_loops {
                push(&mut s.record, &mut len, R | label as u64);
                if let Some(p) = pos {
                    push(&mut s.record, &mut len, p);
                }
            }
            for j in (0..c.outer_loops.len()).rev() {
                push(&mut s.record, &mut len, R | loop_kind_label(c.outer_loops.get(j)) as u64);
            }
            k += 1;
        }
        if i < host_from && i < n && !is_interp(i) {
            let exact = if i == 0 { EXACT_IP } else { 0 };
            push(&mut s.record, &mut len, NATIVE | exact | (s.frames[i].ip as u64 & IP_MASK));
        }
    }
    let spent = now_ns().saturating_sub(started_ns);
    s.record[0] = flags | (weight.min(0xff_ffff) << 8) | (spent.min(u32::MAX as u64) << 32);
    let pushed = ring.push(&s.record[..len]);
    Outcome { flags, frames: len - 1, pushed, outside: false }
}

fn loop_kind_label(kind: u32) -> u32 {
    match kind {
        bcode::FOR => labels::FOR,
        bcode::WHILE => labels::WHILE,
        _ => labels::REPEAT,
    }
}

/// The label of an AST loop whose record native frame `owner` holds: the
/// kind of loop is told by which of R's loop functions that frame runs.
fn loop_label(r: &RFacts, frames: &[Frame], owner: usize) -> u32 {
    let Some(l) = r.loops else { return labels::LOOP };
    match frames.get(owner).map(|f| f.start).filter(|&s| s != 0) {
        Some(f) if f == l.for_ => labels::FOR,
        Some(f) if f == l.while_ => labels::WHILE,
        Some(f) if f == l.repeat => labels::REPEAT,
        _ => labels::LOOP,
    }
}

/// What [`read_contexts`] found.
struct Chain {
    /// Records kept in `ctx`.
    len: usize,
    /// Whether their positions were consistent.
    consistent: bool,
    /// The index of the record where the frames to leave out begin
    /// (`usize::MAX` for none; see [`Region`]).
    cut: usize,
    /// The sample is not the profiled code's.
    outside: bool,
}

/// Reads the chain from `R_GlobalContext` (through the one chain reader,
/// in place inside the ranges where R keeps its records), keeps the
/// function records (and AST loop records) with their labels and anchors
/// in `ctx`, innermost first. None if the chain could not be read.
fn read_contexts(r: &RFacts, sps: &[usize], complete: bool, ctx: &mut [Ctx]) -> Option<Chain> {
    let mem = &r.ranges;
    let mut n = 0;
    let mut cut = usize::MAX;
    let mut outside = matches!(r.region, Region::Under { .. });
    // The srcref saved by the last record read that is not a loop's.
    let mut newer_srcref = None;
    let chain = crate::r::Chain::from_global(mem, &r.base.layout, r.base.global_context, MAX_CONTEXTS * 4);
    let mut reached_top = false;
    for c in chain {
        let c = c.ok()?;
        if c.next == 0 {
            reached_top = true; // the top-level context
            break;
        }
        let function = c.is_function();
        let ast_loop = c.callflag == CTXT_LOOP && mem.on_stack(c.addr);
        let srcref_in = newer_srcref;
        if c.callflag != CTXT_LOOP {
            newer_srcref = Some(c.srcref);
        }
        if function {
            match r.region {
                Region::Under { callfun: f, sysparent }
                    if cut == usize::MAX && c.callfun == f && c.sysparent == sysparent =>
                {
                    cut = n;
                    outside = false;
                }
                Region::Outside { callfun: f } if c.callfun == f => outside = true,
                _ => {}
            }
        }
        if !(function || ast_loop) {
            continue;
        }
        if n >= ctx.len() {
            return None;
        }
        // Where the record sits among native frames: its own address on
        // the C stack, or (a byte-code call's record) the slot of the loop
        // running it.
        let at = if mem.on_stack(c.addr) {
            Some(c.addr)
        } else {
            (c.bcintactive == 1 && mem.on_stack(c.bcpc)).then_some(c.bcpc)
        };
        let (anchor, owner_frame) = match at {
            Some(a) => match interleave::owner_index(sps, a) {
                Some(i) => (i, i),
                None if complete => return None, // inside the capture: impossible
                None => (interleave::BEYOND, interleave::BEYOND),
            },
            None => (interleave::UNKNOWN, interleave::BEYOND),
        };
        ctx[n] = Ctx {
            label: labels::LOOP,
            addr: c.addr,
            call: if function { c.call } else { 0 },
            anchor,
            is_loop: !function,
            owner: owner_frame,
            on_stack: mem.on_stack(c.addr),
            callfun: if function { c.callfun } else { 0 },
            bcintactive: function && c.bcintactive == 1,
            bcbody: if function { c.bcbody } else { 0 },
            bcpc: if function { c.bcpc } else { 0 },
            relpc: if function { c.relpc.unwrap_or(-1) } else { -1 },
            srcref_in,
            loops: LoopPath::default(),
            outer_loops: LoopPath::default(),
            pos: None,
        };
        n += 1;
    }
    if !reached_top {
        return None; // a chain always ends at the top level
    }
    let consistent = interleave::settle_anchors(&mut ctx[..n], |c| &mut c.anchor);
    Some(Chain { len: n, consistent, cut, outside })
}

/// Starts loading what the last sample's R frames were described from:
/// their records and calls (see [`crate::memory::prefetch`]).
fn prefetch_last_contexts(memo: &Memo, call_offset: usize) {
    for seen in &memo.last[memo.which][..memo.len[memo.which]] {
        let k = &seen.key;
        crate::memory::prefetch(k.addr);
        crate::memory::prefetch(k.addr + call_offset);
        crate::memory::prefetch(k.call);
        crate::memory::prefetch(k.callfun);
    }
}

/// The tables the descriptions of R frames are made with.
struct Describe<'a> {
    labels: &'a mut Labels,
    buf: &'a mut rheap::Buf,
    bodies: &'a mut bcode::BodyTables,
    files: &'a mut [(usize, usize, u32)],
}

/// Describes every function record of `ctx` (innermost first): its label,
/// the loops around where its code is now and its source position there,
/// reusing the last sample's description of a frame with the same key
/// (see [`Memo`]).
///
/// Where byte code is now:
/// * if it called something still running (the next inner function record
///   made while byte code ran in this body): that call's position, recorded
///   in the record (`relpc`, R >= 4.4) or in the slot of the loop that made
///   it (`bcpc`, the loop being suspended there);
/// * otherwise (the innermost R frame, or one that called native code): the
///   program counter of the interpreter loop running it: its record's loop
///   slot for a call the loop made inline (R >= 4.4), else the slot of the
///   loop frame closest to its record, found by function and offset.
///
/// The source position: in the AST interpreter the srcref saved by the
/// first record made from the function's code that is not a loop's (a call
/// or a `.Call()`), or R's current one; in byte code, the compiler's srcref
/// table at the code's position. None where R has no srcrefs (code parsed
/// without `keep.source`). A position outside the function's own code is
/// not used.
///
/// A record made by byte code that is not the body of the function further
/// out (a loop the JIT compiled at top level, a promise's code, `eval()` of
/// byte code) also gets the loops of that code around the call.
fn describe_frames(r: &RFacts, frames: &[Frame], ctx: &mut [Ctx], d: &mut Describe, memo: &mut Memo) {
    let h = Objects;
    let stack_word = |a: usize| r.ranges.stack_word(a);
    let current_srcref = r.lines.as_ref().and_then(|_| h.word(r.base.srcref_var)).unwrap_or(0);
    let this = 1 - memo.which;
    let mut i = 0; // outermost-first index
                   // The body of the function record further out (0: none).
    let mut outer_body = 0;
    for k in (0..ctx.len()).rev() {
        if ctx[k].is_loop {
            continue;
        }
        let c = ctx[k];
        let inner = (0..k).rev().find(|&j| !ctx[j].is_loop).map(|j| ctx[j]);
        let symbol = match rheap::call_head(&h, c.call) {
            Some(rheap::Head::Symbol(sym)) => sym,
            _ => 0,
        };
        let body = if r.bc.is_some() { h.word(c.callfun + 40).unwrap_or(0) } else { 0 };
        // Where the byte code is: from the inner call, else from the loop.
        let (from_body, pc) = match inner.filter(|j| j.bcintactive && j.bcbody == body && body != 0) {
            Some(j) if j.relpc > 0 => (j.bcbody, j.relpc as usize),
            Some(j) => (j.bcbody, stack_word(j.bcpc).unwrap_or(0)),
            None if body != 0 => {
                let slot = match r.bc {
                    Some(_) if !c.on_stack && c.bcintactive => Some(c.bcpc),
                    Some(ref bc) => loop_slot(bc, frames, c.anchor.min(frames.len())),
                    None => None,
                };
                (0, slot.and_then(stack_word).unwrap_or(0))
            }
            None => (0, 0),
        };
        let srcref = c.srcref_in.unwrap_or(current_srcref);
        // Called by byte code other than the body further out: where.
        let (caller_code, caller_pc) = match r.bc {
            Some(_) if c.bcintactive && c.bcbody != 0 && c.bcbody != outer_body => {
                let pc = if c.relpc > 0 { c.relpc as usize } else { stack_word(c.bcpc).unwrap_or(0) };
                (c.bcbody, pc)
            }
            _ => (0, 0),
        };
        outer_body = body;
        let key = FrameKey {
            addr: c.addr,
            call: c.call,
            symbol,
            callfun: c.callfun,
            body,
            from_body,
            pc,
            srcref,
            caller_code,
            caller_pc,
        };
        let last = &memo.last[memo.which][..memo.len[memo.which]];
        let seen = match last.get(i) {
            Some(seen) if symbol != 0 && seen.key == key => *seen,
            _ => Seen {
                key,
                label: label_of(r, c.call, d.labels, d.buf),
                loops: LoopPath::default(),
                outer_loops: LoopPath::default(),
                pos: None,
            }
            .described(r, &key, d),
        };
        ctx[k].label = seen.label;
        ctx[k].loops = seen.loops;
        ctx[k].outer_loops = seen.outer_loops;
        ctx[k].pos = seen.pos;
        if let Some(slot) = memo.last[this].get_mut(i) {
            *slot = seen;
        }
        i += 1;
    }
    memo.len[this] = i.min(memo.last[this].len());
    memo.which = this;
}

impl Seen {
    /// Fills in the loops and position of a frame with key `k`.
    fn described(mut self, r: &RFacts, k: &FrameKey, d: &mut Describe) -> Seen {
        let h = Objects;
        let at = r.bc.as_ref().and_then(|bc| {
            let body = bcode::closure_code(&h, k.callfun)?;
            Some((bc, body, position(&h, body, k.from_body != 0, k.pc)?))
        });
        if let (true, Some((bc, body, relpc)), Some(ops)) = (r.with_loops, at, r.bc.and_then(|b| b.ops)) {
            self.loops = d.bodies.loops_at(&h, &bc.syms, ops, body, relpc).unwrap_or_default();
        }
        if let (true, Some(bc), Some(ops)) =
            (r.with_loops && k.caller_code != 0, r.bc, r.bc.and_then(|b| b.ops))
        {
            self.outer_loops = position(&h, k.caller_code, true, k.caller_pc)
                .and_then(|relpc| d.bodies.loops_at(&h, &bc.syms, ops, k.caller_code, relpc))
                .unwrap_or_default();
        }
        if let Some(lf) = &r.lines {
            let ast = Some(k.srcref).filter(|&s| s != r.base.in_bc && s != r.base.nil && s != 0);
            let srcref = ast.or_else(|| {
                let (bc, body, relpc) = at?;
                bcode::located(&h, &bc.syms, body, b"srcrefsIndex", relpc)
            });
            self.pos = srcref.and_then(|s| {
                let (line, srcfile) = bcode::srcref_parts(&h, s, lf.srcfile_sym)?;
                let file = file_label(lf, r.base.nil, srcfile, d.labels, d.files)?;
                Some((file, u32::try_from(line).ok()?))
            });
        }
        self
    }
}

/// The code unit of compiled `body` a position is at: `pc` a relative
/// position when `recorded` (R >= 4.4 records one) and small, else an
/// address in the code.
fn position(h: &impl Memory, body: usize, recorded: bool, pc: usize) -> Option<usize> {
    if recorded && pc < (1 << 32) {
        Some(pc)
    } else {
        bcode::relative_pc(h, body, pc)
    }
}

/// The label id of a srcfile's file name, cached by the srcfile (with its
/// frame, to tell it from a later environment at the same address).
fn file_label(
    lf: &LineFacts,
    nil: usize,
    srcfile: usize,
    labels: &mut Labels,
    files: &mut [(usize, usize, u32)],
) -> Option<u32> {
    let h = Objects;
    let frame = h.word(srcfile + 32)?;
    let slot = (srcfile.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54) & (files.len() - 1);
    if let Some(&(env, f, id)) = files.get(slot) {
        if env == srcfile && f == frame {
            return Some(id);
        }
    }
    let name = bcode::env_value(&h, srcfile, lf.filename_sym, nil)?;
    if rheap::type_of(&h, name)? != rheap::STRSXP || rheap::length(&h, name)? == 0 {
        return None;
    }
    let mut buf = rheap::Buf::default();
    rheap::push_chars(&h, h.word(rheap::data(&h, name)?)?, &mut buf)?;
    let id = labels.intern(buf.as_bytes());
    if id == labels::FULL {
        return None;
    }
    files[slot] = (srcfile, frame, id);
    Some(id)
}

/// The program-counter slot of the interpreter loop frame closest below
/// native frame `limit` (the frame holding a function's record).
fn loop_slot(bc: &BcFacts, frames: &[Frame], limit: usize) -> Option<usize> {
    (0..limit).rev().find_map(|i| {
        let (_, offset) =
            bc.loop_frames.iter().find(|(start, _)| *start != 0 && *start == frames[i].start)?;
        // The frame's CFA is the next outer frame's stack pointer.
        frames.get(i + 1)?.sp.checked_sub(*offset)
    })
}

/// The label id of a function record's call.
fn label_of(r: &RFacts, call: usize, table: &mut Labels, buf: &mut rheap::Buf) -> u32 {
    let h = Objects;
    match rheap::call_head(&h, call) {
        Some(rheap::Head::Symbol(sym)) => {
            if let Some(id) = table.symbol(sym) {
                return id;
            }
            rheap::label(&h, &r.base.symbols, sym, buf);
            let id = table.intern(buf.as_bytes());
            if id != labels::FULL {
                table.remember_symbol(sym, id);
            }
            id
        }
        Some(rheap::Head::Other(fun)) => {
            rheap::label(&h, &r.base.symbols, fun, buf);
            table.intern(buf.as_bytes())
        }
        None => labels::ANONYMOUS,
    }
}
