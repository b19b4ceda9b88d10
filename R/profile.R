#' Profile R and native code together
#'
#' Samples the call stacks of R's main thread and of every other thread of
#' the process while `expr` runs: every sample of R's main thread holds the R
#' frames and the native (C, C++, Fortran, Rust) frames of that moment,
#' interleaved exactly as [winch_sys_calls()] shows them, through any depth
#' of R → native → R calls. Loops of R functions appear as frames of their
#' own, labelled with the function whose body holds them (`f[for]`,
#' `f[while]`, `f[repeat]`; `[for]` at the top level of `expr`). A loop in
#' code passed as an argument (`g(for (...) ...)`, forced inside `g`) shows
#' under `g`, where it runs, and is labelled after the function that wrote
#' it. One case is not seen: byte code of a promise running a loop that
#' calls no R function while its own function's code is elsewhere (then
#' the loop's time shows in the function forcing it, without a loop frame).
#'
#' Samples are taken by a timer of each thread that interrupts it every
#' `interval` seconds of its own CPU time (`event = "cpu"`) or of wall-clock
#' time (`"elapsed"`, so that sleeping and waiting show), with a signal of
#' its own: R's `Rprof()` is left alone, but cannot run at the same time. No
#' thread is stopped for another's sample. The signal handler only walks the
#' stacks into a preallocated buffer; names, files and lines are looked up
#' when sampling stops.
#'
#' @section Threads:
#' With `threads = "all"` (the default), the other threads of the process
#' (OpenMP and BLAS workers, RcppParallel/TBB, `std::thread`, threads of
#' Rust code) are sampled too, each in proportion to its own CPU time. New
#' threads are found within about 2 ms of their start, and those started
#' through `pthread_create()` (OpenMP, TBB, `std::thread`, most thread
#' pools) from their first instruction. The kernel checks CPU timers at its
#' tick, so the CPU time a thread used since its last sample is lost when
#' it ends: threads of a few milliseconds are undercounted. `summary()`
#' says how much of the process's CPU time the profile did not see. A sample of another thread
#' is its native frames (the C library's thread start left out) under a
#' frame `[thread N]` (threads numbered in the order of their first sample;
#' their kernel ids, names and measured CPU time are in `summary()`), and
#' that under the R call that started its work, with the main thread's
#' native frames down to where the work was started (the function that
#' called into the thread's runtime, such as the caller of `GOMP_parallel`
#' or of `std::thread::join()`, when that runtime is on the main thread's
#' stack; otherwise the function R called), so that its frames sit beside
#' the main thread's share of the work:
#' * a thread started while R's main thread is in a native call (by R's
#'   main thread, directly or through a runtime such as `std::thread` or
#'   OpenMP, or by a thread started so, such as the workers of a pool
#'   created during the call) is under that call as long as it is R's
#'   innermost call, however R's main thread spends that time: joining the
#'   thread, waiting on a condition variable, sleeping, spinning or
#'   computing itself;
#' * a thread started before the call (a pool of OpenMP, OpenBLAS or TBB
#'   workers created earlier) is under it while R's main thread is inside
#'   the thread's runtime (an OpenMP region, a TBB or RcppParallel loop), or
#'   when its work starts in the module R called (its start routine, or the
#'   function a `std::thread` runs, is there) and no other R call started it
#'   (a thread an earlier R call started is under a later one only inside
#'   the runtime it started in, not while the main thread is merely in the
#'   library whose function it runs: asking a pool whether it is done is
#'   not giving it work);
#' * otherwise (R's main thread runs R code; a thread of a pool created
#'   before the call, still spinning after its region ended; a thread
#'   started by an R call that has returned since, such as a detached
#'   thread) at the root of the profile, so that no R code is charged
#'   with it. While the call that started a thread has called back into R,
#'   the thread is placed by the rule for threads started before the call.
#'
#' The R call that started a thread is known from `pthread_create()`,
#' which the profile hooks (threads started otherwise, or before the
#' profile, count as started before the call), and calls are told apart
#' by the address of R's record of them: a thread started by a call that has
#' returned, still running while a later call at the same depth of R's
#' stack runs, is taken for that call's. [winch_record()], outside the
#' process, hooks nothing and does not know which call started a thread:
#' there other threads' samples are at the root of the profile.
#'
#' Time spent in a parallel runtime's own code (libgomp, LLVM's and Intel's
#' OpenMP, TBB: spinning or sleeping at barriers, waiting for work, handing
#' it out) carries a frame `[wait]` under its frames, in every thread, so
#' that waiting shows as waiting.
#'
#' A sample whose stack could not be read at all (not even the address the
#' thread was at) is the one frame `[no frames]` (kind `"none"`): it counts
#' like any other sample and is never an empty stack.
#'
#' In a CPU profile, a sample stands for its thread's CPU time since the
#' thread's last sample (its CPU clock, in whole intervals, the rest
#' carried), not for one timer expiration: on a busy machine the kernel
#' delivers a CPU timer's signals late and rarely, and a thread on a CPU,
#' or ready for one, whose samples fall two intervals and 8 ms behind its
#' clock is asked for one (a sleeping thread is not woken for it: its time
#' goes to its next sample).
#'
#' On a busy machine a sample is taken where the thread was running, not
#' where the scheduler stopped it. A signal reaches a thread when it next
#' runs its own code, so a thread stopped on its way out of a system call
#' (where the scheduler most often stops a busy thread) took its samples
#' there: a burn reading its CPU clock every few microseconds had up to 30 %
#' of its samples on the clock's wrapper, where the kernel counted 3 % to
#' 9 % of its time. Now a timer's signal that finds a thread preempted
#' since its last sample at a system call's end leaves the sample to the
#' thread's watch (unless the sample is `[kernel]`'s: that time was spent
#' there): a one-shot timer a fraction of a millisecond ahead, whose signal
#' takes the sample only if the thread ran for most of that while, and
#' tries again a few times otherwise. Each thread has one watch; requests
#' for an overdue sample go through it too.
#'
#' In a CPU profile, time the kernel spent for a thread (system calls, page
#' faults) is a frame `[kernel]` (kind `"kernel"`) innermost, under where
#' the thread was: the system call's wrapper (`__GI_sched_yield`), or the
#' code that faulted. A timer on a thread's CPU clock signals the thread on
#' its way back to its own code, so its samples cannot tell kernel time
#' from its own; instead each sample reads the thread's user and system
#' time (`getrusage(RUSAGE_THREAD)`) and the system share of the time
#' since its last sample is added up: when it makes a whole sample, that
#' sample is the kernel's. So `[kernel]`'s share of a thread's samples is
#' the share of its CPU time the kernel counted as system time (as `perf`
#' counts its kernel samples), and samples at a system call's wrapper
#' without it are the thread's own time there. The kernel's own frames are
#' not shown. Profiles of elapsed time and of memory have no `[kernel]`.
#'
#' `threads = "main"` samples R's main thread only, as before.
#'
#' @section Processes:
#' With `processes = "all"` (the default), child processes forked while
#' the profile runs (`parallel::mclapply()`, `mcparallel()`, `pvec()`,
#' future's `multicore` plan) are sampled too, from inside: a child
#' inherits the profiler with the rest of its parent's memory, arms a timer
#' on its own clock at the fork, and hands its samples to its parent
#' through memory the two share (up to 32 children at once; `summary()`
#' says how many more were not sampled). A child's sample is its joint
#' stack, R frames with its native frames in place, under a frame
#' `[process N]` (numbered in the order of their first sample; their ids,
#' command lines and CPU time are in `summary()`), under the R call of the
#' parent that forked it. The parallel framework's own frames are left
#' out: of the parent's part, those inside the framework's call
#' (`mclapply()`'s `lapply()` and the function that forks); of the child's,
#' those around the user's function (sending the result back, `try()`'s
#' frames, the `lapply()` running the tasks), so that a child of
#' `mclapply()` reads `work > mclapply > [process 1] > FUN > my_fun`. The
#' calls taken for the framework's are those of `parallel`, `future`,
#' `future.apply`, `furrr`, `BiocParallel` and `foreach`; with another
#' framework, its frames are shown.
#'
#' The parent's wait for its workers is in the framework's receiving call:
#' `work > mclapply > selectChildren` (`mccollect()`'s likewise). It uses
#' no CPU, so a CPU profile has no samples of it; an elapsed-time profile
#' (`event = "elapsed"`) shows it beside the workers' time.
#'
#' `as.data.frame()` has a column `process`; [winch_write_pprof()] labels
#' every sample with `process` and `pid` (`go tool pprof
#' -tagfocus=process=process_1`); `summary()` lists the processes with the
#' CPU time each used and the share of the whole tree's CPU time the
#' profile did not see (the CPU time every child used during the profile
#' counts in it, from the kernel's account, sampled or not, ended or not).
#'
#' In a CPU profile, the R sessions of its PSOCK clusters and future's
#' `multisession` workers (`parallel::makeCluster()`, `parLapply()`,
#' `clusterApply()`; found through their connections to this process, at
#' the profile's start and once a second, made before the profile or
#' inside it) are sampled too, from outside: the profiler's collector
#' thread reads each as [winch_record()] does, stopping the worker with
#' `ptrace` for as long as one sample takes (its R frames with native
#' frames in place; the worker's main thread), at the profile's interval
#' of the worker's own CPU time, or less often where reads cost more: at
#' most once per 50 times what a read costs (the time the worker is
#' stopped and the profiler's CPU time), at least every 16 intervals, each
#' sample standing for the CPU time since the last (a waiting worker is
#' not stopped). Each
#' sample is under `[process N]` under this process's outermost call of
#' a parallel framework it was in then (`parLapply`, `clusterApply`,
#' `clusterEvalQ`, `future`, `value`, `foreach`, ...), with the worker's
#' plumbing left out (`parallel`'s `workLoop`, `workCommand`, the
#' `do.call()` and `tryCatch()` running the task, the `lapply()` of a
#' chunk), so `work > parLapply > [process 1] > FUN > my_fun` reads as
#' written (a worker sampled between tasks, in that plumbing's own code,
#' keeps all of it); a worker busy while this process runs other R code is at the
#' root, under `[process N]` alone. What reading them costs this
#' process (its tracer threads' CPU time) is counted as the profiler's
#' own, with its collector's.
#'
#' Children of this process that run another program are read the same
#' way: `callr` sessions (`callr::r()`, `rscript()`, `rcmd()`: R frames
#' with native frames in place, under `[process N]` under the `callr`
#' call, callr's `saveRDS(do.call(...))` around the function left out)
#' and programs run by `system()`, `system2()`, `pipe()` or
#' `processx::run()` (native frames only when the program is not R;
#' under `system2` or `system`), so that
#' `work > callr::r > [process 1] > <Anonymous> > my_fun` and
#' `work > system2 > [process 2] > /prog::main > /prog::kernel` read as
#' written. A child of this process is not stopped by this process: ptrace
#' reports a stop to the tracer's whole thread group, and a child's real
#' parent would see it in its `waitpid()` (R's `system()`, processx's
#' and `parallel`'s wait for their children), so winch's own tracer
#' process (`bin/winch-tracer` in the installed package, started at the
#' first such read and ended with the profile; it is not listed among the
#' profile's processes) stops and releases them for the collector, which
#' reads them as it reads a worker. Their exit status reaches their parent
#' untouched. A child that ran another program after a fork (processx, and
#' R's `pipe()` under R 4.5 and 4.6, fork then run the program) sampled
#' itself until then: it is one process, `[process N]`, its samples from
#' both ways together. A worker that cannot be read (the kernel
#' refuses `ptrace`: Yama's `ptrace_scope`, a container without
#' `CAP_SYS_PTRACE`) stays unsampled, and is said so as below, with the
#' kernel's reason (`summary()`'s `refused`, and the warning); so are
#' workers of an elapsed-time profile. A worker is first read when it
#' first runs during the profile (an idle cluster is never stopped); that
#' read takes a moment (its modules are read then). Its CPU time counts
#' from when the profile first saw it (for a cluster made inside the
#' profile, all of it), so that what it used before its first read is
#' unseen. Reading a worker costs it the time it is stopped
#' (about 0.3 ms a sample on the machine winch is tested on; `summary()`'s
#' `cost` gives the median and 99th percentile of each profile) and this
#' process the profiler's CPU time (about 0.5 ms a sample), so that a
#' worker there is read every 40 ms or so of its CPU time: on a machine
#' whose two cores the workers fill, a profile at `interval = 0.005`
#' makes `parLapply()` take about 5 % longer than unprofiled (see
#' `bench/processes.R`).
#'
#' Not yet sampled: a child of a memory profile (its allocations are its
#' own; `print()` and `summary()` say how many children were forked, and
#' `stats$forked` counts them), children of an elapsed-time profile that
#' run another program, threads
#' other than a child's main thread, and children that load libraries
#' after the fork have those libraries' frames unnamed. Profiles made in
#' other processes can be combined with [c()][c.winch_profile].
#'
#' Such processes are not lost silently: while the profile runs, the
#' processes working for this one (its descendants, every 0.1 s, and the R
#' sessions of its PSOCK clusters, found through their connections to it,
#' every second) are looked at with the CPU time each has used. Those that
#' used CPU time during the profile without being sampled are rows
#' `[worker, not sampled]` or `[child, not sampled]` of `summary()`'s
#' processes, with that time (a process there at the start counts its
#' time since then, one started later all of its time, one there before
#' but first seen later its time since that look), which counts as unseen;
#' when they used 5 % of the tree's CPU time or more, a warning of class
#' `winch_warning_processes_unsampled` names them. The warning names,
#' too, sampled children or workers most of whose CPU time is unseen: one
#' that could not be read after it ran another program, one working in threads
#' of its own (only a process's main thread is sampled), one that started
#' a profile of its own (then its samples are in that profile), or a
#' worker found late (workers are looked for once a second). A process that ended
#' between two looks keeps the time it had at the last; one that started
#' and ended between two looks is not named (a child's time is still
#' counted as unseen, from the kernel's account of the children this
#' process waited for). Workers are looked for once a second: the workers
#' of a cluster made and stopped between two such looks are not seen, and
#' as they are not this process's children, no account holds their time
#' (a gap).
#'
#' @section Memory:
#' With `event = "alloc"`, allocations are sampled instead of time: the
#' allocation functions of every loaded library (`malloc()`, `calloc()`,
#' `realloc()`, `reallocarray()`, `free()`, `posix_memalign()`,
#' `aligned_alloc()`, `memalign()`; C++'s `operator new` ends in these)
#' are hooked through their GOT slots for the time `expr` runs (libraries
#' loaded meanwhile too), and every slot gets its value back when it ends.
#' On average one allocation is sampled per `sample_bytes` bytes allocated:
#' each byte with probability `1 / sample_bytes`, so that a large
#' allocation is nearly always seen, and each sample stands for the bytes
#' and allocations it estimates (unbiased estimates, as Go's heap profile
#' and tcmalloc sample). A sample holds the joint stack of the allocating
#' thread, taken as a CPU sample is. Frees of sampled blocks are followed,
#' so the profile also tells which sampled bytes were still allocated when
#' `expr` ended (`inuse`). R's own vectors count where R allocates them
#' with `malloc()`: a large vector when it is made, small vectors through
#' the pages R takes for them (a page is charged to the call that needed a
#' new one). Its stacks' columns are `alloc_bytes`, `alloc_count`,
#' `inuse_bytes` and `inuse_count` (see [as.data.frame.winch_profile()]);
#' `count` is the number of samples. It is written with
#' [winch_write_pprof()] (Go's heap profile's types: `go tool pprof
#' -sample_index=inuse_space`) and [winch_write_collapsed()] (bytes
#' allocated), not in `Rprof()`'s format. With `threads = "all"`, other
#' threads' allocations are sampled too and placed as their CPU samples
#' are (see "Threads": under `[thread N]`, under the R call that started
#' their work while it runs, else at the root); with `"main"`, only R's
#' main thread's allocations are sampled.
#'
#' A memory profile also reports R's own heap as [gc()] tells it: what it
#' held before `expr` (after a full collection), after it (after another,
#' `expr`'s value included) and at most at a collection in between
#' (`gc()`'s "max used", reset before `expr`). These two collections are
#' not part of the profile; the figures are in `summary()`'s `r_heap`.
#' The hooks add about 2.5 ns to an allocation and its free (one more
#' indirect call), and a profile's start and stop take a few milliseconds
#' (`bench/alloc.R`).
#'
#' One profile runs at a time: starting another one is an error of class
#' `winch_error_busy`. An error or an interrupt in `expr`, or while the
#' profiler starts, stops it. A process forked while a profile runs (by
#' `parallel::mclapply()`) is not sampled and starts with no profile
#' running: it can profile itself. Unloading winch while `expr` runs stops
#' the profile (nothing may point into winch's library once it is gone):
#' the call then ends with an error of class `winch_error_profile_lost`.
#'
#' R frames are labelled as `Rprof()` labels them; native frames
#' `/<module>::<function>` (C++ parameter lists dropped), and unnamed native
#' functions `/<module>::+0x<start>` by the start of the function in the
#' module. Frames of R's own library are left out (see `libr`): the R
#' frames stand for them. Samples are named with the libraries loaded when they were taken:
#' a library unloaded before the profile is built (`dyn.unload()`,
#' `pkgload::load_all()`) shows as offsets in it, never with the names of a
#' library loaded later at the same address, and the few samples taken
#' while libraries were being loaded or unloaded show their native frames
#' as `/?::+0x<address>?`.
#'
#' @param expr An expression to profile, evaluated in the caller's
#'   environment (required). An error in it stops the profiler and
#'   propagates as is.
#' @param file If not `NULL`, the profile is also written there in `Rprof()`'s
#'   format (see [winch_write_rprof()]): a regular file, or a new file in a
#'   directory that exists. Checked before `expr` runs: anything else (a
#'   directory, a FIFO, a device) or a file that cannot be written (a
#'   read-only file system) is an error of class `winch_error_io`. Should
#'   writing fail afterwards, the profile is returned with a warning of
#'   class `winch_warning_io`.
#' @param interval Seconds between samples, at least 0.001 and at most 3600.
#' @param event `"cpu"` (CPU time of R's main thread), `"elapsed"`
#'   (wall-clock time) or `"alloc"` (allocations: see the section "Memory").
#' @param loops Show loops as frames?
#' @param lines Record source positions and write them in the Rprof file:
#'   R frames' file and line from their srcrefs (code sourced or parsed with
#'   `keep.source = TRUE`), native frames' from their debug information.
#' @param ... Not used; must be empty.
#' @param threads `"all"` (every thread of the process; see the section
#'   "Threads") or `"main"` (R's main thread only).
#' @param libr Keep frames of R's own library? With `TRUE`, its named
#'   functions that are not its interpreter's appear (R's Fortran
#'   `dqrls_`/`dqrdc2_` under `lm.fit()`, `R_qsort`, allocation, `R_gc`);
#'   the interpreter's evaluation machinery (`Rf_eval`, `bcEval`, closures,
#'   dispatch) and unnamed frames of R's library stay out: the R frames
#'   stand for them. With `FALSE` (the default) every frame of R's library
#'   is left out.
#' @param gc Show R's garbage collections as frames `<GC>` (`Rprof()`'s
#'   label, as with `Rprof(gc.profiling = TRUE)`) under the code whose
#'   allocation triggered them? With `FALSE`, their time is folded into that
#'   code. (winch finds R's collector from the code of R's `R_gc`; in an R
#'   whose `R_gc` it cannot read, collections stay folded.)
#' @param sample_bytes With `event = "alloc"`: the mean bytes allocated
#'   between two samples (one number, at least 1 and at most 1e15).
#' @param processes `"all"` (the default: child processes too; see the
#'   section "Processes") or `"self"` (this process only).
#' @return A `winch_profile` object: distinct stacks with their counts, the
#'   functions, locations, files and modules they refer to, figures about
#'   the run (`summary()`), and where it was made (`host`, the machine's
#'   name, and `pid`), with `print()`, `summary()`, `plot()` and `c()`
#'   methods.
#' @seealso [winch_rprof()] to start and stop by hand; [winch_write_rprof()],
#'   [winch_write_pprof()]; `vignette("profiling")`.
#' @export
#' @examples
#' if (winch_available()) {
#'   p <- winch_profile(for (i in 1:200) sum(sort(runif(1e4))), interval = 0.005)
#'   p
#' }
winch_profile <- function(expr, file = NULL, interval = 0.01, event = c("cpu", "elapsed", "alloc"),
                          loops = TRUE, lines = FALSE, ..., threads = c("all", "main"), libr = FALSE,
                          gc = TRUE, sample_bytes = 512 * 1024, processes = c("all", "self")) {
  check_required(expr, what = "the code to profile")
  check_no_dots(...)
  opts <- check_profile_args(file, interval, event, loops, lines, threads, libr, gc,
    sample_bytes = sample_bytes, alloc_ok = TRUE, processes = processes
  )
  # The profiled code is what runs under force(expr) below: samples taken
  # before or after it (the profiler starting and stopping) are left out,
  # and so are force()'s frame and those further out.
  opts$region <- list("under", force, environment())
  # The cleanup is armed before the profiler starts, so that an interrupt
  # landing anywhere after the start still stops it; it stops only the
  # session this call started (`token`, this call's environment).
  token <- environment()
  # (Taken now: after an unload of winch in `expr`, a function of the
  # namespace not used yet would be read from its lazy-load database, and
  # that loads winch again.)
  abandon <- profile_abandon
  on.exit(abandon(token), add = TRUE)
  # A memory profile also tells what R's own heap held before and after,
  # and at most in between (R's figures, measured by collecting).
  heap_before <- if (opts$event == "alloc") r_heap(reset = TRUE)
  session <- profile_begin(opts, token, "profile")
  force(expr)
  if (!identical(the$profile_session$token, token)) {
    # Stopped meanwhile from outside this call (winch unloaded while `expr`
    # ran: R/zzz.R): nothing is left to build a profile from. Winch's
    # library may be gone, and functions of its namespace not used yet
    # would load it again (see `abandon`), so only base R and rlang here.
    lost <- the$profile_lost
    the$profile_lost <- NULL
    why <- if (identical(lost$token, token)) paste0(" (", lost$why, ")") else ""
    rlang::abort(
      sprintf("The profile was stopped before `expr` ended%s: its samples are lost.", why),
      class = c("winch_error_profile_lost", "winch_error")
    )
  }
  p <- profile_end(session)
  if (!is.null(heap_before)) {
    p$stats$r_heap <- r_heap_change(heap_before, r_heap())
  }
  if (!is.null(file)) {
    write_profile_file(p, file, lines)
  }
  p
}

