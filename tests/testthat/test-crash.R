# The crash report (issue 9, part 2): crashes run in child R processes, each
# compared with the same run without winch.

skip_if_not(winch:::crash_report_status()$supported, "the crash report needs x86_64 Linux")

crash_lib <- function() compile_clib("wtest_crash", "crash.c", flags = "-g -O1", load = FALSE)

# Runs `code` in a fresh R (Rscript, or R reading it from standard input as
# an interactive session when `interactive`), with winch's crash report on
# (`winch = TRUE`) or without winch; returns the output lines (standard
# output and error), with the exit status as attribute.
run_child <- function(code, winch = TRUE, interactive = FALSE) {
  lib <- crash_lib()
  prelude <- c(
    if (winch) "library(winch); invisible(winch_crash_report(TRUE))",
    sprintf("dyn.load(%s)", deparse(lib$path))
  )
  file <- tempfile(fileext = ".R")
  on.exit(unlink(file))
  writeLines(c(prelude, code), file)
  env <- paste0("R_LIBS=", paste(.libPaths(), collapse = .Platform$path.sep))
  out <- if (interactive) {
    suppressWarnings(system2(file.path(R.home("bin"), "R"), c("--no-echo", "--interactive", "--vanilla"),
      stdin = file, stdout = TRUE, stderr = TRUE, env = env, timeout = 120
    ))
  } else {
    suppressWarnings(system2(file.path(R.home("bin"), "Rscript"), c("--vanilla", shQuote(file)),
      stdout = TRUE, stderr = TRUE, env = env, timeout = 120
    ))
  }
  structure(out, status = attr(out, "status") %||% 0L)
}

# The lines of winch's report (from its header to its last line).
report_lines <- function(out) {
  start <- grep("^\\*\\*\\* winch: ", out)
  end <- grep("^\\*\\*\\* end of winch's report", out)
  if (!length(start) || !length(end)) {
    return(character())
  }
  out[start[[1]]:end[[1]]]
}

# Native frame lines: "<module>  <function> + 0x..".
frame_functions <- function(report) {
  frames <- grep("^  #[0-9]+ ", report, value = TRUE)
  sub("^  #[0-9]+ +0x[0-9a-f]+  [^ ]+  ([^ ]+).*$", "\\1", frames)
}

r_calls <- function(report) {
  sub("^ +R  ", "", grep("^ +R  ", report, value = TRUE))
}

crash_code <- function(entry) {
  c(
    sprintf('g <- function() .Call("%s")', entry),
    "f <- function() g()",
    "f()"
  )
}

test_that("a segfault: the faulting function, its caller and the R calls, then R's own report", {
  out <- run_child(crash_code("wt_segv"))
  plain <- run_child(crash_code("wt_segv"), winch = FALSE)
  rep <- report_lines(out)
  expect_match(rep[[1]], "SIGSEGV (segmentation fault), address 0x0000000000000000, in R's main thread", fixed = TRUE)
  fns <- frame_functions(rep)
  expect_identical(fns[1:3], c("crash_deref", "crash_caller", "wt_segv"))
  expect_identical(r_calls(rep)[1:3], c(".Call()", "g()", "f()"))
  # The R calls follow the native frames that evaluate them: .Call() after
  # the entry point's frame.
  expect_true(grep("R  .Call()", rep, fixed = TRUE) > grep("wt_segv", rep, fixed = TRUE))
  # R's report follows, unchanged.
  expect_true(any(out == " *** caught segfault ***"))
  expect_true(grep("caught segfault", out, fixed = TRUE) > grep("end of winch's report", out, fixed = TRUE))
  expect_identical(out[grep("^Traceback:", out) + 1:3], plain[grep("^Traceback:", plain) + 1:3])
  expect_false(attr(out, "status") == 0L)
  expect_identical(attr(out, "status"), attr(plain, "status"))
})

