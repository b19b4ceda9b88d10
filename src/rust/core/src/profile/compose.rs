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
//! The record is in the format of [`record`](super::record); its header
//! word is the caller's (it knows the sample's weight and cost).

use super::labels::{self, Labels};
use super::record::{Entry, Flags, Header, Origin, Owner, Prefix, Writer, PREFIX};
use crate::interleave;
use crate::memory::Memory;
use crate::r::bcode::{self, LoopPath};
use crate::r::heap as rheap;
use crate::r::layout::CTXT_LOOP;
use crate::r::sexp;
use crate::unwind::walk::{End, Frame, Snapshot};

mod describe;
mod rfacts;
use describe::{describe_frames, prefetch_last_contexts, Describe, Memo};
pub use rfacts::{BcFacts, LineFacts, LoopSymbols, Options, RFacts};

/// Frames and contexts a sample holds at most.
pub const MAX_FRAMES: usize = 4096;
pub const MAX_CONTEXTS: usize = 8192;

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

impl Default for Scratch {
    fn default() -> Scratch {
        let mut s = Scratch {
            frames: vec![Frame::default(); MAX_FRAMES].into_boxed_slice(),
            sps: vec![0; MAX_FRAMES].into_boxed_slice(),
            ctx: vec![Ctx::default(); MAX_CONTEXTS].into_boxed_slice(),
            record: vec![0; PREFIX + MAX_FRAMES + 2 * MAX_CONTEXTS].into_boxed_slice(),
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
    /// Who those loops belong to.
    outer_owner: Owner,
    /// The environment it was called from, and (function records) its own.
    sysparent: usize,
    cloenv: usize,
    /// Its source position now: (file label id, line).
    pos: Option<(u32, u32)>,
}

/// Where a sample reads R: its objects (`heap`), and its context records
/// and the main thread's stack (`chain`, whose stack part is the range
/// `RFacts::ranges` names). In a signal handler both read in place (see
/// [`sample`]); from outside, both read another process (see
/// `outside::recorder`).
pub struct Reads<'a, H: Memory, C: Memory> {
    pub heap: &'a H,
    pub chain: &'a C,
}

impl<H: Memory, C: Memory> Reads<'_, H, C> {
    /// An aligned word of the main thread's stack.
    #[inline]
    fn stack_word(&self, r: &RFacts, a: usize) -> Option<usize> {
        (r.ranges.on_stack(a) && a.is_multiple_of(8)).then(|| self.chain.word(a)).flatten()
    }
}

/// What [`compose`] made.
#[derive(Clone, Copy, Debug)]
pub struct Composed {
    /// The record's header flags.
    pub flags: Flags,
    /// The record's length (it is `Scratch::record(len)`), its prefix
    /// left for the caller (see [`Composed::prefix`]).
    pub len: usize,
    /// The prefix's words but the header.
    pub origin: Origin,
    pub link: u64,
    pub context: u64,
    /// Taken outside the profiled code: no record.
    pub outside: bool,
}

/// What a sample is taken with, and where it stands: the snapshot of
/// loaded modules its native frames are walked (and named) with and its
/// number in the session, and its place among R's main thread's samples
/// (`seq`: its number, or for another thread's sample the number of the
/// main thread's sample to show it under; `context`: R's innermost context
/// record then).
#[derive(Clone, Copy)]
pub struct Moment<'a> {
    pub snapshot: &'a Snapshot,
    pub index: u32,
    pub seq: u64,
    pub context: u64,
    /// In a forked child: the records its R chain held at the fork (their
    /// address and function; innermost first, of the kinds a sample keeps:
    /// see [`fork_records`]). The records of a sample that are still these
    /// are the parent's, copied; the others the child's own. Empty: not a
    /// child.
    pub fork: &'a [(usize, usize)],
}

impl Composed {
    /// The record's prefix, with the header the caller made.
    #[inline]
    pub fn prefix(&self, weight: u64, handler_ns: u64) -> Prefix {
        Prefix {
            header: Header { flags: self.flags, weight, handler_ns },
            origin: self.origin,
            link: self.link,
            context: self.context,
        }
    }
}

