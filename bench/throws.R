# What recording throws costs (issue 9): a C++ library that throws and
# catches internally, 40 frames below R, many times in one .Call, with
# capture on (the default) and off. Reports the time per throw+catch and
# the time capture adds to each throw. Target: <= 5 us added per throw at
# 40 frames.
#
#   Rscript bench/throws.R
library(winch)
stopifnot(winch_available())

# The throw fixture of the tests, compiled here with R CMD SHLIB (-O0:
# optimised, the recursion would become a loop).
src <- if (file.exists("tests/testthat/clib/throw.cpp")) {
  "tests/testthat/clib/throw.cpp"
} else {
  system.file("tests", "testthat", "clib", "throw.cpp", package = "winch")
}
dir <- tempfile("winch-bench-")
dir.create(dir)
invisible(file.copy(src, dir))
makevars <- file.path(dir, "Makevars")
writeLines("CXXFLAGS = -g -O0 -fPIC", makevars)
old <- setwd(dir)
status <- system2(file.path(R.home("bin"), "R"), c("CMD", "SHLIB", "-o", "wbench.so", "throw.cpp"),
  stdout = FALSE, stderr = FALSE, env = paste0("R_MAKEVARS_USER=", makevars)
)
setwd(old)
stopifnot(status == 0)
dll <- dyn.load(file.path(dir, "wbench.so"))

# wt_throw_loop(n, depth): n throws at recursion depth `depth` below the
# entry point, each caught there. depth 38 puts the throw 40 frames below
# R's interpreter (the recursion, wthrow::deep's last frame, the entry).
n <- 10000L
depth <- 38L
loop <- function() .Call("wt_throw_loop", n, depth, PACKAGE = "wbench")

# The frames a record holds at that depth.
options(winch.capture_throws = TRUE)
invisible(winch_last_throw())
invisible(loop())
frames <- nrow(winch_last_throw()) - 1L # without R's own frame
cat(sprintf("frames between the throw and R: %d\n", frames))

run <- function(capture) {
  options(winch.capture_throws = capture)
  invisible(winch_last_throw()) # applies the option
  loop()
}

res <- bench::mark(
  off = run(FALSE),
  on = run(TRUE),
  iterations = 30,
  check = TRUE,
  filter_gc = FALSE
)
print(res[, c("expression", "min", "median", "itr/sec")])

per_throw <- function(t) as.numeric(t) / n * 1e6
off <- per_throw(res$median[[1]])
on <- per_throw(res$median[[2]])
cat(sprintf("throw+catch at %d frames, capture off: %.2f us\n", frames, off))
cat(sprintf("throw+catch at %d frames, capture on:  %.2f us\n", frames, on))
cat(sprintf("added per throw: %.2f us (target: <= 5 us)\n", on - off))
options(winch.capture_throws = TRUE)
