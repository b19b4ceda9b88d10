#' Profile another process from outside
#'
#' Samples the stacks of process `pid`, which never loaded winch, every
#' `interval` seconds for `duration` seconds, and returns the same kind of
#' profile [winch_profile()] returns in-process: R's main thread's R frames
#' with native frames in place, other threads under `[thread N]`, with
#' `print()`, `summary()`, `plot()`, `as.data.frame()`,
#' [winch_write_rprof()], [winch_write_pprof()] and
#' [winch_write_collapsed()]. The process goes on running.
#'
#' Each sample stops every thread of the process for as long as it takes
#' to read it (as [winch_dump()] does: `PTRACE_SEIZE` and
#' `PTRACE_INTERRUPT`, no signal, then detached): about 0.1 ms for a
#' single-threaded R process with a shallow stack, 0.6 ms with 200 R and
#' native frames (more with more threads), so at the default 100 samples a
#' second it runs about 1 % slower (measured by `bench/outside.R`). On a machine whose cores are all busy, a stopped
#' process may wait for a core to go on, and a sample can cost it several
#' milliseconds: use a longer `interval` there. Between samples it is not
#' traced at all: an interrupt of the recording R session (or an error)
#' leaves it running untouched. A thread that does not stop in time (see
#' [winch_dump()]) is left out of that sample; a process killed during a
#' sample ends the recording, and nothing of it stays traced (its parent
#' reaps it as if it had never been recorded).
#'
#' By default the profile is of CPU time, as `winch_profile()`'s: a thread
#' is sampled when it runs at the moment of a sample (never in a sleep it
#' went into since the last one). When the process's threads wait for a
#' core, a running thread is not always on one: each sample then stands
#' for the share of the time the thread spent on a CPU rather than waiting
#' for one (from the kernel's counts of both), so that the samples add up
#' to the CPU time used, whatever the process's share of the cores. With
#' `idle = TRUE` every thread is
#' sampled at every sample (elapsed time: waiting shows).
#'
#' Each sample of R's main thread is read the way [winch_profile()] reads
#' its own samples (the same code, over the other process's memory): R
#' frames labelled as `Rprof()` labels them, native frames in place, loops
#' as frames (`f[for]`), garbage collection as a `<GC>` frame under the R
#' code that allocated, and with `lines = TRUE` source positions. Loops are
#' named by kind, and byte code's loops seen at all, with what this R
#' session learns about its own R (as [winch_profile()] does): that holds
#' when the process runs the same build of R (the same build-id of
#' `libR.so`, as when both run the same installation; the `winch` command
#' uses the R it is installed in). Another build of R: AST loops are
#' `[loop]`, and byte code's loops are not shown. Native frames are named
#' as [winch_dump()] names them. Permissions are those of [winch_dump()].
#'
#' Other threads' samples are their native frames under `[thread N]`, at
#' the root of the profile: from outside, which R call started a thread is
#' not known ([winch_profile()] learns it from `pthread_create()`, which it
#' hooks in its own process; see its section "Threads"), so no thread is
#' shown under an R call.
#'
#' A thread is sampled where the kernel stops it, which favours the points
#' right after system calls: code that makes a system call every few
#' microseconds is seen at its system calls more often than it is there: a
#' C loop that reads a CPU
#' clock (`clock_gettime()` of a thread's CPU time, a system call) a few
#' million times a second showed all its samples in the vDSO's
#' `__vdso_clock_gettime`, where `perf` and [winch_profile()] (sampling in
#' the process, on its own CPU clock) put over 90 % in the loop itself.
#' Totals (the time under each R call and native function) are not
#' affected; self time at such call sites is.
#'
#' As in [winch_profile()], a sample that stands for the kernel's time has
#' a frame `[kernel]` innermost; from outside, each thread's system share
#' comes from `/proc/PID/task/TID/stat` (in clock ticks, too coarse for one
#' sample), so `[kernel]` goes to the thread's samples in turn as its
#' system share comes due, wherever the thread was, not to the samples
#' taken in a system call.
#'
#' @section Child processes:
#' With `children = TRUE`, the processes working for it are recorded too:
#' its descendants (those the kernel lists as children not yet waited for,
#' children of children included) and its workers (a PSOCK cluster's R
#' sessions; see "Child processes" in [winch_dump()]). Descendants are
#' looked for at every sample, workers every quarter of a second; each is
#' recorded from when it is first seen, one process after another at each
#' sample, and kept when it ends. The result is the
#' profiles of all of them combined with `c()` (see [c.winch_profile()]):
#' each process's samples under its own `[process host:pid]` frame, the
#' recorded process first. A forked worker's stack starts with the calls
#' of its parent that forked it (`mclapply()`'s worker shows
#' `hold > mclapply > lapply > FUN > ...`): from outside, the parent's
#' frames are not cut off as [winch_profile()] cuts them in-process.
#' Each descendant costs the recording a start (reading what it loaded) and
#' a sample per interval: a descendant that lives shorter than an interval
#' may be missed, and one that cannot be read is listed in
#' `target$not_recorded` with the reason (and, unless it ended before it
#' was first read, named in a warning of class
#' `winch_warning_children_missed`).
#'
#' @param pid The process id: one positive whole number, at most
#'   `.Machine$integer.max`, not this R process's own (use
#'   [winch_profile()] for that).
#' @param duration Seconds to record: one number, more than 0 and at most
#'   604800 (one week). The recording ends earlier if the process ends.
#' @param interval Seconds between samples: at least 0.001 and at most
#'   `duration`.
#' @param file `NULL`, or a file to write the profile to in `Rprof()`'s
#'   format as well; checked before the recording starts, as `file` in
#'   [winch_profile()] is.
#' @param threads `"all"` (default) or `"main"` (R's main thread only).
#' @param idle Sample threads that are not running too?
#' @param loops Show R's loops as frames (see [winch_profile()])?
#' @param lines Record source positions (where the process's R code was
#'   parsed with `keep.source = TRUE`)? Written to `file` too.
#' @param children Record the process's descendants and workers too (see
#'   "Child processes")? `TRUE` or `FALSE`.
#' @return A `winch_profile`. Its `target` element holds the process's
#'   `pid`, whether it `ended` during the recording, the number of samples
#'   `missed` (ticks that took no sample: the threads to sample did not
#'   stop in time, no thread was running, waiting for a core, a thread's
#'   share had not made an interval yet, or the threads seen running had
#'   gone to sleep in a system call by the time they stopped) and a `note` saying why R's frames
#'   are missing, if they are; with `children = TRUE`, `children` (a data
#'   frame of the processes recorded: `pid`, `parent` (the process it works
#'   for), `relation` (`"child"` or `"worker"`), whether it `ended`, samples
#'   `missed`) and `not_recorded` (`pid`, `parent`, `relation`, `reason`).
#' @examples
#' \dontrun{
#' p <- winch_record(12345, duration = 10)
#' p
#' plot(p)
#' winch_write_pprof(p, "server.pb.gz")
#' # An R session running mclapply() or parLapply(): the session and its
#' # workers.
#' winch_record(12345, duration = 10, children = TRUE)
#' }
#' @export
winch_record <- function(pid, duration, interval = 0.01, file = NULL, threads = c("all", "main"), idle = FALSE,
                         loops = TRUE, lines = FALSE, children = FALSE) {
  check_required(pid, what = "a process id")
  pid <- check_pid(pid)
  check_required(duration, what = "the seconds to record")
  check_number(duration, 0, max_record_seconds, unit = "seconds", min_open = TRUE, why = " (one week)")
  check_number(interval, 0.001, duration, unit = "seconds", why = " (`duration`)")
  threads <- check_choice(threads, c("all", "main"))
  check_flag(idle)
  check_flag(loops)
  check_flag(lines)
  check_flag(children)
  check_output_file(file, null_ok = TRUE)
  check_writable(file)
  sync_options(capture_throws = FALSE)
  if (loops || lines) {
    # What is learnt about this R holds for a process running the same build.
    learn_loops()
  }
  usage <- target_usage(pid)
  started <- Sys.time()
  check_result(rs_record_start(pid, interval, threads, idle, loops, lines, children))
  on.exit(rs_record_discard(), add = TRUE)
  ended <- FALSE
  next_at <- started
  deadline <- started + duration
  repeat {
    if (!check_result(rs_record_tick())) {
      ended <- TRUE
      break
    }
    now <- Sys.time()
    if (now >= deadline) break
    next_at <- next_at + interval
    wait <- as.numeric(next_at - now, units = "secs")
    if (wait > 0) {
      Sys.sleep(min(wait, as.numeric(deadline - now, units = "secs")))
    } else {
      next_at <- now # late: no burst to catch up
    }
  }
  res <- check_result(rs_record_stop())
  opts <- list(loops = loops, lines = lines, threads = threads)
  raw <- res$root
  p <- recorded_profile(raw, opts, usage, if (ended) usage else target_usage(pid), pid)
  target <- list(pid = pid, ended = ended, missed = raw$missed, note = raw$note)
  if (children) {
    kids <- lapply(res$children, function(k) recorded_profile(k$profile, opts, k$usage_start, k$usage_end, k$pid))
    p <- do.call(c, c(list(p), kids))
    target$children <- data.frame(
      pid = vapply(res$children, function(k) k$pid, 0L),
      parent = vapply(res$children, function(k) k$parent, 0L),
      relation = vapply(res$children, function(k) k$relation, ""),
      ended = vapply(res$children, function(k) k$ended, NA),
      missed = vapply(res$children, function(k) k$profile$missed, 0)
    )
    target$not_recorded <- as.data.frame(res$not_recorded, stringsAsFactors = FALSE)
    # (Those that ended before they were read, or this session itself,
    # are listed, not warned about: nothing of them was there to record.)
    lost <- with(target$not_recorded, !reason %in% c("it ended before it was first read", "it is the recording R process"))
    warn_children_missed(target$not_recorded$pid[lost], target$not_recorded$reason[lost], "recorded")
  }
  p$target <- target
  if (!is.null(file)) {
    winch_write_rprof(p, file)
  }
  p
}

# The profile of one recorded process (`raw`, from rs_record_stop()), its
# resource use from `usage` to `usage_end`.
recorded_profile <- function(raw, opts, usage, usage_end, pid) {
  session <- list(opts = opts, usage = usage, gc_counter = list(count = function() NA_real_))
  new_winch_profile(raw, session, usage_end = usage_end, gc_time = c(NA_real_, NA_real_, NA_real_), pid = pid)
}

# The longest recording: one week (a deadline that is never reached would
# leave the recording to an interrupt).
max_record_seconds <- 7 * 24 * 3600

# What /proc tells of process `pid`'s resource use so far, as
# resource_usage() describes this process's (NA where /proc has nothing).
target_usage <- function(pid) {
  check_result(rs_target_usage(as.integer(pid)))
}
