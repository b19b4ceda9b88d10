//! Where native frames sit among R frames: the pure placement algorithm.
//!
//! Inputs are the native frames (innermost first, each with the low end of its
//! stack memory) and the R frames' context addresses. A context lives in the
//! stack frame of the libR function that created it, so the native frame that
//! owns it is the `i` with `lo[i] <= addr < lo[i + 1]`: the "anchor" of that R
//! frame. Every native frame between the anchors of R frames `k` and `k + 1`
//! ran while frame `k` was the innermost R frame, so its parent is `k`.
//!
//! Contexts that are not on the C stack (byte-code contexts that newer R keeps
//! on its own node stack) carry no anchor; they borrow the anchor of their
//! nearest older on-stack neighbour. A native chunk between two on-stack
//! anchors with such contexts between them may belong to any of those R
//! frames (native code can re-enter byte code without a new on-stack context,
//! e.g. by forcing a promise), so its placement is marked approximate. Frames
//! beyond a truncated native stack stay in order; nothing is guessed about
//! them.

use std::ops::Range;

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
    /// Whether the context chain was used (false: fallback).
    pub from_contexts: bool,
    /// R frames without a C-stack context, and R frames beyond a truncated stack.
    pub off_stack: usize,
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

/// Places native frames given the context addresses of R frames 1..=n
/// (`contexts[k - 1]` belongs to frame `k`). Errors mean the inputs are
/// inconsistent and the caller must fall back.
pub fn place(stack: &NativeStack, contexts: &[usize]) -> Result<Placement, String> {
    const TOP: usize = usize::MAX;
    let n = contexts.len();
    let nf = stack.frames.len();
    // anchor[k]: native index owning frame k's context; TOP = above every
    // native frame we have (top level, or beyond a truncated stack).
    let mut anchor = vec![TOP; n + 1];
    let mut off = vec![false; n + 1];
    let mut newest_on_stack = TOP;
    let (mut off_stack, mut beyond_end) = (0, 0);
    for (j, &addr) in contexts.iter().enumerate() {
        let k = j + 1;
        match owner(stack, addr) {
            Owner::Frame(i) => {
                if i > newest_on_stack {
                    return Err(format!("frame {k}'s context is older than its caller's"));
                }
                anchor[k] = i;
                newest_on_stack = i;
            }
            Owner::BeyondEnd => {
                if newest_on_stack != TOP {
                    return Err(format!("frame {k}'s context lies beyond the end of the native stack"));
                }
                beyond_end += 1;
            }
            Owner::OffStack => {
                anchor[k] = newest_on_stack;
                off[k] = true;
                off_stack += 1;
            }
            Owner::Inside => return Err(format!("frame {k}'s context lies inside the capture")),
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

    // A parent borrowed by an off-stack frame is never certain: every native
    // chunk between the surrounding on-stack anchors is approximate.
    let mut approximate = vec![false; nf];
    let chunk_list = chunks(stack.frames);
    let mut k = 1;
    while k <= n {
        if !off[k] {
            k += 1;
            continue;
        }
        let first = k;
        while k <= n && off[k] {
            k += 1;
        }
        // Off-stack run first..k share the region under frame first-1's
        // anchor down to frame k's anchor.
        let in_region = |i: usize| matches!(parent[i], Some(p) if p + 1 >= first && p < k);
        let region: Vec<&Range<usize>> = chunk_list.iter().filter(|c| in_region(c.start)).collect();
        if !region.is_empty() {
            for c in region {
                for i in c.clone() {
                    approximate[i] = true;
                }
            }
        }
    }
    Ok(Placement { parent, approximate, from_contexts: true, off_stack, beyond_end })
}

/// Placement without usable contexts: only what needs no context is placed.
/// With no R frame at all, every native frame is at the top level; otherwise
/// nothing is certain and every frame is unplaced (never paired by guesswork).
pub fn fallback(frames: &[NFrame], n_rframes: usize) -> Placement {
    let parent = if n_rframes == 0 { vec![Some(0); frames.len()] } else { vec![None; frames.len()] };
    Placement {
        parent,
        approximate: vec![false; frames.len()],
        from_contexts: false,
        off_stack: 0,
        beyond_end: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stack described outermost first: `N(foreign)` is a native frame,
    /// `C` is an R frame whose context lives in the native frame before it,
    /// `X` is an R frame whose context is off the C stack.
    #[derive(Clone, Copy)]
    enum E {
        N(bool),
        C,
        X,
    }
    use E::*;

    const HI: usize = 1_000_000;
    const FRAME: usize = 100;

    struct Built {
        frames: Vec<NFrame>,
        contexts: Vec<usize>,
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
                    contexts.push(owner.lo + FRAME / 2);
                    seen_r += 1;
                }
                X => {
                    contexts.push(5); // far below the stack
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

    #[test]
    fn truncated_stack_keeps_r_frames_in_order() {
        let b = build(&[R, C, R, F, R, C, R, F, R, C, R, R]);
        let full = place(&stack(&b.frames, false), &b.contexts).unwrap();
        // Unwinding stopped after the innermost 5 frames.
        let kept = &b.frames[..5];
        let p = place(&stack(kept, true), &b.contexts).unwrap();
        assert_eq!(p.parent, full.parent[..5].to_vec());
        assert_eq!(p.beyond_end, 2);
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
        assert!(place(&stack(&b.frames, false), &swapped).unwrap_err().contains("older"));
        // Beyond the end of a stack that is complete cannot happen.
        let inside = vec![b.frames[0].lo - 1];
        assert!(place(&stack(&b.frames, false), &inside).unwrap_err().contains("inside"));
        // An older frame on the kept stack but a younger one beyond its end.
        let kept = &b.frames[..2];
        let ctx = vec![b.frames[0].lo + 1, b.frames[1].lo + 1];
        assert!(place(&stack(kept, true), &ctx).unwrap_err().contains("beyond"));
    }

    #[test]
    fn fallback_places_only_the_certain() {
        let frames = [NFrame { lo: 1, foreign: true }, NFrame { lo: 2, foreign: false }];
        let p = fallback(&frames, 3);
        assert_eq!(p.parent, vec![None, None]);
        assert!(!p.from_contexts);
        assert_eq!(fallback(&frames, 0).parent, vec![Some(0), Some(0)]);
    }

    #[test]
    fn chunk_detection() {
        let f = |x: bool| NFrame { lo: 0, foreign: x };
        assert_eq!(chunks(&[f(true), f(true), f(false), f(true)]), vec![0..2, 3..4]);
        assert!(chunks(&[f(false)]).is_empty());
    }
}
