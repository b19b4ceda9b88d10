//! What a sample of R's main thread is read with ([`RFacts`]), and its one
//! assembly ([`RFacts::assemble`]) from the pieces that differ between the
//! profiler in this process and the recorder of another one: where R's
//! records may be read, what was learnt about R by watching it, where its
//! garbage collector starts, and the profile's options; and that of this
//! process's R ([`RFacts::of_this_process`]).

use super::Region;
use crate::error::{Error, Result};
use crate::memory::Ranges;
use crate::r::bcode::{BcSymbols, OpTable};
use crate::r::learn::{LoopStarts, Moved};
use crate::r::Facts;

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

/// What reading R frames' source positions needs besides the [`Facts`]
/// (R's current srcref, its marker for byte code, NULL).
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
    pub(crate) base: Facts,
    /// Where R's context records may be read in place.
    pub(crate) ranges: Ranges,
    pub(crate) loops: Option<LoopStarts>,
    /// How to find byte-code positions (None: byte code's loops and lines
    /// are not known).
    pub(crate) bc: Option<BcFacts>,
    /// Record R frames' source positions (None: no).
    pub(crate) lines: Option<LineFacts>,
    /// Show loops as frames.
    pub(crate) with_loops: bool,
    /// Keep the frames of R's own library (`build` leaves out those of its
    /// interpreter: the R frames stand for them).
    pub(crate) keep_libr: bool,
    /// The start of R's garbage collector: a sample inside it has a `<GC>`
    /// frame instead of the collector's own frames (0: folded into the
    /// code that allocated).
    pub(crate) gc_start: usize,
    /// The profiled code's samples and frames: not the profiler's own.
    pub(crate) region: Region,
}

/// R's symbols `for`, `while` and `repeat`, which tell byte code's loops
/// apart; 0 where a symbol's address is not known (R read from outside):
/// then it is told by its name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoopSymbols {
    pub for_: usize,
    pub while_: usize,
    pub repeat: usize,
}

/// The profile's options about R's frames.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// Show loops as frames.
    pub with_loops: bool,
    /// Read byte code's positions, telling its loops by these symbols
    /// (None: byte code's loops and lines are not read).
    pub loop_symbols: Option<LoopSymbols>,
    /// Record source positions (None: no).
    pub lines: Option<LineFacts>,
    /// Keep the frames of R's own library.
    pub keep_libr: bool,
    /// The profiled code's samples and frames.
    pub region: Region,
}

impl RFacts {
    /// The facts R's main thread is sampled with: R's `base` facts,
    /// `ranges` where its records may be read in place (from outside, the
    /// stack is set at each sample), what was `learnt` about R by watching
    /// it (as it holds for the R sampled: see [`crate::r::learn::moved`]),
    /// the start of R's garbage collector (0: not shown) and the profile's
    /// `options`. Byte code's positions are read where both the options ask
    /// for them and the interpreter loop's frames were learnt.
    pub(crate) fn assemble(
        base: Facts,
        ranges: Ranges,
        learnt: Moved,
        gc_start: usize,
        options: Options,
    ) -> RFacts {
        let bc = match (options.loop_symbols, learnt.bc_frames) {
            (Some(s), Some(loop_frames)) => Some(BcFacts {
                syms: BcSymbols {
                    for_: s.for_,
                    while_: s.while_,
                    repeat: s.repeat,
                    class: base.class_symbol,
                },
                loop_frames,
                ops: learnt.ops,
            }),
            _ => None,
        };
        RFacts {
            base,
            ranges,
            loops: learnt.loops,
            bc,
            lines: options.lines,
            with_loops: options.with_loops,
            keep_libr: options.keep_libr,
            gc_start,
            region: options.region,
        }
    }

    /// The facts this process's R is sampled with, called on R's main
    /// thread: its records read in place on the calling thread's stack,
    /// with what was learnt about it, the profile's `options`, and the
    /// start of R's garbage collector if `gc` (for `<GC>` frames).
    pub fn of_this_process(base: Facts, options: Options, gc: bool) -> Result<RFacts> {
        let stack = crate::stack::thread_stack_bounds()
            .ok_or_else(|| Error::Unavailable("the bounds of R's stack are unknown".into()))?;
        let gc_start = if gc { crate::r::gc::own_gc_start(&base).unwrap_or(0) } else { 0 };
        Ok(RFacts::assemble(base, base.ranges(stack), crate::r::learn::moved(0), gc_start, options))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Facts {
        Facts {
            version: (4, 5),
            layout: crate::r::Layout::for_r((4, 5)).unwrap(),
            main_thread: 0,
            interpreter_addr: 0,
            own_addr: 0,
            global_context: 0x100,
            cstack_vars: [0; 3],
            node_stack: None,
            data: [(0, 0); 4],
            symbols: Default::default(),
            nil: 0,
            srcref_var: 0,
            in_bc: 0,
            class_symbol: 0xc1a55,
        }
    }

    #[test]
    fn facts_are_assembled_from_what_was_learnt_and_the_options() {
        let learnt = Moved {
            loops: Some(LoopStarts { for_: 1, while_: 2, repeat: 3 }),
            bc_frames: Some([(0x10, 8), (0x20, 16)]),
            ops: None,
        };
        let ranges = Ranges { stack: (0x7000, 0x9000), ..Ranges::default() };
        let options = Options {
            with_loops: true,
            loop_symbols: Some(LoopSymbols { for_: 0xf0, while_: 0xf1, repeat: 0xf2 }),
            lines: Some(LineFacts { srcfile_sym: 0x5f, filename_sym: 0xf5 }),
            keep_libr: true,
            region: Region::Outside { callfun: 0xca11 },
        };
        let r = RFacts::assemble(base(), ranges, learnt, 0x9c, options);
        assert_eq!(r.loops, learnt.loops);
        let bc = r.bc.expect("byte code's positions are read");
        assert_eq!(bc.syms, BcSymbols { for_: 0xf0, while_: 0xf1, repeat: 0xf2, class: 0xc1a55 });
        assert_eq!(bc.loop_frames, [(0x10, 8), (0x20, 16)]);
        assert!(bc.ops.is_none());
        assert_eq!(r.lines.map(|l| (l.srcfile_sym, l.filename_sym)), Some((0x5f, 0xf5)));
        assert_eq!((r.with_loops, r.keep_libr, r.gc_start), (true, true, 0x9c));
        assert_eq!((r.ranges.stack, r.region), ((0x7000, 0x9000), Region::Outside { callfun: 0xca11 }));
        // Byte code needs both the symbols asked for and the frames learnt.
        let none = RFacts::assemble(base(), ranges, learnt, 0, Options { loop_symbols: None, ..options });
        assert!(none.bc.is_none());
        let unlearnt = Moved { bc_frames: None, ..learnt };
        assert!(RFacts::assemble(base(), ranges, unlearnt, 0, options).bc.is_none());
        // Nothing learnt, nothing asked: loops generic, all samples.
        let plain = RFacts::assemble(base(), Ranges::default(), Moved::default(), 0, Options::default());
        assert!(plain.loops.is_none() && plain.bc.is_none() && plain.lines.is_none());
        assert_eq!((plain.with_loops, plain.keep_libr, plain.region), (false, false, Region::All));
    }
}
