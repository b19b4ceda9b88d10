# print(), summary() and plot() for winch_profile objects.

# For each stack, its function ids (indices into p$functions), innermost
# first: every line of every location.
stack_functions <- function(p) {
  by_location <- split(p$lines$`function`, factor(p$lines$location, levels = seq_len(nrow(p$locations))))
  lapply(p$stacks$locations, function(locs) unlist(by_location[locs], use.names = FALSE))
}

# Self and total counts (or `count`, any value per stack) per function.
function_counts <- function(p, stacks = stack_functions(p), count = p$stacks$count) {
  n <- nrow(p$functions)
  self <- numeric(n)
  total <- numeric(n)
  for (i in seq_along(stacks)) {
    f <- stacks[[i]]
    if (length(f)) {
      self[f[[1L]]] <- self[f[[1L]]] + count[[i]]
      u <- unique(f)
      total[u] <- total[u] + count[[i]]
    }
  }
  list(self = self, total = total)
}

profile_seconds <- function(p) {
  sum(p$stacks$count) * p$interval
}

# What a profile's samples measure, in words: "CPU time of R's main thread
# and 2 other threads".
profile_what <- function(p) {
  self <- stacks_of_self(p)
  others <- length(setdiff(unique((p$stacks$thread %||% 1L)[self]), 1L))
  who <- if (others > 0) {
    sprintf("R's main thread and %d other thread%s", others, if (others == 1) "" else "s")
  } else {
    "R's main thread"
  }
  pr <- profile_processes(p)
  sources <- process_sources(pr)
  if (!is.null(pr$source)) {
    # A merged profile (c()): the main threads of its sources.
    n <- sum(sources)
    who <- sprintf("R's main thread%s of %d process%s", if (n == 1) "" else "s", n, if (n == 1) "" else "es")
    if (others > 0) who <- sprintf("%s and %d other thread%s", who, others, if (others == 1) "" else "s")
  }
  process <- unique(p$stacks$process %||% 1L)
  children <- length(process[!is.na(process) & !sources[process]])
  if (children > 0) {
    who <- sprintf("%s, and %d other process%s", who, children, if (children == 1) "" else "es")
  }
  if (p$event == "cpu") paste("CPU time of", who) else paste("elapsed time of", who)
}

# Which stacks are the profiled process's own (not a child's; in a merged
# profile, its sources').
stacks_of_self <- function(p) {
  process <- p$stacks$process %||% rep(1L, length(p$stacks$count))
  if (!is.null(p$processes$source)) {
    return(process_sources(p$processes)[process])
  }
  process == 1L
}

# The CPU time the profiled process used while it was profiled, from its
# own accounting (`stats`: a profile's), less its profiler's collector
# thread's (the profiler's cost, not the profiled code's; see the cost in
# summary()).
own_cpu <- function(stats) {
  u <- stats$usage
  collector <- stats$collector_cpu %||% 0
  # (Never below 0: the collector's time and the process's are read at
  # nearly but not exactly the same moments.)
  max(0, (u$user %||% NA_real_) + (u$system %||% NA_real_) - if (is.finite(collector)) collector else 0)
}

# CPU time per process: the profiled process (from its own accounting) and
# each child (from its clock, or the kernel's account), and sampled.
by_process_table <- function(p) {
  pr <- profile_processes(p)
  process <- p$stacks$process %||% rep(1L, length(p$stacks$count))
  sampled <- vapply(seq_len(nrow(pr)), function(i) sum(p$stacks$count[process == i]), 0) * p$interval
  cpu <- pr$cpu
  cpu[pr$number == 0L] <- own_cpu(p$stats)
  out <- data.frame(
    process = ifelse(pr$number == 0L, "self", paste0("[", process_names(pr), "]")),
    pid = pr$pid,
    host = pr$host,
    command = pr$command,
    cpu = cpu,
    sampled = sampled,
    stringsAsFactors = FALSE
  )
  # Processes that worked for it unsampled (R/profile-processes.R).
  un <- p$stats$unsampled
  if (is.data.frame(un) && nrow(un)) {
    out <- rbind(out, data.frame(
      process = ifelse(un$relation == "worker", "[worker, not sampled]", "[child, not sampled]"),
      pid = as.double(un$pid), host = un$host, command = un$command, cpu = un$cpu,
      sampled = 0, stringsAsFactors = FALSE
    ))
  }
  # Each process's CPU time no sample stands for (a CPU profile's samples
  # are CPU time; an elapsed profile's are not comparable).
  out$unseen <- if (p$event == "cpu") pmax(0, out$cpu - out$sampled) else NA_real_
  out
}

