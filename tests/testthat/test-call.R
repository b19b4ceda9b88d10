test_that("winch_call() calls fun() and returns its value", {
  expect_identical(winch_call(function() 42L), 42L)
  f <- function(x = 1) x + 1
  expect_identical(winch_call(f), 2)
  expect_identical(winch_call(function(...) nargs()), 0L)
})

test_that("winch_call() evaluates in `env`", {
  env <- new.env()
  fun <- function() parent.frame()
  expect_identical(winch_call(fun, env), env)
  outer <- function() {
    here <- environment()
    identical(winch_call(function() parent.frame()), here)
  }
  expect_true(outer())
})

test_that("winch_call() puts a real native frame on the stack", {
  skip_if_not(winch_available())
  tb <- winch_call(function() winch_trace_back())
  row <- tb[tb$func %in% "winch_call", ]
  expect_identical(nrow(row), 1L)
  expect_identical(basename(row$pathname), "winch.so")
  expect_false(row$is_libr)
})

test_that("errors in fun propagate with their condition object and class", {
  cnd <- structure(
    class = c("my_error", "error", "condition"),
    list(message = "custom failure", call = NULL, data = 1:3)
  )
  caught <- tryCatch(winch_call(function() stop(cnd)), my_error = function(e) e)
  expect_identical(caught, cnd)

  rlang_cnd <- tryCatch(
    winch_call(function() rlang::abort("typed", class = "winch_test_error", detail = "x")),
    winch_test_error = function(e) e
  )
  expect_s3_class(rlang_cnd, "rlang_error")
  expect_identical(rlang_cnd$detail, "x")

  # Calling handlers see the error while the native frame is still there.
  seen <- NULL
  try(silent = TRUE, withCallingHandlers(
    winch_call(function() stop("inner")),
    error = function(e) seen <<- conditionMessage(e)
  ))
  expect_identical(seen, "inner")

  # Warnings and restarts pass through too.
  expect_warning(winch_call(function() warning("careful")), "careful")
  expect_identical(
    withRestarts(winch_call(function() invokeRestart("jump", 5)), jump = function(x) x * 2),
    10
  )
})

test_that("the session continues after an error through winch_call()", {
  for (i in 1:20) {
    expect_error(winch_call(function() stop("again")), "again")
  }
  expect_identical(winch_call(function() "still fine"), "still fine")
})

test_that("winch_stop() raises an R error from native code", {
  err <- tryCatch(winch_stop("boom from C"), error = function(e) e)
  expect_s3_class(err, "simpleError")
  expect_identical(conditionMessage(err), "boom from C")
  expect_identical(conditionCall(err), quote(winch_stop("boom from C")))
})

test_that("winch_init_library() validates and returns invisibly", {
  expect_invisible(winch_init_library())
  expect_null(winch_init_library())
  so <- getLoadedDLLs()[["winch"]][["path"]]
  expect_identical(winch_init_library(so), so)
  expect_identical(winch_init_library(so, force = TRUE), so)
})

test_that("bad input is a clear error and the session continues", {
  expect_snapshot(error = TRUE, {
    winch_call(1)
    winch_call(NULL)
    winch_call(function(x) x)
    winch_call(function(x, y, ...) x, env = 1)
    winch_call(function() 1, env = 1)
    winch_stop(1)
    winch_stop(c("a", "b"))
    winch_stop(NA_character_)
    winch_init_library("no/such/file.so")
    winch_init_library(force = NA)
    winch_init_library(c("a", "b"))
  })
  expect_identical(winch_call(function() "alive"), "alive")
})
