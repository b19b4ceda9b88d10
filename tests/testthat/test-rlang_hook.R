skip_if_not(winch_available(), "native unwinding is not available on this platform")

rt <- roundtrip_lib()

test_that("the hook is installed while winch is loaded", {
  expect_true(winch:::rlang_hook_installed())
  expect_false(winch:::rlang_hook_is_disabled(rlang:::add_winch_trace))
})

test_that("nothing changes while the option is unset or FALSE", {
  f <- function() winch_call(function() rlang::trace_back())
  for (value in list(NULL, FALSE, "false")) {
    withr::local_options(rlang_trace_use_winch = value)
    tr <- f()
    expect_false(any(startsWith(tr$namespace, "/") %in% TRUE))
    expect_null(attr(tr, "winch"))
  }
})

test_that("trace_back() includes native frames when the option is TRUE", {
  withr::local_options(rlang_trace_use_winch = TRUE)
  f <- function() winch_call(function() rlang::trace_back())
  tr <- f()
  expect_identical(trace_labels(tr), c("f", "winch_call", "/winch.so::winch_call", "<fn>"))
  # trace_back() was trimmed at the test environment after winch added rows.
  expect_identical(tr$parent, c(0L, 1L, 2L, 3L))
})

test_that("the hook stops passing sys.calls() only once a capture used the context chain", {
  withr::local_options(rlang_trace_use_winch = TRUE)
  the <- winch:::the
  old <- the$calls_checked
  on.exit(the$calls_checked <- old, add = TRUE)
  the$calls_checked <- NULL
  # Nothing to add (no native code under the trace): nothing was checked.
  pure <- function() rlang::trace_back()
  expect_null(attr(pure(), "winch"))
  expect_null(the$calls_checked)
  # Placed without the context chain: not checked either.
  withr::with_options(list(winch.use_contexts = FALSE), {
    tr <- winch_call(function() rlang::trace_back())
    expect_identical(attr(tr, "winch")$placement, "fallback")
  })
  expect_null(the$calls_checked)
  tr <- winch_call(function() rlang::trace_back())
  expect_identical(attr(tr, "winch")$placement, "exact")
  expect_true(the$calls_checked)
})

test_that("rlang::abort() traces from a callback inside C", {
  withr::local_options(rlang_trace_use_winch = TRUE)
  cb <- function() rlang::abort("from the callback", class = "winch_test")
  outer <- function() .Call("rt_call", cb, environment(), PACKAGE = "wtest_roundtrip")
  err <- tryCatch(outer(), winch_test = function(e) e)
  expect_identical(
    labels_from(trace_labels(err$trace), "outer"),
    c("outer", "/wtest_roundtrip.so::rt_call", "/wtest_roundtrip.so::eval_fun", "<fn>",
      "rlang::abort")
  )
  expect_snapshot(print(err$trace), transform = scrub_locations)
})

test_that("rlang::entrace() traces an error raised by Rf_error() in C", {
  withr::local_options(rlang_trace_use_winch = TRUE)
  f <- function() .Call("rt_error", "from C", PACKAGE = "wtest_roundtrip")
  err <- tryCatch(withCallingHandlers(f(), error = rlang::entrace), error = function(e) e)
  expect_s3_class(err, "rlang_error")
  labels <- trace_labels(err$trace)
  expect_identical(labels_from(labels, "f"), c("f", "/wtest_roundtrip.so::rt_error"))
  line <- marker_line("roundtrip.c", "error")
  expect_match(capture.output(print(err$trace)), sprintf("roundtrip\\.c:%d:", line), all = FALSE)
})