# CPU time per thread: measured from each thread's own clock, and sampled.
by_thread_table <- function(p) {
  th <- profile_threads(p)
  thread <- p$stacks$thread %||% rep(1L, length(p$stacks$count))
  # (The profiled process's threads: children's samples are theirs.)
  self <- stacks_of_self(p)
  sampled <- vapply(seq_len(nrow(th)), function(i) sum(p$stacks$count[thread == i & self]), 0) * p$interval
  data.frame(
    thread = ifelse(th$number == 0L, "main", paste0("[thread ", th$number, "]")),
    tid = th$tid,
    name = th$name,
    cpu = th$cpu,
    sampled = sampled,
    stringsAsFactors = FALSE
  )
}

# The share of the process's CPU time over the run that no sample stands
# for: threads not sampled (all but the main thread with threads = "main",
# threads shorter than the profiler's poll), samples lost.
unseen_share <- function(p, threads = by_thread_table(p), processes = by_process_table(p)) {
  tree <- tree_cpu(p, processes)
  children <- tree$children
  seen <- if (p$event == "cpu") {
    sum(threads$sampled) + sum(children$sampled)
  } else {
    # (An elapsed profile's samples are not CPU time: a process sampled
    # is seen for the CPU time it used, one not sampled is not.)
    sampled <- !endsWith(children$process, "not sampled]")
    sum(threads$cpu[threads$sampled > 0], na.rm = TRUE) + sum(tree$followed[sampled])
  }
  if (!is.finite(tree$total) || tree$total <= 0) {
    return(NA_real_)
  }
  max(0, tree$total - seen) / tree$total
}

# The CPU time the profiled process and those working for it used during
# the profile (`total`; NA when the process's own is not known), with the
# rows of `processes` (see by_process_table()) other than its own
# (`children`) and the time each is known to have used (`followed`).
tree_cpu <- function(p, processes = by_process_table(p)) {
  u <- p$stats$usage
  process <- own_cpu(p$stats)
  # The children's CPU time: those the profile followed, or what all
  # children used during it (the kernel's account of those waited for, and
  # the time of those not yet waited for, living or ended), whichever is
  # more: a child not sampled is unseen.
  # (Processes that worked for it unsampled are rows after its own: see
  # by_process_table(). The time of those not its children, workers of a
  # PSOCK cluster, is in no account of its children.)
  sources <- process_sources(profile_processes(p))
  children <- processes[c(!sources, rep(TRUE, nrow(processes) - length(sources))), , drop = FALSE]
  used <- (u$children_user %||% 0) + (u$children_system %||% 0)
  un <- p$stats$unsampled
  if (is.data.frame(un) && is.finite(used)) used <- used + sum(un$cpu[!counted_as_child(un)])
  followed <- ifelse(is.na(children$cpu), children$sampled, children$cpu)
  children_cpu <- max(if (is.finite(used)) used else 0, sum(followed))
  list(total = process + children_cpu, children = children, followed = followed)
}

#' Print a profile
#'
#' Prints the number of samples, what they measure, and the functions with
#' the most self time. Times in a column share one unit; labels longer
#' than `width` are shortened in the middle (`summary()` has them whole).
#'
#' @param x A `winch_profile`.
#' @param ... Not used. Only the arguments of [print.default()] (which R
#'   passes on when it prints a list holding the profile) are allowed, and
#'   ignored; any other (a misspelled `n`) is an error.
#' @param n How many functions to list: a whole number, 0 or more (`Inf`
#'   lists all).
#' @param width Labels longer than this many characters are shortened: a
#'   whole number, at least 9 (`Inf`: never shortened); by default, what
#'   leaves room for the other columns in `getOption("width")`.
#' @return `x`, invisibly.
#' @export
print.winch_profile <- function(x, ..., n = 10L, width = NULL) {
  check_dots_among(..., ignored = default_method_args(print.default), takes = "`n` and `width`")
  check_count(n, 0, why = " (`Inf` lists all)")
  check_count(width, 9, why = " (`Inf`: labels are never shortened)", null_ok = TRUE)
  width <- min(width %||% max(20L, getOption("width", 80L) - 42L), .Machine$integer.max)
  check_profile(x)
  if (is_memory_profile(x)) {
    return(print_memory_profile(x, n, width))
  }
  total <- sum(x$stacks$count)
  what <- profile_what(x)
  cat(sprintf(
    "<winch_profile> %s samples of %s, every %s: %s sampled over %s\n",
    format(total, big.mark = ","), what, format_seconds(x$interval), format_seconds(total * x$interval),
    format_seconds(x$duration)
  ))
  if (total > 0) {
    tab <- by_function_table(x)
    tab <- utils::head(tab[order(-tab$self, -tab$total), ], n)
    cat("Functions by self time:\n")
    tab[[1L]] <- shorten(tab[[1L]], width)
    print(format_time_table(tab, total * x$interval), row.names = FALSE, right = FALSE)
  }
  cat("summary() for modules, resource use and the profiler's own cost; plot() for a flame graph.\n")
  hint <- unnamed_hint(x)
  if (!is.null(hint)) {
    cat(hint, "\n", sep = "")
  }
  invisible(x)
}