#' Start and stop the profiler by hand
#'
#' A drop-in for [Rprof()] where the code to profile cannot be wrapped in one
#' expression: `winch_rprof(filename)` starts sampling (see
#' [winch_profile()]), `winch_rprof(NULL)` stops it, writes the Rprof file
#' and returns the profile. Its defaults are `Rprof()`'s (`filename =
#' "Rprof.out"`, `interval = 0.02`), so that a script switching from
#' `Rprof()` samples as often as before; [winch_profile()] samples every
#' 10 ms by default, which suits the short runs it is mostly used for.
#'
#' `winch_rprof()` refuses to start while `Rprof()` runs, but `Rprof()`
#' cannot know about winch: started after `winch_rprof()`, it runs beside
#' it. Each has its own timer and signal and writes its own file, and
#' winch's samples are the same as without it (tested); only the time each
#' handler takes is added to the other's run.
#'
#' A profile started by `winch_rprof()` is stopped, without writing its
#' file, if winch is unloaded. `winch_rprof(NULL)` also stops a profile that
#' was left running without R knowing it (with a warning of class
#' `winch_warning`; its samples are discarded). When no profile runs, or the
#' one running is [winch_profile()]'s, it is an error of class
#' `winch_error_bad_argument`.
#'
#' @param filename The Rprof file to write when sampling stops, or `NULL` to
#'   stop. Checked when sampling starts, as for `file` in [winch_profile()].
#' @inheritParams winch_profile
#' @return `winch_rprof(filename)`: `NULL`, invisibly. `winch_rprof(NULL)`: the
#'   `winch_profile` (`NULL`, invisibly, when it stopped a profile left
#'   running).
#' @export
#' @examples
#' if (winch_available()) {
#'   out <- tempfile()
#'   winch_rprof(out, interval = 0.005)
#'   x <- sort(runif(1e6))
#'   p <- winch_rprof(NULL)
#'   summaryRprof(out)$sampling.time
#' }
winch_rprof <- function(filename = "Rprof.out", interval = 0.02, event = c("cpu", "elapsed"),
                        loops = TRUE, lines = FALSE, threads = c("all", "main"), libr = FALSE,
                        gc = TRUE, processes = c("all", "self")) {
  if (is.null(filename)) {
    return(rprof_stop())
  }
  opts <- check_profile_args(filename, interval, event, loops, lines, threads, libr, gc, processes = processes)
  # Samples of winch_rprof() itself (starting and stopping) are left out.
  opts$region <- list("outside", winch_rprof)
  # As in winch_profile(), the cleanup is armed before the profiler starts;
  # it is disarmed once the session is started and R's entry for it made.
  token <- environment()
  started <- FALSE
  on.exit(if (!started) profile_abandon(token), add = TRUE)
  profile_begin(opts, token, "rprof")
  started <- TRUE
  invisible(NULL)
}

