# The command line's exit status: 0 done, 1 an error, 2 bad usage (a
# command line it cannot parse, or an argument winch refuses). Its dumps
# and recordings are tested in test-dump.R and test-record.R.

run_cli <- function(...) {
  cli <- system.file("bin", "winch", package = "winch")
  skip_if(!nzchar(cli), "winch's command line is not installed")
  out <- suppressWarnings(system2(cli, c(...), stdout = TRUE, stderr = TRUE, env = c(
    paste0("R_LIBS=", paste(.libPaths(), collapse = ":")),
    paste0("RSCRIPT=", file.path(R.home("bin"), "Rscript"))
  )))
  structure(out, status = attr(out, "status") %||% 0L)
}

test_that("a PID that is no process id is bad usage (status 2), saying what a PID is", {
  for (pid in c("-5", "0", "1.5", "abc", "99999999999")) {
    out <- run_cli("dump", pid)
    expect_identical(attr(out, "status"), 2L, info = paste(c(pid, out), collapse = "\n"))
    expect_true(any(grepl(sprintf("PID must be a process id, a whole number from 1 to %d, not '%s'", .Machine$integer.max, pid), out, fixed = TRUE)),
      info = paste(out, collapse = "\n")
    )
    expect_true(any(grepl("Usage:", out, fixed = TRUE)))
  }
  out <- run_cli("record", "-5", "-d", "1")
  expect_identical(attr(out, "status"), 2L, info = paste(out, collapse = "\n"))
})

test_that("record's -d and -i must be positive numbers of seconds (status 2)", {
  for (bad in list(c("-d", "0"), c("-d", "-1"), c("-i", "0"), c("-d", "x"), c("-i", "Inf"))) {
    out <- run_cli("record", "1", bad)
    expect_identical(attr(out, "status"), 2L, info = paste(c(bad, out), collapse = "\n"))
  }
  # An interval longer than the recording: refused by winch_record(), as
  # bad usage too.
  out <- run_cli("record", "1", "-d", "0.5", "-i", "1")
  expect_identical(attr(out, "status"), 2L, info = paste(out, collapse = "\n"))
  expect_true(any(grepl("`interval` must be one number, at least 0.001 seconds and at most 0.5 seconds", out, fixed = TRUE)),
    info = paste(out, collapse = "\n")
  )
})

test_that("a process that is gone is an error (status 1), not bad usage", {
  out <- run_cli("dump", "999999999")
  expect_identical(attr(out, "status"), 1L, info = paste(out, collapse = "\n"))
})