test_that("global_entrace() and last_trace() include native frames", {
  out <- run_rscript(sprintf(r"(
    library(winch)
    options(rlang_trace_use_winch = TRUE, error = function() {
      cat("--- last_trace\n"); print(rlang::last_trace()); q(status = 0)
    })
    dyn.load(%s)
    rlang::global_entrace()
    h <- function() .Call("rt_call", function() stop("base error"), environment(),
                          PACKAGE = "wtest_roundtrip")
    h()
  )", deparse(rt$path)))
  expect_identical(attr(out, "status"), 0L)
  after <- out[seq(match("--- last_trace", out), length(out))]
  expect_match(after, "/wtest_roundtrip.so`::rt_call()", fixed = TRUE, all = FALSE)
  expect_match(after, "/wtest_roundtrip.so`::eval_fun()", fixed = TRUE, all = FALSE)
})

test_that("detaching and unloading winch restore rlang", {
  out <- run_rscript(r"(
    original <- rlang:::add_winch_trace
    library(winch)
    cat("attached:", identical(rlang:::add_winch_trace, original), "\n")
    detach("package:winch")
    cat("detached:", identical(rlang:::add_winch_trace, original), "\n")
    library(winch)
    cat("reattached:", identical(rlang:::add_winch_trace, original), "\n")
    detach("package:winch", unload = TRUE)
    cat("unloaded:", identical(rlang:::add_winch_trace, original), "\n")
    cat("winch loaded:", isNamespaceLoaded("winch"), "\n")
    options(rlang_trace_use_winch = TRUE)
    f <- function() rlang::trace_back()
    cat("native rows:", sum(startsWith(f()$namespace, "/") %in% TRUE), "\n")
  )")
  expect_identical(attr(out, "status"), 0L)
  expect_identical(
    trimws(as.character(out)),
    c("attached: FALSE", "detached: TRUE", "reattached: FALSE", "unloaded: TRUE",
      "winch loaded: FALSE", "native rows: 0")
  )
})

test_that("a working rlang hook is left alone; a disabled one is replaced and restored", {
  the <- winch:::the
  saved <- the$hook
  on.exit(the$hook <- saved)

  working <- new.env()
  working$add_winch_trace <- function(trace) winch::winch_add_trace_back(trace)
  the$hook <- NULL
  expect_false(winch:::rlang_hook_install(working))
  expect_null(the$hook)

  disabled <- new.env()
  original <- function(trace) {
    return(trace)
    winch::winch_add_trace_back(trace)
  }
  disabled$add_winch_trace <- original
  lockBinding("add_winch_trace", disabled)
  expect_true(winch:::rlang_hook_install(disabled))
  expect_false(identical(disabled$add_winch_trace, original))
  expect_true(bindingIsLocked("add_winch_trace", disabled))
  winch:::rlang_hook_restore()
  expect_identical(disabled$add_winch_trace, original)
  expect_true(bindingIsLocked("add_winch_trace", disabled))
})

test_that("the hook does not recurse and never fails", {
  withr::local_options(rlang_trace_use_winch = TRUE)
  tr <- rlang::trace_back()
  # Re-entered while running: returns the trace as it is.
  the <- winch:::the
  the$in_hook <- TRUE
  on.exit(the$in_hook <- FALSE)
  expect_identical(winch:::winch_rlang_hook(tr, identity), tr)
  the$in_hook <- FALSE
  # Called from somewhere that is not rlang::trace_back(): no error, no change.
  expect_identical(winch:::winch_rlang_hook(tr, identity), tr)
  # A frame that does not look like rlang::trace_back()'s: no change.
  f <- function() winch_call(function() rlang::trace_back())
  native <- f()
  expect_identical(winch:::add_native_in_trace_back(native, new.env()), native)
  fake <- new.env()
  fake$frames <- list(globalenv())
  expect_identical(winch:::add_native_in_trace_back(tr, fake), tr)
})

# A native round trip outside the trace's top environment, then two R calls
# inside it: rlang trims everything up to h(), so the trace is just k().
# Inserting the native row before the trim point would shift what rlang cuts.
trimmed_after_round_trip <- function() {
  f <- function() winch_call(function() h())
  h <- function() {
    withr::local_options(rlang_trace_top_env = environment())
    k()
  }
  k <- function() rlang::trace_back()
  f()
}

test_that("native frames before the top environment do not disturb rlang's trimming", {
  withr::local_options(rlang_trace_use_winch = TRUE)
  tr <- trimmed_after_round_trip()
  expect_identical(trace_labels(tr), "k")
  expect_identical(tr$parent, 0L)
})

test_that("an rlang whose own hook calls winch_add_trace_back() gets native frames once, trimmed right", {
  # Simulate a future rlang: its add_winch_trace() works and calls winch.
  ns <- asNamespace("rlang")
  current <- get("add_winch_trace", envir = ns)
  working <- function(trace) {
    if (!isTRUE(getOption("rlang_trace_use_winch"))) {
      return(trace)
    }
    winch::winch_add_trace_back(trace)
  }
  winch:::replace_binding(ns, "add_winch_trace", working)
  on.exit(winch:::replace_binding(ns, "add_winch_trace", current))
  withr::local_options(rlang_trace_use_winch = TRUE)

  f <- function() winch_call(function() rlang::trace_back())
  tr <- f()
  # Trimmed at the test environment by rlang after winch added its row.
  expect_identical(trace_labels(tr), c("f", "winch_call", "/winch.so::winch_call", "<fn>"))
  expect_identical(tr$parent, c(0L, 1L, 2L, 3L))
  # And with a native chunk before the trim point.
  tr <- trimmed_after_round_trip()
  expect_identical(trace_labels(tr), "k")
})
