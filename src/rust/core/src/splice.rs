//! Splicing placed native frames into R's call lists: the row order and the
//! parent links of a joint rlang trace, and the entry order of a joint
//! `sys.calls()`. Pure index arithmetic on what `interleave` decided.

/// One row of a spliced trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Row {
    /// Row `j` (0-based) of the input trace.
    R(usize),
    /// Native frame `i` (0-based, in the order given).
    Native(usize),
    /// The node under which unplaced native frames hang.
    UnplacedMarker,
}

/// A spliced trace: rows in order and their parents (1-based, 0 = root).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spliced {
    pub rows: Vec<Row>,
    pub parents: Vec<usize>,
}

/// Splices native frames into an rlang trace.
///
/// * `row_frames[j]`: the R frame number of trace row `j` (consecutive);
/// * `parents[j]`: its parent row (1-based, 0 = root);
/// * `natives[i]`: the R frame each native frame sits under (`Some(0)`: top
///   level, `None`: unplaced), outermost frame first;
/// * `branch[i]`: native frame `i` is a frame of a throw (a branch under the
///   frame before it, which caught it); missing entries are `false`;
/// * only chunks under rows `first` (1-based) and later are inserted, so rows
///   before it keep their positions.
///
/// A native chunk follows its R row, each frame the child of the one before;
/// the R row after a chunk (the R code native code called) becomes the child
/// of the chunk's innermost frame; other R rows keep their parents. Branch
/// frames hang, chained, under the frame before them; the rows after a
/// branch continue from the frame the branch hangs under.
/// Unplaced frames hang, chained, under a marker after the last row.
pub fn splice_trace(
    row_frames: &[usize],
    parents: &[usize],
    natives: &[Option<usize>],
    branch: &[bool],
    first: usize,
) -> Spliced {
    let m = row_frames.len();
    let mut chunks: Vec<Vec<usize>> = vec![Vec::new(); m];
    let mut top = Vec::new();
    let mut unplaced = Vec::new();
    let base = row_frames.first().copied().unwrap_or(1);
    for (i, r) in natives.iter().enumerate() {
        match *r {
            None => unplaced.push(i),
            Some(0) if base == 1 && first <= 1 => top.push(i),
            Some(k) if k >= base && k - base < m && k - base + 1 >= first => chunks[k - base].push(i),
            Some(_) => {}
        }
    }
    let mut rows = Vec::with_capacity(m + natives.len() + 1);
    for &i in &top {
        rows.push(Row::Native(i));
    }
    let mut new_pos = vec![0usize; m];
    for j in 0..m {
        rows.push(Row::R(j));
        new_pos[j] = rows.len();
        rows.extend(chunks[j].iter().map(|&i| Row::Native(i)));
    }
    if !unplaced.is_empty() {
        rows.push(Row::UnplacedMarker);
        rows.extend(unplaced.iter().map(|&i| Row::Native(i)));
    }

    let is_branch = |row: Row| matches!(row, Row::Native(i) if branch.get(i).copied().unwrap_or(false));
    let mut out_parents = Vec::with_capacity(rows.len());
    // The last row that is not a branch frame, and whether it is native.
    let mut main_prev: Option<(usize, bool)> = None;
    for (p, &row) in rows.iter().enumerate() {
        let pos = p + 1;
        let previous = if p > 0 { Some(rows[p - 1]) } else { None };
        out_parents.push(match row {
            Row::R(j) => match (previous, main_prev) {
                (Some(Row::Native(_)), Some((q, true))) => q,
                (Some(Row::Native(_)), _) => pos - 1,
                _ => match parents.get(j).copied().unwrap_or(0) {
                    0 => 0,
                    q if q <= m => new_pos[q - 1],
                    _ => 0,
                },
            },
            // A branch frame hangs under the row before it (the frame that
            // caught the throw, or the branch's previous frame).
            _ if is_branch(row) => pos - 1,
            // The first frame of the top-level chunk is a root; every other
            // native frame is the child of the row before it that is not a
            // branch frame (its R row, the previous frame of its chunk, or
            // the marker).
            Row::Native(_) => main_prev.map_or(0, |(q, _)| q),
            Row::UnplacedMarker => new_pos.last().copied().unwrap_or(0),
        });
        if !is_branch(row) {
            main_prev = Some((pos, matches!(row, Row::Native(_))));
        }
    }
    Spliced { rows, parents: out_parents }
}