# winch_rprof(NULL): stops the session winch_rprof() started, writes its
# file and returns the profile; or stops an orphaned session (one that runs
# with no entry for it in R: left by a failure), with a warning.
rprof_stop <- function(call = rlang::caller_env()) {
  state <- profile_state()
  session <- the$profile_session
  switch(state,
    rprof = {
      p <- profile_end(session, call = call)
      write_profile_file(p, session$opts$file, session$opts$lines)
    },
    orphan = {
      profile_stop_discard()
      rlang::warn(
        "Stopped a winch profile that had been left running; its samples were discarded.",
        class = c("winch_warning_orphan_profile", "winch_warning")
      )
      invisible(NULL)
    },
    profile = abort_bad_argument(
      "No profile was started with `winch_rprof()`: the one running is `winch_profile()`'s.",
      call = call
    ),
    none = abort_bad_argument("No profile was started with `winch_rprof()`.", call = call)
  )
}

check_profile_args <- function(file, interval, event, loops, lines, threads = "main", libr = FALSE,
                               gc = TRUE, sample_bytes = 512 * 1024, alloc_ok = FALSE,
                               processes = "self", call = rlang::caller_env()) {
  check_number(interval, 0.001, 3600, unit = "seconds", why = " (the timers cannot honour less)", call = call)
  event <- check_choice(event, if (alloc_ok) c("cpu", "elapsed", "alloc") else c("cpu", "elapsed"), call = call)
  # (Also checked, with the same bounds, where the native side reads it:
  # src/rust/src/profile.rs.)
  check_number(sample_bytes, 1, 1e15, why = " (bytes)", call = call)
  if (event == "alloc" && !is.null(file)) {
    abort_bad_argument(
      "A memory profile cannot be written in `Rprof()`'s format: leave `file` NULL and use `winch_write_pprof()`.",
      call = call
    )
  }
  check_flag(loops, call = call)
  check_flag(lines, call = call)
  check_flag(libr, call = call)
  check_flag(gc, call = call)
  threads <- check_choice(threads, c("all", "main"), call = call)
  processes <- check_choice(processes, c("all", "self"), call = call)
  check_output_file(file, null_ok = TRUE, call = call)
  check_writable(file, call = call)
  if (!winch_available()) {
    abort_winch("Profiling needs native unwinding, which is not available on this platform.",
      class = "winch_error_unavailable", call = call
    )
  }
  state <- profile_state()
  if (state != "none") {
    msg <- switch(state,
      rprof = "A winch profile is already running: stop it with `winch_rprof(NULL)`.",
      orphan = "A winch profile was left running: stop it with `winch_rprof(NULL)`.",
      "A winch profile is already running."
    )
    abort_winch(msg, class = "winch_error_busy", call = call)
  }
  if (rprof_running()) {
    abort_winch("R's profiler is running: stop it with `Rprof(NULL)` first.", class = "winch_error_busy", call = call)
  }
  list(
    file = file, interval = interval, event = event, loops = loops, lines = lines, threads = threads,
    libr = libr, gc = gc, sample_bytes = as.double(sample_bytes), processes = processes
  )
}

