# What profiling every thread costs (issue 18), in one process:
#
# 1. Wall time of a fixed amount of work done by 1, 2, 8 and 32 busy
#    threads (more threads than cores is fine: the work is the same),
#    run plain and under winch_profile(threads = "all") at 1 ms,
#    alternating, medians of several rounds. Targets: at most 3% over the
#    plain run for 1 and 2 threads, at most 5% at 32.
# 2. The cost of one sample as the signal handler measures itself in those
#    runs (all threads; median and 99th percentile), and of R's main
#    thread's samples at about 50 and about 500 frames is in
#    bench/profile.R. Target: <= 5 us median.
#
# The work is tests/testthat/clib/threads.c's thr_work(), compiled here.
#
#   Rscript bench/threads.R
library(winch)
stopifnot(winch_available())

interval <- as.numeric(Sys.getenv("WINCH_BENCH_INTERVAL", "0.001"))
rounds <- as.integer(Sys.getenv("WINCH_BENCH_ROUNDS", "7"))
# Million loop steps in all (split among the threads): about 2 s of CPU.
steps <- as.numeric(Sys.getenv("WINCH_BENCH_STEPS", "1600"))

src <- normalizePath(file.path("tests", "testthat", "clib", "threads.c"), mustWork = TRUE)
dir <- tempfile("winch-bench-threads-")
dir.create(dir)
file.copy(src, dir)
writeLines(c("CFLAGS = -O2 -fopenmp -fPIC", "LDFLAGS = -fopenmp -pthread"), file.path(dir, "Makevars"))
old <- setwd(dir)
out <- system2(file.path(R.home("bin"), "R"), c("CMD", "SHLIB", "-o", "bench_threads.so", "threads.c"),
  stdout = TRUE, stderr = TRUE, env = paste0("R_MAKEVARS_USER=", file.path(dir, "Makevars"))
)
setwd(old)
dll <- dyn.load(file.path(dir, "bench_threads.so"))
work <- function(n) .Call("thr_work", as.integer(n), steps / n, PACKAGE = "bench_threads")

elapsed <- function(expr) {
  t0 <- proc.time()[["elapsed"]]
  force(expr)
  proc.time()[["elapsed"]] - t0
}

cat(sprintf("R %s, interval %g s, %d cores\n\n", getRversion(), interval, parallel::detectCores()))
invisible(work(2L)) # warm-up
invisible(winch_profile(work(2L), interval = interval))
cat("Wall time of the same work (median of", rounds, "rounds, alternating):\n")
for (n in c(1L, 2L, 8L, 32L)) {
  costs <- list()
  times <- replicate(rounds, {
    plain <- elapsed(work(n))
    p <- NULL
    prof <- elapsed(p <- winch_profile(work(n), interval = interval))
    s <- summary(p)
    costs[[length(costs) + 1L]] <<- c(s$cost$handler_median, s$cost$handler_p99, s$unseen, nrow(s$by_thread))
    c(plain = plain, winch = prof)
  })
  med <- apply(times, 1L, stats::median)
  k <- apply(do.call(rbind, costs), 2L, stats::median)
  cat(sprintf(
    "  %2d threads: plain %.3f s; winch_profile() %.3f s (%+.1f%%); per sample %.1f us median, %.1f us p99; %d threads in the profile, %.1f%% of the CPU unseen\n",
    n, med[["plain"]], med[["winch"]], 100 * (med[["winch"]] / med[["plain"]] - 1),
    k[[1L]] * 1e6, k[[2L]] * 1e6, as.integer(k[[4L]]), 100 * k[[3L]]
  ))
}