test_that("a crash deep in R's stack counts the native frames and R calls not shown", {
  # 300 nested R calls in the AST interpreter: thousands of native frames,
  # far more than shown. (Byte-compiled, R >= 4.4 runs calls made from byte
  # code inside one interpreter loop, without C frames of their own.)
  out <- run_child(c(
    "invisible(compiler::enableJIT(0))",
    'h <- function(n) if (n == 0L) .Call("wt_segv") else h(n - 1L)',
    "h(300L)"
  ))
  rep <- report_lines(out)
  expect_length(grep("^  #[0-9]+ ", rep), 100L)
  more <- regmatches(rep, regexpr("^  \\[(at least )?[0-9]+ more native frames not shown\\]$", rep))
  expect_length(more, 1L)
  # Every frame of the stack is counted, not one more than shown.
  expect_gt(as.integer(gsub("[^0-9]", "", more)), 1000L)
  calls <- regmatches(rep, regexpr("^  \\[(at least )?[0-9]+ more R calls not shown\\]$", rep))
  expect_length(calls, 1L)
  expect_gt(as.integer(gsub("[^0-9]", "", calls)), 150L)
})

test_that("abort(): a report (R prints none) and the same exit status", {
  out <- run_child(crash_code("wt_abort"))
  plain <- run_child(crash_code("wt_abort"), winch = FALSE)
  rep <- report_lines(out)
  expect_match(rep[[1]], "SIGABRT (abort), in R's main thread", fixed = TRUE)
  fns <- frame_functions(rep)
  at <- match(TRUE, startsWith(fns, "abort_here"))
  expect_false(is.na(at))
  expect_identical(fns[at + 1:2], c("abort_caller", "wt_abort"))
  expect_identical(r_calls(rep)[1:3], c(".Call()", "g()", "f()"))
  expect_false(any(grepl("winch", plain)))
  expect_identical(attr(out, "status"), attr(plain, "status"))
})

test_that("SIGFPE and a SIGSEGV sent with raise() are reported and passed on", {
  out <- run_child(c('g <- function() .Call("wt_fpe", 0L)', "g()"))
  plain <- run_child(c('g <- function() .Call("wt_fpe", 0L)', "g()"), winch = FALSE)
  rep <- report_lines(out)
  expect_match(rep[[1]], "SIGFPE", fixed = TRUE)
  expect_identical(frame_functions(rep)[1:2], c("divide", "wt_fpe"))
  expect_identical(attr(out, "status"), attr(plain, "status"))

  out <- run_child(crash_code("wt_raise_segv"))
  plain <- run_child(crash_code("wt_raise_segv"), winch = FALSE)
  rep <- report_lines(out)
  expect_match(rep[[1]], "SIGSEGV (segmentation fault), in R's main thread", fixed = TRUE)
  expect_true("wt_raise_segv" %in% frame_functions(rep))
  expect_true(any(out == " *** caught segfault ***"))
  expect_identical(attr(out, "status"), attr(plain, "status"))
})

test_that("a crash in another thread: native frames only, and no hang", {
  out <- run_child(crash_code("wt_segv_in_thread"))
  plain <- run_child(crash_code("wt_segv_in_thread"), winch = FALSE)
  rep <- report_lines(out)
  expect_match(rep[[1]], "in a thread other than R's main thread", fixed = TRUE)
  expect_identical(frame_functions(rep)[1:3], c("crash_deref", "crash_caller", "thread_body"))
  expect_identical(r_calls(rep), character())
  expect_true(any(out == " *** caught segfault ***"))
  expect_identical(attr(out, "status"), attr(plain, "status"))
})

