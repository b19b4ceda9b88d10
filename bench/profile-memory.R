# The profiler's memory (issue 8): a steady workload sampled 200,000 times
# (set WINCH_BENCH_SAMPLES to change; 200,000 samples at 1 ms is ~200 s),
# in a fresh process, so that the resident memory before the profile holds
# nothing of an earlier one. Target: under 50 MB.
#
#   Rscript bench/profile-memory.R
library(winch)
stopifnot(winch_available())

interval <- 0.001
n_samples <- as.numeric(Sys.getenv("WINCH_BENCH_SAMPLES", "200000"))

# R loops, R -> native -> R round trips, base R's own C code.
workload <- function(n) {
  s <- 0
  for (i in seq_len(n)) {
    s <- s + winch_call(function() sum(sort(runif(200))))
    j <- 0L
    while (j < 20L) j <- j + 1L
  }
  s
}
# Elapsed time, so that it runs at a known pace whatever the CPU load.
steady <- function(seconds) {
  end <- proc.time()[["elapsed"]] + seconds
  while (proc.time()[["elapsed"]] < end) workload(50L)
}
# The process's resident memory (VmRSS), in MB.
rss <- function() {
  x <- grep("^VmRSS:", readLines("/proc/self/status"), value = TRUE)
  as.numeric(gsub("[^0-9]", "", x)) / 1024
}

steady(1) # the workload's own memory, before the profile
invisible(gc())
before <- rss()
during <- NA
p <- winch_profile(
  {
    steady(n_samples * interval)
    during <- rss() # the profiler's buffers, tables and stacks are all there
  },
  interval = interval, event = "elapsed"
)
after <- rss()
s <- summary(p)
cat(sprintf("R %s: after %s samples (%s distinct stacks), the collector holds %.1f MB of stacks;",
  getRversion(), format(s$handler_runs, big.mark = ","), format(s$distinct_stacks, big.mark = ","),
  p$stats$memory / 2^20))
cat(sprintf(" the profile object is %.1f MB.\nResident memory: %.0f MB before, %.0f MB at the end of the run (+%.0f MB), %.0f MB once the profile is built\n",
  as.numeric(utils::object.size(p)) / 2^20, before, during, during - before, after))