# Whether a session of this process runs (the native side's word: a fork
# child has none, whatever its parent ran).
profile_active <- function() {
  isTRUE(check_result(rs_profile_active()))
}

# The session running in this process, as R knows it:
# * "none": none runs;
# * "profile": a winch_profile() call, still running, started it;
# * "rprof": winch_rprof() started it;
# * "orphan": one runs that R has no live entry for (an interrupt at the
#   wrong moment, winch unloaded and loaded again).
# R's entry (`the$profile_session`, from profile_begin()) holds the pid of
# the process that started the session: in a fork child, the parent's
# entry stands for nothing.
profile_state <- function() {
  if (!profile_active()) {
    return("none")
  }
  session <- the$profile_session
  if (is.null(session) || !identical(session$pid, Sys.getpid())) {
    return("orphan")
  }
  if (identical(session$kind, "rprof")) {
    return("rprof")
  }
  # winch_profile()'s session lives as long as its call.
  live <- any(vapply(sys.frames(), identical, NA, session$token))
  if (live) "profile" else "orphan"
}

# Starts sampling; returns the session's bookkeeping (resource use before
# the start, used when the session does not say what it was once sampling
# ran; a GC counter), kept in `the$profile_session` before the
# profiler starts, with `token` (what identifies the caller's session to
# profile_abandon()), `kind` ("profile" or "rprof") and the pid.
profile_begin <- function(opts, token, kind, call = rlang::caller_env()) {
  # Debug directories and debuginfod as the options say now: the names of
  # the profile are looked up with them when it stops.
  sync_options(call = call, capture_throws = FALSE)
  if (opts$loops) {
    learn_loops()
  }
  probes <- label_probes()
  usage <- resource_usage()
  gc_time <- gc.time()
  gc_counter <- new_gc_counter()
  # An entry left from a session that ended without forgetting it (the
  # profiler is not running: check_profile_args() made sure).
  if (!is.null(the$profile_session)) {
    profile_forget(the$profile_session)
  }
  session <- list(
    opts = opts, usage = usage, gc_time = gc_time, gc_counter = gc_counter,
    token = token, kind = kind, pid = Sys.getpid()
  )
  the$profile_session <- session
  check_result(
    rs_profile_start(
      as.double(opts$interval), opts$event, opts$loops, opts$region,
      opts$lines, list(quote(`for`), quote(`while`), quote(`repeat`), quote(srcfile), quote(filename)),
      as.list(sys.frames()), as.list(sys.calls()), probes$calls, probes$labels,
      opts$threads, list(
        libr = opts$libr, gc = opts$gc, sample_bytes = opts$sample_bytes %||% (512 * 1024),
        processes = identical(opts$processes, "all")
      )
    ),
    call = call
  )
  session
}