# One line saying how to name unnamed native frames, when they hold much of
# the native self time, debuginfod servers are configured and winch was
# neither allowed nor told not to ask them.
unnamed_hint <- function(p) {
  if (!is.null(getOption("winch.debuginfod")) || !nzchar(trimws(Sys.getenv("DEBUGINFOD_URLS")))) {
    return(NULL)
  }
  tab <- by_function_table(p)
  native <- tab$kind == "native"
  total <- sum(tab$self[native])
  unnamed <- sum(tab$self[native & grepl("::\\+0x[0-9a-f]+\\??$", tab$label)])
  if (total <= 0 || unnamed / total < 0.2) {
    return(NULL)
  }
  sprintf(
    "%.0f%% of the native time is in unnamed functions: `options(winch.debuginfod = TRUE)` names them from the servers in DEBUGINFOD_URLS (`FALSE` silences this).",
    100 * unnamed / total
  )
}

by_function_table <- function(p) {
  counts <- function_counts(p)
  f <- p$functions
  module <- ifelse(is.na(f$module), NA_character_, basename(p$modules$path[f$module]))
  data.frame(
    label = f$label,
    kind = f$kind,
    module = module,
    self = counts$self * p$interval,
    total = counts$total * p$interval,
    stringsAsFactors = FALSE
  )
}

# Self and total time per native module (or `count`, any value per stack,
# times `scale`).
by_module_table <- function(p, count = p$stacks$count, scale = p$interval) {
  stacks <- stack_functions(p)
  fmod <- p$functions$module
  modules <- p$modules$path
  self <- numeric(length(modules))
  total <- numeric(length(modules))
  for (i in seq_along(stacks)) {
    m <- fmod[stacks[[i]]]
    # Self: the innermost native frame, when the sample is in native code.
    if (length(m) && !is.na(m[[1L]])) {
      self[m[[1L]]] <- self[m[[1L]]] + count[[i]]
    }
    u <- unique(m[!is.na(m)])
    total[u] <- total[u] + count[[i]]
  }
  data.frame(module = modules, self = self * scale, total = total * scale, stringsAsFactors = FALSE)
}

format_seconds <- function(x) {
  ifelse(is.na(x), "NA", ifelse(x < 1e-3, sprintf("%.1f \u00b5s", x * 1e6),
    ifelse(x < 1, sprintf("%.1f ms", x * 1e3), sprintf("%.2f s", x))
  ))
}

# Times in one unit, the one that suits the largest: "1.46 s" beside
# "0.00 s" rather than beside "0.0 µs", so that a column reads down.
format_seconds_column <- function(x) {
  top <- suppressWarnings(max(abs(x), na.rm = TRUE))
  if (!is.finite(top)) {
    return(rep("NA", length(x)))
  }
  unit <- if (top >= 1) list(1, "s", 2L) else if (top >= 1e-2) list(1e3, "ms", 1L) else list(1e6, "\u00b5s", 1L)
  out <- ifelse(is.na(x), "NA", paste(formatC(x * unit[[1L]], format = "f", digits = unit[[3L]]), unit[[2L]]))
  # Right-aligned, so that the digits line up.
  formatC(out, width = max(nchar(out)))
}

# Labels longer than `width` characters, with their middle replaced by
# "...": both ends of a long C++ name say the most.
shorten <- function(x, width) {
  width <- max(as.integer(width), 9L)
  long <- !is.na(x) & nchar(x) > width
  keep <- width - 3L
  head <- ceiling(keep / 2)
  x[long] <- paste0(substr(x[long], 1L, head), "...", substring(x[long], nchar(x[long]) - (keep - head) + 1L))
  x
}

# Self and total columns (times, or bytes with `format_bytes_column`) with
# their shares of `total`.
format_time_table <- function(tab, total, format_column = format_seconds_column) {
  pct <- function(x) if (total > 0) sprintf("%5.1f%%", 100 * x / total) else "   NA"
  out <- data.frame(
    function_ = tab[[1L]],
    self = format_column(tab$self),
    `self%` = vapply(tab$self, pct, ""),
    total = format_column(tab$total),
    `total%` = vapply(tab$total, pct, ""),
    check.names = FALSE,
    stringsAsFactors = FALSE
  )
  names(out)[[1L]] <- names(tab)[[1L]]
  out
}