/// Makes the record of one sample of R's main thread in `s` (all but its
/// header word): the native stack walked from `regs`, R's context chain,
/// merged. What [`sample`] pushes; what a recording from outside keeps.
pub fn compose<H: Memory, C: Memory>(
    regs: (usize, usize, usize),
    flags: Flags,
    at: Moment,
    r: &RFacts,
    mem: &Reads<H, C>,
    s: &mut Scratch,
) -> Composed {
    let Moment { snapshot: snap, index, seq, context, fork } = at;
    let mut flags = flags;
    let origin = Origin::main(index);
    let nothing = |flags| Composed { flags, len: 0, outside: true, origin, link: seq, context };
    let read_stack = |a: usize| mem.stack_word(r, a);
    // A signal that arrived while R ran on another stack (a signal
    // handler's alternate stack): no native frames, R's chain only.
    let (n, end) = if r.ranges.on_stack(regs.1) {
        snap.walk(regs, read_stack, &mut s.frames)
    } else {
        (0, End::Stopped("not on the main thread's stack"))
    };
    if end != End::Outermost {
        flags |= Flags::TRUNCATED_NATIVE;
    }
    let complete = end == End::Outermost;
    for i in 0..n {
        s.sps[i] = s.frames[i].sp;
    }
    let (nctx, cut, fork_at) = match read_contexts(r, mem.chain, &s.sps[..n], complete, &mut s.ctx) {
        Some(Chain { outside: true, .. }) => {
            return nothing(flags);
        }
        Some(Chain { len: k, consistent, cut, outside: false }) => {
            if !consistent {
                flags |= Flags::TRUNCATED_R;
            }
            let mut d = Describe {
                labels: &mut s.labels,
                buf: &mut s.label,
                bodies: &mut s.bodies,
                files: &mut s.files,
            };
            describe_frames(r, mem, &s.frames[..n], &mut s.ctx[..k], &mut d, &mut s.memo);
            (k, cut, parent_from(&s.ctx[..k], fork))
        }
        None => {
            flags |= Flags::TRUNCATED_R;
            (0, usize::MAX, usize::MAX)
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

    // Inside the garbage collector: its frames become one `<GC>`.
    let gc_at = if r.gc_start != 0 { (0..n).find(|&i| s.frames[i].start == r.gc_start) } else { None };

    let mut w = Writer::new(&mut s.record);
    let mut k = 0; // next context (innermost first)
    'merge: for i in 0..=n {
        while k < nctx && (s.ctx[k].anchor <= i || (i == n && s.ctx[k].anchor >= n)) {
            if k == cut {
                break 'merge; // the frames of the profiler's caller
            }
            if k == fork_at {
                // A forked child's own frames end here; the parent's
                // (copied at the fork) follow.
                w.push(Entry::r(labels::PROCESS));
            }
            let c = s.ctx[k];
            let label = if c.is_loop { loop_label(r, &s.frames, c.owner) } else { c.label };
            // An AST loop belongs to the function whose environment it runs
            // in (a promise's loop to the function that made the promise,
            // a top-level one to none), not to the function called.
            let owner = if c.is_loop { ast_loop_owner(mem.heap, &s.ctx[..nctx], k) } else { Owner::Caller };
            // A function's byte-code loops, innermost first, then itself.
            let pos = c.pos.map(|(file, line)| Entry::pos(file, line));
            for j in (0..c.loops.len()).rev() {
                w.push(Entry::r(loop_kind_label(c.loops.get(j))));
                if let Some(p) = pos {
                    w.push(p);
                }
            }
            if !c.is_loop || r.with_loops {
                w.push(Entry::r_owned(label, owner));
                if let Some(p) = pos {
                    w.push(p);
                }
            }
            for j in (0..c.outer_loops.len()).rev() {
                w.push(Entry::r_owned(loop_kind_label(c.outer_loops.get(j)), c.outer_owner));
            }
            k += 1;
        }
        if r.with_loops && i < n && jit_loop_at(r, &s.frames[..n], &s.ctx[..nctx], i) {
            w.push(Entry::r_owned(loop_label(r, &s.frames, i), Owner::TopLevel));
        }
        if gc_at == Some(i) {
            w.push(Entry::r(labels::GC));
        } else if gc_at.is_some_and(|g| i < g) {
            // The collector's own frames.
        } else if i < host_from
            && i < n
            && (!is_interp(i) || (r.keep_libr && module(i).is_some() && module(i) == snap.libr))
        {
            w.push(Entry::native(s.frames[i].ip, i == 0));
        }
    }
    Composed { flags, len: w.len(), outside: false, origin, link: seq, context }
}

impl Scratch {
    /// Brings the context records the last sample read into the cache
    /// (a sample of R's main thread reads them again).
    pub fn prefetch(&self, r: &RFacts) {
        prefetch_last_contexts(&self.memo, r.base.layout.call);
    }

    /// Appends `words` to the record [`compose`] made, `len` words long:
    /// its new length (the words that do not fit are left out).
    pub fn append(&mut self, len: usize, words: &[u64]) -> usize {
        let mut len = len.min(self.record.len());
        for &w in words {
            if let Some(slot) = self.record.get_mut(len) {
                *slot = w;
                len += 1;
            }
        }
        len
    }

    /// The record [`compose`] made, `len` words long; its header word is
    /// the caller's to write.
    pub fn record(&mut self, len: usize) -> &mut [u64] {
        let len = len.min(self.record.len());
        &mut self.record[..len]
    }

    /// The record `len` words long with its entries from the first to
    /// `first` (the sampler's own frames) replaced by `head`: its new
    /// length. `head` is left out if the record would not fit.
    pub fn splice_head(&mut self, len: usize, first: usize, head: &[u64]) -> usize {
        let len = len.min(self.record.len());
        let first = first.clamp(PREFIX.min(len), len);
        let kept = len - first;
        let head = if PREFIX + head.len() + kept <= self.record.len() { head } else { &[] };
        let at = PREFIX.min(len) + head.len();
        self.record.copy_within(first..len, at);
        self.record[at - head.len()..at].copy_from_slice(head);
        at + kept
    }

    /// The record [`compose`] made, `len` words long, and the labels its R
    /// entries name.
    pub fn record_and_labels(&mut self, len: usize) -> (&mut [u64], &Labels) {
        let len = len.min(self.record.len());
        (&mut self.record[..len], &self.labels)
    }

    /// Made ready for another session: what it remembers of the last one's
    /// samples (descriptions by label id, byte code's tables, files) is
    /// forgotten, and its label table is new. Keeps its buffers: making
    /// them (megabytes, touched page by page) is most of a session's start.
    pub fn reset(&mut self) {
        // (A table taken by `take_labels` left a new one behind.)
        if !self.labels.is_new() {
            self.labels = Labels::new();
        }
        self.memo.clear();
        self.bodies.forget();
        self.files.fill((0, 0, 0));
    }

    /// The labels the samples' R frames were given so far.
    pub fn labels(&self) -> &Labels {
        &self.labels
    }

    /// The labels the samples' R frames were given (taken: the scratch's
    /// table starts empty again).
    pub fn take_labels(&mut self) -> Labels {
        std::mem::take(&mut self.labels)
    }
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

/// Whether native frame `i` is one of R's AST loop functions running a
/// loop the JIT compiled instead (R does so only for loops at top level):
/// no loop record there, and the next frame further in that R code runs
/// on is an interpreter loop, with no record made there or on the way (a
/// record the compiled loop made carries the loop already; one on the way
/// is the compiler's own code, or the loop's sequence being evaluated).
fn jit_loop_at(r: &RFacts, frames: &[Frame], ctx: &[Ctx], i: usize) -> bool {
    let (Some(l), Some(bc)) = (r.loops, r.bc.as_ref()) else { return false };
    let start = frames[i].start;
    if start == 0 || (start != l.for_ && start != l.while_ && start != l.repeat) {
        return false;
    }
    if ctx.iter().any(|c| c.is_loop && c.owner == i) {
        return false;
    }
    let is_bc_loop = |j: usize| bc.loop_frames.iter().any(|&(s, _)| s != 0 && s == frames[j].start);
    match (0..i).rev().find(|&j| is_bc_loop(j)) {
        // A record the loop's code made names the loop itself (its outer
        // loops).
        Some(j) => !ctx.iter().any(|c| {
            c.anchor <= i && (c.anchor > j || (c.anchor..frames.len()).find(|&m| is_bc_loop(m)) == Some(j))
        }),
        None => false,
    }
}

/// Who AST loop record `k` of `ctx` (innermost first) belongs to: the
/// caller when the function record further out runs it (the
/// usual case: the label says so already), else the closure whose
/// environment the loop runs in, or none (top level, `eval()` in an
/// environment of no function's).
fn ast_loop_owner(h: &impl Memory, ctx: &[Ctx], k: usize) -> Owner {
    let env = ctx[k].cloenv;
    let mut functions = ctx.iter().enumerate().skip(k + 1).filter(|(_, c)| !c.is_loop);
    match functions.next() {
        Some((_, c)) if env != 0 && c.cloenv == env => return Owner::Caller,
        None => return Owner::TopLevel,
        _ => {}
    }
    let owner = ctx.iter().skip(k + 1).find(|c| {
        !c.is_loop && env != 0 && c.cloenv == env && sexp::type_of(h, c.callfun) == Some(sexp::CLOSXP)
    });
    match owner {
        Some(c) => Owner::Frame(c.label),
        None => Owner::TopLevel,
    }
}

/// Where a forked child's records end and its parent's begin, in `ctx`
/// (innermost first): the records that are still those of the fork
/// (`fork`, innermost first) are the outermost ones, matched from the
/// outside in (the child has left the innermost records of the fork, and
/// made its own further in). `usize::MAX`: not a child, or nothing of the
/// parent's is left.
fn parent_from(ctx: &[Ctx], fork: &[(usize, usize)]) -> usize {
    if fork.is_empty() {
        return usize::MAX;
    }
    let same = ctx
        .iter()
        .rev()
        .zip(fork.iter().rev())
        .take_while(|(c, &(addr, fun))| c.addr == addr && c.callfun == fun)
        .count();
    if same == 0 {
        usize::MAX
    } else {
        ctx.len() - same
    }
}

/// The records of R's chain that a sample keeps (function records, and
/// loop records on the C stack), as (address, function) innermost first,
/// into `out`: what a forked child remembers of the fork (see
/// [`Moment::fork`]). How many; None if the chain could not be read whole.
pub fn fork_records(r: &RFacts, mem: &impl Memory, out: &mut [(usize, usize)]) -> Option<usize> {
    let chain = crate::r::Chain::from_global(mem, &r.base.layout, r.base.global_context, MAX_CONTEXTS * 4);
    let mut n = 0;
    for c in chain {
        let c = c.ok()?;
        if c.next == 0 {
            return Some(n);
        }
        let function = c.is_function();
        if function || (c.callflag == CTXT_LOOP && r.ranges.on_stack(c.addr)) {
            *out.get_mut(n)? = (c.addr, if function { c.callfun } else { 0 });
            n += 1;
        }
    }
    None
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
/// from `mem`: in the handler, in place inside the ranges where R keeps its
/// records), keeps the function records (and AST loop records) with their
/// labels and anchors in `ctx`, innermost first. None if the chain could
/// not be read.
fn read_contexts(
    r: &RFacts,
    mem: &impl Memory,
    sps: &[usize],
    complete: bool,
    ctx: &mut [Ctx],
) -> Option<Chain> {
    let on_stack = |a: usize| r.ranges.on_stack(a);
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
        let ast_loop = c.callflag == CTXT_LOOP && on_stack(c.addr);
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
        let at = if on_stack(c.addr) {
            Some(c.addr)
        } else {
            (c.bcintactive == 1 && on_stack(c.bcpc)).then_some(c.bcpc)
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
            on_stack: on_stack(c.addr),
            callfun: if function { c.callfun } else { 0 },
            bcintactive: function && c.bcintactive == 1,
            bcbody: if function { c.bcbody } else { 0 },
            bcpc: if function { c.bcpc } else { 0 },
            relpc: if function { c.relpc.unwrap_or(-1) } else { -1 },
            srcref_in,
            loops: LoopPath::default(),
            outer_loops: LoopPath::default(),
            outer_owner: Owner::Caller,
            sysparent: if function { c.sysparent } else { 0 },
            cloenv: c.cloenv,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sampler_s_frames_are_replaced_by_the_head() {
        let mut s = Scratch::default();
        let rec = [10, 11, 12, 13, 1, 2, 3, 4];
        s.record[..rec.len()].copy_from_slice(&rec);
        // Two of the sampler's own frames out, one marker in.
        let len = s.splice_head(rec.len(), PREFIX + 2, &[99]);
        assert_eq!(s.record(len), [10, 11, 12, 13, 99, 3, 4]);
        // Nothing out, nothing in.
        let len = s.splice_head(len, PREFIX, &[]);
        assert_eq!(s.record(len), [10, 11, 12, 13, 99, 3, 4]);
        // A full record keeps its frames: the head is left out.
        let full = s.record.len();
        s.record.fill(7);
        assert_eq!(s.splice_head(full, PREFIX, &[99]), full);
        assert!(s.record.iter().all(|&w| w == 7));
    }
    use crate::memory::Image;
    use crate::r::layout::{Layout, CTXT_BUILTIN, CTXT_FUNCTION, CTXT_TOPLEVEL};

    /// A synthetic R: a main stack at 0x7000..0x9000, a node stack at
    /// 0x20000.., R_GlobalContext at 0x100 (the tests of `describe` fill
    /// in its symbols).
    pub(super) fn facts(layout: Layout, region: Region) -> RFacts {
        let base = crate::r::Facts {
            version: (4, 5),
            layout,
            main_thread: 0,
            interpreter_addr: 0,
            own_addr: 0,
            global_context: 0x100,
            cstack_vars: [0; 3],
            node_stack: Some((0x20000, 0x30000)),
            data: [(0x100, 0x108), (0, 0), (0, 0), (0, 0)],
            symbols: Default::default(),
            nil: 0,
            srcref_var: 0,
            in_bc: 0,
            class_symbol: 0,
        };
        RFacts {
            base,
            ranges: base.ranges((0x7000, 0x9000)),
            loops: None,
            bc: None,
            lines: None,
            with_loops: true,
            keep_libr: false,
            gc_start: 0,
            region,
        }
    }

    /// Writes a record; returns its address.
    /// A context record of the synthetic R: where it is, the next one
    /// out, its kind and function, and for a byte-code call the loop slot
    /// holding its program counter.
    struct Rec {
        addr: usize,
        next: usize,
        flag: i32,
        callfun: usize,
        bcpc: Option<usize>,
    }

    fn record(m: &mut Image, l: &Layout, r: Rec) {
        m.put(r.addr, vec![0; l.size]);
        m.put_word(r.addr + l.next, r.next);
        m.put_bytes(r.addr + l.callflag, &r.flag.to_ne_bytes());
        m.put_word(r.addr + l.callfun, r.callfun);
        m.put_word(r.addr + l.sysparent, 0xe0);
        m.put_bytes(r.addr + l.bcintactive, &(r.bcpc.is_some() as i32).to_ne_bytes());
        m.put_word(r.addr + l.bcpc, r.bcpc.unwrap_or(0));
    }

    /// R's stack, innermost first: a byte-code call on the node stack run
    /// by the loop whose counter is at 0x7810, a builtin, a closure call on
    /// the C stack, top level.
    fn chain(l: &Layout) -> Image {
        let mut m = Image::new();
        m.put_word(0x100, 0x20040);
        let r = |addr, next, flag, callfun| Rec { addr, next, flag, callfun, bcpc: None };
        record(&mut m, l, Rec { bcpc: Some(0x7810), ..r(0x20040, 0x7400, CTXT_FUNCTION, 0xf2) });
        record(&mut m, l, r(0x7400, 0x7c00, CTXT_BUILTIN, 0));
        record(&mut m, l, r(0x7c00, 0x8800, CTXT_FUNCTION, 0xf1));
        record(&mut m, l, r(0x8800, 0, CTXT_TOPLEVEL, 0));
        m
    }

    #[test]
    fn a_sample_places_records_among_the_frames_walked() {
        let l = Layout::for_r((4, 5)).unwrap();
        let r = facts(l, Region::All);
        let m = chain(&l);
        // Native frames (innermost first) with their stack pointers.
        let sps = [0x7000, 0x7800, 0x7a00, 0x8000, 0x8c00];
        let mut ctx = vec![Ctx::default(); 8];
        let c = read_contexts(&r, &m, &sps, true, &mut ctx).unwrap();
        assert_eq!((c.len, c.consistent, c.cut, c.outside), (2, true, usize::MAX, false));
        // Not a child: no parent's part.
        assert_eq!(parent_from(&ctx[..2], &[]), usize::MAX);
        // The records a child remembers of its fork: these two.
        let mut fork = [(0, 0); 8];
        assert_eq!(fork_records(&r, &m, &mut fork), Some(2));
        assert_eq!(&fork[..2], &[(0x20040, 0xf2), (0x7c00, 0xf1)]);
        // Still inside the call it forked from: all of it the parent's.
        assert_eq!(parent_from(&ctx[..2], &fork[..2]), 0);
        // Forked from inside a call it has left since (its record gone or
        // reused by another function's): the closure further out is the
        // parent's, the rest the child's.
        assert_eq!(parent_from(&ctx[..2], &[(0x9999, 0xf3), (0x7c00, 0xf1)]), 1);
        assert_eq!(parent_from(&ctx[..2], &[(0x20040, 0xf9), (0x7c00, 0xf1)]), 1);
        // Nothing of the fork left: no parent's part.
        assert_eq!(parent_from(&ctx[..2], &[(0x1, 0x2)]), usize::MAX);
        // The byte-code call goes with the loop frame holding its counter
        // (frame 1: 0x7800 <= 0x7810 < 0x7a00); the closure call with the
        // frame holding its record (frame 2: 0x7a00 <= 0x7c00 < 0x8000).
        assert_eq!((ctx[0].addr, ctx[0].anchor, ctx[0].callfun), (0x20040, 1, 0xf2));
        assert_eq!((ctx[1].addr, ctx[1].anchor, ctx[1].callfun), (0x7c00, 2, 0xf1));
        assert!(ctx[0].bcintactive && !ctx[0].on_stack && ctx[1].on_stack);
    }

    #[test]
    fn a_sample_keeps_only_the_profiled_region() {
        let l = Layout::for_r((4, 5)).unwrap();
        let m = chain(&l);
        let sps = [0x7000, 0x7800, 0x7a00, 0x8000, 0x8c00];
        let mut ctx = vec![Ctx::default(); 8];
        let under = facts(l, Region::Under { callfun: 0xf1, sysparent: 0xe0 });
        let c = read_contexts(&under, &m, &sps, true, &mut ctx).unwrap();
        assert_eq!((c.cut, c.outside), (1, false), "frames from the region's own record on are cut");
        let elsewhere = facts(l, Region::Under { callfun: 0xf9, sysparent: 0xe0 });
        assert!(read_contexts(&elsewhere, &m, &sps, true, &mut ctx).unwrap().outside);
        let outside = facts(l, Region::Outside { callfun: 0xf2 });
        assert!(read_contexts(&outside, &m, &sps, true, &mut ctx).unwrap().outside);
    }

    #[test]
    fn a_torn_or_unfinished_chain_gives_no_r_frames() {
        let l = Layout::for_r((4, 5)).unwrap();
        let r = facts(l, Region::All);
        let sps = [0x7000, 0x7800, 0x7a00, 0x8000, 0x8c00];
        let mut ctx = vec![Ctx::default(); 8];
        // A record being written when the signal came (an implausible
        // callflag), a chain that ends without the top level, a record
        // outside the memory: no R frames rather than wrong ones.
        let mut torn = chain(&l);
        torn.put_bytes(0x7400 + l.callflag, &0x7fff_0000i32.to_ne_bytes());
        assert!(read_contexts(&r, &torn, &sps, true, &mut ctx).is_none());
        let mut unfinished = chain(&l);
        unfinished.put_word(0x7c00 + l.next, 0);
        assert!(read_contexts(&r, &unfinished, &sps, true, &mut ctx).is_none());
        let mut dangling = chain(&l);
        dangling.put_word(0x7c00 + l.next, 0x5_0000);
        assert!(read_contexts(&r, &dangling, &sps, true, &mut ctx).is_none());
        // A record inside the capture itself (below the innermost frame) on
        // a complete stack is impossible: refused.
        assert!(read_contexts(&r, &chain(&l), &[0x7d00, 0x8c00], true, &mut ctx).is_none());
        // More records than room: refused, not truncated.
        assert!(read_contexts(&r, &chain(&l), &sps, true, &mut ctx[..1]).is_none());
    }
}
