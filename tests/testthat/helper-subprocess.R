# Runs R code in a fresh Rscript process (same library paths) and returns its
# output lines; the status is attached as attribute "status".
run_rscript <- function(code) {
  file <- tempfile(fileext = ".R")
  on.exit(unlink(file))
  writeLines(code, file)
  out <- suppressWarnings(system2(
    file.path(R.home("bin"), "Rscript"), c("--vanilla", shQuote(file)),
    stdout = TRUE, stderr = TRUE,
    env = paste0("R_LIBS=", paste(.libPaths(), collapse = .Platform$path.sep))
  ))
  structure(out, status = attr(out, "status") %||% 0L)
}

# Makes printed traces independent of where things were built: keeps the
# file name of source locations but drops directories, line and column.
scrub_locations <- function(x) {
  gsub("at ([^ ]*/)?([^/ ]+):[0-9]+:[0-9]+", "at <dir>/\\2:<line>", x)
}

# Whether SIGINT is ignored in this process: a command started in the
# background by a shell without job control inherits that, and R >= 4.5
# keeps it (R 4.2 installs its handler regardless), so an interrupt sent to
# the process cannot arrive.
sigint_ignored <- function() {
  status <- tryCatch(readLines("/proc/self/status", warn = FALSE), error = function(e) character())
  ignored <- sub("^SigIgn:\\s*", "", grep("^SigIgn:", status, value = TRUE))
  if (length(ignored) != 1L) {
    return(FALSE)
  }
  # SIGINT is signal 2: bit 1 of the mask (hex, lowest bits last).
  low <- strtoi(substr(ignored, nchar(ignored) - 1L, nchar(ignored)), 16L)
  bitwAnd(low, 2L) == 2L
}

skip_if_sigint_ignored <- function() {
  skip_if(sigint_ignored(), "SIGINT is ignored in this process (started in the background), so no interrupt can be sent to it")
}

# What winch_profile(..) of `before()` followed by an interrupt (SIGINT
# to this process) gives: "interrupted" when the interrupt ended it, as it
# should, "not interrupted" otherwise.
profile_interrupted <- function(before, ...) {
  tryCatch(
    winch_profile(
      {
        before()
        tools::pskill(Sys.getpid(), tools::SIGINT)
        Sys.sleep(2)
        "not interrupted"
      },
      ...
    ),
    interrupt = function(e) "interrupted"
  )
}

# Expects `line` among the (trimmed) lines a subprocess printed, showing
# them all when it is not.
expect_line <- function(out, line) {
  out <- trimws(out)
  expect_true(line %in% out, label = paste(c(sprintf("%s in", line), out), collapse = "\n"))
}