#' Summarise a profile
#'
#' @param object A `winch_profile`.
#' @param ... Not used; must be empty.
#' @return An object of class `summary.winch_profile`, a list with
#'   * `by_function`: self and total time per function (R, native and loops);
#'   * `by_module`: self and total time per native module;
#'   * `samples` (timer intervals sampled), `handler_runs`, `truncated`
#'     (samples whose native stack or context chain was not read whole, kept
#'     and counted), `dropped` (intervals lost because the buffer was
#'     full) and `outside` (intervals sampled while the profiler itself was
#'     starting or stopping, left out);
#'   * `usage`: the run's resource use (`getrusage()` deltas from once
#'     sampling had begun to as it was stopped, so that starting the
#'     profiler and building the profile are left out: user and system
#'     time, largest resident set, minor and major page faults, block input
#'     and output, voluntary and involuntary context switches) and R's
#'     garbage collections (`gc_count`, `gc_time`);
#'   * `cost`: the profiler's own cost: time spent in the signal handler in
#'     total, median and 99th percentile per sample, and as a share of the
#'     run; and `collector`, the CPU time of the profiler's collector
#'     thread (looking for threads and processes, taking the samples from
#'     their buffers), which is not the profiled code's: the process's CPU
#'     time in `by_process` and `unseen` leaves it out; and, when
#'     processes were read from outside (workers, callr's sessions,
#'     programs: see [winch_profile()], "Processes"), `worker_stops`, how
#'     many of their samples were taken, with `worker_stop_median` and
#'     `worker_stop_p99`, how long one kept its process stopped (what a
#'     sample costs it);
#'   * `by_thread`: per thread (R's main thread first, then `[thread N]`
#'     as numbered in the stacks): its kernel id, name, CPU time measured
#'     from its own clock while the profile ran, and time sampled;
#'   * `by_process`: per process (the profiled one, `self`, then each
#'     child as `[process N]`; in a merged profile, each source as
#'     `[process host:pid]` and its children; then the processes that
#'     worked for it unsampled, `[worker, not sampled]` and `[child, not
#'     sampled]`, see [winch_profile()], "Processes"), its id, host,
#'     command, CPU time, time sampled and `unseen`, the CPU time no sample
#'     stands for (`NA` in an elapsed-time profile);
#'   * `refused`: the processes winch tried to read and could not (a
#'     worker the kernel does not let it trace: Yama's `ptrace_scope`, a
#'     container without `CAP_SYS_PTRACE`), with why (`pid`, `why`);
#'   * `unseen`: the share of the CPU time of the process and its child
#'     processes over the run that no sample stands for (with
#'     `threads = "main"`, the other threads' share; with `"all"`, threads
#'     that lived shorter than the profiler looks for new ones, about 1 ms,
#'     and samples lost; children not sampled, with `processes = "self"`
#'     all of them, whether they ended or still run).
#'
#'   For a memory profile (`event = "alloc"`): `sample_bytes`, `samples`,
#'   `alloc_bytes` and `inuse_bytes` (estimated bytes allocated, and still
#'   allocated at the end), `allocations` and `sampled_allocations`
#'   (counted by each thread up to its last sample), `untracked` (sampled
#'   blocks whose free could not be followed: counted as freed), `forked`
#'   (child processes forked during the run: not sampled), `by_function` (bytes allocated self and total, and still allocated,
#'   per function), `by_module` (bytes allocated in and under each native
#'   module), `largest_inuse` (the stacks holding the most bytes at
#'   the end), `r_heap` (R's heap in bytes as [gc()] tells it: `before`
#'   and `after` the run, and `peak`, the most held at a collection during
#'   it), `usage` and `cost`.
#'
#'   Figures a profile does not have (its `stats` removed) are `NA`. A
#'   damaged profile (a field edited to something it cannot hold) is an
#'   error of class `winch_error_bad_argument` that names the field, as for
#'   `print()`, `plot()`, `as.data.frame()` and the writers.
#' @export
summary.winch_profile <- function(object, ...) {
  check_no_dots(...)
  p <- check_profile(object)
  if (is_memory_profile(p)) {
    return(summary_memory_profile(p))
  }
  s <- p$stats
  fun <- by_function_table(p)
  threads <- by_thread_table(p)
  processes <- by_process_table(p)
  structure(
    list(
      event = p$event,
      interval = p$interval,
      duration = p$duration,
      samples = sum(p$stacks$count),
      handler_runs = s$samples,
      truncated = s$truncated,
      dropped = s$dropped,
      outside = s$outside,
      distinct_stacks = s$distinct_stacks,
      by_function = fun[order(-fun$self, -fun$total), ],
      by_module = by_module_table(p),
      usage = c(s$usage, list(gc_count = s$gc_count, gc_time = s$gc_time)),
      cost = list(
        handler_total = s$handler_total,
        handler_median = s$handler_median,
        handler_p99 = s$handler_p99,
        share = if (p$duration > 0) s$handler_total / p$duration else NA_real_,
        collector = s$collector_cpu %||% NA_real_,
        worker_stops = s$worker_stops %||% 0,
        worker_stop_median = s$worker_stop_median %||% NA_real_,
        worker_stop_p99 = s$worker_stop_p99 %||% NA_real_
      ),
      by_thread = threads,
      by_process = processes,
      processes_missed = s$processes_missed %||% 0,
      refused = refused_processes(s$unsampled),
      unseen = unseen_share(p, threads, processes),
      what = profile_what(p),
      merged = !is.null(p$processes$source),
      thread_stats = list(
        joined = s$thread_joined %||% 0, alone = s$thread_alone %||% 0,
        dropped = s$thread_dropped %||% 0
      )
    ),
    class = "summary.winch_profile"
  )
}

