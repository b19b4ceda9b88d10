# Issue 33: every exported function and method, called with bad values of
# every argument, and damaged profiles and core files, each ends in an
# error of class winch_error (or is accepted where the table says why):
# never an unclassed error, a silently accepted value, a hang or a crash.
# The table is in helper-bad-input-table.R, its runner (watched child
# processes) in helper-bad-input-run.R. Set WINCH_BAD_INPUT_TABLE=<file>
# to have the results written there (one case a line).
skip_if_not(winch_available(), "native unwinding is not available on this platform")
skip_if_not(nzchar(Sys.which("mkfifo")), "mkfifo is needed for the FIFO cases")

expect_cases_ok <- function(res, what) {
  bad <- res[!res$ok, , drop = FALSE]
  expect(
    nrow(bad) == 0L,
    sprintf(
      "%d of %d %s did not end as the table says:\n%s", nrow(bad), nrow(res), what,
      paste(bi_describe(bad), collapse = "\n")
    )
  )
  expect_gt(nrow(res), 0L)
}

test_that("the valid calls the table starts from work", {
  res <- bi_results()
  expect_cases_ok(res[res$area == "base", ], "valid calls")
})

test_that("every argument is checked: a classed error saying what is allowed, or accepted by design", {
  res <- bi_results()
  args <- res[res$area == "args", ]
  expect_cases_ok(args, "calls with a bad argument")
  # The message of a refusal says what is allowed (each names the argument
  # it refuses, or says which is missing).
  refused <- args[args$expect == "error" & args$ok, ]
  says <- grepl("must|is missing|Unknown argument|only `probe \\+ 0`|is this R process", refused$message)
  expect_true(all(says), label = paste(bi_describe(refused[!says, ]), collapse = "\n"))
})

test_that("file arguments: special files, missing paths and wrong types are refused at once", {
  res <- bi_results()
  expect_cases_ok(res[res$area == "files", ], "calls with a bad file argument")
})

test_that("damaged profiles are refused by every reader with a classed error", {
  res <- bi_results()
  expect_cases_ok(res[res$area == "damaged", ], "readers of a damaged profile")
})

test_that("damaged core files are refused, or read with a note that says why", {
  res <- bi_results()
  skip_if(is.null(attr(res, "core")), "no core file can be made here (core_pattern pipes to a program and gdb's gcore is not installed)")
  expect_cases_ok(res[res$area == "cores", ], "dumps of a damaged core")
})

test_that("no case crashed or hung its process", {
  res <- bi_results()
  gone <- res[res$got %in% c("crash", "hang", "timeout", "not run"), ]
  expect(nrow(gone) == 0L, paste(c("Cases that crashed or hung:", bi_describe(gone)), collapse = "\n"))
})

test_that("refusals say what is allowed, bounds included", {
  p <- synthetic_profile()
  expect_error(print(p, n = -1), "`n` must be one whole number, at least 0 (`Inf` lists all).", fixed = TRUE, class = "winch_error_bad_argument")
  expect_error(print(p, n = "abc"), "`n` must be one whole number", fixed = TRUE, class = "winch_error_bad_argument")
  expect_error(print(p, width = list(1)), "`width` must be `NULL` or one whole number, at least 9", fixed = TRUE, class = "winch_error_bad_argument")
  expect_error(print(p, m = 3), "Unknown argument `m`: this method takes `n` and `width`.", fixed = TRUE, class = "winch_error_bad_argument")
  expect_error(print(summary(p), n = NA), "`n` must be one whole number", fixed = TRUE, class = "winch_error_bad_argument")
  expect_error(plot(p, min_width = 2), "`min_width` must be one number, at least 0 and at most 1 (a share of the total).", fixed = TRUE, class = "winch_error_bad_argument")
  expect_error(plot(p, what = "both"), '`what` must be "alloc" or "inuse".', fixed = TRUE, class = "winch_error_bad_argument")
  expect_error(winch_dump(core = NULL), "`pid` is missing: give a process id, or `core`, the path of a core file.", fixed = TRUE, class = "winch_error_bad_argument")
  expect_error(winch_record(1, 1, threads = character(0)), '`threads` must be "all" or "main".', fixed = TRUE, class = "winch_error_bad_argument")
  expect_error(winch_record(1, 1e308), "`duration` must be one number, more than 0 seconds and at most 604800 seconds (one week).", fixed = TRUE, class = "winch_error_bad_argument")
  expect_error(winch_profile(1, interval = 1e308), "at most 3600 seconds", fixed = TRUE, class = "winch_error_bad_argument")
  expect_error(winch_profile(1, event = "alloc", sample_bytes = 1e16), "`sample_bytes` must be one number, at least 1 and at most 1e+15 (bytes).", fixed = TRUE, class = "winch_error_bad_argument")
})

test_that("the native side refuses sample_bytes out of bounds with the same words", {
  # Past R's check (profile_begin() is what winch_profile() calls after
  # it): the glue's own check, src/rust/src/profile.rs.
  opts <- winch:::check_profile_args(NULL, 0.01, "alloc", TRUE, FALSE, "main", alloc_ok = TRUE)
  opts$region <- list("all")
  opts$sample_bytes <- 1e16
  withr::defer(stop_left_running())
  expect_error(winch:::profile_begin(opts, environment(), "profile"),
    "`sample_bytes` must be one number, at least 1 and at most 1e+15 (bytes)", fixed = TRUE, class = "winch_error_bad_argument"
  )
  expect_false(winch:::profile_active())
})

test_that("print methods ignore the arguments R passes on when printing a list; data.frame() takes a profile", {
  p <- synthetic_profile()
  expect_output(print(list(p), digits = 3, quote = FALSE), "<winch_profile>", fixed = TRUE)
  calls <- winch_call(function() winch_sys_calls())
  expect_output(print(list(calls), digits = 3), "winch_call", fixed = TRUE)
  df <- data.frame(p)
  expect_identical(df, as.data.frame(p))
})
