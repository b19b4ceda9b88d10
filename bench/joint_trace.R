# Cost of joint traces: rlang::trace_back() without and with the winch hook
# (options(rlang_trace_use_winch = TRUE)), and winch_sys_calls() next to
# sys.calls(), in one process (bench::mark medians).
#
#   Rscript bench/joint_trace.R
#
# Target (issue 3): the hook adds at most half of rlang's own trace_back() cost.
library(winch)
stopifnot(winch_available())
options(rlang_trace_use_winch = TRUE)
stopifnot(any(startsWith(winch_call(function() rlang::trace_back())$namespace, "/") %in% TRUE))

deep <- function(n, fn) if (n == 0L) fn() else deep(n - 1L, fn)

# The same expression, at the same depth, with the option off and on.
mark_trace_back <- function(use_winch) {
  old <- options(rlang_trace_use_winch = use_winch)
  on.exit(options(old))
  res <- bench::mark(rlang::trace_back(), min_iterations = 50, time_unit = "us")
  as.numeric(res$median)
}

measure <- function(label, run) {
  run(function() {
    rows <- nrow(winch_trace_back())
    off <- mark_trace_back(FALSE)
    on <- mark_trace_back(TRUE)
    res <- bench::mark(
      sys.calls = sys.calls(),
      winch_sys_calls = winch_sys_calls(),
      check = FALSE, min_iterations = 50, time_unit = "us"
    )
    med <- setNames(as.numeric(res$median), as.character(res$expression))
    cat(sprintf("\n%s: %d native frames\n", label, rows))
    cat(sprintf("  %-28s median %10.1f us\n", "rlang::trace_back()", off))
    cat(sprintf("  %-28s median %10.1f us\n", "rlang::trace_back() + winch", on))
    for (n in names(med)) cat(sprintf("  %-28s median %10.1f us\n", n, med[[n]]))
    cat(sprintf("  the hook adds %.1f us = %.2f x rlang's own cost (target <= 0.5)\n", on - off, (on - off) / off))
    cat(sprintf("  winch_sys_calls() / sys.calls() = %.1f\n", med[["winch_sys_calls"]] / med[["sys.calls"]]))
    invisible((on - off) / off)
  })
}

winch_sys_calls() # fill the caches
# A native round trip so that there is something to add.
small <- measure("~40 frames (one winch_call)", function(f) winch_call(f))
large <- measure("~440 frames (100 R calls in winch_call)", function(f) winch_call(function() deep(100L, f)))
cat(sprintf("\ntarget met: %s\n", small <= 0.5 && large <= 0.5))
