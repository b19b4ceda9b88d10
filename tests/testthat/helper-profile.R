# Shared by the profiler's tests (test-profile-*.R), each of which starts
# with `profile_fixture()`.
#
# The fixture library clib/burn.c burns known amounts of CPU time of the
# calling thread (measured with CLOCK_THREAD_CPUTIME_ID) in known functions
# and calls back into R, so the truth of every profile is known. Sampling
# with event = "cpu" counts CPU time of R's main thread, so a busy machine
# makes the runs longer but leaves the proportions alone. Intervals are
# short (2-5 ms) and workloads small (0.1-0.8 s of CPU), with a few points
# of slack.

BURN <- "/wtest_burn.so::"
A <- paste0(BURN, "burn_a")
B <- paste0(BURN, "burn_b")
CHILD <- paste0(BURN, "burn_child")
CALL <- paste0(BURN, "burn_call")
NEST <- paste0(BURN, "burn_nest")

# R functions around the burns: each native burn runs under the R function
# that .Call()s it.
r_a <- function(t) .Call("burn_a", t, PACKAGE = "wtest_burn")
r_b <- function(t) .Call("burn_b", t, PACKAGE = "wtest_burn")
r_child <- function(t) .Call("burn_child", t, PACKAGE = "wtest_burn")

# The labels of every stack of `p`, innermost first: every line of every
# location (a native frame lists its inlined calls first), computed here
# from the profile's tables rather than with the package's own helpers.
stack_labels <- function(p) {
  lines <- p$lines
  by_location <- split(lines$`function`, factor(lines$location, levels = seq_len(nrow(p$locations))))
  lapply(p$stacks$locations, function(locs) p$functions$label[unlist(by_location[locs], use.names = FALSE)])
}

# A stack's labels without `[kernel]` (innermost where a CPU sample stood
# for the kernel's time, see ?winch_profile): where the thread's own code
# was.
own_labels <- function(s) s[s != "[kernel]"]

# Seconds sampled in stacks that hold a frame labelled `label`.
seconds_in <- function(p, label) {
  hit <- vapply(stack_labels(p), function(s) label %in% s, NA)
  sum(p$stacks$count[hit]) * p$interval
}

# The distinct paths, from the innermost frame labelled `leaf` outwards, of
# the stacks that hold one, each as one string "leaf < caller < ...".
paths_from <- function(p, leaf) {
  paths <- lapply(stack_labels(p), function(s) {
    i <- match(leaf, s)
    if (is.na(i)) NULL else paste(s[i:length(s)], collapse = " < ")
  })
  sort(unique(unlist(paths)))
}

path <- function(...) paste(c(...), collapse = " < ")

# Compiles and loads the fixture (once per session; returns it) and warms up:
# the first profile of the session learns R's loop functions, and the first
# calls of these R functions may be compiled by the JIT.
# The workload R -> C -> R -> C of several profile tests, made in the
# calling test file's environment (samples are labelled by these names):
# `outer` burns 0.1 s itself, then calls back through burn_call into `cb`,
# which burns 0.2 s. burn_call evaluates the call `cb()`, so R labels that
# frame "cb".
burn_workload <- function(env = parent.frame()) {
  env$cb <- function() r_b(0.2)
  env$outer <- function() {
    r_a(0.1)
    .Call("burn_call", quote(cb), environment(), PACKAGE = "wtest_burn")
  }
  environment(env$cb) <- env
  environment(env$outer) <- env
  invisible()
}

profile_fixture <- function() {
  bl <- compile_clib("wtest_burn", "burn.c")
  invisible(winch_profile(for (i in 1:2) r_a(0.001), interval = 0.002))
  r_b(0.001)
  r_child(0.001)
  invisible(bl)
}

# Whether a profiler's collector thread (named "winch-profile") runs in
# this process.
collector_running <- function() {
  comm <- file.path(list.files("/proc/self/task", full.names = TRUE), "comm")
  names <- vapply(comm, function(f) tryCatch(readLines(f, warn = FALSE)[1L], error = function(e) ""), "")
  any(names == "winch-profile", na.rm = TRUE)
}

# Makes R forget that a profile runs, as if its record were lost: the
# native session, if any, goes on. (`rprof` and `profile_session` are the
# names R's record has had in the package's state.)
forget_r_session <- function() {
  the <- winch:::the
  rm(list = intersect(c("rprof", "profile_session"), ls(the)), envir = the)
}

# Stops whatever a failed test may have left running, and forgets it.
stop_left_running <- function() {
  if (winch:::profile_active()) {
    winch:::rs_profile_stop()
  }
  forget_r_session()
  invisible()
}

