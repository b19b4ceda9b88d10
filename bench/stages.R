# Where the time of a warm capture goes: nanoseconds per capture spent
# unwinding, unwinding plus module lookup and checks, and those plus symbol
# lookups, for each backend, at a moderate depth. (Building the R data frame
# and the R wrapper are the rest of winch_trace_back(): see trace_back.R.)
#
#   Rscript bench/stages.R
library(winch)
stopifnot(winch_available())

at_depth <- function(n, fn) if (n == 0L) fn() else winch_call(function() at_depth(n - 1L, fn))
invisible(at_depth(5L, function() {
  for (backend in winch:::winch_backends()) {
    winch_trace_back(backend = backend) # fill the caches
    t <- winch:::stage_times(backend, 500L)
    cat(sprintf("%-10s %4d frames: unwind %7.1f us, + checks %7.1f us, + symbols %7.1f us\n",
                backend, as.integer(t[["frames"]]), t[["unwind"]] / 1000, t[["assemble"]] / 1000,
                t[["symbolize"]] / 1000))
  }
}))