# Stops sampling and builds the profile.
profile_end <- function(session, call = rlang::caller_env()) {
  # Names for the samples: R's registered routines as they are now (DLLs
  # loaded while profiling included). Never raises an error.
  sync_registrations()
  raw <- check_result(rs_profile_stop(), call = call)
  profile_forget(session)
  p <- new_winch_profile(raw, session)
  warn_unsampled_processes(p, call = call)
  p
}

# Stops the session of `token` if it did not end normally (an error or an
# interrupt in the profiled code, or in starting it): nothing is returned,
# the timer and signal are restored. A session of another caller, or of
# the parent process in a fork child, is left alone.
profile_abandon <- function(token) {
  session <- the$profile_session
  if (is.null(session) || !identical(session$token, token)) {
    return(invisible())
  }
  if (identical(session$pid, Sys.getpid()) && profile_active()) {
    rs_profile_discard()
  }
  profile_forget(session)
}

# Stops whatever session runs, and forgets R's entry for it: for an
# orphaned session, and when winch is unloaded (`why`: what the
# winch_profile() call whose session it was will say).
profile_stop_discard <- function(why = NULL) {
  if (profile_active()) {
    rs_profile_discard()
  }
  session <- the$profile_session
  if (!is.null(session)) {
    if (!is.null(why)) the$profile_lost <- list(token = session$token, why = why)
    profile_forget(session)
  }
  invisible()
}