# Runs R code in a fresh Rscript process, as run_rscript() does, killing it
# after `timeout` seconds.
run_rscript_timeout <- function(code, timeout = 60) {
  file <- tempfile(fileext = ".R")
  on.exit(unlink(file))
  writeLines(code, file)
  out <- suppressWarnings(system2(
    file.path(R.home("bin"), "Rscript"), c("--vanilla", shQuote(file)),
    stdout = TRUE, stderr = TRUE, timeout = timeout,
    env = paste0("R_LIBS=", paste(.libPaths(), collapse = .Platform$path.sep))
  ))
  structure(out, status = attr(out, "status") %||% 0L)
}

# A profile made by hand, with fixed figures (for snapshots of printed
# output): `outer` calls the native `/libx.so::compute` (self 1.46 s)
# through `f[for]`, a long C++ function (0.55 s) and `g` (0 s self).
synthetic_profile <- function() {
  df <- function(...) data.frame(..., stringsAsFactors = FALSE)
  long <- "/libx.so::std::vector<double,std::allocator<double>>::_M_realloc_insert<double_const&>"
  p <- list(
    event = "cpu",
    interval = 0.01,
    start = structure(1.7e9, class = c("POSIXct", "POSIXt")),
    duration = 2.5,
    stacks = list(count = c(146, 55, 1), locations = list(c(4L, 3L, 2L, 1L), c(5L, 2L, 1L), c(6L, 1L)), thread = c(1L, 1L, 1L)),
    functions = df(
      name = c("outer", "f[for]", "f", "compute", long, "g"),
      label = c("outer", "f[for]", "f", "/libx.so::compute", long, "g"),
      kind = c("r", "loop", "r", "native", "native", "r"),
      module = c(NA, NA, NA, 1L, 1L, NA), file = NA_integer_
    ),
    locations = df(module = c(NA, NA, NA, 1L, 1L, NA), address = c("0x0", "0x0", "0x0", "0x7f0000001000", "0x7f0000002000", "0x0")),
    lines = df(location = 1:6, `function` = c(1L, 2L, 3L, 4L, 5L, 6L), file = NA_integer_, line = NA_integer_, check.names = FALSE),
    files = character(),
    modules = df(path = "/opt/libx.so", build_id = NA_character_, start = "0x7f0000000000", limit = "0x7f0000100000", offset = "0x0"),
    threads = df(number = 0L, tid = 4242, name = "R", cpu = 2.03),
    stats = list(
      samples = 202, intervals = 202, truncated = 0, dropped = 0, outside = 0, distinct_stacks = 3,
      handler_total = 0.002, handler_median = 9e-6, handler_p99 = 3e-5, labels_full = FALSE, memory = 1000,
      thread_joined = 0, thread_alone = 0, thread_dropped = 0, references = 0, collector_cpu = 0.004,
      usage = list(
        user = 2.0, system = 0.05, max_rss = 2^27, minor_faults = 100, major_faults = 0, block_input = 0,
        block_output = 8, voluntary_switches = 3, involuntary_switches = 5
      ),
      gc_time = 0.01, gc_count = 2
    ),
    options = list(loops = TRUE, lines = FALSE, threads = "all")
  )
  structure(p, class = "winch_profile")
}

# synthetic_profile() as a memory profile: bytes and allocations per
# stack, allocation counts and R's heap.
synthetic_memory_profile <- function() {
  p <- unclass(synthetic_profile())
  p$event <- "alloc"
  p$interval <- NA_real_
  p$sample_bytes <- 512 * 1024
  p$stacks$count <- c(40, 12, 3)
  p$stacks$alloc_bytes <- c(2.1e7, 6.5e6, 1.6e6)
  p$stacks$alloc_count <- c(2.0e5, 1.2e4, 3)
  p$stacks$inuse_bytes <- c(0, 4.2e6, 1.6e6)
  p$stacks$inuse_count <- c(0, 8e3, 3)
  p$stats$allocations <- 212003
  p$stats$sampled_allocations <- 55
  p$stats$untracked <- 0
  p$stats$r_heap <- list(before = 4.5e7, after = 4.7e7, peak = 9.9e7)
  structure(p, class = "winch_profile")
}

# The R type of every part of a profile's list `x` and of every column of
# its tables, by path (`part`, `table$column`), as `rs_profile_form()`
# names them.
part_types <- function(x) {
  out <- character()
  for (part in names(x)) {
    out[[part]] <- typeof(x[[part]])
    if (is.list(x[[part]]) && !is.null(names(x[[part]]))) {
      for (column in names(x[[part]])) {
        out[[paste0(part, "$", column)]] <- typeof(x[[part]][[column]])
      }
    }
  }
  out
}

# The description of a profile's R form (src/rust/src/profile_form.rs).
profile_form_description <- function() {
  as.data.frame(winch:::check_result(winch:::rs_profile_form()), stringsAsFactors = FALSE)
}
