//! Where native frames sit among R frames: the pure placement algorithm.
//!
//! Inputs are the native frames (innermost first, each with the low end of its
//! stack memory) and, for every R frame, where its context record is. A
//! context made by a libR C function (`applyClosure`, `R_execClosure`, ...)
//! is a local variable of that function, so the native frame that owns it is
//! the `i` with `lo[i] <= addr < lo[i + 1]`: the "anchor" of that R frame.
//! Every native frame between the anchors of R frames `k` and `k + 1` ran
//! while frame `k` was the innermost R frame, so its parent is `k`.
//!
//! Since R 4.4, a byte-compiled closure called from byte code runs inside the
//! caller's interpreter loop: its context lives on R's node stack (heap), and
//! no C frame of its own exists. Such a record still says which loop runs it:
//! `bcpc`, saved when the record was made, is the address of that loop's
//! program-counter slot, a local variable of the loop's C frame. That frame
//! is the record's anchor (its "runner"). Several records can share one
//! runner (inlined calls nest inside one loop); native code called from that
//! loop was called by the innermost of them, which is what the rule above
//! gives. A loop started by native code (forcing a promise, `Rf_eval` of byte
//! code) is a newer C frame with its own slot, so records it runs are never
//! confused with those of an older loop.
//!
//! Only a record whose runner is unknown (the part of the record holding it
//! could not be read or validated) borrows the anchor of its nearest older
//! neighbour; the native chunks that could belong to it are then marked
//! approximate. Frames beyond a truncated native stack stay in order;
//! nothing is guessed about them.

use crate::error::{Error, Result};
use std::ops::Range;

mod inplace;
pub use inplace::{owner_index, owners, settle_anchors, BEYOND, UNKNOWN};

/// A native frame as the placement sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NFrame {
    /// Low end of the frame's stack memory.
    pub lo: usize,
    /// Not R's own code (a package's library, libc, ...).
    pub foreign: bool,
}

/// The native stack.
#[derive(Clone, Copy, Debug)]
pub struct NativeStack<'a> {
    /// Innermost first.
    pub frames: &'a [NFrame],
    /// Lowest address of the live stack (the capturing frame's).
    pub stack_lo: usize,
    /// One past the highest address of the thread's stack.
    pub stack_hi: usize,
    /// The unwinder did not reach the outermost frame.
    pub truncated: bool,
}

/// The native frame that owns an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    Frame(usize),
    /// Not on this thread's stack at all (R's byte-code node stack).
    OffStack,
    /// On the stack but outside the unwound part of a truncated stack.
    BeyondEnd,
    /// Inside the capture's own frames: impossible for a live R context.
    Inside,
}

pub fn owner(stack: &NativeStack, addr: usize) -> Owner {
    let f = stack.frames;
    if addr < stack.stack_lo || addr >= stack.stack_hi {
        return Owner::OffStack;
    }
    if f.is_empty() || addr < f[0].lo {
        return if f.is_empty() && stack.truncated { Owner::BeyondEnd } else { Owner::Inside };
    }
    let i = f.partition_point(|x| x.lo <= addr) - 1;
    if i == f.len() - 1 && stack.truncated {
        // Somewhere in or above the last frame we have: its extent is unknown.
        return Owner::BeyondEnd;
    }
    Owner::Frame(i)
}

/// The result: for every native frame, the R frame it sits under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// `Some(k)`: under R frame `k` (0 = top level, before frame 1). `None`:
    /// unplaced.
    pub parent: Vec<Option<usize>>,
    /// The frame's parent is one of several possible ones.
    pub approximate: Vec<bool>,
    /// R frames whose context is not on the C stack; of those, the ones
    /// anchored by their interpreter loop's frame; R frames beyond a
    /// truncated stack.
    pub(crate) off_stack: usize,
    pub(crate) by_runner: usize,
    pub beyond_end: usize,
}

impl Placement {
    pub fn is_approximate(&self) -> bool {
        self.approximate.iter().any(|&a| a)
    }
}

/// Maximal runs of consecutive foreign frames.
pub fn chunks(frames: &[NFrame]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < frames.len() {
        if frames[i].foreign {
            let start = i;
            while i < frames.len() && frames[i].foreign {
                i += 1;
            }
            out.push(start..i);
        } else {
            i += 1;
        }
    }
    out
}

