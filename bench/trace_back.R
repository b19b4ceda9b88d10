# Speed of winch_trace_back() with warm caches, next to rlang::trace_back()
# and sys.calls() in the same process (bench::mark medians).
#
#   Rscript bench/trace_back.R
#
# Stack shapes:
#   shallow: bench::mark at top level (bench's own frames included)
#   deep:    100 nested R calls inside one winch_call()   (~440 native frames)
#   round trips: 100 nested R -> C -> R round trips       (~1550 native frames)
# Targets (issue 4): <= 50 us at ~40 frames, <= 300 us at ~440 frames;
# issue 23 (cheap enough to leave on): <= 10 us at ~40, <= 40 us at ~450.
library(winch)
stopifnot(winch_available())

deep <- function(n, fn) if (n == 0L) fn() else deep(n - 1L, fn)
round_trips <- function(n, fn) if (n == 0L) fn() else winch_call(function() round_trips(n - 1L, fn))

measure <- function(label, run) {
  run(function() {
    rows <- nrow(winch_trace_back())
    res <- bench::mark(
      winch_trace_back = winch_trace_back(),
      `rlang::trace_back` = rlang::trace_back(),
      sys.calls = sys.calls(),
      check = FALSE, min_iterations = 100, time_unit = "us"
    )
    med <- setNames(as.numeric(res$median), as.character(res$expression))
    cat(sprintf("\n%s: %d native frames\n", label, rows))
    for (n in names(med)) {
      cat(sprintf("  %-18s median %10.1f us   ratio to winch_trace_back %7.2f\n",
                  n, med[[n]], med[[n]] / med[["winch_trace_back"]]))
    }
    cat(sprintf("  winch_trace_back per frame: %.3f us\n", med[["winch_trace_back"]] / rows))
    invisible(c(rows = rows, med))
  })
}

winch_trace_back() # first capture: fills the caches
shallow <- measure("shallow", function(f) f())
deep_res <- measure("deep (100 R calls in winch_call)", function(f) winch_call(function() deep(100L, f)))
trips <- measure("round trips (100 x R -> C -> R)", function(f) round_trips(100L, f))

cat(sprintf(
  "\ntargets: shallow %.1f us (<= 50: %s); deep %.1f us at %d frames (<= 300: %s)\n",
  shallow[["winch_trace_back"]], shallow[["winch_trace_back"]] <= 50,
  deep_res[["winch_trace_back"]], deep_res[["rows"]], deep_res[["winch_trace_back"]] <= 300
))
cat(sprintf(
  "issue 23 targets: shallow <= 10 us: %s; deep <= 40 us: %s\n",
  shallow[["winch_trace_back"]] <= 10, deep_res[["winch_trace_back"]] <= 40
))
