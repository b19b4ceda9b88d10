skip_if_not(winch_available(), "native unwinding is not available on this platform")

rt <- roundtrip_lib()

test_that("native rows are inserted under the R call that entered them", {
  f <- function() winch_call(function() winch_add_trace_back())
  tr <- f()
  expect_s3_class(tr, "rlang_trace")
  labels <- trace_labels(tr)
  expect_identical(
    labels_from(labels, "f"),
    c("f", "winch_call", "/winch.so::winch_call", "<fn>")
  )
  i <- match("f", labels)
  # Parents: native row under winch_call(), the callback under the native row.
  expect_identical(tr$parent[[i + 1L]], i)
  expect_identical(tr$parent[[i + 2L]], i + 1L)
  expect_identical(tr$parent[[i + 3L]], i + 2L)
  native <- i + 2L
  expect_identical(tr$namespace[[native]], "/winch.so")
  expect_identical(tr$scope[[native]], "::")
  expect_identical(tr$call[[native]][[1L]], as.symbol("winch_call"))
  expect_true(tr$visible[[native]])
  expect_identical(attr(tr, "winch")$placement, "exact")
  # What the capture said about the placement, typed in Rust until made
  # here: in this order, with nothing thrown.
  winch <- attr(tr, "winch")
  expect_named(winch, c("placement", "fallback_reason", "truncated", "truncation", "added", "throw"))
  expect_identical(winch$fallback_reason, NA_character_)
  expect_false(winch$truncated)
  expect_identical(winch$truncation, NA_character_)
  expect_identical(winch$added, 1L)
  expect_null(winch$throw)
})

test_that("round trips through two libraries build a proper tree", {
  inner <- function() winch_add_trace_back()
  mid <- function() .Call("other_call", inner, environment(), PACKAGE = "wtest_other")
  outer <- function() .Call("rt_call", mid, environment(), PACKAGE = "wtest_roundtrip")
  other_lib()
  tr <- outer()
  labels <- trace_labels(tr)
  expect_identical(
    labels_from(labels, "outer"),
    c("outer", "/wtest_roundtrip.so::rt_call", "/wtest_roundtrip.so::eval_fun", "<fn>",
      "/wtest_other.so::other_call", "<fn>")
  )
  i <- match("outer", labels)
  # A chain: each row is the child of the one before it.
  expect_identical(tr$parent[i + 1:5], i + 0:4)
})

test_that("every column and attribute is kept", {
  f <- function() winch_call(function() {
    tr <- rlang::trace_back(bottom = environment())
    tr$error_frame <- FALSE
    tr$error_frame[[nrow(tr)]] <- TRUE
    tr$error_arg <- rep(list(NULL), nrow(tr))
    tr$error_arg[[nrow(tr)]] <- "x"
    # (A compact sequence: ALTREP, whose data is made when first read.)
    tr$custom <- seq_len(nrow(tr))
    tr$weight <- seq_len(nrow(tr)) / 2
    tr$tag <- factor(rep(c("a", "b"), length.out = nrow(tr)))
    tr$note <- rep("r", nrow(tr))
    attr(tr, "extra") <- "kept"
    list(before = tr, after = winch_add_trace_back(tr))
  })
  res <- f()
  before <- res$before
  after <- res$after
  expect_identical(names(after), names(before))
  expect_identical(class(after), class(before))
  expect_identical(attr(after, "extra"), "kept")
  expect_identical(attr(after, "version"), attr(before, "version"))
  # In the trace's order, then winch's.
  expect_identical(names(attributes(after)), c(names(attributes(before)), "winch"))
  expect_identical(.row_names_info(after, 1L), -nrow(after))
  expect_identical(nrow(after), nrow(before) + 1L)
  native <- which(after$namespace %in% "/winch.so")
  expect_length(native, 1L)
  # Native rows get neutral values in columns winch does not know.
  expect_false(after$error_frame[[native]])
  expect_null(after$error_arg[[native]])
  expect_true(is.na(after$custom[[native]]))
  expect_true(is.na(after$weight[[native]]))
  expect_true(is.na(after$note[[native]]))
  # A column with a class keeps it (subset by its own method).
  expect_s3_class(after$tag, "factor")
  expect_identical(levels(after$tag), c("a", "b"))
  expect_true(is.na(after$tag[[native]]))
  # R rows are unchanged apart from their parents.
  r_rows <- setdiff(seq_len(nrow(after)), native)
  for (col in setdiff(names(before), "parent")) {
    expect_identical(after[[col]][r_rows], before[[col]], label = col)
  }
})

