# What a memory profile costs (issue 21), in one process:
#
# 1. Wall time of allocation-heavy R code (`lapply(1:1e5, function(i)
#    numeric(10))`, repeated) and of a C++ workload of many small
#    `new`/`delete` pairs, run plain and under winch_profile(event =
#    "alloc") at the default sample_bytes, alternating, medians of rounds.
#    Target: at most 10 % over the plain run. The C++ workloads: nothing
#    but `new`/`delete` of small vectors (the worst case: a pair costs
#    about 10 ns plain), and strings and a std::map built (work between
#    allocations, as real code has).
# 2. The hook's fast path: the new/delete workload's added time per pair
#    (an allocation and its free are two calls through the hooks), net of
#    a memory profile's fixed cost (starting and stopping, measured on
#    `NULL`).
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
  "}",
  "#include <map>",
  "#include <string>",
  "extern \"C\" SEXP strings_map(SEXP n_) {",
  "  int n = Rf_asInteger(n_);",
  "  std::map<std::string, int> m;",
  "  for (int i = 0; i < n; i++) {",
  "    std::string key = \"a key long enough for the heap \" + std::to_string(i % 50000);",
  "    m[key] += i;",
  "  }",
  "  return Rf_ScalarReal((double) m.size());",
  "}"
), file.path(dir, "churn.cpp"))
old <- setwd(dir)
invisible(system2(file.path(R.home("bin"), "R"), c("CMD", "SHLIB", "-o", "churn.so", "churn.cpp"), stdout = TRUE, stderr = TRUE))
setwd(old)
dyn.load(file.path(dir, "churn.so"))

r_work <- function() for (k in 1:5) lapply(1:1e5, function(i) numeric(10))
n_cpp <- 2e7
cpp_work <- function() .Call("churn_new", as.integer(n_cpp))
map_work <- function() .Call("strings_map", 2e6L)

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
invisible(winch_profile(NULL, event = "alloc"))
fixed <- median(replicate(rounds, elapsed(winch_profile(NULL, event = "alloc"))))
cat(sprintf("A memory profile's fixed cost (start and stop, on NULL): %.1f ms\n", 1000 * fixed))
for (w in list(
  list("R vectors (lapply of numeric(10), 5 x 1e5)", r_work),
  list("C++ strings into a std::map (2e6)", map_work),
  list("C++ new/delete only (2e7 pairs)", cpp_work)
)) {
  m <- measure(w[[2L]])
  cat(sprintf(
    "%s: plain %.3f s, memory profile %.3f s: %+.1f %%\n",
    w[[1L]], m[["plain"]], m[["alloc"]], 100 * (m[["alloc"]] / m[["plain"]] - 1)
  ))
  if (identical(w[[2L]], cpp_work)) {
    cat(sprintf("  added per pair (new and delete through the hooks, fixed cost taken out): %.1f ns\n",
      1e9 * (m[["alloc"]] - m[["plain"]] - fixed) / n_cpp))
  }
}
p <- winch_profile(cpp_work(), event = "alloc")
s <- summary(p)
cat(sprintf("\nC++ workload once more: %s allocations seen, %s sampled\n",
  format(s$allocations, big.mark = ","), format(s$sampled_allocations, big.mark = ",")))
print(utils::head(as.data.frame(p)[, -1L], 3))
