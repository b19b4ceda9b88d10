//! What a forked child's sample shows: its own frames (the fork's plumbing
//! at their outer end left out), `[process N]`, and its parent's frames
//! that dispatched the work, cut after the parallel framework's call.
//!
//! A child's R stack holds its parent's frames as they were at the fork
//! (`compose` puts a `[process]` entry between the two parts). Of the
//! parent's part, what is kept ends at the outermost call of a parallel
//! framework (`mclapply`, `mcparallel`, `pvec`, ... : [`DISPATCH`]); the
//! framework's inner frames below it (`lapply`, the function forking) are
//! left out. Of the child's part, the framework's own frames at its outer
//! end ([`PLUMBING`]: sending the result back, `try()`'s frames, the
//! `lapply()` running the tasks) are left out, so that
//! `work > mclapply > [process 1] > FUN > my_fun` reads as a user expects.

/// Calls that hand work to other processes, as R labels (with or without
/// their namespace).
const DISPATCH: [&str; 15] = [
    "mclapply",
    "mcparallel",
    "mcfork",
    "pvec",
    "mcmapply",
    "mcMap",
    "future",
    "futureCall",
    "future_lapply",
    "future_sapply",
    "future_vapply",
    "future_mapply",
    "future_map",
    "bplapply",
    "foreach",
];

/// A forked child's frames that belong to the framework running it, at
/// the outer end of its own part.
const PLUMBING: [&str; 13] = [
    "sendMaster",
    "serialize",
    "try",
    "tryCatch",
    "tryCatchList",
    "tryCatchOne",
    "doTryCatch",
    "lapply",
    "eval",
    "evalq",
    "withCallingHandlers",
    "mcexit",
    "withVisible",
];

/// A label without its namespace (`parallel::mclapply` is `mclapply`).
fn bare(label: &str) -> &str {
    label.rsplit("::").next().unwrap_or(label).trim_start_matches(':')
}

/// Whether an R label is a parallel framework's dispatching call.
pub(super) fn is_dispatch(label: &str) -> bool {
    DISPATCH.contains(&bare(label))
}

/// Whether an R label is a framework's plumbing in a child.
pub(super) fn is_plumbing(label: &str) -> bool {
    PLUMBING.contains(&bare(label))
}

/// An entry of a stack as these rules see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Item {
    /// An R frame (or loop) with its label.
    R(String),
    /// The source position of the R frame before it.
    Pos,
    /// A native frame.
    Native,
}

/// Of a child's own entries (innermost first; `item(k)` says what entry k
/// is), how many to keep: the framework's plumbing at the outer end left
/// out, with the native frames and positions among it (never all of them:
/// a child whose every frame is plumbing keeps them).
pub(super) fn own_kept(item: impl Fn(usize) -> Item, len: usize) -> usize {
    let mut keep = len;
    while keep > 0 {
        match item(keep - 1) {
            Item::R(l) if !is_plumbing(&l) => break,
            _ => keep -= 1,
        }
    }
    if keep == 0 {
        return len;
    }
    // The kept frame's own position follows it.
    while keep < len && item(keep) == Item::Pos {
        keep += 1;
    }
    keep
}

/// Of the parent's entries (innermost first), where the part shown
/// begins: at the outermost dispatching call (its inner frames left out);
/// 0 when there is none (everything shown).
pub(super) fn parent_from(item: impl Fn(usize) -> Item, len: usize) -> usize {
    (0..len).rev().find(|&k| matches!(item(k), Item::R(l) if is_dispatch(&l))).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items<'a>(v: &'a [&'a str]) -> impl Fn(usize) -> Item + 'a {
        move |k| match v[k] {
            "@pos" => Item::Pos,
            "@native" => Item::Native,
            l => Item::R(l.to_string()),
        }
    }

    #[test]
    fn an_mclapply_childs_stack_reads_as_the_users_call() {
        // Innermost first, as sys.calls() showed in a child of mclapply:
        // the user's function under lapply's FUN under try() under
        // sendMaster; the parent's part: mcfork under inner.do (FUN) under
        // lapply under mclapply under work.
        let own = [
            "my_fun",
            "@native",
            "FUN",
            "@pos",
            "lapply",
            "@pos",
            "doTryCatch",
            "tryCatchOne",
            "tryCatchList",
            "tryCatch",
            "try",
            "sendMaster",
            "@native",
        ];
        assert_eq!(own_kept(items(&own), own.len()), 4, "FUN, its position and what it called");
        let parent = ["mcfork", "FUN", "lapply", "mclapply", "@pos", "work"];
        assert_eq!(parent_from(items(&parent), parent.len()), 3, "from mclapply out");
        let qualified = ["FUN", "lapply", "parallel::mclapply", "work"];
        assert_eq!(parent_from(items(&qualified), qualified.len()), 2);
    }

    #[test]
    fn unknown_frameworks_keep_everything() {
        let own = ["g", "eval", "mystery_runner"];
        assert_eq!(own_kept(items(&own), own.len()), 3, "plumbing only at the outer end");
        let parent = ["fork_it", "work"];
        assert_eq!(parent_from(items(&parent), parent.len()), 0);
        // A child whose every frame is plumbing keeps them.
        let all = ["try", "sendMaster"];
        assert_eq!(own_kept(items(&all), all.len()), 2);
    }
}
