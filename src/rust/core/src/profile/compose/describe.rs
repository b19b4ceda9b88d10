//! Describing a sample's R frames (their labels, the loops around where
//! their code is now, their source positions), reusing the last sample's
//! descriptions where R's stack did not change. Part of the signal handler:
//! no allocation, no lock.

use super::{BcFacts, Ctx, LineFacts, RFacts, Reads, MAX_CONTEXTS};
use crate::memory::Memory;
use crate::profile::labels::{self, Labels};
use crate::profile::record::Owner;
use crate::r::bcode::{self, LoopPath};
use crate::r::heap as rheap;
use crate::r::sexp;
use crate::unwind::walk::Frame;

/// The descriptions (label, loops, position) of the last sample's R
/// frames, outermost first: the outer part of R's stack rarely changes
/// between samples, and a frame with the same [`FrameKey`] has the same
/// description. Checking the key reads a few words instead of the call,
/// the symbol, the body, its tables and the label cache (which a busy
/// workload pushes out of the CPU's caches between samples).
pub(super) struct Memo {
    last: [Box<[Seen]>; 2],
    len: [usize; 2],
    which: usize,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Seen {
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
pub(super) struct FrameKey {
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

impl Memo {
    /// Forgets the last sample's descriptions (their label ids belong to
    /// another session's table).
    pub(super) fn clear(&mut self) {
        self.len = [0, 0];
    }
}

/// Starts loading what the last sample's R frames were described from:
/// their records and calls (see [`crate::memory::prefetch`]).
pub(super) fn prefetch_last_contexts(memo: &Memo, call_offset: usize) {
    for seen in &memo.last[memo.which][..memo.len[memo.which]] {
        let k = &seen.key;
        crate::memory::prefetch(k.addr);
        crate::memory::prefetch(k.addr + call_offset);
        crate::memory::prefetch(k.call);
        crate::memory::prefetch(k.callfun);
    }
}

/// The tables the descriptions of R frames are made with.
pub(super) struct Describe<'a> {
    pub labels: &'a mut Labels,
    pub buf: &'a mut rheap::Buf,
    pub bodies: &'a mut bcode::BodyTables,
    pub files: &'a mut [(usize, usize, u32)],
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
pub(super) fn describe_frames<H: Memory, C: Memory>(
    r: &RFacts,
    mem: &Reads<H, C>,
    frames: &[Frame],
    ctx: &mut [Ctx],
    d: &mut Describe,
    memo: &mut Memo,
) {
    let h = mem.heap;
    let stack_word = |a: usize| mem.stack_word(r, a);
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
        let symbol = match rheap::call_head(h, c.call) {
            Some(rheap::Head::Symbol(sym)) => sym,
            _ => 0,
        };
        // A closure's record has a body; the record R makes for a primitive
        // that dispatches (`[` calling `[.data.frame`) has none, and the
        // method it calls runs from the same code as the primitive's
        // caller: that code stays the body further out.
        let closure = sexp::type_of(h, c.callfun) == Some(sexp::CLOSXP);
        let body = if r.bc.is_some() && closure { sexp::closure_body(h, c.callfun).unwrap_or(0) } else { 0 };
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
        if closure {
            outer_body = body;
        } else if caller_code != 0 {
            // A dispatching primitive runs in the code that called it: the
            // method it calls is called from that code too, whose loops are
            // this record's already.
            outer_body = caller_code;
        }
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
                label: label_of(h, r, c.call, d.labels, d.buf),
                loops: LoopPath::default(),
                outer_loops: LoopPath::default(),
                pos: None,
            }
            .described(h, r, &key, d),
        };
        ctx[k].label = seen.label;
        ctx[k].loops = seen.loops;
        ctx[k].outer_loops = seen.outer_loops;
        // Loops of the code the call was made from belong to the function
        // whose environment that code ran in (a promise forced further in
        // belongs to the function that made it): the record further out
        // whose environment the call came from.
        ctx[k].outer_owner = if seen.outer_loops.is_empty() {
            Owner::Caller
        } else {
            let sysparent = ctx[k].sysparent;
            // (Closures only: `eval()` makes a record whose environment is
            // the one it evaluates in, for no function's code.)
            let owner = ((k + 1)..ctx.len()).find(|&j| {
                !ctx[j].is_loop
                    && ctx[j].cloenv == sysparent
                    && sysparent != 0
                    && sexp::type_of(h, ctx[j].callfun) == Some(sexp::CLOSXP)
            });
            match owner {
                Some(j) => Owner::Frame(ctx[j].label),
                None => Owner::TopLevel,
            }
        };
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
    fn described(mut self, h: &impl Memory, r: &RFacts, k: &FrameKey, d: &mut Describe) -> Seen {
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
                let file = file_label(h, lf, r.base.nil, srcfile, d.labels, d.files)?;
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
    h: &impl Memory,
    lf: &LineFacts,
    nil: usize,
    srcfile: usize,
    labels: &mut Labels,
    files: &mut [(usize, usize, u32)],
) -> Option<u32> {
    let frame = sexp::env_frame(h, srcfile)?;
    let slot = (srcfile.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54) & (files.len() - 1);
    if let Some(&(env, f, id)) = files.get(slot) {
        if env == srcfile && f == frame {
            return Some(id);
        }
    }
    let name = bcode::env_value(h, srcfile, (lf.filename_sym, b"filename"), nil)?;
    if sexp::type_of(h, name)? != sexp::STRSXP || sexp::length(h, name)? == 0 {
        return None;
    }
    let mut buf = rheap::Buf::default();
    rheap::push_chars(h, h.word(sexp::data(h, name)?)?, &mut buf)?;
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
fn label_of(h: &impl Memory, r: &RFacts, call: usize, table: &mut Labels, buf: &mut rheap::Buf) -> u32 {
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