# Forgets R's entry for `session` (once sampling has stopped).
profile_forget <- function(session) {
  session$gc_counter$stop()
  if (identical(the$profile_session$token, session$token)) {
    the$profile_session <- NULL
  }
  invisible()
}

# Whether R's Rprof() is running: R gives builtins a context only while it
# runs, so the context under an Ops method that `+` dispatched to
# (evaluated by the AST interpreter) tells.
rprof_running <- function() {
  probe <- structure(list(), class = "winch_rprof_probe")
  res <- tryCatch(eval(quote(probe + 0)), winch_error = function(e) FALSE)
  isTRUE(res)
}

# (Exported for R's dispatch only: a probe is winch's own object, and
# `probe + 0` the one operation it has.)
#' @export
Ops.winch_rprof_probe <- function(e1, e2) {
  if (.Generic != "+" || missing(e2) || !identical(e2, 0)) {
    abort_bad_argument("A `winch_rprof_probe` is winch's own probe of R's profiler: only `probe + 0` is defined.")
  }
  check_result(rs_rprof_running(list(Ops.winch_rprof_probe)))
}

resource_usage <- function() {
  check_result(rs_resource_usage())
}

# Counts garbage collections: a finalizer of an unreachable environment runs
# after each collection that frees it, and makes the next one.
new_gc_counter <- function() {
  state <- new.env(parent = emptyenv())
  state$count <- 0L
  state$active <- TRUE
  arm <- function() {
    reg.finalizer(new.env(parent = emptyenv()), function(e) {
      if (state$active) {
        state$count <- state$count + 1L
        arm()
      }
    })
    invisible()
  }
  arm()
  list(
    stop = function() state$active <- FALSE,
    count = function() state$count
  )
}