#' @export
print.summary.winch_profile <- function(x, ..., n = 15L) {
  check_dots_among(..., ignored = default_method_args(print.default), takes = "`n`")
  check_count(n, 0, why = " (`Inf` lists all)")
  if (identical(x$event, "alloc")) {
    return(print_memory_summary(x, n))
  }
  total <- x$samples * x$interval
  cat(sprintf(
    "%s samples (%s every %s) over %s; %s with a truncated stack, %s dropped, %s distinct stacks\n",
    format(x$samples, big.mark = ","), x$event, format_seconds(x$interval), format_seconds(x$duration),
    format(x$truncated, big.mark = ","), format(x$dropped, big.mark = ","),
    format(x$distinct_stacks, big.mark = ",")
  ))
  if (isTRUE(x$outside > 0)) {
    cat(sprintf("%s samples of the profiler starting or stopping left out\n", format(x$outside, big.mark = ",")))
  }
  if (!is.null(x$what)) {
    cat(sprintf("Sampled: %s\n", x$what))
  }
  th <- x$by_thread
  if (!is.null(th) && nrow(th)) {
    cat("\nBy thread (CPU time from each thread's clock, and time sampled):\n")
    out <- data.frame(
      thread = th$thread, tid = format(th$tid, scientific = FALSE), name = th$name,
      cpu = format_seconds_column(th$cpu), sampled = format_seconds_column(th$sampled),
      stringsAsFactors = FALSE
    )
    print(out, row.names = FALSE, right = FALSE)
  }
  pr <- x$by_process
  if (!is.null(pr) && nrow(pr) > 1L) {
    cat(if (all(is.na(pr$unseen))) {
      "\nBy process (CPU time from each process's accounting, and time sampled):\n"
    } else {
      "\nBy process (CPU time from each process's accounting, time sampled, unseen):\n"
    })
    out <- data.frame(
      process = pr$process, pid = format(pr$pid, scientific = FALSE), host = pr$host,
      cpu = format_seconds_column(pr$cpu), sampled = format_seconds_column(pr$sampled),
      unseen = format_seconds_column(pr$unseen),
      command = shorten(pr$command, 40L),
      stringsAsFactors = FALSE
    )
    # (An elapsed profile's samples are not CPU time: nothing is unseen.)
    if (all(is.na(pr$unseen))) out$unseen <- NULL
    print(out, row.names = FALSE, right = FALSE)
    if (isTRUE(x$processes_missed > 0)) {
      cat(sprintf("%s child processes were not sampled (too many at once)\n", format(x$processes_missed)))
    }
    refused <- x$refused
    if (is.data.frame(refused) && nrow(refused)) {
      cat(paste0(refused_line(refused$pid, refused$why), "\n"), sep = "")
    }
  }
  if (!is.null(x$unseen)) {
    cat(sprintf(
      "Not seen by the profile: %s of %s CPU time%s\n",
      if (is.na(x$unseen)) "NA" else sprintf("%.1f%%", 100 * x$unseen),
      if (isTRUE(x$merged)) {
        "the merged processes' (and their children's)"
      } else if (!is.null(pr) && nrow(pr) > 1L) "the process's and its children's" else "the process's",
      if (!isTRUE(x$unseen > 0.05)) {
        ""
      } else if (any(endsWith(pr$process, "not sampled]"))) {
        " (processes not sampled: see ?winch_profile, \"Processes\")"
      } else if (nrow(th) == 1L) " (other threads: profile them with threads = \"all\")" else ""
    ))
  }
  cat("\nBy function:\n")
  print(format_time_table(utils::head(x$by_function, n), total), row.names = FALSE, right = FALSE)
  mods <- x$by_module[order(-x$by_module$total), ]
  mods <- mods[mods$total > 0, , drop = FALSE]
  if (nrow(mods)) {
    cat("\nBy native module:\n")
    mods$module <- basename(mods$module)
    print(format_time_table(mods, total), row.names = FALSE, right = FALSE)
  }
  u <- x$usage
  cat("\nResource use over the run:\n")
  cat(sprintf(
    "  CPU %s user, %s system; max RSS %.1f MB; page faults %s minor, %s major\n",
    format_seconds(u$user), format_seconds(u$system), u$max_rss / 2^20,
    format(u$minor_faults, big.mark = ","), format(u$major_faults, big.mark = ",")
  ))
  cat(sprintf(
    "  block I/O %s in, %s out; context switches %s voluntary, %s involuntary\n",
    format(u$block_input, big.mark = ","), format(u$block_output, big.mark = ","),
    format(u$voluntary_switches, big.mark = ","), format(u$involuntary_switches, big.mark = ",")
  ))
  cat(sprintf("  R garbage collections: %d, %s\n", as.integer(u$gc_count), format_seconds(u$gc_time)))
  k <- x$cost
  cat(sprintf(
    "\nProfiler's own cost: %s in the signal handler (%.2f%% of the run), %s median and %s 99th percentile per sample%s\n",
    format_seconds(k$handler_total), 100 * k$share, format_seconds(k$handler_median), format_seconds(k$handler_p99),
    if (is.finite(k$collector %||% NA_real_)) sprintf("; %s of CPU time in its collector thread", format_seconds(k$collector)) else ""
  ))
  if ((k$worker_stops %||% 0) > 0) {
    cat(sprintf(
      "Processes read from outside: %s samples, each stopping its process %s median, %s 99th percentile\n",
      format(k$worker_stops, big.mark = ","), format_seconds(k$worker_stop_median), format_seconds(k$worker_stop_p99)
    ))
  }
  invisible(x)
}

