#' Combine profiles made in several processes
#'
#' `c()` of `winch_profile`s gives one profile holding the samples of each,
#' each under a frame `[process host:pid]` of its own at the root: the
#' machine and the process the profile was made in. This is how the work
#' of processes that winch cannot sample from the profiled one is seen
#' together: workers on other machines, batch jobs, PSOCK, future,
#' batchtools, mirai or callr workers that profile themselves with
#' [winch_profile()] and return the profile (an R object like any other).
#' The result is a `winch_profile` like any other: printed, summarised,
#' plotted and written ([winch_write_rprof()], [winch_write_pprof()],
#' [winch_write_collapsed()], [as.data.frame()][as.data.frame.winch_profile])
#' as one.
#'
#' A profile keeps where it was made (`host`, the machine's
#' `Sys.info()[["nodename"]]`, and `pid`). A profile saved before winch kept
#' them is placed by its own process's row of its `processes` table when
#' it has one, else under `[process unknown:unknown]`. Children a source
#' sampled itself (its own `[process N]` frames, see "Processes" in
#' [winch_profile()]) stay where they are, under their source, renumbered
#' so that every process of the result has a number of its own; threads'
#' `[thread N]` frames likewise. Two sources made in the same process (two
#' profiles of one session) have the same frame, so their samples add up
#' in every view; `summary()` lists each source apart all the same.
#'
#' How the parts combine:
#' * `stacks`: all of them, each source's under its `[process host:pid]`
#'   frame (a merged profile given to `c()` again keeps its frames:
#'   `c(c(a, b), d)` is `c(a, b, d)`).
#' * `interval`: a time profile's samples each stand for one interval, and
#'   every writer (Rprof's `sample.interval`, pprof's period) has one. When
#'   sources were sampled at different intervals, the result has the
#'   finest, and the counts of the others are multiplied by their interval
#'   over it (a sample every 10 ms counts twice at 5 ms), so that every
#'   time is kept exactly; intervals that are not whole multiples of the
#'   finest are an error. A memory profile's `sample_bytes` is the
#'   smallest of its sources' (each source's bytes are estimates of its
#'   own, so they add up whatever the rates).
#' * `duration`: the sum of the sources' (as the time sampled is a sum:
#'   workers that ran side by side each count, so that `print()`'s "sampled
#'   over" compares like with like); `start`: the earliest.
#' * `threads`: one row `main` for the main threads of every source (the
#'   `process` of a stack tells whose), then the other threads of each
#'   source, renumbered.
#' * `processes`: each source's own process first, then the children it
#'   sampled, numbered from 1 in that order, with a column `source` (the
#'   number of the source each belongs to). A source's CPU time is its own
#'   measure (`usage` user and system time, less its profiler's collector
#'   thread's, `collector_cpu`). `as.data.frame()`'s column
#'   `process` names a source `process host:pid`; a pprof file labels every
#'   sample with `process N` (its process's number in this table) and
#'   `pid`, as in any profile.
#' * `stats`: counts (samples, intervals lost, handler time, allocations,
#'   garbage collections) and resource use are summed; `max_rss` is the
#'   largest; the handler's median and 99th percentile per sample are the
#'   largest of the sources' (an upper bound of the merged figure); R's heap
#'   (`r_heap`) is summed; a figure a source lacks makes the sum `NA`
#'   (but `collector_cpu`: a recording from outside has no collector in the
#'   process, and counts none; and the figures of workers read from
#'   outside, `worker_stops` and the time they kept their workers stopped,
#'   which a source lacking them read none of); the
#'   processes that worked for a source unsampled (`unsampled`) are all
#'   listed.
#' * `functions`, `locations`, `lines`, `files`, `modules`: each source's,
#'   one after the other (addresses belong to their process).
#' * `options`: `loops` and `lines` if any source had them; `threads` and
#'   `processes` as the sources had them, `NA` if they differ.
#'
#' `c(p)` of one profile gives it under its `[process host:pid]` frame, as
#' in any merged profile (so that `c()` always gives the same shape).
#' `NULL`s are dropped (a worker that returned nothing; R drops those after
#' the first argument before the method is called). R picks `c()`'s
#' method from the first argument: when it may be `NULL`, drop the `NULL`s
#' first (`do.call(c, Filter(Negate(is.null), profiles))`).
#'
#' @param ... `winch_profile`s (or `NULL`s, which are dropped), all time
#'   profiles of the same event (`"cpu"` or `"elapsed"`) or all memory
#'   profiles. Anything else, profiles of different events, or no profile
#'   at all, is an error of class `winch_error_bad_argument`; so is a
#'   damaged profile (see [winch_write_rprof()]).
#' @return A `winch_profile`, with `host` and `pid` `NA` (it was made in
#'   several processes).
#' @seealso `vignette("profiling")`, section "Processes", for profiles
#'   returned by `parallel` workers.
#' @export
#' @examples
#' if (winch_available()) {
#'   work <- function(n) for (i in 1:n) sort(runif(1e4))
#'   a <- winch_profile(work(100), interval = 0.005)
#'   b <- winch_profile(work(50), interval = 0.01)
#'   p <- c(a, b)
#'   p
#'   summary(p)$by_process
#' }
c.winch_profile <- function(...) {
  merge_profiles(list(...))
}

