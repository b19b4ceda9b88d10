# What a memory profile costs (issue 21), in one process:
#
# 1. Wall time of allocation-heavy R code (`lapply(1:1e5, function(i)
#    numeric(10))`, repeated) and of a C++ workload of many small
#    `new`/`delete` pairs, run plain and under winch_profile(event =
#    "alloc") at the default sample_bytes, alternating, medians of rounds.
#    Target: at most 10 % over the plain run.
# 2. The hook's fast path: the C++ workload's added time per allocation
#    (an allocation and its free are two calls through the hooks).
#
#   Rscript bench/alloc.R
library(winch)
stopifnot(winch_available())
rounds <- as.integer(Sys.getenv("WINCH_BENCH_ROUNDS", "7"))

dir <- tempfile("winch-bench-alloc-")
dir.create(dir)
writeLines(c(
  "#include <R.h>",
  "#include <Rinternals.h>",
  "#include <vector>",
  "extern \"C\" SEXP churn_new(SEXP n_) {",
  "  int n = Rf_asInteger(n_);",
  "  long sum = 0;",
  "  for (int i = 0; i < n; i++) {",
  "    std::vector<int> *v = new std::vector<int>(4 + i % 8, i);",
  "    sum += (*v)[0];",
  "    delete v;",
  "  }",
  "  return Rf_ScalarReal((double) sum);",
  "}"
), file.path(dir, "churn.cpp"))
old <- setwd(dir)
invisible(system2(file.path(R.home("bin"), "R"), c("CMD", "SHLIB", "-o", "churn.so", "churn.cpp"), stdout = TRUE, stderr = TRUE))
setwd(old)
dyn.load(file.path(dir, "churn.so"))

r_work <- function() for (k in 1:5) lapply(1:1e5, function(i) numeric(10))
n_cpp <- 2e6
cpp_work <- function() .Call("churn_new", as.integer(n_cpp))

elapsed <- function(expr) {
  t0 <- proc.time()[["elapsed"]]
  force(expr)
  proc.time()[["elapsed"]] - t0
}

measure <- function(work) {
  res <- replicate(rounds, c(
    plain = elapsed(work()),
    alloc = elapsed(winch_profile(work(), event = "alloc"))
  ))
  apply(res, 1, median)
}

cat(sprintf("R %s, %d cores, %d rounds, sample_bytes = 512 KiB\n\n", getRversion(), parallel::detectCores(), rounds))
for (w in list(list("R vectors (lapply of numeric(10), 5 x 1e5)", r_work), list("C++ new/delete (2e6 pairs)", cpp_work))) {
  m <- measure(w[[2L]])
  cat(sprintf(
    "%s: plain %.3f s, memory profile %.3f s: %+.1f %%\n",
    w[[1L]], m[["plain"]], m[["alloc"]], 100 * (m[["alloc"]] / m[["plain"]] - 1)
  ))
  if (identical(w[[2L]], cpp_work)) {
    cat(sprintf("  added per allocation (new and delete through the hooks): %.1f ns\n",
      1e9 * (m[["alloc"]] - m[["plain"]]) / n_cpp))
  }
}
p <- winch_profile(cpp_work(), event = "alloc")
s <- summary(p)
cat(sprintf("\nC++ workload once more: %s allocations seen, %s sampled\n",
  format(s$allocations, big.mark = ","), format(s$sampled_allocations, big.mark = ",")))
print(utils::head(as.data.frame(p), 3))
