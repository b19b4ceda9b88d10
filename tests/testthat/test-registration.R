test_that("every Rust entry point is registered, with its number of arguments", {
  rust <- winch:::rust_entry_points()
  routines <- getDLLRegisteredRoutines("winch")$.Call
  name <- vapply(routines, function(r) r$name, "")
  arity <- vapply(routines, function(r) r$numParameters, 0L)
  rs <- startsWith(name, "rs_")
  expect_setequal(name[rs], rust$name)
  expect_identical(unname(arity[match(rust$name, name)]), rust$arity)
  # The C entry points of callbacks.c.
  expect_identical(unname(arity[c("winch_call", "winch_stop")]), c(2L, 2L))
})

test_that("each kind of error reaches R as its own condition class", {
  kinds <- c(
    "bad_argument", "unavailable", "wrong_thread", "busy", "unreadable",
    "inconsistent", "io", "internal"
  )
  for (kind in kinds) {
    cnd <- expect_error(
      winch:::check_result(.Call(winch:::C_rs_error_of_kind, kind)),
      class = paste0("winch_error_", kind)
    )
    expect_s3_class(cnd, "winch_error")
    expect_s3_class(cnd, "rlang_error")
  }
})

test_that("a panic in Rust is caught and becomes an internal error", {
  cnd <- expect_error(
    winch:::check_result(.Call(winch:::C_rs_error_of_kind, "panic")),
    class = "winch_error_internal"
  )
  expect_match(conditionMessage(cnd), "a panic in an entry point", fixed = TRUE)
  # The session goes on, and so does winch.
  expect_true(is.data.frame(winch_trace_back()))
})

test_that("arguments of the wrong type at the .Call boundary are bad arguments", {
  call <- function(...) winch:::check_result(.Call(...))
  expect_error(call(winch:::C_rs_splice_calls, 1L, "not integers"), class = "winch_error_bad_argument")
  expect_error(call(winch:::C_rs_splice_calls, "1", 1L), class = "winch_error_bad_argument")
  expect_error(call(winch:::C_rs_trace_back, "auto", NA, TRUE), class = "winch_error_bad_argument")
  expect_error(call(winch:::C_rs_trace_back, c("auto", "cfi"), TRUE, TRUE), class = "winch_error_bad_argument")
  expect_error(call(winch:::C_rs_trace_back, "gdb", TRUE, TRUE), class = "winch_error_bad_argument")
  expect_error(call(winch:::C_rs_set_debug_dirs, NA_character_), class = "winch_error_bad_argument")
  expect_error(call(winch:::C_rs_joint, "auto", 1, list(), FALSE, TRUE), class = "winch_error_bad_argument")
  expect_error(call(winch:::C_rs_splice_native, list(parent = "a"), NULL, NULL, list(), NULL, 1L, "auto", TRUE, TRUE), class = "winch_error_bad_argument")
  expect_error(call(winch:::C_rs_splice_native, list(parent = 0L), NULL, 1:2, list(), NULL, 1L, "auto", TRUE, TRUE), class = "winch_error_bad_argument")
  expect_error(call(winch:::C_rs_init, "4.5"), class = "winch_error_bad_argument")
})

test_that("an out-of-memory result is a classed error", {
  expect_error(winch:::check_result(NULL), class = "winch_error_out_of_memory")
})

test_that("bad input to the exported functions is classed as a bad argument", {
  bad <- list(
    quote(winch_trace_back(backend = "gdb")),
    quote(winch_trace_back(backend = NA)),
    quote(winch_trace_back(libr = NA)),
    quote(winch_sys_calls(libr = "yes")),
    quote(winch_sys_calls(backend = 1)),
    quote(winch_add_trace_back("x")),
    quote(winch_add_trace_back(data.frame(call = 1, parent = 0))),
    quote(winch_call(1)),
    quote(winch_call(function(x) x)),
    quote(winch_call(function() 1, env = 1)),
    quote(winch_stop(NA_character_)),
    quote(winch_init_library("no/such/file.so")),
    quote(winch_init_library(force = NA))
  )
  for (expr in bad) {
    expect_error(eval(expr), class = "winch_error_bad_argument", label = deparse(expr))
  }
  withr::local_options(winch.debug_dirs = 1)
  expect_error(winch_trace_back(), class = "winch_error_bad_argument")
})

test_that("the registration table is read from the DLLs' own records, routine for routine as R lists it", {
  dlls <- getLoadedDLLs()
  counts <- winch:::rs_set_registered_dlls(lapply(dlls, function(d) d[["info"]]))
  listed <- vapply(dlls, function(d) {
    as.numeric(sum(lengths(lapply(getDLLRegisteredRoutines(d), names))))
  }, 0)
  expect_identical(as.numeric(counts), unname(listed))
  expect_gt(sum(listed[c("base", "stats")]), 100)
  # The table is put back for the captures that follow.
  the <- winch:::the
  the$registration_key <- NULL
  the$registration_generation <- NULL
  expect_true(winch:::sync_registrations())
})