# `profiles` (a list, NULLs dropped) as one winch_profile, as c() documents.
merge_profiles <- function(profiles, call = rlang::caller_env()) {
  given <- which(!vapply(profiles, is.null, NA))
  if (!length(given)) {
    abort_bad_argument("`c()` needs at least one `winch_profile` to combine (all arguments are NULL).", call = call)
  }
  for (i in given) {
    if (!inherits(profiles[[i]], "winch_profile")) {
      abort_bad_argument(sprintf(
        "Every argument of `c()` must be a `winch_profile` (or NULL): argument %d is %s.", i, describe_object(profiles[[i]])
      ), call = call)
    }
  }
  sources <- lapply(given, function(i) {
    tryCatch(check_profile(profiles[[i]], call = call), winch_error_bad_argument = function(e) {
      rlang::abort(sprintf("Argument %d of `c()` is not a valid profile.", i),
        class = c("winch_error_bad_argument", "winch_error"), call = call, parent = e
      )
    })
  })
  events <- vapply(sources, `[[`, "", "event")
  if (length(unique(events)) > 1L) {
    abort_bad_argument(sprintf(
      "`c()` combines profiles of one event only: these are of %s (arguments %s).",
      paste0("\"", unique(events), "\"", collapse = " and "),
      paste(given[!duplicated(events)], collapse = " and ")
    ), call = call)
  }
  memory <- events[[1L]] == "alloc"
  factors <- if (memory) rep(1, length(sources)) else interval_factors(sources, given, call)
  out <- empty_merge()
  for (k in seq_along(sources)) {
    out <- merge_one(out, sources[[k]], factors[[k]])
  }
  out$threads$name[is.na(out$threads$name)] <- ""
  for (table in c("functions", "locations", "lines", "modules", "threads", "processes")) {
    rownames(out[[table]]) <- NULL
  }
  first <- sources[[1L]]
  same <- function(x) if (length(unique(x)) == 1L) x[[1L]] else NA
  structure(
    list(
      event = first$event,
      interval = if (memory) first$interval else min(vapply(sources, `[[`, 0, "interval")),
      sample_bytes = if (memory) {
        min(vapply(sources, function(s) as.double(s$sample_bytes %||% NA), 0))
      } else {
        first$sample_bytes %||% NA_real_
      },
      start = structure(min(vapply(sources, function(s) as.double(s$start), 0)), class = c("POSIXct", "POSIXt")),
      duration = sum(vapply(sources, function(s) as.double(s$duration), 0)),
      stacks = out$stacks,
      functions = out$functions,
      locations = out$locations,
      lines = out$lines,
      files = out$files,
      modules = out$modules,
      threads = out$threads,
      processes = out$processes,
      stats = merge_stats(lapply(sources, `[[`, "stats")),
      options = list(
        loops = any(vapply(sources, function(s) isTRUE(s$options$loops), NA)),
        lines = any(vapply(sources, function(s) isTRUE(s$options$lines), NA)),
        threads = same(vapply(sources, function(s) s$options$threads %||% NA_character_, "")),
        processes = same(vapply(sources, function(s) s$options$processes %||% NA_character_, ""))
      ),
      host = NA_character_,
      pid = NA_real_
    ),
    class = "winch_profile"
  )
}

