skip_if_not(winch_available(), "native unwinding is not available on this platform")

# Every printed form of winch's output, pinned. Paths, addresses, source
# lines and R's deparsing of anonymous functions (which differs between R
# versions) are scrubbed; everything else is as printed.

rt <- roundtrip_lib()

# Anonymous functions called from C deparse differently across R versions.
scrub_printed <- function(x) {
  x <- scrub_locations(x)
  gsub("\\(function ?\\(\\) .*\\)\\(\\)$", "(<anonymous function>)()", x)
}

# The entries of a winch_calls object from the first call of `from` on.
calls_from <- function(x, from) {
  x[seq(match(from, joint_labels(x)), length(x))]
}

test_that("winch_sys_calls(): an exact joint stack", {
  cb <- function() winch_sys_calls()
  inner <- function() .Call("rt_call", cb, environment(), PACKAGE = "wtest_roundtrip")
  outer <- function() winch_call(inner)
  x <- calls_from(outer(), "outer")
  expect_identical(attr(x, "placement"), "exact")
  expect_snapshot(print(x), transform = scrub_printed)
})

test_that("winch_sys_calls(): unplaced frames, without R's context chain", {
  withr::local_options(winch.use_contexts = FALSE)
  outer <- function() winch_call(function() winch_sys_calls())
  x <- calls_from(outer(), "outer")
  expect_identical(attr(x, "placement"), "fallback")
  expect_snapshot(print(x), transform = scrub_printed)
})

test_that("winch_sys_calls(): approximate entries", {
  # Real approximate placements need an R whose byte-code records cannot be
  # read; the printed form is pinned on a constructed stack.
  x <- winch:::winch_calls(
    list(quote(f()), quote(`/libfoo.so`::foo()), quote(g())),
    native = c(FALSE, TRUE, FALSE),
    status = c("r", "approximate", "r"),
    from = list(placement = "approximate", truncated = FALSE, truncation = NA_character_)
  )
  expect_snapshot(print(x))
})

test_that("winch_sys_calls(): a truncated native stack", {
  compile_clib(
    "wtest_nounwind", "nounwind.c",
    flags = "-g -O2 -fno-asynchronous-unwind-tables -fno-unwind-tables -fomit-frame-pointer"
  )
  inner <- function() winch_sys_calls()
  outer <- function() .Call("nu_call", inner, environment(), PACKAGE = "wtest_nounwind")
  x <- calls_from(outer(), "outer")
  expect_true(attr(x, "truncated"))
  expect_snapshot(print(x), transform = scrub_printed)
})

test_that("rlang traces with native rows, full and branch views", {
  withr::local_options(rlang_trace_use_winch = TRUE)
  cb <- function() rlang::abort("from the callback", class = "winch_test")
  outer <- function() .Call("rt_call", cb, environment(), PACKAGE = "wtest_roundtrip")
  err <- tryCatch(outer(), winch_test = function(e) e)
  expect_snapshot(print(err$trace, simplify = "none"), transform = scrub_printed)
  expect_snapshot(print(err$trace, simplify = "branch"), transform = scrub_printed)
})

test_that("winch_trace_back() as printed", {
  inner <- function() winch_trace_back(libr = FALSE)
  tb <- .Call("rt_call", inner, environment(), PACKAGE = "wtest_roundtrip")
  # The frames of the fixture, and the columns as they print; addresses and
  # directories differ between runs and machines.
  rows <- basename(tb$pathname) == "wtest_roundtrip.so"
  shown <- tb[rows, ]
  shown$ip <- "<ip>"
  shown$offset <- "<offset>"
  shown$start <- ifelse(is.na(shown$start), NA, "<start>")
  shown$pathname <- basename(shown$pathname)
  shown$file <- basename(shown$file)
  shown$line <- shown$line - marker_line("roundtrip.c", "rt_call")
  shown$column <- NA_integer_
  rownames(shown) <- NULL
  expect_snapshot(print(shown))
})

test_that("a stripped library: registered entry point, helper by its start", {
  skip_without_tools(c("strip", "nm", "readelf"))
  lib <- stripped_lib("wtest_print_stripped")
  # The helper's start as the unstripped copy's symbol table has it: the
  # printed form must show exactly that.
  start <- sprintf("+0x%x", nm_address(lib$unstripped, "st_helper"))
  scrub <- function(x) gsub(start, "+0x<start of st_helper>", scrub_printed(x), fixed = TRUE)
  cb <- function() winch_sys_calls()
  outer <- function() .Call(routine(lib, "st_entry"), cb, environment())
  expect_snapshot(print(calls_from(outer(), "outer")), transform = scrub)
  withr::local_options(rlang_trace_use_winch = TRUE)
  cb <- function() rlang::abort("from the callback", class = "winch_test")
  err <- tryCatch(outer(), winch_test = function(e) e)
  expect_snapshot(print(err$trace, simplify = "branch"), transform = scrub)
})