#' Flame graph of a profile
#'
#' Draws the profile as a flame graph with base graphics: the outermost
#' frames at the bottom, each frame as wide as the time spent in it and in
#' what it called. R frames are grey, loops light grey, native frames
#' coloured by module (legend at the top).
#'
#' A frame's label is drawn whole where it fits, shortened in the middle
#' (`fo...ar`) where a few characters fit, and left out in narrower frames:
#' to read those, draw the part of the profile under one frame with
#' `focus`, or list every stack with [as.data.frame()][as.data.frame.winch_profile].
#'
#' @param x A `winch_profile`.
#' @param ... Graphical parameters passed to [graphics::plot.window()] (named
#'   as [graphics::par()] names them, or `asp`, `log`); any other argument
#'   is an error (`xlim` and `ylim` are the flame graph's own).
#' @param min_width Frames narrower than this share of the total are not
#'   drawn: a number from 0 to 1.
#' @param focus `NULL`, or the label of a frame (as printed, e.g.
#'   `"glm.fit"` or `"/stats.so::Cdqrls"`): only the samples with that
#'   frame are drawn, from that frame up (its outermost occurrence in each
#'   stack), so that what it calls fills the width. A label that is no
#'   frame of the profile is an error of class `winch_error_bad_argument`
#'   (naming labels close to it); a frame whose samples weigh nothing
#'   (`what = "inuse"` where nothing was still allocated under it) gives a
#'   plot that says so.
#' @param what For a memory profile (`event = "alloc"`): frames as wide as
#'   the bytes allocated under them (`"alloc"`), or of those still
#'   allocated when the profile ended (`"inuse"`).
#' @return `x`, invisibly.
#' @examples
#' p <- winch_profile(for (i in 1:20) sort(runif(1e5)), interval = 0.002)
#' plot(p)
#' plot(p, focus = "sort")
#' @export
plot.winch_profile <- function(x, ..., min_width = 0.002, focus = NULL, what = c("alloc", "inuse")) {
  check_number(min_width, 0, 1, why = " (a share of the total)")
  what <- check_choice(what, c("alloc", "inuse"))
  if (!is.null(focus) && (!is.character(focus) || length(focus) != 1L || is.na(focus))) {
    abort_bad_argument("`focus` must be NULL or one frame label (a string).")
  }
  p <- check_profile(x)
  stacks <- lapply(stack_functions(p), rev) # outermost first
  memory <- is_memory_profile(p)
  count <- if (memory) stack_bytes(p, what) else p$stacks$count
  if (!is.null(focus)) {
    check_focus(focus, p$functions$label)
    stacks <- lapply(stacks, function(s) {
      at <- match(focus, p$functions$label[s])
      if (is.na(at)) integer() else s[at:length(s)]
    })
    count <- count * (lengths(stacks) > 0L)
  }
  total <- sum(count)
  if (!total) {
    graphics::plot.new()
    check_plot_dots(...)
    graphics::title(main = if (is.null(focus)) "empty profile" else sprintf("no sample has a frame %s", focus))
    return(invisible(x))
  }
  rects <- flame_rects(stacks, count, p$functions$label)
  rects <- rects[rects$width >= min_width * total, , drop = FALSE]
  f <- p$functions
  # Modules drawn, each in a colour of its own that is the same in every
  # plot (from its name).
  modules <- unique(f$module[rects$fn][!is.na(f$module[rects$fn])])
  names <- basename(p$modules$path[modules])
  palette <- module_colours(names)
  fill <- ifelse(f$kind == "loop", "grey88", ifelse(f$kind %in% c("thread", "wait", "none", "kernel"), "grey95", "grey72"))
  native <- !is.na(f$module) & f$module %in% modules
  fill[native] <- palette[match(f$module[native], modules)]
  depth <- max(rects$depth, 0) + 1
  old_par <- graphics::par(mar = c(1, 1, 3, 1))
  on.exit(graphics::par(old_par), add = TRUE)
  graphics::plot.new()
  check_plot_dots(...)
  graphics::plot.window(xlim = c(0, total), ylim = c(0, depth), ...)
  # The legend goes inside the plot, above the frames: the window is made
  # taller by its height, measured at this device's size.
  legend_h <- 0
  if (length(modules)) {
    ncol <- max(1L, min(length(modules), floor(graphics::par("pin")[[1L]] / 1.6)))
    size <- graphics::legend("topleft", legend = names, fill = palette, ncol = ncol, bty = "n", cex = 0.75, plot = FALSE)
    legend_h <- size$rect$h
    graphics::plot.window(xlim = c(0, total), ylim = c(0, depth + legend_h * 1.1), ...)
  }
  graphics::rect(rects$x, rects$depth, rects$x + rects$width, rects$depth + 0.95,
    col = fill[rects$fn], border = "white", lwd = 0.5
  )
  # Labels as large as a row allows (rows are 1 unit high), and only in
  # frames wide enough for them; none when rows are too thin to read.
  cex <- min(1, 0.75 / graphics::strheight("M", cex = 1))
  the$plot_labels <- NULL
  if (cex >= 0.3) {
    labels <- fit_labels(f$label[rects$fn], rects$width * 0.95, cex)
    shown <- nzchar(labels)
    graphics::text(rects$x[shown] + rects$width[shown] / 2, rects$depth[shown] + 0.47, labels[shown], cex = cex)
    the$plot_labels <- data.frame(label = labels[shown], depth = rects$depth[shown])
  }
  main <- if (memory) {
    sprintf("winch memory profile: %s %s", format_bytes(total), if (what == "alloc") "allocated" else "still allocated at the end")
  } else {
    sprintf("winch profile: %s of %s", format_seconds(total * p$interval), profile_what(p))
  }
  if (!is.null(focus)) main <- sprintf("%s, under %s", main, focus)
  graphics::title(main = main)
  the$plot_legend <- NULL
  if (length(modules)) {
    the$plot_legend <- graphics::legend("topleft",
      legend = names, fill = palette, ncol = ncol, bty = "n", cex = 0.75
    )$rect
  }
  invisible(x)
}