# What each source's counts are multiplied by, so that all are counted in
# the finest interval (intervals in whole nanoseconds, as the writers read
# them).
interval_factors <- function(sources, given, call) {
  ns <- round(vapply(sources, `[[`, 0, "interval") * 1e9)
  factors <- ns / min(ns)
  bad <- which(abs(factors - round(factors)) > 1e-9)
  if (length(bad)) {
    abort_bad_argument(c(
      sprintf(
        "`c()` cannot count argument %d's samples (every %s) in the finest interval of the profiles (%s): one is not a whole multiple of the other.",
        given[[bad[[1L]]]], format_seconds(ns[[bad[[1L]]]] / 1e9), format_seconds(min(ns) / 1e9)
      ),
      i = "Profile the workers at one interval."
    ), call = call)
  }
  round(factors)
}

empty_merge <- function() {
  df <- function(...) data.frame(..., stringsAsFactors = FALSE)
  list(
    functions = df(name = character(), label = character(), kind = character(), module = integer(), file = integer()),
    locations = df(module = integer(), address = character()),
    lines = df(location = integer(), `function` = integer(), file = integer(), line = integer(), check.names = FALSE),
    files = character(),
    modules = df(path = character(), build_id = character(), start = character(), limit = character(), offset = character()),
    stacks = list(count = numeric(), thread = integer(), process = integer(), locations = list()),
    threads = df(number = 0L, tid = 0, name = NA_character_, cpu = 0),
    processes = df(
      number = integer(), pid = numeric(), command = character(), host = character(), cpu = numeric(),
      samples = numeric(), source = integer()
    )
  )
}

