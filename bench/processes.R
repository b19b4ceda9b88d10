# What profiling child processes costs (issue 32), in one process:
#
# 1. Wall time of parallel::mclapply() of 4 tasks on 2 cores (each task
#    about 0.4 s of CPU: R code calling a compiled loop), run plain, under
#    winch_profile(processes = "self") and under winch_profile() (children
#    sampled), at `interval` (0.005 s), alternating, medians of several
#    rounds. Target: the children's sampling adds at most 5 % of wall time.
# 2. The share of the whole tree's CPU time the profile did not see
#    (summary()$unseen). Target: at most 10 %.
# 3. What a sample costs a child: the children's CPU time (the kernel's
#    account of reaped children, getrusage(RUSAGE_CHILDREN)) profiled minus
#    plain, over the children's samples, medians of the rounds.
#
# 4. The same for parallel::parLapply() of 4 tasks on a PSOCK cluster of 2
#    workers made before the profile (read from outside, see
#    ?winch_profile): wall time, unseen share, and what a sample costs a
#    worker (the workers' own CPU time, from proc.time() in each, profiled
#    minus plain, over their samples: being stopped costs a worker wall
#    time, not CPU time), how long a sample keeps a worker stopped (median
#    and 99th percentile, summary()'s cost), and the profiler's own CPU
#    time (collector and tracer threads) per worker sample.
#
# 5. The same for a callr session (callr::r() of one task of 2 x burn
#    seconds, when callr is installed), read through winch's tracer
#    process: wall time, unseen share, and how long a sample keeps the
#    session stopped (median and 99th percentile).
#
# The compiled loop is tests/testthat/clib/burn.c's burn_a() (a known
# amount of the calling thread's CPU time), built here.
#
#   Rscript bench/processes.R
library(winch)
stopifnot(winch_available())

interval <- as.numeric(Sys.getenv("WINCH_BENCH_INTERVAL", "0.005"))
rounds <- as.integer(Sys.getenv("WINCH_BENCH_ROUNDS", "7"))
# CPU seconds of the compiled loop per task.
burn <- as.numeric(Sys.getenv("WINCH_BENCH_BURN", "0.4"))

src <- normalizePath(file.path("tests", "testthat", "clib", "burn.c"), mustWork = TRUE)
dir <- tempfile("winch-bench-processes-")
dir.create(dir)
file.copy(src, dir)
writeLines("CFLAGS = -O2 -g -fPIC", file.path(dir, "Makevars"))
old <- setwd(dir)
out <- system2(file.path(R.home("bin"), "R"), c("CMD", "SHLIB", "-o", "bench_processes.so", "burn.c"),
  stdout = TRUE, stderr = TRUE, env = paste0("R_MAKEVARS_USER=", file.path(dir, "Makevars"))
)
setwd(old)
dll <- dyn.load(file.path(dir, "bench_processes.so"))

task <- function(i) {
  # Some R work around the compiled loop, as a real task has.
  x <- 0
  for (k in 1:2e5) x <- x + k
  .Call("burn_a", burn, PACKAGE = "bench_processes")
}
work <- function() parallel::mclapply(1:4, task, mc.cores = 2, mc.preschedule = FALSE)

# Wall time, and the CPU time of children reaped while `expr` ran.
measure <- function(expr) {
  t0 <- proc.time()
  force(expr)
  t <- proc.time() - t0
  c(wall = t[["elapsed"]], children = t[["user.child"]] + t[["sys.child"]])
}

# The wall-time line of medians `m` (plain, self, all).
wall_line <- function(m) {
  cat(sprintf("  wall time: plain %.3f s; processes = \"self\" %.3f s (%+.1f%%); processes = \"all\" %.3f s (%+.1f%%)\n",
    m[["plain"]], m[["self"]], 100 * (m[["self"]] / m[["plain"]] - 1),
    m[["all"]], 100 * (m[["all"]] / m[["plain"]] - 1)))
}

cat(sprintf("R %s, interval %g s, %d cores, %d rounds\n\n", getRversion(), interval, parallel::detectCores(), rounds))
invisible(work()) # warm-up
invisible(winch_profile(work(), interval = interval))

rows <- replicate(rounds, {
  plain <- measure(work())
  p_self <- NULL
  self <- measure(p_self <- winch_profile(work(), interval = interval, processes = "self"))
  p_all <- NULL
  all <- measure(p_all <- winch_profile(work(), interval = interval))
  s <- summary(p_all)
  child_samples <- round(sum(s$by_process$sampled[-1L]) / interval)
  c(
    plain = plain[["wall"]], self = self[["wall"]], all = all[["wall"]],
    unseen_all = s$unseen, unseen_self = summary(p_self)$unseen,
    per_sample = (all[["children"]] - plain[["children"]]) / max(child_samples, 1),
    child_samples = child_samples
  )
})
med <- apply(rows, 1L, stats::median)
cat("mclapply() of 4 tasks on 2 cores (medians):\n")
wall_line(med)
cat(sprintf("  unseen CPU of the tree: %.1f%% with children sampled (%.1f%% with processes = \"self\")\n",
  100 * med[["unseen_all"]], 100 * med[["unseen_self"]]))