/// The entry order of a joint `sys.calls()` for R frames 1..=n: for each
/// entry, `Ok(k)` is R call `k` (1-based) and `Err(i)` native frame `i`.
/// Native frames (outermost first) follow the R call they sit under
/// (top-level ones come first); frames under deeper R frames are left out;
/// unplaced ones come last.
pub fn splice_calls(n: usize, natives: &[Option<usize>]) -> Vec<Result<usize, usize>> {
    let mut under: Vec<Vec<usize>> = vec![Vec::new(); n + 1];
    let mut unplaced = Vec::new();
    for (i, r) in natives.iter().enumerate() {
        match *r {
            Some(k) if k <= n => under[k].push(i),
            Some(_) => {}
            None => unplaced.push(i),
        }
    }
    let mut out = Vec::with_capacity(n + natives.len());
    out.extend(under[0].iter().map(|&i| Err(i)));
    for (k, chunk) in under.iter().enumerate().skip(1) {
        out.push(Ok(k));
        out.extend(chunk.iter().map(|&i| Err(i)));
    }
    out.extend(unplaced.into_iter().map(Err));
    out
}

/// The rows of a frame table whose frames (in view order) resolve to
/// `levels[i]` entries each, innermost inlined call first and the physical
/// function last: `(frame, entry)` pairs in the order the view reads.
/// `winch_trace_back()` reads innermost first, so every frame's entries
/// keep their order; joint views read outermost first, so a frame's
/// physical function comes first, then the calls inlined into it, the
/// innermost last (right before the R code it calls).
pub fn expand_inlined(
    levels: impl IntoIterator<Item = usize>,
    outermost_first: bool,
) -> impl Iterator<Item = (usize, usize)> {
    levels
        .into_iter()
        .enumerate()
        .flat_map(move |(i, n)| (0..n).map(move |j| (i, if outermost_first { n - 1 - j } else { j })))
}