# `out` with the source `p` added (its counts times `factor`).
merge_one <- function(out, p, factor) {
  nl <- nrow(out$locations)
  nmod <- nrow(out$modules)
  take <- function(table, columns) table[, columns, drop = FALSE]

  # Threads: R's main thread joins the one `main` row; the others are
  # numbered after those already in.
  th <- profile_threads(p)
  main <- th$number == 0L
  others <- which(!main)
  numbers <- max(out$threads$number) + seq_along(others)
  thread_row <- integer(nrow(th))
  thread_row[main] <- 1L
  thread_row[others] <- nrow(out$threads) + seq_along(others)
  out$threads$cpu[[1L]] <- out$threads$cpu[[1L]] + sum(th$cpu[main])
  main_name <- if (any(main)) th$name[main][[1L]] else ""
  shown <- out$threads$name[[1L]]
  out$threads$name[[1L]] <- if (is.na(shown) || identical(shown, main_name)) main_name else ""
  if (length(others)) {
    out$threads <- rbind(out$threads, data.frame(
      number = numbers, tid = as.double(th$tid[others]), name = as.character(th$name[others]),
      cpu = as.double(th$cpu[others]), stringsAsFactors = FALSE
    ))
  }
  thread_number <- numbers
  names(thread_number) <- th$number[others]

  # Processes: a merged profile's keep their sources; another profile's own
  # process is the source of its children.
  pr <- profile_processes(p)
  first_number <- if (nrow(out$processes)) max(out$processes$number) + 1L else 1L
  new_number <- first_number + seq_len(nrow(pr)) - 1L
  merged <- !is.null(pr$source)
  source_number <- if (merged) {
    new_number[match(pr$source, pr$number)]
  } else {
    rep(new_number[pr$number == 0L][1L], nrow(pr))
  }
  rows <- data.frame(
    number = new_number, pid = as.double(pr$pid), command = as.character(pr$command),
    host = as.character(pr$host), cpu = as.double(pr$cpu), samples = as.double(pr$samples),
    source = source_number, stringsAsFactors = FALSE
  )
  frame_location <- NULL
  if (!merged) {
    own <- which(pr$number == 0L)[[1L]]
    where <- profile_origin(p)
    rows$host[[own]] <- if (is.na(where$host)) "" else where$host
    rows$pid[[own]] <- if (is.na(where$pid)) 0 else where$pid
    rows$cpu[[own]] <- own_cpu(p$stats)
  }
  out$processes <- rbind(out$processes, rows)
  process_number <- new_number
  names(process_number) <- pr$number

  # Files and modules: a file named by several sources is one; modules
  # are each source's (a location's address is of its process), but a
  # function's module is the first of the same library (path and
  # build-id), so that a function of several sources is one, and
  # summary()'s modules are each one row.
  files <- as.character(p$files)
  out$files <- c(out$files, files[!files %in% out$files & !duplicated(files)])
  file_map <- match(files, out$files)
  m <- take(p$modules, names(profile_form$modules))
  out$modules <- rbind(out$modules, m)
  library_key <- paste(out$modules$path, out$modules$build_id, sep = "\r")
  same_library <- match(library_key, library_key)

  # Functions, with [thread N] and [process N] renumbered; those alike in
  # every column (once renumbered: a source's own frame, or the same code
  # in several sources) are one.
  f <- take(p$functions, names(profile_form$functions))
  f$module <- same_library[as.integer(f$module) + nmod]
  f$file <- file_map[as.integer(f$file)]
  f <- renumber_markers(f, "thread", thread_number)
  f <- renumber_markers(f, "process", process_number)
  loc <- take(p$locations, names(profile_form$locations))
  loc$module <- as.integer(loc$module) + nmod
  ln <- take(p$lines, names(profile_form$lines))
  ln$location <- as.integer(ln$location) + nl
  ln$file <- file_map[as.integer(ln$file)]
  if (!merged) {
    # The source's own frame, at the root of each of its stacks.
    name <- process_frame_name(rows$host[[own]], rows$pid[[own]])
    f <- rbind(f, data.frame(
      name = name, label = frame_label(name), kind = "process", module = NA_integer_, file = NA_integer_,
      stringsAsFactors = FALSE
    ))
    loc <- rbind(loc, data.frame(module = NA_integer_, address = "0x0", stringsAsFactors = FALSE))
    ln <- rbind(ln, data.frame(
      location = nl + nrow(loc), `function` = nrow(f), file = NA_integer_, line = NA_integer_, check.names = FALSE
    ))
    frame_location <- nl + nrow(loc)
  }
  function_key <- function(f) paste(f$name, f$label, f$kind, f$module, f$file, sep = "\r")
  keys <- function_key(f)
  known <- function_key(out$functions)
  fresh <- !keys %in% known & !duplicated(keys)
  out$functions <- rbind(out$functions, f[fresh, , drop = FALSE])
  ln$`function` <- match(keys, c(known, keys[fresh]))[as.integer(ln$`function`)]
  out$locations <- rbind(out$locations, loc)
  out$lines <- rbind(out$lines, ln)

  # Stacks.
  s <- p$stacks
  n <- length(s$count)
  out$stacks$count <- c(out$stacks$count, as.double(s$count) * factor)
  out$stacks$thread <- c(out$stacks$thread, thread_row[s$thread %||% rep(1L, n)])
  out$stacks$process <- c(out$stacks$process, nrow(out$processes) - nrow(pr) + (s$process %||% rep(1L, n)))
  grown <- lapply(s$locations, function(l) c(as.integer(l) + nl, frame_location))
  out$stacks$locations <- c(out$stacks$locations, grown)
  if (identical(p$event, "alloc")) {
    for (col in c("alloc_bytes", "alloc_count", "inuse_bytes", "inuse_count")) {
      out$stacks[[col]] <- c(out$stacks[[col]], as.double(s[[col]]))
    }
  }
  out
}

# Functions of `kind` named `[kind N]` renamed by `numbers` (N -> new N,
# names the old numbers); others left as they are.
renumber_markers <- function(f, kind, numbers) {
  pattern <- sprintf("^\\[%s ([0-9]+)\\]$", kind)
  hit <- which(f$kind == kind & grepl(pattern, f$name))
  old <- sub(pattern, "\\1", f$name[hit])
  new <- numbers[old]
  ok <- !is.na(new)
  hit <- hit[ok]
  f$name[hit] <- sprintf("[%s %d]", kind, as.integer(new[ok]))
  f$label[hit] <- sprintf("[%s_%d]", kind, as.integer(new[ok]))
  f
}

# What `x` is, in a few words: "a data frame", "a number", "a list".
describe_object <- function(x) {
  if (is.data.frame(x)) {
    return("a data frame")
  }
  what <- if (is.object(x)) sprintf("an object of class `%s`", class(x)[[1L]]) else typeof(x)
  what <- switch(what, double = "a double vector", integer = "an integer vector", character = "a character vector",
    logical = "a logical vector", list = "a list", closure = , builtin = , special = "a function", what)
  if (!is.object(x) && !grepl("^a", what)) paste("a", what) else what
}