# A `focus` that is a frame of the profile; else an error naming the labels
# closest to it (those holding it, then those a few edits away).
check_focus <- function(focus, labels, call = rlang::caller_env()) {
  if (focus %in% labels) {
    return(invisible(focus))
  }
  labels <- unique(labels)
  near <- unique(c(
    labels[grepl(focus, labels, fixed = TRUE)],
    agrep(focus, labels, max.distance = 0.2, value = TRUE, fixed = TRUE)
  ))
  abort_bad_argument(c(
    sprintf("`focus` must be the label of a frame of the profile; none is labelled \"%s\".", focus),
    i = if (length(near)) {
      sprintf("Close: %s.", paste0("\"", utils::head(near, 5L), "\"", collapse = ", "))
    } else {
      "The labels are those `as.data.frame()` joins into its stacks."
    }
  ), call = call)
}

# Graphical parameters for plot.window() only, so that a misspelled argument
# of plot() is not taken for one (called once a device is open: par() names
# them).
check_plot_dots <- function(..., call = rlang::caller_env()) {
  check_dots_among(...,
    ignored = c(setdiff(names(graphics::par()), c("xlim", "ylim")), "asp", "log"),
    takes = "`min_width`, `focus`, `what` and graphical parameters for `plot.window()` (see `?par`)",
    call = call
  )
}

