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
    /// `pc` is a position in the code (recorded by R >= 4.4), not an
    /// address in it (read from an interpreter loop's slot).
    pc_relative: bool,
    srcref: usize,
    caller_code: usize,
    caller_pc: usize,
    caller_relative: bool,
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
        let (from_body, pc, pc_relative) =
            match inner.filter(|j| j.bcintactive && j.bcbody == body && body != 0) {
                Some(j) if j.relpc > 0 => (j.bcbody, j.relpc as usize, true),
                Some(j) => (j.bcbody, stack_word(j.bcpc).unwrap_or(0), false),
                None if body != 0 => {
                    let slot = match r.bc {
                        Some(_) if !c.on_stack && c.bcintactive => Some(c.bcpc),
                        Some(ref bc) => loop_slot(bc, frames, c.anchor.min(frames.len())),
                        None => None,
                    };
                    (0, slot.and_then(stack_word).unwrap_or(0), false)
                }
                None => (0, 0, false),
            };
        let srcref = c.srcref_in.unwrap_or(current_srcref);
        // Called by byte code other than the body further out: where.
        let (caller_code, caller_pc, caller_relative) = match r.bc {
            Some(_) if c.bcintactive && c.bcbody != 0 && c.bcbody != outer_body => match c.relpc {
                relpc if relpc > 0 => (c.bcbody, relpc as usize, true),
                _ => (c.bcbody, stack_word(c.bcpc).unwrap_or(0), false),
            },
            _ => (0, 0, false),
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
            pc_relative,
            srcref,
            caller_code,
            caller_pc,
            caller_relative,
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
            Some((bc, body, position(&h, body, k.pc_relative, k.pc)?))
        });
        if let (true, Some((bc, body, relpc)), Some(ops)) = (r.with_loops, at, r.bc.and_then(|b| b.ops)) {
            self.loops = d.bodies.loops_at(&h, &bc.syms, ops, body, relpc).unwrap_or_default();
        }
        if let (true, Some(bc), Some(ops)) =
            (r.with_loops && k.caller_code != 0, r.bc, r.bc.and_then(|b| b.ops))
        {
            self.outer_loops = position(&h, k.caller_code, k.caller_relative, k.caller_pc)
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

/// The code unit of compiled `body` a position is at: `pc` itself when it
/// is `relative` (R >= 4.4 records one in a context record), else an
/// address in the code (an interpreter loop's slot holds one).
fn position(h: &impl Memory, body: usize, relative: bool, pc: usize) -> Option<usize> {
    if relative {
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

#[cfg(test)]
mod tests {
    //! A synthetic R: calls, closures, srcrefs and byte code in a fake
    //! heap (`r::heap`'s and `r::bcode`'s test helpers), records as
    //! `read_contexts` leaves them, and the interpreter loop's program
    //! counters on a made-up stack.

    use super::super::Region;
    use super::*;
    use crate::memory::Image;
    use crate::r::bcode::tests::{self as bc, Fixture, CALL, RETURN, STARTFOR, STEPFOR};
    use crate::r::bcode::FOR;
    use crate::r::layout::Layout;
    use crate::r::sexp::{self, tests::FakeHeap};
    use std::cell::RefCell;

    /// R's NULL, the variable `R_Srcref`, and its marker for byte code.
    const NIL: usize = 0x42;
    const SRCREF_VAR: usize = 0x9_0000;
    const IN_BC: usize = 0x9_0100;
    /// The interpreter loop's function, and where it keeps its program
    /// counter (below its CFA).
    const BC_LOOP: usize = 0xbc00;
    const PC_BELOW_CFA: usize = 0x40;
    /// Environments: global, and those of functions.
    const GLOBAL: usize = 0xe0;
    const F_ENV: usize = 0xe1f0;
    const G_ENV: usize = 0xe2f0;

    /// What describing keeps between samples.
    struct Tables {
        labels: Labels,
        buf: rheap::Buf,
        bodies: bcode::BodyTables,
        files: Vec<(usize, usize, u32)>,
        memo: Memo,
    }

    struct World {
        f: Fixture,
        /// The main thread's stack (0x7000-0x9000).
        stack: Image,
        r: RFacts,
        t: Tables,
        srcfile_sym: usize,
    }

    /// A synthetic R without byte code or lines (see `with_bc`,
    /// `with_lines`).
    fn world() -> World {
        let mut f = bc::fixture();
        let symbols = rheap::Symbols {
            double_colon: f.h.symbol("::"),
            triple_colon: f.h.symbol(":::"),
            dollar: f.h.symbol("$"),
            bracket2: f.h.symbol("[["),
        };
        let mut r = super::super::tests::facts(Layout::for_r((4, 5)).unwrap(), Region::All);
        r.base.data = [(0, 0); 4];
        r.base.symbols = symbols;
        r.base.nil = NIL;
        r.base.srcref_var = SRCREF_VAR;
        r.base.in_bc = IN_BC;
        r.base.class_symbol = f.syms.class;
        r.ranges = r.base.ranges((0x7000, 0x9000));
        let mut stack = Image::new();
        stack.put(0x7000, vec![0; 0x2000]);
        let srcfile_sym = f.h.symbol("srcfile");
        let t = Tables {
            labels: Labels::new(),
            buf: rheap::Buf::default(),
            bodies: bcode::BodyTables::default(),
            files: vec![(0, 0, 0); 1024],
            memo: Memo::default(),
        };
        World { f, stack, r, t, srcfile_sym }
    }

    impl World {
        /// Byte code's positions and loops known.
        fn with_bc(mut self) -> World {
            let ops: &'static bcode::OpTable = Box::leak(Box::new(bc::op_table(&mut self.f)));
            let loop_frames = [(BC_LOOP, PC_BELOW_CFA), (0, 0)];
            self.r.bc = Some(BcFacts { syms: self.f.syms, loop_frames, ops: Some(ops) });
            self
        }

        /// Source positions recorded; R's current srcref NULL.
        fn with_lines(mut self) -> World {
            let filename_sym = self.f.h.symbol("filename");
            self.r.lines = Some(LineFacts { srcfile_sym: self.srcfile_sym, filename_sym });
            self.f.h.mem.put_word(SRCREF_VAR, NIL);
            self
        }

        /// Describes `ctx` (innermost first) on native frames `frames`.
        fn describe(&mut self, frames: &[Frame], ctx: &mut [Ctx]) {
            run(&self.f.h, &self.stack, &self.r, &mut self.t, frames, ctx);
        }

        /// As [`World::describe`]; the heap's addresses read.
        fn describe_watched(&mut self, ctx: &mut [Ctx]) -> Vec<usize> {
            let watched = Watched { h: &self.f.h, reads: RefCell::new(Vec::new()) };
            run(&watched, &self.stack, &self.r, &mut self.t, &[], ctx);
            watched.reads.into_inner()
        }

        fn text(&self, id: u32) -> &str {
            self.t.labels.text(id)
        }

        /// A call `name(args...)`.
        fn call(&mut self, name: &str, args: &[usize]) -> usize {
            let f = self.f.h.symbol(name);
            self.f.h.call(f, args)
        }

        /// A closure with body `body`.
        fn closure(&mut self, body: usize) -> usize {
            self.f.h.closure(body)
        }

        /// A srcref at `line` of a file named `file` (its srcfile
        /// environment made anew).
        fn srcref(&mut self, file: &str, line: i32) -> usize {
            let env = self.srcfile(file);
            self.srcref_in(env, line)
        }

        /// A srcfile environment whose `filename` is `file`.
        fn srcfile(&mut self, file: &str) -> usize {
            let frame = self.filename(file);
            self.f.h.env(frame, NIL)
        }

        /// A frame binding `filename` to `file`.
        fn filename(&mut self, file: &str) -> usize {
            let name = self.f.h.string(file);
            let filename_sym = self.r.lines.expect("lines on").filename_sym;
            self.f.h.tagged(filename_sym, name, NIL)
        }

        /// A srcref at `line` in `srcfile`.
        fn srcref_in(&mut self, srcfile: usize, line: i32) -> usize {
            let s = self.f.h.ints(&[line, 1, line, 20, 1, 20]);
            self.f.h.attr(s, self.srcfile_sym, srcfile);
            s
        }

        fn pos(&self, c: &Ctx) -> Option<(&str, u32)> {
            c.pos.map(|(file, line)| (self.text(file), line))
        }
    }

    fn run<H: Memory>(
        heap: &H,
        stack: &Image,
        r: &RFacts,
        t: &mut Tables,
        frames: &[Frame],
        ctx: &mut [Ctx],
    ) {
        let mem = Reads { heap, chain: stack };
        let mut d =
            Describe { labels: &mut t.labels, buf: &mut t.buf, bodies: &mut t.bodies, files: &mut t.files };
        describe_frames(r, &mem, frames, ctx, &mut d, &mut t.memo);
    }

    /// Reads of a fake heap, recorded.
    struct Watched<'a> {
        h: &'a FakeHeap,
        reads: RefCell<Vec<usize>>,
    }

    impl Memory for Watched<'_> {
        fn read(&self, addr: usize, out: &mut [u8]) -> bool {
            self.reads.borrow_mut().push(addr);
            self.h.read(addr, out)
        }
        fn word(&self, addr: usize) -> Option<usize> {
            self.reads.borrow_mut().push(addr);
            self.h.word(addr)
        }
    }

    /// Makes the object of `bytes` bytes at `from` anew at `to` (over
    /// what was there): R never moves objects, but a later object can be
    /// made where a freed one was.
    fn relocate(h: &mut FakeHeap, from: usize, to: usize, bytes: usize) {
        let mut copy = vec![0; bytes];
        assert!(h.read(from, &mut copy));
        h.mem.put_bytes(to, &copy);
    }

    /// A function record (its address, call and function), called from
    /// the environment `sysparent`, not from byte code.
    fn record(addr: usize, call: usize, callfun: usize) -> Ctx {
        Ctx {
            addr,
            call,
            callfun,
            on_stack: true,
            anchor: usize::MAX,
            relpc: -1,
            sysparent: GLOBAL,
            ..Ctx::default()
        }
    }

    /// A record made by byte code `body` at code unit `relpc` (R >= 4.4
    /// records it).
    fn called_from(c: Ctx, body: usize, relpc: isize) -> Ctx {
        Ctx { bcintactive: true, bcbody: body, relpc, ..c }
    }

    fn kinds(p: LoopPath) -> Vec<u32> {
        (0..p.len()).map(|j| p.get(j)).collect()
    }

    /// The code of `for (i in y) g(i)` (units 5-8 inside the loop, 2-4
    /// its set-up, 9 after it); with `srcrefs`, the compiler's srcref
    /// table too: the second srcref inside the loop, the first elsewhere.
    fn for_loop(w: &mut World, srcrefs: Option<(usize, usize)>) -> usize {
        let (g, i, y) = (w.f.h.symbol("g"), w.f.h.symbol("i"), w.f.h.symbol("y"));
        let g_call = w.f.h.call(g, &[i]);
        let for_call = w.f.h.call(w.f.syms.for_, &[i, y, g_call]);
        let mut consts = vec![for_call, for_call, g_call];
        if let Some((outside, inside)) = srcrefs {
            consts.extend([outside, inside]);
            let table = w.f.h.ints(&[3, 3, 3, 3, 3, 4, 4, 4, 4, 3]);
            let class = w.f.h.string("srcrefsIndex");
            w.f.h.attr(table, w.f.syms.class, class);
            consts.push(table);
        }
        let (o, a) = (true, false);
        #[rustfmt::skip]
        let units = [
            (o, STARTFOR), (a, 0), (a, 0), (a, 7), // 1: for (i in y)
            (o, CALL), (a, 2),                     // 5: g(i)
            (o, STEPFOR), (a, 5),                  // 7: back to 5
            (o, RETURN),                           // 9
        ];
        let exprs = [0, 1, 1, 1, 1, 2, 2, 1, 1, 0];
        bc::body_of(&mut w.f, &units, &exprs, &consts)
    }

    /// The address of code unit `unit` of compiled `body`.
    fn unit_at(w: &World, body: usize, unit: usize) -> usize {
        bcode::code_range(&w.f.h, body).unwrap().0 + 8 * unit
    }

    #[test]
    fn labels_are_the_names_rprof_gives_the_calls() {
        let mut w = world();
        let clo = w.closure(NIL);
        let x = w.f.h.symbol("x");
        let f = w.call("f", &[x]);
        let (stats, median) = (w.f.h.symbol("stats"), w.f.h.symbol("median"));
        let pkg = w.f.h.call(w.r.base.symbols.double_colon, &[stats, median]);
        let pkg_call = w.f.h.call(pkg, &[x]);
        let lambda = w.call("function", &[x, x]);
        let anonymous = w.f.h.call(lambda, &[x]);
        let obj = w.f.h.symbol("obj");
        let method = w.f.h.call(w.r.base.symbols.dollar, &[obj, median]);
        let method_call = w.f.h.call(method, &[]);
        let by_value = w.f.h.call(clo, &[x]); // do.call(f, ...) puts the closure in the call
        let not_a_call = x;
        let mut ctx = [
            record(0x7100, f, clo),
            record(0x7200, pkg_call, clo),
            record(0x7300, anonymous, clo),
            record(0x7400, method_call, clo),
            record(0x7500, by_value, clo),
            record(0x7600, not_a_call, clo),
        ];
        w.describe(&[], &mut ctx);
        let labels: Vec<&str> = ctx.iter().map(|c| w.text(c.label)).collect();
        assert_eq!(labels, ["f", "stats::median", "<Anonymous>", "obj$median", "<Anonymous>", "<Anonymous>"]);
        assert_eq!(ctx[5].label, labels::ANONYMOUS);
        // Without byte code or lines: no loops, no positions.
        for c in &ctx {
            assert_eq!((c.loops, c.outer_loops, c.outer_owner, c.pos), Default::default());
        }
    }

    #[test]
    fn a_symbols_label_is_interned_once_and_remembered_by_the_symbol() {
        let mut w = world();
        let clo = w.closure(NIL);
        let f = w.f.h.symbol("f");
        let (one, two) = (w.f.h.call(f, &[]), w.f.h.call(f, &[NIL]));
        let mut ctx = [record(0x7100, one, clo)];
        w.describe(&[], &mut ctx);
        let id = ctx[0].label;
        assert_eq!((w.text(id), w.t.labels.symbol(f)), ("f", Some(id)));
        let n = w.t.labels.len();
        // Another call of `f`, elsewhere, in another sample.
        let mut ctx = [record(0x7400, two, clo), record(0x7800, one, clo)];
        w.describe(&[], &mut ctx);
        assert_eq!((ctx[0].label, ctx[1].label, w.t.labels.len()), (id, id, n));
    }

    /// Three records (innermost first: h, g, f), each with a srcref of its
    /// own line.
    fn three_calls(w: &mut World) -> ([Ctx; 3], [usize; 3]) {
        let clo = w.closure(NIL);
        let file = w.srcfile("a.R");
        let srcrefs = [w.srcref_in(file, 3), w.srcref_in(file, 2), w.srcref_in(file, 1)];
        let calls = [w.call("h", &[]), w.call("g", &[]), w.call("f", &[])];
        let mut ctx = [0x7100, 0x7400, 0x7800].map(|a| record(a, 0, clo));
        for k in 0..3 {
            ctx[k].call = calls[k];
            ctx[k].srcref_in = Some(srcrefs[k]);
        }
        (ctx, srcrefs)
    }

    /// Whether the line of `srcref` was read.
    fn read_line(w: &World, reads: &[usize], srcref: usize) -> bool {
        reads.contains(&sexp::data(&w.f.h, srcref).unwrap())
    }

    #[test]
    fn records_seen_again_unchanged_are_not_described_again() {
        let mut w = world().with_lines();
        let (ctx, srcrefs) = three_calls(&mut w);
        let mut first = ctx;
        let reads = w.describe_watched(&mut first);
        assert!(srcrefs.iter().all(|&s| read_line(&w, &reads, s)));
        let positions: Vec<_> = first.iter().map(|c| w.pos(c)).collect();
        assert_eq!(positions, [Some(("a.R", 3)), Some(("a.R", 2)), Some(("a.R", 1))]);
        // The next sample: the same records, described from the memo.
        let mut again = ctx;
        let reads = w.describe_watched(&mut again);
        assert!(!srcrefs.iter().any(|&s| read_line(&w, &reads, s)), "nothing described again");
        for (a, b) in first.iter().zip(&again) {
            assert_eq!((a.label, a.pos, a.loops, a.outer_loops), (b.label, b.pos, b.loops, b.outer_loops));
        }
    }

    #[test]
    fn a_record_that_changed_is_described_again() {
        let mut w = world().with_lines();
        let (ctx, _) = three_calls(&mut w);
        w.describe(&[], &mut ctx.clone());
        // Another call in the same record (the record reused by R for
        // another call), another function, another srcref: each is seen.
        let mut changed = ctx;
        changed[2].call = w.call("k", &[]);
        let other = w.srcref("b.R", 9);
        changed[1].srcref_in = Some(other);
        changed[0].callfun = w.closure(NIL);
        let reads = w.describe_watched(&mut changed);
        assert_eq!(w.text(changed[2].label), "k");
        assert_eq!(w.pos(&changed[1]), Some(("b.R", 9)));
        assert!(read_line(&w, &reads, ctx[0].srcref_in.unwrap()), "a record with another function");
        assert_eq!(w.pos(&changed[0]), Some(("a.R", 3)));
    }

    #[test]
    fn calls_not_made_by_a_symbol_are_described_every_time() {
        let mut w = world().with_lines();
        let clo = w.closure(NIL);
        let (stats, median) = (w.f.h.symbol("stats"), w.f.h.symbol("median"));
        let pkg = w.f.h.call(w.r.base.symbols.double_colon, &[stats, median]);
        let s = w.srcref("a.R", 5);
        let c = Ctx { srcref_in: Some(s), ..record(0x7100, w.f.h.call(pkg, &[]), clo) };
        for _ in 0..3 {
            let reads = w.describe_watched(&mut [c]);
            assert!(read_line(&w, &reads, s), "described anew");
        }
    }

    #[test]
    fn the_memo_matches_records_by_depth_from_the_outermost() {
        let mut w = world().with_lines();
        let (ctx, srcrefs) = three_calls(&mut w);
        w.describe(&[], &mut ctx.clone());
        // A deeper stack: one more record further in; the three are
        // reused.
        let s = w.srcref("b.R", 4);
        let inner = Ctx { srcref_in: Some(s), ..record(0x7000, w.call("k", &[]), ctx[0].callfun) };
        let mut deeper = [inner, ctx[0], ctx[1], ctx[2]];
        let reads = w.describe_watched(&mut deeper);
        assert!(!srcrefs.iter().any(|&s| read_line(&w, &reads, s)));
        assert!(read_line(&w, &reads, s));
        assert_eq!(w.text(deeper[0].label), "k");
        // A shallower one whose second record is not the last one's
        // second: described again.
        let mut other = [inner, ctx[2]];
        let reads = w.describe_watched(&mut other);
        assert!(!read_line(&w, &reads, srcrefs[2]), "the outermost reused");
        assert!(read_line(&w, &reads, s), "the second described");
        assert_eq!(other.map(|c| w.text(c.label).to_owned()), ["k", "f"]);
    }

    #[test]
    fn a_cleared_memo_describes_everything_again() {
        let mut w = world().with_lines();
        let (ctx, srcrefs) = three_calls(&mut w);
        w.describe(&[], &mut ctx.clone());
        w.t.memo.clear();
        let reads = w.describe_watched(&mut ctx.clone());
        assert!(srcrefs.iter().all(|&s| read_line(&w, &reads, s)));
    }

    #[test]
    fn positions_are_the_srcref_in_effect_when_lines_are_on() {
        let mut w = world().with_lines();
        let clo = w.closure(NIL);
        let (f, g) = (w.call("f", &[]), w.call("g", &[]));
        let s = w.srcref("a.R", 12);
        // f: the srcref saved by the record made from its code (g's);
        // g, the innermost: R's current srcref.
        let now = w.srcref("b.R", 30);
        w.f.h.mem.put_word(SRCREF_VAR, now);
        let ctx = [record(0x7100, g, clo), Ctx { srcref_in: Some(s), ..record(0x7400, f, clo) }];
        let mut got = ctx;
        w.describe(&[], &mut got);
        assert_eq!((w.pos(&got[0]), w.pos(&got[1])), (Some(("b.R", 30)), Some(("a.R", 12))));
        // Code parsed without srcrefs (NULL, or none), and byte code's
        // marker without byte code known: no position.
        for none in [NIL, 0, IN_BC] {
            let mut got = [Ctx { srcref_in: Some(none), ..ctx[1] }];
            w.describe(&[], &mut got);
            assert_eq!(got[0].pos, None, "srcref {none:#x}");
        }
        // Lines off (another session: the memo cleared): none either.
        w.r.lines = None;
        w.t.memo.clear();
        let mut got = ctx;
        w.describe(&[], &mut got);
        assert_eq!((got[0].pos, got[1].pos), (None, None));
    }

    #[test]
    fn a_file_name_is_read_again_for_a_srcfile_made_where_another_was() {
        let mut w = world().with_lines();
        let clo = w.closure(NIL);
        let f = w.call("f", &[]);
        let file = w.srcfile("a.R");
        let s1 = w.srcref_in(file, 1);
        let mut ctx = [Ctx { srcref_in: Some(s1), ..record(0x7100, f, clo) }];
        w.describe(&[], &mut ctx);
        assert_eq!(w.pos(&ctx[0]), Some(("a.R", 1)));
        // A later srcfile at the same address (the first one freed) and a
        // srcref of it.
        let frame = w.filename("b.R");
        let later = w.f.h.env(frame, NIL);
        relocate(&mut w.f.h, later, file, sexp::offset::DATA);
        let s2 = w.srcref_in(file, 2);
        let mut ctx = [Ctx { srcref_in: Some(s2), ..ctx[0] }];
        w.describe(&[], &mut ctx);
        assert_eq!(w.pos(&ctx[0]), Some(("b.R", 2)));
    }

    #[test]
    fn byte_codes_position_is_the_compilers_srcref_at_its_code_unit() {
        let mut w = world().with_bc().with_lines();
        let (outside, inside) = (w.srcref("a.R", 1), w.srcref("a.R", 2));
        let body = for_loop(&mut w, Some((outside, inside)));
        let f_clo = w.closure(body);
        let (f, g) = (w.call("f", &[]), w.call("g", &[]));
        let g_clo = w.closure(NIL);
        // f's code called g from inside its loop, then from after it;
        // R's srcref says "byte code".
        for (relpc, line) in [(6, 2), (9, 1)] {
            let gr = called_from(Ctx { srcref_in: Some(IN_BC), ..record(0x7100, g, g_clo) }, body, relpc);
            let mut ctx = [gr, Ctx { srcref_in: Some(IN_BC), ..record(0x7400, f, f_clo) }];
            w.describe(&[], &mut ctx);
            assert_eq!(w.pos(&ctx[1]), Some(("a.R", line)), "at unit {relpc}");
        }
    }

    #[test]
    fn a_closures_loops_are_where_its_code_called_the_next_record() {
        let mut w = world().with_bc();
        let body = for_loop(&mut w, None);
        let f_clo = w.closure(body);
        let g_clo = w.closure(NIL);
        let (f, g) = (w.call("f", &[]), w.call("g", &[]));
        let f_rec = record(0x7800, f, f_clo);
        let loops = |w: &mut World, g_rec: Ctx| {
            let mut ctx = [g_rec, f_rec];
            w.describe(&[], &mut ctx);
            (kinds(ctx[1].loops), kinds(ctx[0].loops), kinds(ctx[0].outer_loops))
        };
        // R >= 4.4: the position recorded in g's record.
        let g_rec = record(0x7400, g, g_clo);
        assert_eq!(loops(&mut w, called_from(g_rec, body, 6)), (vec![FOR], vec![], vec![]));
        assert_eq!(loops(&mut w, called_from(g_rec, body, 3)), (vec![], vec![], vec![]), "the loop's set-up");
        // Older R: the program counter in the slot of the loop running f.
        let code = bcode::code_range(&w.f.h, body).unwrap().0;
        let code_vector = sexp::car(&w.f.h, body).unwrap();
        let high = 0x7f00_0000_0000;
        let bytes = sexp::offset::DATA + sexp::length(&w.f.h, code_vector).unwrap() * sexp::INT_SIZE;
        relocate(&mut w.f.h, code_vector, high, bytes);
        w.f.h.set(body, sexp::offset::CAR, high);
        assert_ne!(bcode::code_range(&w.f.h, body).unwrap().0, code);
        w.stack.put_word(0x7810, unit_at(&w, body, 6));
        let g_rec = Ctx { bcpc: 0x7810, ..called_from(g_rec, body, -1) };
        assert_eq!(loops(&mut w, g_rec).0, vec![FOR]);
        // A counter outside f's code, or unreadable: no loops.
        w.stack.put_word(0x7810, unit_at(&w, body, 6) + 0x1000);
        assert_eq!(loops(&mut w, g_rec).0, vec![]);
        assert_eq!(loops(&mut w, Ctx { bcpc: 0x6000, ..g_rec }).0, vec![]);
        // g called by other code than f's body (not f's position).
        let other = for_loop(&mut w, None);
        assert_eq!(loops(&mut w, called_from(record(0x7400, g, g_clo), other, 6)).0, vec![]);
        // Loops not asked for, or R's instructions not known: none.
        w.r.with_loops = false;
        assert_eq!(loops(&mut w, called_from(record(0x7400, g, g_clo), body, 6)).0, vec![]);
        w.r.with_loops = true;
        w.r.bc.as_mut().unwrap().ops = None;
        assert_eq!(loops(&mut w, called_from(record(0x7400, g, g_clo), body, 6)).0, vec![]);
    }

    #[test]
    fn the_innermost_closure_is_where_its_interpreter_loop_is() {
        let mut w = world().with_bc();
        let body = for_loop(&mut w, None);
        let f_clo = w.closure(body);
        let f = w.call("f", &[]);
        // Native frames, innermost first: something f's code called, the
        // interpreter loop running f (frame 1), the frame holding f's
        // record (frame 2), further out.
        let frames = [(0x5000, 0x7000), (BC_LOOP, 0x7100), (0x5100, 0x7200), (0x5200, 0x7300)]
            .map(|(start, sp)| Frame { ip: start + 5, sp, start, module: Some(0) });
        let slot = frames[2].sp - PC_BELOW_CFA;
        w.stack.put_word(slot, unit_at(&w, body, 7));
        let mut ctx = [Ctx { anchor: 2, ..record(0x7280, f, f_clo) }];
        w.describe(&frames, &mut ctx);
        assert_eq!(kinds(ctx[0].loops), [FOR]);
        // No loop frame below the record's: no position.
        let mut ctx = [Ctx { anchor: 1, ..ctx[0] }];
        w.describe(&frames, &mut ctx);
        assert_eq!(kinds(ctx[0].loops), []);
        // A record the loop made inline on R's node stack (R >= 4.4): the
        // loop's slot it names.
        w.stack.put_word(0x7810, unit_at(&w, body, 5));
        let inline = Ctx { on_stack: false, bcintactive: true, bcpc: 0x7810, ..record(0x20040, f, f_clo) };
        let mut ctx = [inline];
        w.describe(&frames, &mut ctx);
        assert_eq!(kinds(ctx[0].loops), [FOR]);
    }

    #[test]
    fn loops_of_code_that_is_not_the_callers_body_get_their_owner() {
        let mut w = world().with_bc();
        let code = for_loop(&mut w, None); // not any function's body
        let (f_body, g_body) = (for_loop(&mut w, None), w.call("g_body", &[]));
        let (f_clo, g_clo, h_clo) = (w.closure(f_body), w.closure(g_body), w.closure(NIL));
        let (f, g, h) = (w.call("f", &[]), w.call("g", &[]), w.call("h", &[]));
        let (f_rec, g_rec) = (
            Ctx { cloenv: F_ENV, ..record(0x7800, f, f_clo) },
            Ctx { cloenv: G_ENV, sysparent: F_ENV, ..record(0x7600, g, g_clo) },
        );
        // A loop at top level (compiled by the JIT) calling h: no owner.
        let mut ctx = [called_from(record(0x7400, h, h_clo), code, 6)];
        w.describe(&[], &mut ctx);
        assert_eq!((kinds(ctx[0].outer_loops), ctx[0].outer_owner), (vec![FOR], Owner::TopLevel));
        // A promise f made, forced in g, whose loop calls h: f's loop.
        let in_promise = Ctx { sysparent: F_ENV, ..called_from(record(0x7400, h, h_clo), code, 6) };
        let mut ctx = [in_promise, g_rec, f_rec];
        w.describe(&[], &mut ctx);
        assert_eq!(kinds(ctx[0].outer_loops), [FOR]);
        assert_eq!(ctx[0].outer_owner, Owner::Frame(ctx[2].label));
        assert_eq!(w.text(ctx[2].label), "f");
        // Environments not known (0) match nothing.
        let mut ctx =
            [Ctx { sysparent: 0, ..in_promise }, Ctx { cloenv: 0, ..g_rec }, Ctx { cloenv: 0, ..f_rec }];
        w.describe(&[], &mut ctx);
        assert_eq!((kinds(ctx[0].outer_loops), ctx[0].outer_owner), (vec![FOR], Owner::TopLevel));
        // eval() of that code in f's environment from g: eval's record
        // (a builtin's, whose environment is f's) owns nothing.
        let eval = w.f.h.cons(8, NIL, NIL);
        let eval_rec = Ctx { cloenv: F_ENV, ..record(0x7500, w.call("eval", &[]), eval) };
        let mut ctx = [in_promise, eval_rec, g_rec];
        w.describe(&[], &mut ctx);
        assert_eq!((kinds(ctx[0].outer_loops), ctx[0].outer_owner), (vec![FOR], Owner::TopLevel));
        // Called from f's own body: f's loops (its own position), none
        // outside.
        let mut ctx = [called_from(record(0x7400, h, h_clo), f_body, 6), f_rec];
        w.describe(&[], &mut ctx);
        assert_eq!((kinds(ctx[0].outer_loops), ctx[0].outer_owner), (vec![], Owner::Caller));
        assert_eq!(kinds(ctx[1].loops), [FOR]);
    }

    #[test]
    fn a_method_a_primitive_dispatched_to_does_not_repeat_its_loops() {
        // for (i in y) x[i] at top level, `[` dispatching to a method: the
        // loop around the call is the primitive's record's; the method
        // runs from the same code.
        let mut w = world().with_bc();
        let code = for_loop(&mut w, None);
        let primitive = w.f.h.cons(8, NIL, NIL);
        let method = w.closure(NIL);
        let (bracket, dispatched) = (w.call("[", &[]), w.call("[.data.frame", &[]));
        let mut ctx = [
            called_from(record(0x7400, dispatched, method), code, 6),
            called_from(record(0x7600, bracket, primitive), code, 6),
        ];
        w.describe(&[], &mut ctx);
        assert_eq!((kinds(ctx[1].outer_loops), ctx[1].outer_owner), (vec![FOR], Owner::TopLevel));
        assert_eq!((kinds(ctx[0].outer_loops), ctx[0].outer_owner), (vec![], Owner::Caller));
    }

    #[test]
    fn prefetching_the_last_samples_records_never_faults() {
        // The records may be gone by the next sample: prefetching their
        // addresses must not fault whatever they are.
        let mut w = world();
        let mut ctx = [0, 8, 0xdead_0000, 0x7fff_ffff_f000].map(|a| record(a, a, a));
        w.describe(&[], &mut ctx);
        assert!(ctx.iter().all(|c| c.label == labels::ANONYMOUS));
        prefetch_last_contexts(&w.t.memo, w.r.base.layout.call);
        prefetch_last_contexts(&Memo::default(), 0);
    }

    #[test]
    fn byte_code_below_4_gib_has_its_loops() {
        // R < 4.4 (no relpc): where f's code called g is the address in
        // the loop's slot. `position` tells an address from a relative
        // position by size, so code below 4 GiB (a fake heap here; a
        // non-PIE R's brk heap in life) loses its loops and lines.
        let mut w = world().with_bc();
        let body = for_loop(&mut w, None);
        assert!(unit_at(&w, body, 6) < 1 << 32);
        let (f_clo, g_clo) = (w.closure(body), w.closure(NIL));
        let (f, g) = (w.call("f", &[]), w.call("g", &[]));
        w.stack.put_word(0x7810, unit_at(&w, body, 6));
        let g_rec = Ctx { bcpc: 0x7810, ..called_from(record(0x7400, g, g_clo), body, -1) };
        let mut ctx = [g_rec, record(0x7800, f, f_clo)];
        w.describe(&[], &mut ctx);
        assert_eq!(kinds(ctx[1].loops), [FOR]);
    }
}
