skip_if_not(winch_available(), "native unwinding is not available on this platform")

# Inlined calls in call order: acc_entry's work is done by middle (inlined),
# which calls inner (inlined), which calls back into R. winch_trace_back()
# lists them innermost first; joint views outermost first, so that they read
# acc_entry, middle, inner, then the R callback.

order_lib <- function() compile_clib("wtest_inline_order", "inline_order.c", flags = "-g -O2")

test_that("winch_trace_back(): innermost first", {
  lib <- order_lib()
  tb <- .Call("acc_entry", function() winch_trace_back(libr = FALSE), environment(), PACKAGE = lib$name)
  rows <- module_rows(tb, lib$path)
  expect_identical(rows$func, c("inner", "middle", "acc_entry"))
  expect_identical(rows$inlined, c(TRUE, TRUE, FALSE))
  # One physical frame: one start for all three.
  expect_length(unique(rows$start), 1L)
})

test_that("winch_sys_calls(): outermost first, then the R callback", {
  lib <- order_lib()
  callback <- function() winch_sys_calls()
  entry <- function() .Call("acc_entry", callback, environment(), PACKAGE = lib$name)
  labels <- labels_from(joint_labels(entry()), "entry")
  expect_identical(labels, c(
    "entry",
    "/wtest_inline_order.so::acc_entry",
    "/wtest_inline_order.so::middle",
    "/wtest_inline_order.so::inner",
    "<inline>"
  ))
})

test_that("rlang traces: outermost first, the R callback the child of the innermost", {
  lib <- order_lib()
  withr::local_options(rlang_trace_use_winch = TRUE)
  callback <- function() rlang::abort("boom", class = "winch_test")
  entry <- function() .Call("acc_entry", callback, environment(), PACKAGE = lib$name)
  err <- tryCatch(entry(), winch_test = function(e) e)
  tr <- err$trace
  labels <- trace_labels(tr)
  i <- match("entry", labels)
  expect_identical(labels[i + 0:3], c(
    "entry",
    "/wtest_inline_order.so::acc_entry",
    "/wtest_inline_order.so::middle",
    "/wtest_inline_order.so::inner"
  ))
  # A chain: each row the child of the one before, the callback under inner.
  expect_identical(tr$parent[i + 1:4], i + 0:3)
})