# `pid`: the process profiled (this one, or the one winch_record() read),
# kept with this machine's name so that c() can say where each profile of
# a merged one was made.
new_winch_profile <- function(raw, session, usage_end = resource_usage(), gc_time = gc.time() - session$gc_time,
                              pid = Sys.getpid()) {
  as_df <- function(x) {
    attr(x, "row.names") <- .set_row_names(length(x[[1L]]))
    class(x) <- "data.frame"
    x
  }
  # The process's use while sampling ran, read where the session began
  # and ended (raw$usage_start/_end), so that what starting the profiler
  # and building the profile cost is left out; from R's side otherwise.
  usage_start <- raw$usage_start %||% session$usage
  usage_end <- raw$usage_end %||% usage_end
  usage <- mapply(function(a, b) b - a, usage_start, usage_end, SIMPLIFY = FALSE)
  usage$max_rss <- usage_end$max_rss
  structure(
    list(
      event = raw$event,
      interval = raw$interval,
      sample_bytes = raw$sample_bytes,
      start = structure(raw$start, class = c("POSIXct", "POSIXt")),
      duration = raw$duration,
      stacks = raw$stacks,
      functions = as_df(raw$functions),
      locations = as_df(raw$locations),
      lines = as_df(raw$lines),
      files = raw$files,
      modules = as_df(raw$modules),
      threads = as_df(raw$threads),
      processes = latest_commands(as_df(raw$processes), raw$relatives),
      stats = c(raw$stats, list(
        usage = usage,
        gc_time = gc_time[[3L]],
        gc_count = session$gc_counter$count(),
        unsampled = if (!is.null(raw$relatives)) unsampled_processes(raw$relatives, raw$processes$pid)
      )),
      options = list(
        loops = session$opts$loops, lines = session$opts$lines, threads = session$opts$threads,
        processes = session$opts$processes
      ),
      host = Sys.info()[["nodename"]],
      pid = as.double(pid)
    ),
    class = "winch_profile"
  )
}

# A column only memory profiles have, taken as `take` takes it (by a
# function of its own: marking `take` itself would mark a primitive such
# as as.double() everywhere).
memory_only <- function(take) structure(function(x) take(x), memory_only = TRUE)