# Where profile `p` was made: its fields `host` and `pid`; for a profile
# made before they were kept, its own process's row of `processes`; NA
# where neither says.
profile_origin <- function(p) {
  pr <- p$processes
  own <- if (!is.null(pr)) which(pr$number == 0L) else integer()
  host <- p$host
  if (is.null(host) && length(own) && nzchar(pr$host[[own[[1L]]]])) host <- pr$host[[own[[1L]]]]
  pid <- p$pid
  if (is.null(pid) && length(own) && isTRUE(pr$pid[[own[[1L]]]] > 0)) pid <- pr$pid[[own[[1L]]]]
  list(host = as.character(host %||% NA_character_), pid = as.double(pid %||% NA_real_))
}

# The name of a merged profile's frame for a source made on `host` by
# process `pid` ("" and 0: unknown).
process_frame_name <- function(host, pid) {
  host <- ifelse(is.na(host) | !nzchar(host), "unknown", host)
  pid <- ifelse(is.na(pid) | pid <= 0, "unknown", format(pid, scientific = FALSE, trim = TRUE))
  sprintf("[process %s:%s]", host, pid)
}

# A frame's label in Rprof's format: no spaces, no double quotes.
frame_label <- function(name) gsub("[[:space:]\"]", "_", name)

# Which rows of a processes table are a profiled process's own (not a
# child it sampled): in a merged profile, its sources.
process_sources <- function(pr) {
  if (is.null(pr$source)) pr$number == 0L else pr$source == pr$number
}

# Each process's name, as `as.data.frame()`'s column `process` has it:
# "self", "process N" (a child), "process host:pid" (a merged profile's
# source).
process_names <- function(pr) {
  name <- ifelse(pr$number == 0L, "self", paste("process", pr$number))
  if (!is.null(pr$source)) {
    s <- pr$source == pr$number
    name[s] <- sub("^\\[(.*)\\]$", "\\1", process_frame_name(pr$host[s], pr$pid[s]))
  }
  name
}

# The sources' figures combined, as c() documents.
merge_stats <- function(stats) {
  largest <- c("handler_median", "handler_p99", "worker_stop_median", "worker_stop_p99")
  names <- unique(unlist(lapply(stats, names)))
  figure <- function(f) vapply(stats, function(s) as.double(s[[f]] %||% NA_real_)[1L], 0)
  out <- list()
  for (f in setdiff(names, c("usage", "r_heap", "labels_full", "unsampled"))) {
    x <- figure(f)
    # (A source without its collector's time, a recording from outside
    # (NaN) or an older profile (none), had no collector in the process.)
    # (Worker figures: a source without them, an older profile, read
    # none.)
    workers <- startsWith(f, "worker_")
    out[[f]] <- if (workers && all(is.na(x))) {
      NA_real_
    } else if (f %in% largest) {
      max(x, na.rm = workers)
    } else {
      sum(x, na.rm = workers || f == "collector_cpu")
    }
  }
  if ("labels_full" %in% names) {
    out$labels_full <- all(vapply(stats, function(s) isTRUE(s$labels_full), NA))
  }
  usages <- lapply(stats, function(s) s$usage %||% list())
  usage <- list()
  for (f in unique(unlist(lapply(usages, names)))) {
    x <- vapply(usages, function(u) as.double(u[[f]] %||% NA_real_)[1L], 0)
    usage[[f]] <- if (f == "max_rss") max(x) else sum(x)
  }
  out$usage <- usage
  # Processes that worked for a source unsampled: all of them.
  unsampled <- Filter(is.data.frame, lapply(stats, `[[`, "unsampled"))
  # (A source made before `why` was kept lacks it.)
  unsampled <- lapply(unsampled, function(u) {
    if (is.null(u$why)) u$why <- rep(NA_character_, nrow(u))
    u
  })
  if (length(unsampled)) out$unsampled <- do.call(rbind, unsampled)
  heaps <- lapply(stats, `[[`, "r_heap")
  if (!all(vapply(heaps, is.null, NA))) {
    out$r_heap <- lapply(c(before = "before", after = "after", peak = "peak"), function(f) {
      sum(vapply(heaps, function(h) as.double(h[[f]] %||% NA_real_), 0))
    })
  }
  out
}