/// Where an R frame's context record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RFrameAt {
    /// Address of the context record.
    pub ctx: usize,
    /// For a record made by the byte-code interpreter itself: the address of
    /// the program-counter slot of the interpreter loop that runs the call
    /// (the record's `bcpc`), if it was read and checked.
    pub runner: Option<usize>,
}

impl RFrameAt {
    /// A record made by a C function, on the C stack (or one whose runner is
    /// unknown).
    #[cfg(test)]
    pub fn on_stack(ctx: usize) -> RFrameAt {
        RFrameAt { ctx, runner: None }
    }
}

/// Places native frames given where the contexts of R frames 1..=n are
/// (`frames[k - 1]` belongs to frame `k`). Errors mean the inputs are
/// inconsistent and the caller must fall back.
pub fn place(stack: &NativeStack, frames: &[RFrameAt]) -> Result<Placement> {
    const TOP: usize = usize::MAX;
    let n = frames.len();
    let nf = stack.frames.len();
    // anchor[k]: native index owning frame k's context (or its runner's
    // slot); TOP = above every native frame we have (top level, or beyond a
    // truncated stack).
    let mut anchor = vec![TOP; n + 1];
    // borrowed[k]: frame k's anchor is its older neighbour's, not its own.
    let mut borrowed = vec![false; n + 1];
    let mut newest = TOP;
    let (mut off_stack, mut beyond_end, mut by_runner) = (0, 0, 0);
    for (j, at) in frames.iter().enumerate() {
        let k = j + 1;
        let mut own = owner(stack, at.ctx);
        if own == Owner::OffStack {
            off_stack += 1;
            if let Some(r) = at.runner {
                match owner(stack, r) {
                    o @ (Owner::Frame(_) | Owner::BeyondEnd) => {
                        own = o;
                        by_runner += 1;
                    }
                    Owner::OffStack | Owner::Inside => {}
                }
            }
        }
        match own {
            Owner::Frame(i) => {
                if i > newest {
                    return Err(Error::Inconsistent(format!(
                        "frame {k}'s context is older than its caller's"
                    )));
                }
                anchor[k] = i;
                newest = i;
            }
            Owner::BeyondEnd => {
                if newest != TOP {
                    return Err(Error::Inconsistent(format!(
                        "frame {k}'s context lies beyond the end of the native stack"
                    )));
                }
                beyond_end += 1;
            }
            Owner::OffStack => {
                anchor[k] = newest;
                borrowed[k] = true;
            }
            Owner::Inside => {
                return Err(Error::Inconsistent(format!("frame {k}'s context lies inside the capture")))
            }
        }
    }

    // Anchors never increase with k, so the frames whose anchor is above
    // native frame i form a prefix 0..=K; K is i's parent.
    let mut parent = vec![None; nf];
    let mut k = 0;
    for i in (0..nf).rev() {
        while k < n && anchor[k + 1] > i {
            k += 1;
        }
        parent[i] = Some(k);
    }

    // A borrowed anchor is never certain: every native chunk between the
    // surrounding anchors could belong to the borrowing frame or to the
    // frames around it, so all of them are approximate.
    let mut approximate = vec![false; nf];
    let chunk_list = chunks(stack.frames);
    let mut k = 1;
    while k <= n {
        if !borrowed[k] {
            k += 1;
            continue;
        }
        let first = k;
        while k <= n && borrowed[k] {
            k += 1;
        }
        // Borrowing run first..k shares the region under frame first-1's
        // anchor down to frame k's anchor.
        let in_region = |i: usize| matches!(parent[i], Some(p) if p + 1 >= first && p < k);
        for c in chunk_list.iter().filter(|c| in_region(c.start)) {
            for i in c.clone() {
                approximate[i] = true;
            }
        }
    }
    Ok(Placement { parent, approximate, off_stack, by_runner, beyond_end })
}

