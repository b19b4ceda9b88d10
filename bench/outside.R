# What reading a process from outside costs (issue 20), measured on child
# R processes that never load winch:
#
# 1. winch_dump() of a process whose main thread is 100 R <-> C round trips
#    deep (burn_nest): the first dump in this session (cold: modules read,
#    unwind tables copied, names looked up) and the next ones (warm),
#    bench::mark medians. Targets: <= 1 s cold, <= 50 ms warm. Then a
#    recording of it: what one sample of a deep stack costs.
# 2. winch_record() at 100 Hz: the target's slowdown, as the rate of its
#    own CPU-clocked work (a loop of burn_a(0.01) calls, counted per wall
#    second by the child itself) while recorded against while not,
#    alternating, median of rounds. Target: <= 5 %.
#
#   Rscript bench/outside.R
library(winch)
stopifnot(winch_available())
rounds <- as.integer(Sys.getenv("WINCH_BENCH_ROUNDS", "5"))

src <- normalizePath(file.path("tests", "testthat", "clib", "burn.c"), mustWork = TRUE)
dir <- tempfile("winch-bench-outside-")
dir.create(dir)
file.copy(src, dir)
old <- setwd(dir)
invisible(system2(file.path(R.home("bin"), "R"), c("CMD", "SHLIB", "-o", "wtest_burn.so", "burn.c"), stdout = TRUE, stderr = TRUE))
setwd(old)
so <- file.path(dir, "wtest_burn.so")

start_child <- function(code) {
  file <- tempfile(fileext = ".R")
  ready <- tempfile("ready-")
  writeLines(c(sprintf("ready <- %s", deparse(ready)), sprintf("dyn.load(%s)", deparse(so)), code), file)
  pid <- as.integer(system(sprintf("%s --vanilla %s > /dev/null 2>&1 & echo $!",
    shQuote(file.path(R.home("bin"), "Rscript")), shQuote(file)), intern = TRUE))
  while (!file.exists(ready)) Sys.sleep(0.05)
  pid
}

cat(sprintf("R %s, %d cores\n\n", getRversion(), parallel::detectCores()))

# 1. Dumps at depth 100.
pid <- start_child(c(
  "f <- function(k) if (k > 0) .Call('burn_nest', quote(f), k - 1, environment(), PACKAGE = 'wtest_burn') else { file.create(ready); .Call('burn_a', 1e6, PACKAGE = 'wtest_burn') }",
  "f(100)"
))
cold <- system.time(d <- winch_dump(pid))[["elapsed"]]
cat(sprintf("winch_dump(): %d entries on the main thread\n", length(d$main)))
cat(sprintf("  cold (first in this session): %.1f ms\n", 1000 * cold))
m <- bench::mark(winch_dump(pid), iterations = 20, check = FALSE)
cat(sprintf("  warm: median %.1f ms (min %.1f)\n", 1000 * as.numeric(m$median), 1000 * as.numeric(m$min)))
# A recording of the same deep stack: what one sample costs there.
p <- winch_record(pid, 2, interval = 0.01)
cat(sprintf("  winch_record() of it at 100 Hz: %d frames a sample, %.2f ms a sample (median, stop to detach)\n\n",
  max(lengths(p$stacks$locations)), 1000 * summary(p)$cost$handler_median))
tools::pskill(pid)

# 2. The target's work rate while recorded.
rate_file <- tempfile("rate-")
pid <- start_child(c(
  sprintf("out <- %s", deparse(rate_file)),
  "file.create(ready)",
  "repeat { t0 <- Sys.time(); n <- 0; while (Sys.time() - t0 < 0.5) { .Call('burn_a', 0.005, PACKAGE = 'wtest_burn'); n <- n + 1 }",
  "  cat(n / as.numeric(Sys.time() - t0, units = 'secs'), '\\n', file = out, append = TRUE) }"
))
while (!file.exists(rate_file)) Sys.sleep(0.1)
rate_over <- function(seconds, record) {
  before <- length(readLines(rate_file))
  if (record) p <- winch_record(pid, seconds, interval = 0.01) else Sys.sleep(seconds)
  r <- as.numeric(readLines(rate_file))
  r <- r[(before + 2L):length(r)] # whole half-seconds inside the window
  list(rate = median(r, na.rm = TRUE), p = if (record) p)
}
res <- replicate(rounds, {
  plain <- rate_over(3, FALSE)
  rec <- rate_over(3, TRUE)
  c(plain = plain$rate, recorded = rec$rate, samples = sum(rec$p$stacks$count),
    cost_ms = 1000 * summary(rec$p)$cost$handler_median)
})
tools::pskill(pid)
med <- apply(res, 1, median)
cat(sprintf("winch_record() at 100 Hz (median of %d rounds of 3 s):\n", rounds))
cat(sprintf("  work rate plain %.1f/s, recorded %.1f/s: %.1f%% slower\n",
  med[["plain"]], med[["recorded"]], 100 * (1 - med[["recorded"]] / med[["plain"]])))
cat(sprintf("  %.0f samples in 3 s; a sample takes %.2f ms (median, stop to detach)\n", med[["samples"]], med[["cost_ms"]]))