/// Where the rows of a trace sit among the stack's frames: the rows are
/// consecutive frames whose calls' heads (`frame_keys`, outermost first)
/// equal the rows' (`trace_keys`) at exactly one position. Returns the
/// 0-based frame of the first row, or None where no position or several
/// (a trace of identical recursive calls) match: then nothing is added
/// rather than guessed.
pub fn match_rows<K: PartialEq>(trace_keys: &[K], frame_keys: &[K]) -> Option<usize> {
    let (m, n) = (trace_keys.len(), frame_keys.len());
    if m > n {
        return None;
    }
    let mut found = None;
    for start in 0..=n - m {
        if frame_keys[start..start + m] == *trace_keys {
            if found.is_some() {
                return None;
            }
            found = Some(start);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_match_at_exactly_one_position_or_not_at_all() {
        assert_eq!(match_rows(&["f", "g"], &["top", "f", "g", "winch"]), Some(1));
        assert_eq!(match_rows(&["f", "g"], &["f", "g"]), Some(0));
        assert_eq!(match_rows::<&str>(&[], &["a"]), None, "no rows fit anywhere");
        assert_eq!(match_rows(&["f", "f"], &["f", "f", "f"]), None, "recursion: two positions");
        assert_eq!(match_rows(&["f", "h"], &["f", "g"]), None);
        assert_eq!(match_rows(&["a", "b", "c"], &["a", "b"]), None, "more rows than frames");
    }
    use Row::*;

    #[test]
    fn chunk_goes_under_its_row_and_rewires_the_next() {
        // Rows: f (frame 1) -> winch_call (2) -> <fn> (3, whose R parent is f).
        let s = splice_trace(&[1, 2, 3], &[0, 1, 1], &[Some(2)], &[], 1);
        assert_eq!(s.rows, vec![R(0), R(1), Native(0), R(2)]);
        assert_eq!(s.parents, vec![0, 1, 2, 3]);
    }

    #[test]
    fn chunks_in_two_places_and_frames_chained() {
        // outer (1) -> [a, b] -> mid (2) -> [c] -> inner (3)
        let s = splice_trace(&[1, 2, 3], &[0, 1, 2], &[Some(1), Some(1), Some(2)], &[], 1);
        assert_eq!(s.rows, vec![R(0), Native(0), Native(1), R(1), Native(2), R(2)]);
        assert_eq!(s.parents, vec![0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn other_rows_keep_renumbered_parents() {
        // Lazy evaluation: row 3's parent is row 1, and it is not entered
        // from native code (the chunk is under row 3 itself).
        let s = splice_trace(&[1, 2, 3], &[0, 1, 1], &[Some(1), Some(3)], &[], 1);
        assert_eq!(s.rows, vec![R(0), Native(0), R(1), R(2), Native(1)]);
        assert_eq!(s.parents, vec![0, 1, 2, 1, 4]);
    }

    #[test]
    fn top_level_chunk_only_when_the_trace_starts_at_frame_1() {
        let s = splice_trace(&[1, 2], &[0, 1], &[Some(0), Some(0)], &[], 1);
        assert_eq!(s.rows, vec![Native(0), Native(1), R(0), R(1)]);
        assert_eq!(s.parents, vec![0, 1, 2, 3]);
        // A trimmed trace (starting at frame 5): the top-level chunk and
        // chunks under frames before the trace are not shown.
        let s = splice_trace(&[5, 6], &[0, 1], &[Some(0), Some(2), Some(5)], &[], 1);
        assert_eq!(s.rows, vec![R(0), Native(2), R(1)]);
        assert_eq!(s.parents, vec![0, 1, 2]);
    }

    #[test]
    fn rows_before_first_keep_their_positions() {
        // rlang will drop rows 1..2 afterwards: nothing may be inserted there.
        let s = splice_trace(&[1, 2, 3, 4], &[0, 1, 2, 3], &[Some(0), Some(1), Some(3)], &[], 3);
        assert_eq!(s.rows, vec![R(0), R(1), R(2), Native(2), R(3)]);
        assert_eq!(s.parents, vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn unplaced_frames_hang_under_a_marker() {
        let s = splice_trace(&[1, 2], &[0, 1], &[None, None], &[], 1);
        assert_eq!(s.rows, vec![R(0), R(1), UnplacedMarker, Native(0), Native(1)]);
        assert_eq!(s.parents, vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn frames_under_deeper_r_frames_are_dropped() {
        let s = splice_trace(&[1, 2], &[0, 1], &[Some(2), Some(7)], &[], 1);
        assert_eq!(s.rows, vec![R(0), R(1), Native(0)]);
        let c = splice_calls(2, &[Some(0), Some(1), Some(3), None]);
        assert_eq!(c, vec![Err(0), Ok(1), Err(1), Ok(2), Err(3)]);
    }

    #[test]
    fn inlined_calls_read_in_the_order_of_the_view() {
        // Frame 0 resolves to [inner, middle, acc_entry] (innermost first),
        // frame 1 to [caller].
        let levels = [3, 1];
        let expand = |levels: &[usize], outermost_first| -> Vec<(usize, usize)> {
            expand_inlined(levels.iter().copied(), outermost_first).collect()
        };
        assert_eq!(expand(&levels, false), vec![(0, 0), (0, 1), (0, 2), (1, 0)]);
        // A joint view lists frames outermost first (frame 1 is given
        // first): caller, then acc_entry, middle, inner.
        assert_eq!(expand(&[1, 3], true), vec![(0, 0), (1, 2), (1, 1), (1, 0)]);
        assert!(expand(&[], true).is_empty());
    }

    #[test]
    fn inlined_rows_splice_outermost_first_before_the_r_callback() {
        // R frame 1 calls acc_entry (with middle and inner inlined into it),
        // which calls back into R frame 2. The rows of the joint table are
        // expanded outermost first, then spliced: acc_entry right after
        // R frame 1, inner right before R frame 2 and its parent.
        let names = ["inner", "middle", "acc_entry"];
        let rows: Vec<_> = expand_inlined([3], true).collect();
        let shown: Vec<&str> = rows.iter().map(|&(_, k)| names[k]).collect();
        assert_eq!(shown, ["acc_entry", "middle", "inner"]);
        let r_frame: Vec<Option<usize>> = rows.iter().map(|_| Some(1)).collect();
        let s = splice_trace(&[1, 2], &[0, 1], &r_frame, &[], 1);
        assert_eq!(s.rows, vec![R(0), Native(0), Native(1), Native(2), R(1)]);
        assert_eq!(s.parents, vec![0, 1, 2, 3, 4]);
        assert_eq!(splice_calls(2, &r_frame), vec![Ok(1), Err(0), Err(1), Err(2), Ok(2)]);
    }

    #[test]
    fn a_throw_branch_hangs_under_its_catcher() {
        // f (1) -> [entry, entry at the throw, level1, level2] -> stop (2)
        let s = splice_trace(
            &[1, 2],
            &[0, 1],
            &[Some(1), Some(1), Some(1), Some(1)],
            &[false, true, true, true],
            1,
        );
        assert_eq!(s.rows, vec![R(0), Native(0), Native(1), Native(2), Native(3), R(1)]);
        // The branch chains under entry; stop() is entry's child, not
        // level2's.
        assert_eq!(s.parents, vec![0, 1, 2, 3, 4, 2]);
        // Native frames after a branch continue from the catcher too.
        let s = splice_trace(&[1], &[0], &[Some(1), Some(1), Some(1)], &[false, true, false], 1);
        assert_eq!(s.parents, vec![0, 1, 2, 2]);
    }

    #[test]
    fn empty_inputs() {
        let s = splice_trace(&[], &[], &[None], &[], 1);
        assert_eq!(s.rows, vec![UnplacedMarker, Native(0)]);
        assert_eq!(s.parents, vec![0, 1]);
        assert_eq!(splice_calls(0, &[]), vec![]);
    }
}
