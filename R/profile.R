#' Profile R and native code together
#'
#' Samples the call stack of R's main thread while `expr` runs: every sample
#' holds the R frames and the native (C, C++, Fortran, Rust) frames of that
#' moment, interleaved exactly as [winch_sys_calls()] shows them, through any
#' depth of R → native → R calls. Loops of R functions appear as frames of
#' their own (`[for]`, `[while]`, `[repeat]`).
#'
#' Samples are taken by a timer of R's main thread that interrupts it every
#' `interval` seconds of its CPU time (`event = "cpu"`) or of wall-clock time
#' (`"elapsed"`, so that sleeping and waiting show), with a signal of its own:
#' R's `Rprof()` is left alone, but cannot run at the same time. The signal
#' handler only walks the stacks into a preallocated buffer; names, files and
#' lines are looked up when sampling stops.
#'
#' R frames are labelled as `Rprof()` labels them; native frames
#' `/<module>::<function>` (C++ parameter lists dropped), and unnamed native
#' functions `/<module>::+0x<start>` by the start of the function in the
#' module. Frames of R's own library are left out: the R frames stand for
#' them.
#'
#' @param expr An expression to profile, evaluated in the caller's
#'   environment. An error in it stops the profiler and propagates as is.
#' @param file If not `NULL`, the profile is also written there in `Rprof()`'s
#'   format (see [winch_write_rprof()]).
#' @param interval Seconds between samples, at least 0.001 and at most 3600.
#' @param event `"cpu"` (CPU time of R's main thread) or `"elapsed"`
#'   (wall-clock time).
#' @param loops Show loops as frames?
#' @param lines Record source positions and write them in the Rprof file:
#'   R frames' file and line from their srcrefs (code sourced or parsed with
#'   `keep.source = TRUE`), native frames' from their debug information.
#' @param ... Not used; must be empty.
#' @return A `winch_profile` object: distinct stacks with their counts, the
#'   functions, locations, files and modules they refer to, and figures about
#'   the run (`summary()`), with `print()`, `summary()` and `plot()` methods.
#' @seealso [winch_rprof()] to start and stop by hand; [winch_write_rprof()],
#'   [winch_write_pprof()]; `vignette("profiling")`.
#' @export
#' @examples
#' if (winch_available()) {
#'   p <- winch_profile(for (i in 1:200) sum(sort(runif(1e4))), interval = 0.005)
#'   p
#' }
winch_profile <- function(expr, file = NULL, interval = 0.01, event = c("cpu", "elapsed"),
                          loops = TRUE, lines = FALSE, ...) {
  rlang::check_dots_empty()
  opts <- check_profile_args(file, interval, event, loops, lines)
  # The profiled code is what runs under force(expr) below: samples taken
  # before or after it (the profiler starting and stopping) are left out,
  # and so are force()'s frame and those further out.
  opts$region <- list("under", force, environment())
  session <- profile_begin(opts)
  on.exit(profile_abandon(session), add = TRUE)
  force(expr)
  p <- profile_end(session)
  if (!is.null(file)) {
    winch_write_rprof(p, file, lines = lines)
  }
  p
}

#' Start and stop the profiler by hand
#'
#' A drop-in for [Rprof()] where the code to profile cannot be wrapped in one
#' expression: `winch_rprof(filename)` starts sampling (see
#' [winch_profile()]), `winch_rprof(NULL)` stops it, writes the Rprof file
#' and returns the profile.
#'
#' @param filename The Rprof file to write when sampling stops, or `NULL` to
#'   stop.
#' @inheritParams winch_profile
#' @return `winch_rprof(filename)`: `NULL`, invisibly. `winch_rprof(NULL)`: the
#'   `winch_profile`.
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
                        loops = TRUE, lines = FALSE) {
  if (is.null(filename)) {
    session <- the$rprof
    if (is.null(session)) {
      abort_bad_argument("No profile was started with `winch_rprof()`.")
    }
    the$rprof <- NULL
    p <- profile_end(session)
    winch_write_rprof(p, session$opts$file, lines = session$opts$lines)
    return(p)
  }
  opts <- check_profile_args(filename, interval, event, loops, lines)
  # Samples of winch_rprof() itself (starting and stopping) are left out.
  opts$region <- list("outside", winch_rprof)
  the$rprof <- profile_begin(opts)
  invisible(NULL)
}

check_profile_args <- function(file, interval, event, loops, lines, call = rlang::caller_env()) {
  if (!is.numeric(interval) || length(interval) != 1L || is.na(interval) || !is.finite(interval)) {
    abort_bad_argument("`interval` must be a single number of seconds.", call = call)
  }
  if (interval < 0.001) {
    abort_bad_argument("`interval` must be at least 0.001 seconds (the timers cannot honour less).", call = call)
  }
  if (interval > 3600) {
    abort_bad_argument("`interval` must be at most 3600 seconds (one sample an hour).", call = call)
  }
  if (!is.character(event) || !length(event) || anyNA(event)) {
    abort_bad_argument('`event` must be "cpu" or "elapsed".', call = call)
  }
  if (length(event) > 1L) {
    event <- event[[1L]]
  }
  if (!event %in% c("cpu", "elapsed")) {
    abort_bad_argument('`event` must be "cpu" or "elapsed".', call = call)
  }
  check_flag(loops, call = call)
  check_flag(lines, call = call)
  check_path(file, null_ok = TRUE, call = call)
  if (!winch_available()) {
    abort_winch("Profiling needs native unwinding, which is not available on this platform.",
      class = "winch_error_unavailable", call = call
    )
  }
  if (profile_active() || !is.null(the$rprof)) {
    abort_winch("A winch profile is already running.", class = "winch_error_busy", call = call)
  }
  if (rprof_running()) {
    abort_winch("R's profiler is running: stop it with `Rprof(NULL)` first.", class = "winch_error_busy", call = call)
  }
  list(file = file, interval = interval, event = event, loops = loops, lines = lines)
}