cat(sprintf("  children's samples: %d; CPU a sample costs a child: %.1f us (median of rounds; %.1f us .. %.1f us)\n",
  as.integer(med[["child_samples"]]), med[["per_sample"]] * 1e6,
  min(rows["per_sample", ]) * 1e6, max(rows["per_sample", ]) * 1e6))

# PSOCK workers, read from outside.
cl <- parallel::makeCluster(2)
invisible(parallel::clusterCall(cl, dyn.load, file.path(dir, "bench_processes.so")))
ptask <- function(i, seconds) .Call("burn_a", seconds, PACKAGE = "bench_processes")
pwork <- function() parallel::parLapply(cl, 1:4, ptask, seconds = burn)
workers_cpu <- function() sum(unlist(parallel::clusterEvalQ(cl, sum(proc.time()[c("user.self", "sys.self")]))))
pmeasure <- function(expr) {
  c0 <- workers_cpu()
  t0 <- proc.time()[["elapsed"]]
  force(expr)
  c(wall = proc.time()[["elapsed"]] - t0, workers = workers_cpu() - c0)
}
invisible(pwork())
invisible(winch_profile(pwork(), interval = interval))
prows <- replicate(rounds, {
  plain <- pmeasure(pwork())
  self <- pmeasure(winch_profile(pwork(), interval = interval, processes = "self"))
  p_all <- NULL
  all <- pmeasure(p_all <- winch_profile(pwork(), interval = interval))
  s <- summary(p_all)
  theirs <- s$by_process$process != "self"
  worker_samples <- p_all$stats$worker_stops
  c(
    plain = plain[["wall"]], self = self[["wall"]], all = all[["wall"]],
    unseen_all = s$unseen,
    per_sample = (all[["workers"]] - plain[["workers"]]) / max(worker_samples, 1),
    profiler = p_all$stats$collector_cpu / max(worker_samples, 1),
    worker_samples = worker_samples,
    intervals = sum(s$by_process$sampled[theirs]) / interval / max(worker_samples, 1),
    stop_median = s$cost$worker_stop_median, stop_p99 = s$cost$worker_stop_p99
  )
})
parallel::stopCluster(cl)
pmed <- apply(prows, 1L, stats::median)
cat("\nparLapply() of 4 tasks on a PSOCK cluster of 2 workers (medians):\n")
wall_line(pmed)
cat(sprintf("  unseen CPU of the tree: %.1f%%\n", 100 * pmed[["unseen_all"]]))
cat(sprintf("  workers' samples: %d; CPU a sample costs a worker: %.1f us (%.1f us .. %.1f us); the profiler's CPU per worker sample: %.1f us\n",
  as.integer(pmed[["worker_samples"]]), pmed[["per_sample"]] * 1e6,
  min(prows["per_sample", ]) * 1e6, max(prows["per_sample", ]) * 1e6, pmed[["profiler"]] * 1e6))
cat(sprintf("  a sample stands for %.1f intervals and keeps its worker stopped %.0f us (median; 99th percentile %.0f us)\n",
  pmed[["intervals"]], pmed[["stop_median"]] * 1e6, pmed[["stop_p99"]] * 1e6))

# A callr session, read through winch's tracer process.
if (requireNamespace("callr", quietly = TRUE)) {
  so <- file.path(dir, "bench_processes.so")
  cwork <- function() {
    callr::r(function(so, seconds) {
      dyn.load(so)
      .Call("burn_a", seconds, PACKAGE = "bench_processes")
    }, list(so = so, seconds = 2 * burn))
  }
  invisible(cwork())
  invisible(winch_profile(cwork(), interval = interval))
  crows <- replicate(rounds, {
    plain <- measure(cwork())
    self <- measure(winch_profile(cwork(), interval = interval, processes = "self"))
    p_all <- NULL
    all <- measure(p_all <- winch_profile(cwork(), interval = interval))
    s <- summary(p_all)
    c(
      plain = plain[["wall"]], self = self[["wall"]], all = all[["wall"]],
      unseen_all = s$unseen, samples = p_all$stats$worker_stops,
      stop_median = s$cost$worker_stop_median, stop_p99 = s$cost$worker_stop_p99
    )
  })
  cmed <- apply(crows, 1L, stats::median)
  cat(sprintf("\ncallr::r() of one task of %.1f s (medians):\n", 2 * burn))
  wall_line(cmed)
  cat(sprintf("  unseen CPU of the tree: %.1f%%; the session's samples: %d, each keeping it stopped %.0f us (median; 99th percentile %.0f us)\n",
    100 * cmed[["unseen_all"]], as.integer(cmed[["samples"]]), cmed[["stop_median"]] * 1e6, cmed[["stop_p99"]] * 1e6))
} else {
  cat("\ncallr is not installed: no callr figures\n")
}