# Labels that fit their frames' widths (in user coordinates): whole, else
# shortened in the middle to the most characters that fit (at least 6 of
# the label's own), else "".
fit_labels <- function(labels, widths, cex) {
  whole <- graphics::strwidth(labels, cex = cex) < widths
  char <- graphics::strwidth("m", cex = cex)
  out <- ifelse(whole, labels, "")
  for (i in which(!whole)) {
    keep <- floor(widths[[i]] / char) - 3L
    if (keep >= 6L) {
      cand <- shorten(labels[[i]], keep + 3L)
      while (keep >= 6L && graphics::strwidth(cand, cex = cex) >= widths[[i]]) {
        keep <- keep - 1L
        cand <- shorten(labels[[i]], keep + 3L)
      }
      if (keep >= 6L) out[[i]] <- cand
    }
  }
  out
}

# A colour per module name, the same in every plot: one of 64 hues, picked
# by the name's bytes and spread by the golden angle (so that names with
# neighbouring picks still differ); names that pick a hue already taken get
# the next free one.
module_colours <- function(names) {
  pick <- vapply(names, function(n) sum(utf8ToInt(n) * seq_along(utf8ToInt(n))) %% 64L, 0)
  for (i in seq_along(pick)) {
    while (pick[[i]] %in% pick[seq_len(i - 1L)] && length(unique(pick)) < 64L) pick[[i]] <- (pick[[i]] + 1) %% 64
  }
  grDevices::hcl(h = (pick * 137.508) %% 360, c = 55, l = c(70, 60)[(pick %% 2) + 1])
}

# Rectangles of a flame graph: stacks (outermost first) merged by common
# prefix, children ordered by label; x and width in samples. Built in one
# pass over the stacks sorted as a depth-first walk of the merged tree
# would visit them (by each frame's rank: its label, then its function),
# keeping the path of frames open at each depth: no recursion per frame,
# so a stack as deep as a sample can be (tens of thousands of frames)
# neither overflows R's C stack nor nests too deeply.
flame_rects <- function(stacks, count, labels) {
  empty <- data.frame(fn = integer(), depth = integer(), x = numeric(), width = numeric())
  some <- lengths(stacks) > 0L
  stacks <- stacks[some]
  count <- count[some]
  if (!length(stacks)) {
    return(empty)
  }
  # Rank of each function among its siblings' order: label, then index.
  rank <- integer(length(labels))
  rank[order(labels, seq_along(labels))] <- seq_along(labels)
  digits <- nchar(length(labels))
  keys <- vapply(stacks, function(s) paste(formatC(rank[s], width = digits, flag = "0"), collapse = ""), "")
  ord <- order(keys, method = "radix")
  deepest <- max(lengths(stacks))
  # The open path: per depth its function, x, width; where its next child
  # starts.
  open_fn <- integer(deepest)
  open_x <- numeric(deepest)
  open_w <- numeric(deepest)
  next_x <- numeric(deepest)
  top <- 0L # frames open
  root_x <- 0
  out <- list()
  close_to <- function(keep) {
    # Closes the open frames deeper than `keep`; the parent of the
    # shallowest closed one has its next child start after it.
    if (top > keep) {
      d <- (keep + 1L):top
      out[[length(out) + 1L]] <<- list(fn = open_fn[d], depth = d - 1L, x = open_x[d], width = open_w[d])
      if (keep > 0L) next_x[[keep]] <<- next_x[[keep]] + open_w[[keep + 1L]] else root_x <<- root_x + open_w[[1L]]
      top <<- keep
    }
  }
  for (i in ord) {
    s <- stacks[[i]]
    n <- length(s)
    m <- min(n, top)
    same <- if (m > 0L) s[seq_len(m)] == open_fn[seq_len(m)] else logical()
    keep <- if (all(same)) m else which(!same)[[1L]] - 1L
    close_to(keep)
    if (n > keep) {
      d <- (keep + 1L):n
      x0 <- if (keep > 0L) next_x[[keep]] else root_x
      open_fn[d] <- s[d]
      open_x[d] <- x0
      open_w[d] <- 0
      next_x[d] <- x0
      top <- n
    }
    open_w[seq_len(n)] <- open_w[seq_len(n)] + count[[i]]
  }
  close_to(0L)
  rects <- data.frame(
    fn = unlist(lapply(out, `[[`, "fn")), depth = unlist(lapply(out, `[[`, "depth")),
    x = unlist(lapply(out, `[[`, "x")), width = unlist(lapply(out, `[[`, "width"))
  )
  # Outer frames first, left to right (the order a walk would draw them).
  rects[order(rects$x, rects$depth), , drop = FALSE]
}
