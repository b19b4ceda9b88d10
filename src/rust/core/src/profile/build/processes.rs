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
/// their namespace): forking (`parallel`'s `mc*`, `pvec`), a cluster's
/// (`parallel`'s `par*` and `cluster*`, `snow`'s), future's and
/// BiocParallel's, foreach's, and running a program (`system()`,
/// `system2()`). callr's calls (`r()`, `rscript()`, `rcmd()`, ...) are
/// known by the function they all call, [`RUNS_R`]; processx's `run()`
/// only as [`QUALIFIED`] (`run` alone names too much).
const DISPATCH: [&str; 34] = [
    "system",
    "system2",
    "mclapply",
    "mcparallel",
    "mcfork",
    "pvec",
    "mcmapply",
    "mcMap",
    "parLapply",
    "parSapply",
    "parApply",
    "parRapply",
    "parCapply",
    "parLapplyLB",
    "parSapplyLB",
    "clusterApply",
    "clusterApplyLB",
    "clusterMap",
    "clusterCall",
    "clusterEvalQ",
    "clusterExport",
    "future",
    "futureCall",
    "value",
    "resolve",
    "future_lapply",
    "future_sapply",
    "future_vapply",
    "future_mapply",
    "future_map",
    "bplapply",
    "bpmapply",
    "foreach",
    "%dopar%",
];

/// callr's function that runs an R session for each of its calls: the
/// R call that calls it is the dispatching one (`callr::r`, however it
/// was written).
const RUNS_R: &str = "run_r";

/// Dispatching calls known only with their namespace.
const QUALIFIED: [&str; 1] = ["processx::run"];

/// The frames of the framework running a task in a worker, at the outer
/// end of its own part: a forked child's (sending the result back,
/// `try()`'s frames, the `lapply()` running the tasks) and a cluster
/// worker's (`parallel`'s or `parallelly`'s loop reading commands,
/// `do.call()` of the task, future's evaluation of a future), and the
/// closures `tryCatch()` itself calls (`parent.frame()`, and
/// `environment()` from `doTryCatch()`: a worker between two tasks is
/// sometimes sampled there), and callr's session's (`saveRDS()` of what
/// `do.call()` of the function returns).
const PLUMBING: [&str; 26] = [
    "saveRDS",
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
    ".workRSOCK",
    "workRSOCK",
    "workLoop",
    "workCommand",
    "do.call",
    "sendData",
    "local",
    "eval.parent",
    "evalFuture",
    "evalFutureInternal",
    "environment",
    "parent.frame",
];

/// The labels of loops (see `labels`).
const LOOPS: [&str; 4] = ["[for]", "[while]", "[repeat]", "[loop]"];

/// A label without its namespace (`parallel::mclapply` is `mclapply`).
fn bare(label: &str) -> &str {
    label.rsplit("::").next().unwrap_or(label).trim_start_matches(':')
}