/// Placement without usable contexts: only what needs no context is placed.
/// With no R frame at all, every native frame is at the top level; otherwise
/// nothing is certain and every frame is unplaced (never paired by guesswork).
pub fn fallback(frames: &[NFrame], n_rframes: usize) -> Placement {
    let parent = if n_rframes == 0 { vec![Some(0); frames.len()] } else { vec![None; frames.len()] };
    Placement { parent, approximate: vec![false; frames.len()], off_stack: 0, by_runner: 0, beyond_end: 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stack described outermost first: `N(foreign)` is a native frame,
    /// `C` is an R frame whose context lives in the native frame before it,
    /// `I` an R frame called inline by the byte-code loop running in the
    /// native frame before it (context off the C stack, runner known), `X` an
    /// R frame whose context is off the C stack with its runner unknown.
    #[derive(Clone, Copy)]
    enum E {
        N(bool),
        C,
        I,
        X,
    }
    use E::*;

    const HI: usize = 1_000_000;
    const FRAME: usize = 100;

    struct Built {
        frames: Vec<NFrame>,
        contexts: Vec<RFrameAt>,
        /// Expected parent of each native frame (innermost first).
        expected: Vec<usize>,
    }

    fn build(spec: &[E]) -> Built {
        let mut frames_outer_first = Vec::new();
        let mut expected_outer_first = Vec::new();
        let mut contexts = Vec::new();
        let mut seen_r = 0;
        for e in spec {
            match *e {
                N(foreign) => {
                    let j = frames_outer_first.len();
                    frames_outer_first.push(NFrame { lo: HI - FRAME * (j + 1), foreign });
                    expected_outer_first.push(seen_r);
                }
                C => {
                    let owner = frames_outer_first.last().expect("a context needs an owner frame");
                    contexts.push(RFrameAt::on_stack(owner.lo + FRAME / 2));
                    seen_r += 1;
                }
                I => {
                    let runner = frames_outer_first.last().expect("an inline call needs a loop frame");
                    // Node-stack records grow upwards, far below the C stack.
                    contexts.push(RFrameAt { ctx: 5 + seen_r * 8, runner: Some(runner.lo + 8) });
                    seen_r += 1;
                }
                X => {
                    contexts.push(RFrameAt { ctx: 5 + seen_r * 8, runner: None });
                    seen_r += 1;
                }
            }
        }
        frames_outer_first.reverse();
        expected_outer_first.reverse();
        Built { frames: frames_outer_first, contexts, expected: expected_outer_first }
    }

    fn stack(frames: &[NFrame], truncated: bool) -> NativeStack<'_> {
        NativeStack { frames, stack_lo: 10_000, stack_hi: HI, truncated }
    }

    fn parents(p: &Placement) -> Vec<usize> {
        p.parent.iter().map(|x| x.expect("placed")).collect()
    }

    const R: E = N(false); // a libR frame
    const F: E = N(true); // a foreign frame

    #[test]
    fn nested_round_trips() {
        // main → eval → f() → .Call → C → Rf_eval → g() → .Call → C2 → Rf_eval → h() → capture
        let b = build(&[R, R, C, R, F, F, R, C, R, F, R, R, C, R]);
        let p = place(&stack(&b.frames, false), &b.contexts).unwrap();
        assert_eq!(parents(&p), b.expected);
        assert!(!p.is_approximate());
        // The two foreign chunks sit under frames 1 and 2.
        let foreign: Vec<usize> =
            (0..b.frames.len()).filter(|&i| b.frames[i].foreign).map(|i| parents(&p)[i]).collect();
        assert_eq!(foreign, vec![2, 1, 1]);
    }

    #[test]
    fn fifty_alternating_round_trips() {
        let mut spec = vec![R];
        for _ in 0..50 {
            spec.extend([C, R, F, F, R]);
        }
        spec.push(C);
        spec.push(R);
        let b = build(&spec);
        let p = place(&stack(&b.frames, false), &b.contexts).unwrap();
        assert_eq!(parents(&p), b.expected);
        assert_eq!(b.contexts.len(), 51);
    }

    #[test]
    fn chunk_without_its_own_context() {
        // Byte-compiled .Call makes no context: the chunk is found between the
        // anchors of frames 1 and 2 only.
        let b = build(&[R, C, R, R, F, F, F, R, C, R]);
        let p = place(&stack(&b.frames, false), &b.contexts).unwrap();
        assert_eq!(parents(&p), b.expected);
    }

    #[test]
    fn tail_call_eliminated_frame() {
        // C's frame that tail-called Rf_eval is simply absent: what remains
        // keeps its place, and the R frame it entered stays after the chunk.
        let with = build(&[R, C, R, F, F, R, C, R]);
        let without = build(&[R, C, R, F, R, C, R]);
        let p = place(&stack(&without.frames, false), &without.contexts).unwrap();
        assert_eq!(parents(&p), without.expected);
        assert_eq!(with.contexts.len(), without.contexts.len());
    }

    #[test]
    fn top_level_native_frames() {
        // Native code called at top level that calls back into R.
        let b = build(&[R, F, R, C, R]);
        let p = place(&stack(&b.frames, false), &b.contexts).unwrap();
        assert_eq!(parents(&p), vec![1, 0, 0, 0]);
        let none = build(&[R, F, R]);
        let p = place(&stack(&none.frames, false), &none.contexts).unwrap();
        assert_eq!(parents(&p), vec![0, 0, 0]);
    }

    #[test]
    fn off_stack_context_makes_its_chunk_approximate() {
        // f (on stack) → inlined g (off stack) → .Call → C → h (on stack).
        // The chunk most likely belongs to g (the deeper frame), but C code
        // could also have started g itself (forcing a byte-compiled promise),
        // so it is placed under g and marked approximate. The byte-code frame
        // running both f and the inlined g goes with g too.
        let b = build(&[R, C, R, X, F, F, R, C, R]);
        let p = place(&stack(&b.frames, false), &b.contexts).unwrap();
        assert_eq!(parents(&p), vec![3, 2, 2, 2, 2, 0]);
        assert_eq!(b.expected, vec![3, 2, 2, 2, 1, 0]);
        assert_eq!(p.off_stack, 1);
        for (i, f) in b.frames.iter().enumerate() {
            assert_eq!(p.approximate[i], f.foreign, "frame {i}");
        }
        // Without the off-stack frame, the same chunk is exact.
        let b = build(&[R, C, R, F, F, R, C, R]);
        assert!(!place(&stack(&b.frames, false), &b.contexts).unwrap().is_approximate());
    }

    #[test]
    fn off_stack_context_with_two_chunks_is_approximate() {
        // Two chunks between on-stack anchors 1 and 3: whether frame 2 was
        // entered before or between them cannot be told.
        let b = build(&[R, C, R, F, R, X, F, R, C, R]);
        let p = place(&stack(&b.frames, false), &b.contexts).unwrap();
        assert!(p.is_approximate());
        for (i, f) in b.frames.iter().enumerate() {
            assert_eq!(p.approximate[i], f.foreign, "frame {i}");
        }
        // Both chunks are placed under the deepest candidate.
        let foreign: Vec<usize> =
            (0..b.frames.len()).filter(|&i| b.frames[i].foreign).map(|i| parents(&p)[i]).collect();
        assert_eq!(foreign, vec![2, 2]);
    }

    #[test]
    fn off_stack_outermost_frame() {
        // Without an older anchor, frame 1 claims everything above frame 2.
        let b = build(&[R, X, F, R, C, R]);
        let p = place(&stack(&b.frames, false), &b.contexts).unwrap();
        assert_eq!(parents(&p), vec![2, 1, 1, 1]);
    }

    /// Places `spec` and checks every frame against the truth, exactly.
    fn assert_exact(spec: &[E]) -> Placement {
        let b = build(spec);
        let p = place(&stack(&b.frames, false), &b.contexts).unwrap();
        assert_eq!(parents(&p), b.expected);
        assert!(!p.is_approximate());
        p
    }

    #[test]
    fn inline_calls_are_placed_by_their_loop() {
        // R >= 4.4: f (applyClosure, on stack) runs its body in a loop frame;
        // f calls g inline, g calls h inline, h calls .Call: the chunk is h's.
        let p = assert_exact(&[R, C, R, I, I, F, F, R, C, R]);
        assert_eq!(p.off_stack, 2);
        assert_eq!(p.by_runner, 2);
        // The same with the runner unknown: placed under the deepest
        // candidate, but only approximately.
        let b = build(&[R, C, R, X, X, F, F, R, C, R]);
        let p = place(&stack(&b.frames, false), &b.contexts).unwrap();
        for (i, f) in b.frames.iter().enumerate().filter(|(_, f)| f.foreign) {
            assert_eq!(parents(&p)[i], b.expected[i]);
            assert!(p.approximate[i], "frame {i} {f:?}");
        }
    }

    #[test]
    fn runs_of_inline_records_between_on_stack_ones() {
        // 30 steps R <-> C, every R function called inline by the loop that
        // the previous callback started.
        let mut spec = vec![R, C, R];
        for _ in 0..30 {
            spec.extend([I, F, F, R, C, R]);
        }
        spec.extend([I, I, F, R, C, R]);
        assert_exact(&spec);
    }

    #[test]
    fn promise_forced_from_native_code_starts_a_new_loop() {
        // f's loop calls C, which forces a byte-compiled promise: a new loop
        // frame, which calls g inline; g calls C again. The first chunk is
        // f's, the second g's, although no on-stack record separates them.
        let b = build(&[R, C, R, F, F, R, R, I, F, R, C, R]);
        let p = place(&stack(&b.frames, false), &b.contexts).unwrap();
        assert_eq!(parents(&p), b.expected);
        assert!(!p.is_approximate());
        let foreign: Vec<usize> =
            (0..b.frames.len()).filter(|&i| b.frames[i].foreign).map(|i| parents(&p)[i]).collect();
        assert_eq!(foreign, vec![2, 1, 1]);
        // Borrowing the older anchor instead would have claimed the first
        // chunk for g as well (and marked it approximate).
        let b = build(&[R, C, R, F, F, R, R, X, F, R, C, R]);
        let p = place(&stack(&b.frames, false), &b.contexts).unwrap();
        let foreign: Vec<usize> =
            (0..b.frames.len()).filter(|&i| b.frames[i].foreign).map(|i| parents(&p)[i]).collect();
        assert_eq!(foreign, vec![2, 2, 2]);
        assert!(p.is_approximate());
    }

    #[test]
    fn nested_loops_without_on_stack_records() {
        // Top-level compiled loop (no function context at all) calls f
        // inline; f's C code forces a promise (new loop) that calls g and h
        // inline; h's C code evaluates byte code directly (another loop)
        // that calls k inline, which captures.
        assert_exact(&[R, R, I, F, R, R, I, I, F, F, R, R, I, R]);
    }

    #[test]
    fn truncated_stack_keeps_r_frames_in_order() {
        // (stack, innermost frames kept, R frames beyond them): in the
        // second, frames 1 and 3 are beyond by their own records, frame 2 by
        // its loop's slot.
        let cases: [(&[E], usize, usize); 2] =
            [(&[R, C, R, F, R, C, R, F, R, C, R, R], 5, 2), (&[R, C, R, I, F, R, C, R, F, R, C, R], 4, 3)];
        for (spec, kept, beyond) in cases {
            let b = build(spec);
            let full = place(&stack(&b.frames, false), &b.contexts).unwrap();
            let p = place(&stack(&b.frames[..kept], true), &b.contexts).unwrap();
            assert_eq!(p.parent, full.parent[..kept].to_vec());
            assert_eq!(p.beyond_end, beyond);
        }
        let b = build(cases[0].0);
        // Nothing unwound beyond the capture.
        let p = place(&stack(&[], true), &b.contexts).unwrap();
        assert!(p.parent.is_empty());
        assert_eq!(p.beyond_end, 3);
    }

    #[test]
    fn inconsistent_inputs_are_errors() {
        let b = build(&[R, C, R, C, R]);
        let mut swapped = b.contexts.clone();
        swapped.swap(0, 1);
        assert!(place(&stack(&b.frames, false), &swapped).unwrap_err().to_string().contains("older"));
        // Beyond the end of a stack that is complete cannot happen.
        let inside = vec![RFrameAt::on_stack(b.frames[0].lo - 1)];
        assert!(place(&stack(&b.frames, false), &inside).unwrap_err().to_string().contains("inside"));
        // An older frame on the kept stack but a younger one beyond its end.
        let kept = &b.frames[..2];
        let ctx = vec![RFrameAt::on_stack(b.frames[0].lo + 1), RFrameAt::on_stack(b.frames[1].lo + 1)];
        assert!(place(&stack(kept, true), &ctx).unwrap_err().to_string().contains("beyond"));
        // An inline record whose loop is older than its caller's context.
        let b = build(&[R, C, R, C, R, R]);
        let wrong = vec![b.contexts[0], b.contexts[1], RFrameAt { ctx: 5, runner: Some(b.frames[3].lo) }];
        assert!(place(&stack(&b.frames, false), &wrong).unwrap_err().to_string().contains("older"));
    }

    #[test]
    fn fallback_places_only_the_certain() {
        let frames = [NFrame { lo: 1, foreign: true }, NFrame { lo: 2, foreign: false }];
        let p = fallback(&frames, 3);
        assert_eq!(p.parent, vec![None, None]);
        assert_eq!(fallback(&frames, 0).parent, vec![Some(0), Some(0)]);
    }

    #[test]
    fn chunk_detection() {
        let f = |x: bool| NFrame { lo: 0, foreign: x };
        assert_eq!(chunks(&[f(true), f(true), f(false), f(true)]), vec![0..2, 3..4]);
        assert!(chunks(&[f(false)]).is_empty());
    }
}