test_that("traces trimmed by rlang_trace_top_env and traces taken with bottom", {
  # testthat sets rlang_trace_top_env, so these traces start at the test code.
  f <- function() winch_call(function() g())
  g <- function() h()
  h <- function() {
    bottom <- rlang::trace_back(bottom = 2L)
    list(top = winch_add_trace_back(), bottom = bottom, bottom_added = winch_add_trace_back(bottom))
  }
  res <- f()
  expect_identical(trace_labels(res$top), c("f", "winch_call", "/winch.so::winch_call", "<fn>", "g", "h"))
  # With bottom = 2, rlang's trace stops above h(); the native row still goes
  # in its place.
  expected <- append(trace_labels(res$bottom), "/winch.so::winch_call", after = 2L)
  expect_identical(trace_labels(res$bottom_added), expected)
  expect_false("h" %in% expected)
})

test_that("no native code to add: the trace comes back unchanged, silently", {
  f <- function() {
    tr <- rlang::trace_back(bottom = environment())
    list(tr = tr, out = winch_add_trace_back(tr))
  }
  expect_silent(res <- f())
  expect_identical(res$out, res$tr)
})

test_that("a trace that does not describe the current stack is left alone", {
  f <- function() winch_call(function() rlang::trace_back(bottom = environment()))
  old <- f()
  elsewhere <- function() winch_add_trace_back(old)
  expect_identical(elsewhere(), old)
})

test_that("native frames are never added twice", {
  f <- function() winch_call(function() winch_add_trace_back(winch_add_trace_back()))
  tr <- f()
  expect_identical(sum(tr$namespace %in% "/winch.so"), 1L)
})

test_that("old and malformed traces", {
  old <- structure(list(calls = list(quote(f())), parents = 0L), class = "rlang_trace")
  expect_identical(winch_add_trace_back(old), old)
  expect_snapshot(error = TRUE, {
    winch_add_trace_back("x")
    winch_add_trace_back(NULL)
    winch_add_trace_back(data.frame())
    winch_add_trace_back(data.frame(call = 1, parent = 0))
  })
})

test_that("printed trees show native frames with their source location", {
  inner <- function() rlang::trace_back()
  outer <- function() .Call("rt_call", inner, environment(), PACKAGE = "wtest_roundtrip")
  withr::local_options(rlang_trace_use_winch = TRUE)
  tr <- outer()
  expect_snapshot(print(tr), transform = scrub_locations)
  lines <- capture.output(print(tr))
  rt_line <- grep("::rt_call()", lines, fixed = TRUE, value = TRUE)
  expect_match(rt_line, sprintf("roundtrip\\.c:%d:", marker_line("roundtrip.c", "rt_call")))
})

test_that("an ambiguous alignment adds nothing rather than guessing", {
  # A trace of identical recursive calls matches the stack at several
  # positions.
  rec <- function(n) {
    if (n == 0L) {
      tr <- rlang::trace_back(bottom = environment())
      recursive <- which(trace_labels(tr) == "rec")
      only_rec <- rlang:::trace_slice(tr, recursive[-1L])
      stopifnot(all(trace_labels(only_rec) == "rec"))
      return(list(ambiguous = winch_add_trace_back(only_rec), input = only_rec))
    }
    rec(n - 1L)
  }
  f <- function() winch_call(function() rec(5L))
  res <- f()
  expect_identical(res$ambiguous, res$input)
  # Traces that pin their position still work in recursive code.
  rec2 <- function(n) if (n == 0L) winch_add_trace_back() else rec2(n - 1L)
  g <- function() winch_call(function() rec2(5L))
  expect_true("/winch.so::winch_call" %in% trace_labels(g()))
})