/// Whether an R label is a parallel framework's dispatching call.
pub(super) fn is_dispatch(label: &str) -> bool {
    DISPATCH.contains(&bare(label)) || QUALIFIED.contains(&label)
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
    // Whether an R frame that is not a loop is further in than entry k
    // (innermost first).
    let called = |k: usize| (0..k).any(|j| matches!(item(j), Item::R(l) if !LOOPS.contains(&l.as_str())));
    let mut keep = len;
    let mut outer: Option<String> = None;
    while keep > 0 {
        match item(keep - 1) {
            // The loop of PSOCK's `workLoop` is the plumbing's (any other
            // loop is the task's: `mcparallel({for ...})`). So is an
            // anonymous function called as
            // the outermost R frame (the PSOCK worker's start,
            // `tryCatch(parallel:::.workRSOCK, ...)()`), or by the
            // plumbing's `do.call()` when it calls R functions in turn
            // (a cluster's `lapply` handed over as a function:
            // `parLapply`'s chunks; future's evaluation of a future; an
            // anonymous task calling on): one doing the work itself is
            // kept.
            Item::R(l)
                if (LOOPS.contains(&l.as_str()) && outer.as_deref() == Some("workLoop"))
                    || (l == "<Anonymous>"
                        && (outer.is_none()
                            || (outer.as_deref() == Some("do.call") && called(keep - 1)))) =>
            {
                outer = Some(l);
                keep -= 1;
            }
            Item::R(l) if !is_plumbing(&l) => break,
            Item::R(l) => {
                outer = Some(bare(&l).to_string());
                keep -= 1;
            }
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
/// 0 when there is none (everything shown: a fork's parent part is where
/// the fork was made).
pub(super) fn parent_from(item: impl Fn(usize) -> Item, len: usize) -> usize {
    dispatch_at(item, len).unwrap_or(0)
}

/// Of R's main thread's entries (innermost first), where its outermost
/// dispatching call is; None when it is in none (a worker's sample is then
/// not charged to what the main thread runs).
pub(super) fn dispatch_at(item: impl Fn(usize) -> Item, len: usize) -> Option<usize> {
    // The R frame next further in than entry k.
    let inner = |k: usize| (0..k).rev().find_map(|j| if let Item::R(l) = item(j) { Some(l) } else { None });
    (0..len).rev().find(|&k| match item(k) {
        Item::R(l) => is_dispatch(&l) || inner(k).is_some_and(|i| bare(&i) == RUNS_R),
        _ => false,
    })
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
    fn a_cluster_workers_stack_reads_as_the_users_call() {
        // A PSOCK worker running parLapply's chunk: the task under
        // do.call() under tryCatch() under workCommand() under workLoop();
        // R's main thread waiting in parLapply for the results.
        let own = [
            "my_fun",
            "FUN",
            "<Anonymous>",
            "do.call",
            "doTryCatch",
            "tryCatchOne",
            "tryCatchList",
            "tryCatch",
            "workCommand",
            "[while]",
            "workLoop",
            "<Anonymous>",
            "@native",
        ];
        assert_eq!(own_kept(items(&own), own.len()), 2, "FUN and what it called");
        // A loop of the task's own is kept, also right under the
        // plumbing (a fork's `mcparallel({for ...})`).
        let forked = ["g", "[for]", "eval", "try", "sendMaster"];
        assert_eq!(own_kept(items(&forked), forked.len()), 2);
        let looping = ["[for]", "FUN", "lapply", "do.call", "workCommand", "[while]", "workLoop"];
        assert_eq!(own_kept(items(&looping), looping.len()), 2);
        // parLapply's lapply is called by do.call() as a function:
        // anonymous, around FUN. So is an anonymous task: left out when it
        // calls on (the frames it calls are the task's), kept when it does
        // the work itself.
        let task = ["g", "<Anonymous>", "do.call", "workCommand", "[while]", "workLoop"];
        assert_eq!(own_kept(items(&task), task.len()), 1);
        let itself = ["@native", "[for]", "<Anonymous>", "do.call", "workCommand", "[while]", "workLoop"];
        assert_eq!(own_kept(items(&itself), itself.len()), 3);
        // future.apply's future_lapply() on a multisession worker
        // (parallelly's workRSOCK; namespaces as R labels them).
        let future = [
            "...future.FUN",
            "FUN",
            "lapply",
            "<Anonymous>",
            "do.call",
            "withCallingHandlers",
            "eval",
            "eval.parent",
            "base::local",
            "base::withVisible",
            "base::tryCatch",
            "eval",
            "<Anonymous>",
            "do.call",
            "tryCatch",
            "workCommand",
            "[while]",
            "workLoop",
            "workRSOCK",
        ];
        assert_eq!(own_kept(items(&future), future.len()), 2, "...future.FUN under future.apply's FUN");
        // future 1.75 (R 4.6's Debian) evaluates through evalFutureInternal.
        let newer = [
            "...future.FUN",
            "FUN",
            "lapply",
            "<Anonymous>",
            "do.call",
            "eval",
            "local",
            "tryCatch",
            "evalFutureInternal",
            "@native",
        ];
        assert_eq!(own_kept(items(&newer), newer.len()), 2);
        // Between tasks, in the loop's own code (workCommand() timing a
        // task with proc.time(); doTryCatch()'s call of environment(),
        // which R 4.5's CI caught): all plumbing, all kept. (The loop's
        // frames are those around the task above.)
        let psock_loop = &own[4..12];
        assert_eq!((psock_loop[0], psock_loop[7]), ("doTryCatch", "<Anonymous>"));
        for inner in ["@native", "environment"] {
            let between = [&[inner][..], psock_loop].concat();
            assert_eq!(own_kept(items(&between), between.len()), between.len(), "{inner}");
        }
        // A task's own call of environment() is the task's.
        let task_env = ["environment", "FUN", "<Anonymous>", "do.call", "workCommand", "[while]", "workLoop"];
        assert_eq!(own_kept(items(&task_env), task_env.len()), 2);
        // An anonymous function further in is the task's.
        let anonymous = ["<Anonymous>", "lapply", "do.call", "workCommand"];
        assert_eq!(own_kept(items(&anonymous), anonymous.len()), 1);
        let main = [
            "unserialize",
            "recvData",
            "recvResult",
            "staticClusterApply",
            "clusterApply",
            "parLapply",
            "work",
        ];
        assert_eq!(dispatch_at(items(&main), main.len()), Some(5), "from parLapply out, the outermost");
        // The main thread running other R code: nothing to charge.
        let other = ["sort", "other_work"];
        assert_eq!(dispatch_at(items(&other), other.len()), None);
    }

    #[test]
    fn a_callr_sessions_stack_reads_as_the_users_call() {
        // Innermost first, as a profile of callr::r(function() burn(...))
        // read them: the session's saveRDS(do.call(do.call, ...)) around
        // the user's function; the parent's, waiting in processx.
        let own = ["burn[for]", "burn", "<Anonymous>", "<Anonymous>", "do.call", "saveRDS"];
        assert_eq!(own_kept(items(&own), own.len()), 3, "to the user's function");
        let main = [
            "@native",
            "processx::run",
            "<Anonymous>",
            "do.call",
            "force",
            "with_envvar",
            "eval",
            "with.default",
            "with",
            "run_r",
            "@pos",
            "callr::r",
            "work",
        ];
        assert_eq!(dispatch_at(items(&main), main.len()), Some(11), "callr::r, the call of run_r");
        // However r() was written (attached, or another entry point).
        let bare = ["run_r", "rscript", "work"];
        assert_eq!(dispatch_at(items(&bare), bare.len()), Some(1));
        // processx's run() called directly; run() alone is no dispatch.
        let px = ["@native", "processx::run", "work"];
        assert_eq!(dispatch_at(items(&px), px.len()), Some(1));
        let run = ["@native", "run", "work"];
        assert_eq!(dispatch_at(items(&run), run.len()), None);
        // A program that system2() runs: under system2, system left out.
        let sys = ["@native", "system", "system2", "work"];
        assert_eq!(dispatch_at(items(&sys), sys.len()), Some(2));
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