# The parts of a profile the Rust writers read back, in order, each with
# how profile_parts() takes it from a winch_profile (a table: each column's
# way). Their description, with their R types, is written once in Rust
# (src/rust/src/profile_form.rs; `rs_profile_form()`): test-profile-formats.R
# checks that this list names the same parts, and that profile_parts()
# gives them the types that description says.
profile_form <- list(
  event = identity,
  interval = as.double,
  sample_bytes = as.double,
  start = as.double,
  duration = as.double,
  functions = list(name = identity, label = identity, kind = identity, module = as.integer, file = as.integer),
  locations = list(module = as.integer, address = identity),
  lines = list(location = as.integer, `function` = as.integer, file = as.integer, line = as.integer),
  stacks = list(
    count = as.double, thread = as.integer, process = as.integer, locations = function(x) lapply(x, as.integer),
    alloc_bytes = memory_only(as.double), alloc_count = memory_only(as.double),
    inuse_bytes = memory_only(as.double), inuse_count = memory_only(as.double)
  ),
  threads = list(number = as.integer, tid = as.double, name = as.character, cpu = as.double),
  processes = list(
    number = as.integer, pid = as.double, command = as.character, host = as.character, cpu = as.double,
    samples = as.double
  ),
  files = as.character,
  modules = list(path = identity, build_id = identity, start = identity, limit = identity, offset = identity)
)

# The profile as the Rust writers read it (from_r() in
# src/rust/src/profile.rs): a named list with the parts of `profile_form`,
# tables as lists of columns (a column the profile lacks is left out, and
# the writers say so). Fields are looked up by name: their order does not
# matter.
profile_parts <- function(p) {
  # What profiles made before memory profiles, or before threads were
  # sampled, lack.
  p$sample_bytes <- p$sample_bytes %||% NA_real_
  p$stacks$thread <- p$stacks$thread %||% rep(1L, length(p$stacks$count))
  p$threads <- profile_threads(p)
  p$stacks$process <- p$stacks$process %||% rep(1L, length(p$stacks$count))
  p$processes <- profile_processes(p)
  memory <- identical(p$event, "alloc")
  parts <- lapply(names(profile_form), function(part) {
    take <- profile_form[[part]]
    if (is.function(take)) {
      return(take(p[[part]]))
    }
    table <- p[[part]]
    columns <- intersect(names(take), names(table))
    if (!memory) {
      columns <- columns[!vapply(take[columns], function(f) isTRUE(attr(f, "memory_only")), NA)]
    }
    out <- lapply(columns, function(col) take[[col]](table[[col]]))
    names(out) <- columns
    out
  })
  names(parts) <- names(profile_form)
  parts
}

# The processes of a profile (a profile made before processes were sampled
# has the profiled process only, whose id and host were not kept).
profile_processes <- function(p) {
  p$processes %||% data.frame(
    number = 0L, pid = 0, command = "", host = "", cpu = NA_real_, samples = sum(p$stacks$count),
    stringsAsFactors = FALSE
  )
}

# The threads of a profile (a profile made before threads were sampled has
# R's main thread only).
profile_threads <- function(p) {
  p$threads %||% data.frame(number = 0L, tid = 0, name = "", cpu = NA_real_, stringsAsFactors = FALSE)
}

#' Write a profile in Rprof's format or as pprof
#'
#' `winch_write_rprof()` writes the file format of [Rprof()], which
#' [summaryRprof()], `profvis::profvis(prof_input = )` and other Rprof readers
#' read: one line per sample, innermost frame first. With `lines = TRUE`,
#' source positions are written as `Rprof(line.profiling = TRUE)` writes
#' them (native frames' file and line from their debug information), so
#' profvis can show C and C++ sources.
#'
#' `winch_write_pprof()` writes a gzipped `profile.proto` for
#' `go tool pprof` and the tools that read pprof profiles: R and native
#' functions, inlined calls, modules with their build-ids, files and lines.
#'
#' Both check the profile whole first (as `print()`, `summary()` and
#' `plot()` do): its fields, that every index is in range, and that its
#' sample counts fit its duration. A damaged profile is an error of class
#' `winch_error_bad_argument`, and nothing is written.
#'
#' @param profile A `winch_profile`.
#' @param path The file to write: a regular file (replaced) or a new file in
#'   a directory that exists. Anything else (a directory, a FIFO, a device)
#'   is an error of class `winch_error_io`, and nothing is written.
#' @param lines Write source positions?
#' @return `path`, invisibly.
#' @export
#' @examples
#' if (winch_available()) {
#'   p <- winch_profile(for (i in 1:100) sort(runif(1e4)), interval = 0.005)
#'   out <- tempfile()
#'   winch_write_rprof(p, out)
#'   summaryRprof(out)$by.total[1:3, ]
#'   winch_write_pprof(p, tempfile(fileext = ".pb.gz"))
#' }
winch_write_rprof <- function(profile, path, lines = profile$options$lines) {
  check_required(profile, what = "a `winch_profile`")
  check_required(path, what = "the file to write")
  check_profile(profile)
  check_output_file(path)
  check_flag(lines)
  check_result(rs_profile_write(profile_parts(profile), normalizePath(path, mustWork = FALSE), "rprof", lines))
  invisible(path)
}

#' @rdname winch_write_rprof
#' @export
winch_write_pprof <- function(profile, path) {
  check_required(profile, what = "a `winch_profile`")
  check_required(path, what = "the file to write")
  check_profile(profile)
  check_output_file(path)
  check_result(rs_profile_write(profile_parts(profile), normalizePath(path, mustWork = FALSE), "pprof", FALSE))
  invisible(path)
}