test_that("R's recovery from a C stack overflow keeps working, without a report", {
  code <- c(
    'h <- function() .Call("wt_overflow")',
    "h()",
    'cat("after the first overflow\\n")',
    'cat("reported:", paste(winch:::crash_report_status()$signals, collapse = " "), "\\n")',
    "h()",
    'cat("after the second overflow\\n")',
    'q("no", status = 0)'
  )
  out <- run_child(code, interactive = TRUE)
  plain <- run_child(code[-4], winch = FALSE, interactive = TRUE)
  # R recovered from the first overflow and went on.
  expect_true("Error: segfault from C stack overflow" %in% out)
  expect_true("after the first overflow" %in% out)
  expect_false(any(grepl("*** winch", out, fixed = TRUE)))
  # The report is back after R's recovery (R >= 4.4 leaves SIGSEGV at the
  # default action then; winch takes it over again from there).
  expect_match(out, "reported: SIGSEGV SIGBUS SIGILL SIGFPE SIGABRT", fixed = TRUE, all = FALSE)
  # A second overflow ends as without winch: recovered again (R < 4.4), or
  # the process dies of it (R >= 4.4 does not take SIGSEGV back).
  expect_identical(sum(grepl("C stack overflow", out)), sum(grepl("C stack overflow", plain)))
  expect_identical("after the second overflow" %in% out, "after the second overflow" %in% plain)
  expect_identical(attr(out, "status"), attr(plain, "status"))
})

test_that("the option winch.crash_report turns the report on at load", {
  lib <- crash_lib()
  out <- run_rscript(c(
    "options(winch.crash_report = TRUE)",
    "library(winch)",
    sprintf("dyn.load(%s)", deparse(lib$path)),
    crash_code("wt_segv")
  ))
  expect_identical(frame_functions(report_lines(out))[1:2], c("crash_deref", "crash_caller"))
  out <- run_rscript(c(
    'options(winch.crash_report = "yes")',
    "library(winch)",
    'cat("enabled:", winch:::crash_report_status()$enabled, "\\n")'
  ))
  expect_match(out, "`winch.crash_report` must be `TRUE` or `FALSE`", fixed = TRUE, all = FALSE)
  expect_match(out, "enabled: FALSE", fixed = TRUE, all = FALSE)
})

test_that("a SIGSEGV handler that is not R's is left alone", {
  out <- run_rscript(c(
    sprintf("dyn.load(%s)", deparse(crash_lib()$path)),
    'invisible(.Call("wt_install_foreign_handler"))',
    "library(winch)",
    "before <- winch:::crash_handlers()$handler",
    "s <- winch_crash_report(TRUE)",
    'cat("skipped:", s$skipped, "\\n")',
    'cat("reason:", s$reasons, "\\n")',
    'cat("kept:", winch:::crash_handlers()$handler[[1]] == before[[1]], "\\n")'
  ))
  expect_match(out, "skipped: SIGSEGV", fixed = TRUE, all = FALSE)
  expect_match(out, "reason: its handler belongs to wtest_crash.so, not to R", fixed = TRUE, all = FALSE)
  expect_match(out, "kept: TRUE", fixed = TRUE, all = FALSE)
})

test_that("turning the report off restores the previous handlers exactly", {
  before <- winch:::crash_handlers()
  on <- winch_crash_report(TRUE)
  expect_true(on$enabled)
  expect_identical(on$signals, c("SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT"))
  during <- winch:::crash_handlers()
  expect_false(any(during$handler == before$handler))
  off <- winch_crash_report(FALSE)
  expect_false(off$enabled)
  expect_identical(winch:::crash_handlers(), before)
  # Twice on, then off: still exact.
  winch_crash_report(TRUE)
  winch_crash_report(TRUE)
  winch_crash_report(FALSE)
  expect_identical(winch:::crash_handlers(), before)
})

test_that("unloading winch gives the signals back", {
  out <- run_child(c(
    'unloadNamespace("winch")',
    crash_code("wt_segv")
  ))
  expect_identical(report_lines(out), character())
  expect_true(any(out == " *** caught segfault ***"))
})

test_that("bad input to winch_crash_report() is refused with a classed error", {
  expect_error(winch_crash_report(NA), class = "winch_error_bad_argument")
  expect_error(winch_crash_report("yes"), class = "winch_error_bad_argument")
  expect_error(winch_crash_report(c(TRUE, FALSE)), class = "winch_error_bad_argument")
  expect_error(winch_crash_report(), class = "error")
  expect_false(winch:::crash_report_status()$enabled)
})
