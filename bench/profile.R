# What profiling costs (issue 8), in one process:
#
# 1. Wall time of a workload mixing R loops and native round trips
#    (R -> winch.so -> R), run plain, under winch_profile() and under Rprof()
#    at the same interval, alternating, medians of several rounds.
#    Targets: at most 3% over the plain run, and no more than Rprof() + 1
#    point. (R >= 4.3 raises Rprof()'s interval on Linux to at least 10 ms;
#    its figures are then at 10 ms, and this script says so.)
# 2. The cost of one sample, as the signal handler measures itself during
#    a profile (median and 99th percentile), at about 50 and about 500 native
#    frames. Targets: <= 5 us and <= 30 us median.
# 3. The profile's memory after 200,000 samples: bench/profile-memory.R (in
#    a fresh process of its own).
#
#   Rscript bench/profile.R
library(winch)
stopifnot(winch_available())

interval <- as.numeric(Sys.getenv("WINCH_BENCH_INTERVAL", "0.001"))
rounds <- as.integer(Sys.getenv("WINCH_BENCH_ROUNDS", "7"))

# R loops, R -> native -> R round trips, base R's own C code.
workload <- function(n = 40000L) {
  s <- 0
  for (i in seq_len(n)) {
    s <- s + winch_call(function() sum(sort(runif(200))))
    j <- 0L
    while (j < 20L) j <- j + 1L
  }
  s
}

elapsed <- function(expr) {
  t0 <- proc.time()[["elapsed"]]
  force(expr)
  proc.time()[["elapsed"]] - t0
}

run_plain <- function() elapsed(workload())
run_winch <- function() elapsed(winch_profile(workload(), interval = interval))
run_rprof <- function() {
  out <- tempfile()
  on.exit(unlink(out))
  suppressWarnings(Rprof(out, interval = interval))
  t <- elapsed(workload())
  Rprof(NULL)
  t
}

cat(sprintf("R %s, interval %g s\n\n", getRversion(), interval))
invisible(run_plain()) # warm-up (JIT, caches)
invisible(run_winch())
times <- replicate(rounds, c(plain = run_plain(), winch = run_winch(), rprof = run_rprof()))
med <- apply(times, 1L, stats::median)
cat("1. Wall time of the workload (median of", rounds, "rounds, alternating):\n")
cat(sprintf("   plain %.3f s; winch_profile() %.3f s (%+.1f%%); Rprof() %.3f s (%+.1f%%)\n",
  med[["plain"]], med[["winch"]], 100 * (med[["winch"]] / med[["plain"]] - 1),
  med[["rprof"]], 100 * (med[["rprof"]] / med[["plain"]] - 1)))
if (getRversion() >= "4.3.0" && interval < 0.01) {
  cat("   (Rprof() ran at 10 ms: R >= 4.3 does not sample faster on Linux)\n")
}

# 2. Per-sample cost at two depths: R recursion through winch_call() adds a
# native round trip (and R's own frames) per level.
nested <- function(k, n) if (k == 0L) workload(n) else winch_call(function() nested(k - 1L, n))
depth_profile <- function(k, n) {
  p <- winch_profile(nested(k, n), interval = interval)
  stacks <- winch:::stack_functions(p)
  deepest <- max(lengths(stacks))
  s <- summary(p)
  c(entries = deepest, native = NA, median_us = s$cost$handler_median * 1e6, p99_us = s$cost$handler_p99 * 1e6)
}
native_frames <- function(k) {
  # Native frames a sample walks at that depth (R's own included).
  f <- function() nrow(winch_trace_back(libr = TRUE))
  g <- function(k) if (k == 0L) f() else winch_call(function() g(k - 1L))
  g(k)
}
cat("\n2. Cost of one sample, measured in the signal handler:\n")
for (k in c(2L, 40L)) {
  r <- depth_profile(k, 30000L)
  cat(sprintf("   ~%d native frames (%d entries in the deepest sample): median %.1f us, 99th percentile %.1f us\n",
    native_frames(k), as.integer(r[["entries"]]), r[["median_us"]], r[["p99_us"]]))
}
cost <- function(k) {
  g <- function(k) if (k == 0L) .Call(winch:::C_rs_profile_sample_cost, 5000L, 0L) else winch_call(function() g(k - 1L))
  unlist(g(k))
}
cat("   (the same sampler in a tight loop, caches warm:",
  sprintf("%.1f us at ~%d frames, %.1f us at ~%d frames)\n",
    cost(2L)[["median_ns"]] / 1e3, native_frames(2L), cost(40L)[["median_ns"]] / 1e3, native_frames(40L)))