profile_active <- function() {
  isTRUE(check_result(rs_profile_active()))
}

# Starts sampling; returns the session's bookkeeping (resource use at the
# start, a GC counter).
profile_begin <- function(opts, call = rlang::caller_env()) {
  if (opts$loops) {
    learn_loops()
  }
  probes <- label_probes()
  usage <- resource_usage()
  gc_time <- gc.time()
  gc_counter <- new_gc_counter()
  check_result(
    rs_profile_start(
      as.double(opts$interval), opts$event, opts$loops, opts$region,
      opts$lines, list(quote(`for`), quote(`while`), quote(`repeat`), quote(srcfile), quote(filename)),
      as.list(sys.frames()), as.list(sys.calls()), probes$calls, probes$labels
    ),
    call = call
  )
  list(opts = opts, usage = usage, gc_time = gc_time, gc_counter = gc_counter)
}

# Stops sampling and builds the profile.
profile_end <- function(session, call = rlang::caller_env()) {
  # Names for the samples: R's registered routines as they are now (DLLs
  # loaded while profiling included). Never raises an error.
  sync_registrations()
  raw <- check_result(rs_profile_stop(), call = call)
  session$gc_counter$stop()
  new_winch_profile(raw, session)
}

# Stops a session that did not end normally (an error or an interrupt in
# the profiled code): nothing is returned, the timer and signal are restored.
profile_abandon <- function(session) {
  if (profile_active()) {
    rs_profile_stop()
    session$gc_counter$stop()
  }
}

# Whether R's Rprof() is running: R gives builtins a context record only
# while it runs, so the record under an Ops method that `+` dispatched to
# (evaluated by the AST interpreter) tells.
rprof_running <- function() {
  probe <- structure(list(), class = "winch_rprof_probe")
  res <- tryCatch(eval(quote(probe + 0)), winch_error = function(e) FALSE)
  isTRUE(res)
}

#' @export
Ops.winch_rprof_probe <- function(e1, e2) {
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

new_winch_profile <- function(raw, session) {
  as_df <- function(x) {
    attr(x, "row.names") <- .set_row_names(length(x[[1L]]))
    class(x) <- "data.frame"
    x
  }
  usage_end <- resource_usage()
  usage <- mapply(function(a, b) b - a, session$usage, usage_end, SIMPLIFY = FALSE)
  usage$max_rss <- usage_end$max_rss
  gc_time <- gc.time() - session$gc_time
  structure(
    list(
      event = raw$event,
      interval = raw$interval,
      start = structure(raw$start, class = c("POSIXct", "POSIXt")),
      duration = raw$duration,
      stacks = raw$stacks,
      functions = as_df(raw$functions),
      locations = as_df(raw$locations),
      lines = as_df(raw$lines),
      files = raw$files,
      modules = as_df(raw$modules),
      stats = c(raw$stats, list(
        usage = usage,
        gc_time = gc_time[[3L]],
        gc_count = session$gc_counter$count()
      )),
      options = list(loops = session$opts$loops, lines = session$opts$lines)
    ),
    class = "winch_profile"
  )
}

# The profile as the Rust writers read it (from_r() in
# src/rust/src/profile.rs): a named list with the fields, names and nesting
# of what the profiler returns (its to_r(), turned into a winch_profile by
# new_winch_profile()), tables as lists of columns. Fields are looked up by
# name: their order does not matter.
profile_parts <- function(p) {
  f <- p$functions
  l <- p$locations
  x <- p$lines
  m <- p$modules
  list(
    event = p$event,
    interval = as.double(p$interval),
    start = as.double(p$start),
    duration = as.double(p$duration),
    functions = list(
      name = f$name, label = f$label, kind = f$kind,
      module = as.integer(f$module), file = as.integer(f$file)
    ),
    locations = list(module = as.integer(l$module), address = l$address),
    lines = list(
      location = as.integer(x$location), `function` = as.integer(x$`function`),
      file = as.integer(x$file), line = as.integer(x$line)
    ),
    stacks = list(count = as.double(p$stacks$count), locations = lapply(p$stacks$locations, as.integer)),
    files = as.character(p$files),
    modules = list(path = m$path, build_id = m$build_id, start = m$start, limit = m$limit, offset = m$offset)
  )
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
#' @param path The file to write.
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
  check_profile(profile)
  check_path(path)
  check_flag(lines)
  check_result(rs_profile_write(profile_parts(profile), normalizePath(path, mustWork = FALSE), "rprof", lines))
  invisible(path)
}

#' @rdname winch_write_rprof
#' @export
winch_write_pprof <- function(profile, path) {
  check_profile(profile)
  check_path(path)
  check_result(rs_profile_write(profile_parts(profile), normalizePath(path, mustWork = FALSE), "pprof", FALSE))
  invisible(path)
}