test_that("native rows' srcrefs make rlang print the debug information's line and column", {
  res <- NULL
  cb <- function() res <<- list(tr = winch_add_trace_back(), nat = winch_trace_back())
  outer <- function() .Call("rt_call", cb, environment(), PACKAGE = "wtest_roundtrip")
  outer()
  tr <- res$tr
  nat <- res$nat
  rows <- which(tr$namespace == "/wtest_roundtrip.so")
  expect_setequal(vapply(rows, function(i) as.character(tr$call[[i]][[1L]]), ""), c("rt_call", "eval_fun"))
  for (i in rows) {
    fn <- as.character(tr$call[[i]][[1L]])
    ref <- attr(tr$call[[i]], "srcref")
    hit <- nat[!is.na(nat$func) & nat$func == fn, ]
    expect_identical(nrow(hit), 1L)
    expect_false(is.null(ref))
    expect_identical(ref[[1L]], hit$line)
    # rlang prints `srcref[5] - 1` as the column: that is the DWARF column.
    expect_identical(ref[[5L]] - 1L, hit$column)
    expect_gt(hit$column, 0L)
  }
})

test_that("trace rows are matched to frames by their calls' heads", {
  match_rows <- winch:::match_trace_rows
  fn_call <- as.call(list(as.symbol("<fn>")))
  frames <- list(
    quote(top()), quote(pkg::g(1)), quote((function() 1)()), quote(h(x)), quote(pkg:::k()), quote(bottom())
  )
  # rlang writes an inlined function as `<fn>`: it matches any non-symbol head.
  trace <- data.frame(row = 1:4)
  trace$call <- list(quote(pkg::g(2)), fn_call, quote(h()), quote(pkg:::k()))
  expect_identical(match_rows(trace, frames), 2:5)
  # `::` and `:::` differ; so do other names.
  trace$call <- list(quote(pkg:::g()), fn_call, quote(h()), quote(pkg:::k()))
  expect_null(match_rows(trace, frames))
  # A trace that fits at two places matches nowhere.
  trace2 <- data.frame(row = 1:2)
  trace2$call <- list(quote(f()), quote(f()))
  expect_null(match_rows(trace2, list(quote(f()), quote(f()), quote(f()))))
  expect_identical(match_rows(trace2, list(quote(g()), quote(f()), quote(f()))), 2:3)
  # More rows than frames, and elements that are not calls.
  expect_null(match_rows(trace, frames[1:3]))
  trace2$call <- list(1, quote(f()))
  expect_identical(match_rows(trace2, list(quote(g()), "x", quote(f()))), 2:3)
})

test_that("native rows' calls are kept between traces, and changing one in R changes no other trace", {
  traces <- list()
  cb <- function() traces[[length(traces) + 1L]] <<- winch_add_trace_back()
  outer <- function() .Call("rt_call", cb, environment(), PACKAGE = "wtest_roundtrip")
  for (i in 1:3) outer()
  rows <- lapply(traces, function(tr) which(tr$namespace == "/wtest_roundtrip.so"))
  expect_identical(rows[[1L]], rows[[2L]])
  first <- traces[[1L]]$call[rows[[1L]]]
  expect_identical(traces[[2L]]$call[rows[[2L]]], first)
  # Changed in R: a copy is changed, not the call the other traces hold.
  tr <- traces[[2L]]
  i <- rows[[2L]][[1L]]
  tr$call[[i]][[1L]] <- as.symbol("changed")
  attr(tr$call[[i]], "srcref") <- NULL
  expect_identical(as.character(tr$call[[i]][[1L]]), "changed")
  expect_identical(traces[[1L]]$call[rows[[1L]]], first)
  expect_identical(traces[[3L]]$call[rows[[3L]]], first)
  expect_false(is.null(attr(traces[[3L]]$call[[i]], "srcref")))
  outer()
  expect_identical(traces[[4L]]$call[rows[[1L]]], first)
})

test_that("a change of winch's options between traces is seen, and a bad one is an error", {
  f <- function() winch_call(function() winch_add_trace_back())
  expect_true("/winch.so" %in% f()$namespace)
  withr::with_options(list(winch.debug_dirs = c(tempdir(), "/usr/lib/debug")), {
    expect_true("/winch.so" %in% f()$namespace)
    expect_identical(winch:::the$debug_dirs, c(tempdir(), "/usr/lib/debug"))
  })
  expect_error(withr::with_options(list(winch.backend = "nope"), f()), class = "winch_error_bad_argument")
  expect_error(withr::with_options(list(winch.debug_dirs = 1), f()), class = "winch_error_bad_argument")
  expect_true("/winch.so" %in% f()$namespace)
})
