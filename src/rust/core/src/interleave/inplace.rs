//! Placement without allocation, for the signal handlers (profiler samples
//! and the crash report): the same rule as [`super::place`] (a record
//! belongs to the native frame whose stack memory holds it, or holds its
//! runner's slot), on plain arrays of stack pointers.

/// An anchor beyond every native frame walked (the record belongs further
/// out than the walk reached).
pub const BEYOND: usize = usize::MAX;
/// An anchor not known (the record's position could not be read): it takes
/// its older neighbour's in [`settle_anchors`].
pub const UNKNOWN: usize = usize::MAX - 1;

/// The native frame whose stack memory holds `addr` (`sps`: the frames'
/// stack pointers, innermost first, ascending): `Some(i)` for frame `i`,
/// None when the address is beyond the frames walked or inside the
/// innermost one's callee (the capture itself).
#[inline]
pub fn owner_index(sps: &[usize], addr: usize) -> Option<usize> {
    let i = sps.partition_point(|&sp| sp <= addr);
    (i > 0 && i < sps.len()).then(|| i - 1)
}

/// Makes the anchors of records (innermost first) usable: a record whose
/// anchor is [`UNKNOWN`] takes its older neighbour's (the deepest frame that
/// may own what lies below it), and a record is never placed newer than the
/// record of the frame it called (anchors only grow outwards). Returns
/// whether the anchors read were already in order.
pub fn settle_anchors<T>(records: &mut [T], anchor: impl Fn(&mut T) -> &mut usize) -> bool {
    let mut older = BEYOND;
    for r in records.iter_mut().rev() {
        let a = anchor(r);
        if *a == UNKNOWN {
            *a = older;
        }
        older = *a;
    }
    let mut consistent = true;
    let mut newer = 0;
    for r in records.iter_mut() {
        let a = anchor(r);
        if *a < newer {
            consistent = false;
            *a = newer;
        }
        newer = *a;
    }
    consistent
}

/// For each R context (addresses `contexts`, innermost first, as R's chain
/// lists them), the native frame it belongs to: a context is a local
/// variable of the C function that made it, so it belongs to the frame `i`
/// with `sps[i] <= addr < sps[i + 1]` (the outermost walked frame owns
/// everything above it, up to `stack_hi`). Contexts that are not on the C
/// stack (R's byte-code calls keep theirs on R's node stack) go with the
/// next context further out that is, and when none is, after the last
/// frame. `sps` are the frames' stack pointers, innermost first. Writes
/// into `out` (as long as `contexts`).
pub fn owners(sps: &[usize], contexts: &[usize], stack_hi: usize, out: &mut [usize]) {
    let n = sps.len();
    let lo = sps.first().copied().unwrap_or(usize::MAX);
    let last = n.saturating_sub(1);
    let mut pending = 0;
    let mut frame = 0;
    for (k, &addr) in contexts.iter().enumerate() {
        if n == 0 || addr < lo || addr >= stack_hi {
            continue; // placed with the next one on the stack
        }
        while frame + 1 < n && sps[frame + 1] <= addr {
            frame += 1;
        }
        for o in out.iter_mut().take(k + 1).skip(pending) {
            *o = frame;
        }
        pending = k + 1;
    }
    for o in out.iter_mut().take(contexts.len()).skip(pending) {
        *o = last;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_of_an_address() {
        let sps = [100, 200, 300];
        assert_eq!(owner_index(&sps, 150), Some(0));
        assert_eq!(owner_index(&sps, 200), Some(1));
        assert_eq!(owner_index(&sps, 299), Some(1));
        assert_eq!(owner_index(&sps, 300), None, "beyond the frames walked");
        assert_eq!(owner_index(&sps, 50), None, "inside the capture");
    }

    #[test]
    fn unknown_anchors_borrow_and_anchors_grow_outwards() {
        // Innermost first: an unknown one takes its older neighbour's.
        let mut a = [1, UNKNOWN, 4, UNKNOWN];
        assert!(settle_anchors(&mut a, |x| x));
        assert_eq!(a, [1, 4, 4, BEYOND]);
        // A record placed newer than the one inside it is moved out.
        let mut a = [3, 2, 5];
        assert!(!settle_anchors(&mut a, |x| x));
        assert_eq!(a, [3, 3, 5]);
        let mut empty: [usize; 0] = [];
        assert!(settle_anchors(&mut empty, |x| x));
    }

    #[test]
    fn contexts_go_to_the_frames_that_own_them() {
        // Frames at 100, 200, 300, 400 (innermost first); the stack ends at
        // 1000.
        let sps = [100, 200, 300, 400];
        let ctx = [150, 250, 260, 450, 999];
        let mut out = [9; 5];
        owners(&sps, &ctx, 1000, &mut out);
        assert_eq!(out, [0, 1, 1, 3, 3]);
        // Contexts off the C stack (node stack, at 5000) go with the next
        // one on the stack; trailing ones after the last frame.
        let ctx = [5000, 5008, 250, 6000];
        let mut out = [9; 4];
        owners(&sps, &ctx, 1000, &mut out);
        assert_eq!(out, [1, 1, 1, 3]);
        // Below the innermost frame (cannot happen for a live context):
        // treated as off the stack.
        let mut out = [9; 2];
        owners(&sps, &[50, 350], 1000, &mut out);
        assert_eq!(out, [2, 2]);
        // No frames at all.
        let mut out = [9; 2];
        owners(&[], &[10, 20], 1000, &mut out);
        assert_eq!(out, [0, 0]);
    }
}
