skip_if_not(winch_available(), "native unwinding is not available on this platform")

# Fixture libraries and direct .Call wrappers used by the scenarios below.
rt <- roundtrip_lib()
ot <- other_lib()
RT <- "/wtest_roundtrip.so"
OT <- "/wtest_other.so"

expect_exact <- function(x) {
  expect_identical(attr(x, "placement"), "exact")
  expect_false(any(attr(x, "status") %in% c("approximate", "unplaced")))
}

test_that("R -> C -> R -> C -> R through two different libraries", {
  inner <- function() winch_sys_calls()
  mid <- function() .Call("other_call", inner, environment(), PACKAGE = "wtest_other")
  outer <- function() .Call("rt_call", mid, environment(), PACKAGE = "wtest_roundtrip")
  x <- outer()
  expect_s3_class(x, "winch_calls")
  expect_exact(x)
  expect_identical(
    labels_from(joint_labels(x), "outer"),
    c("outer", paste0(RT, "::rt_call"), paste0(RT, "::eval_fun"), "<inline>",
      paste0(OT, "::other_call"), "<inline>")
  )
})

test_that("the R part is exactly sys.calls() of the caller", {
  check <- function() {
    x <- winch_sys_calls()
    list(r = unclass(x)[!attr(x, "native")], base = as.list(sys.calls()))
  }
  res <- winch_call(check)
  expect_identical(res$r, res$base)
})

test_that("inside a promise, the R entries are sys.calls() evaluated in the same place", {
  # tryCatch() evaluates its argument as a promise: sys.calls() there stops at
  # f, the frame that made the promise, not at the frames forcing it.
  f <- function() tryCatch(list(a = sys.calls(), b = winch_sys_calls()))
  x <- f()
  expect_identical(unclass(x$b)[!attr(x$b, "native")], as.list(x$a))
  expect_identical(labels_from(joint_labels(x$b), "f"), "f")
  # A promise forced by C code: the C frames belong to g, which sys.calls()
  # does not show there, so neither does winch_sys_calls().
  g <- function(x) .Call("rt_force", environment(), PACKAGE = "wtest_roundtrip")
  h <- function() g(list(a = sys.calls(), b = winch_sys_calls()))
  y <- h()
  expect_identical(unclass(y$b)[!attr(y$b, "native")], as.list(y$a))
  expect_identical(labels_from(joint_labels(y$b), "h"), "h")
  # A promise made by eval() in the global environment: up to eval()'s frame.
  z <- evalq(identity(list(a = sys.calls(), b = winch_sys_calls())), globalenv())
  expect_identical(unclass(z$b)[!attr(z$b, "native")], as.list(z$a))
  expect_identical(tail(joint_labels(z$b), 1L), "evalq") # eval()'s record holds the call of evalq()
})

test_that("a .Call that already returned is not on the stack", {
  f <- function() {
    .Call("rt_identity", 1, PACKAGE = "wtest_roundtrip")
    winch_call(function() winch_sys_calls())
  }
  labels <- labels_from(joint_labels(f()), "f")
  expect_identical(labels, c("f", "winch_call", "/winch.so::winch_call", "<inline>"))
})

test_that("a .Call in an untaken branch or in a lambda is placed where it runs", {
  f <- function(run) {
    if (FALSE) .Call("rt_call", NULL, NULL, PACKAGE = "wtest_roundtrip")
    lambda <- function() .Call("rt_call", function() winch_sys_calls(), environment(),
                               PACKAGE = "wtest_roundtrip")
    lambda()
  }
  x <- f()
  expect_exact(x)
  expect_identical(
    labels_from(joint_labels(x), "f"),
    c("f", "lambda", paste0(RT, "::rt_call"), paste0(RT, "::eval_fun"), "<inline>")
  )
})

test_that("do.call(\".Call\", ...) and .External", {
  f <- function() {
    do.call(".Call", list("rt_call", function() winch_sys_calls(), environment(),
                          PACKAGE = "wtest_roundtrip"))
  }
  expect_identical(
    labels_from(joint_labels(f()), "f"),
    c("f", "do.call", paste0(RT, "::rt_call"), paste0(RT, "::eval_fun"), "<inline>")
  )
  g <- function() .External("rt_external", function() winch_sys_calls(), environment(),
                            PACKAGE = "wtest_roundtrip")
  expect_identical(
    labels_from(joint_labels(g()), "g"),
    c("g", paste0(RT, "::rt_external"), paste0(RT, "::eval_fun"), "<inline>")
  )
})

test_that("callbacks through R_tryEval, R_ToplevelExec and R_UnwindProtect", {
  cb <- function() winch_sys_calls()
  via <- function(symbol) .Call(symbol, cb, environment(), PACKAGE = "wtest_roundtrip")
  x <- via("rt_tryeval")
  expect_exact(x)
  expect_identical(labels_from(joint_labels(x), "via"), c("via", paste0(RT, "::rt_tryeval"), "<inline>"))
  x <- via("rt_toplevel")
  expect_exact(x)
  expect_identical(
    labels_from(joint_labels(x), "via"),
    c("via", paste0(RT, c("::rt_toplevel", "::toplevel_fn", "::eval_fun")), "<inline>")
  )
  x <- via("rt_unwind_protect")
  expect_exact(x)
  expect_identical(
    labels_from(joint_labels(x), "via"),
    c("via", paste0(RT, c("::rt_unwind_protect", "::unwind_fn", "::eval_fun")), "<inline>")
  )
})

test_that("50 alternating round trips", {
  env <- environment()
  nest <- function(k) {
    if (k == 0L) winch_sys_calls() else .Call("rt_nest", nest, k - 1L, env, PACKAGE = "wtest_roundtrip")
  }
  x <- nest(50L)
  expect_exact(x)
  labels <- labels_from(joint_labels(x), "nest")
  expect_identical(labels, c("nest", rep(c(paste0(RT, "::rt_nest"), "<inline>"), 50L)))
})

test_that("byte code and the AST interpreter place frames the same way", {
  make <- function() {
    inner <- function() winch_sys_calls()
    mid <- function() .Call("other_call", inner, environment(), PACKAGE = "wtest_other")
    outer <- function() .Call("rt_call", mid, environment(), PACKAGE = "wtest_roundtrip")
    outer
  }
  ast_fn <- make()
  old <- compiler::enableJIT(0L)
  on.exit(compiler::enableJIT(old), add = TRUE)
  ast <- ast_fn()
  bc_fn <- compiler::cmpfun(make())
  expect_true(is.function(bc_fn))
  bc <- bc_fn()
  expect_exact(ast)
  expect_exact(bc)
  expect_identical(labels_from(joint_labels(ast), "ast_fn"), labels_from(joint_labels(bc), "bc_fn")[-1L] |>
    (\(l) c("ast_fn", l))())
})

test_that("placement stays exact while Rprof() is running", {
  prof <- tempfile()
  Rprof(prof, interval = 0.01) # the shortest R >= 4.3 allows on Linux
  on.exit({
    Rprof(NULL)
    unlink(prof)
  })
  inner <- function() {
    x <- NULL
    for (i in 1:30) x <- winch_sys_calls()
    x
  }
  outer <- function() .Call("rt_call", inner, environment(), PACKAGE = "wtest_roundtrip")
  x <- outer()
  Rprof(NULL)
  expect_exact(x)
  expect_identical(
    labels_from(joint_labels(x), "outer"),
    c("outer", paste0(RT, "::rt_call"), paste0(RT, "::eval_fun"), "<inline>")
  )
})

test_that("an error raised by Rf_error() is seen in place from a calling handler", {
  seen <- NULL
  f <- function() .Call("rt_error", "from C", PACKAGE = "wtest_roundtrip")
  try(silent = TRUE, withCallingHandlers(f(), error = function(e) seen <<- winch_sys_calls()))
  # The handler runs inside the C function's call to Rf_error(): R calls
  # .handleSimpleError(), which calls the handler as h(cond).
  expect_identical(
    labels_from(joint_labels(seen), "f"),
    c("f", paste0(RT, "::rt_error"), ".handleSimpleError", "h")
  )
  expect_exact(seen)
})

test_that("without the context chain nothing is guessed: native frames are unplaced", {
  withr::local_options(winch.use_contexts = FALSE)
  f <- function() winch_call(function() winch_sys_calls())
  x <- f()
  expect_identical(attr(x, "placement"), "fallback")
  status <- attr(x, "status")
  labels <- joint_labels(x)
  # R calls stay in order, native frames come after them, marked unplaced.
  n_r <- sum(status == "r")
  expect_true(all(status[seq_len(n_r)] == "r"))
  expect_true(all(status[-seq_len(n_r)] == "unplaced"))
  expect_true("/winch.so::winch_call" %in% labels[status == "unplaced"])
  expect_match(format(x), "unplaced", all = FALSE)
})

test_that("the printed joint stack marks native frames", {
  f <- function() winch_call(function() winch_sys_calls())
  x <- f()
  out <- format(x)
  expect_match(out, "^ *[0-9]+:   `/winch.so`::winch_call\\(\\)$", all = FALSE)
  expect_output(expect_identical(print(x), x), "winch_call", fixed = TRUE)
  # Approximate entries (R >= 4.4 byte code) are marked and explained.
  attr(x, "status")[attr(x, "native")] <- "approximate"
  out <- format(x)
  expect_match(out, "^ *[0-9]+:   ~ `/winch.so`::winch_call\\(\\)$", all = FALSE)
  expect_match(out, "placement approximate", all = FALSE)
})

test_that("errors from the native side become winch errors with the user's call", {
  err <- tryCatch(winch:::check_result(list(error = "boom")), error = function(e) e)
  expect_s3_class(err, "winch_error")
  expect_identical(conditionMessage(err), "boom")
  expect_s3_class(tryCatch(winch:::check_result(NULL), error = function(e) e), "winch_error")
  f <- function() .Call(winch:::C_rs_splice_calls, 1L, "not integers")
  expect_match(f()$error, "integer")
})

test_that("bad arguments are clear errors", {
  expect_snapshot(error = TRUE, {
    winch_sys_calls(libr = "yes")
    winch_sys_calls(backend = 1)
  })
})

test_that("a library without unwind tables: truncated, R frames in order, no crash", {
  nu <- compile_clib(
    "wtest_nounwind", "nounwind.c",
    flags = "-g -O2 -fno-asynchronous-unwind-tables -fno-unwind-tables -fomit-frame-pointer"
  )
  for (backend in winch:::winch_backends()) {
    inner <- function() list(tb = winch_trace_back(backend = backend), calls = winch_sys_calls(backend = backend))
    outer <- function() .Call("nu_call", inner, environment(), PACKAGE = "wtest_nounwind")
    res <- outer()
    # Unwinding stops at the frame without unwind information: said so.
    expect_true(attr(res$tb, "truncated"), label = backend)
    expect_match(attr(res$tb, "truncation"), "without unwind information")
    expect_identical(basename(res$tb$pathname[[nrow(res$tb)]]), "wtest_nounwind.so")
    # The R frames are all there and in order; the frame that could be
    # unwound is in its place.
    x <- res$calls
    expect_true(attr(x, "truncated"))
    expect_identical(unclass(x)[!attr(x, "native")][seq_len(sys.nframe())], as.list(sys.calls()))
    expect_identical(
      labels_from(joint_labels(x), "outer"),
      c("outer", "/wtest_nounwind.so::nu_call", "<inline>")
    )
    expect_match(format(x), "native stack truncated", all = FALSE)
  }
})

test_that("contexts off the C stack (a byte-code loop context) are read and placement stays exact", {
  # `break` inside a promise makes the byte-code compiler give the loop a
  # context, which R keeps on its own node stack, not on the C stack.
  body_fn <- compiler::cmpfun(function() {
    out <- NULL
    for (i in 1:2) {
      out <- list(chain = winch:::context_chain(), calls = winch_sys_calls())
      identity(break)
    }
    out
  })
  outer <- function() .Call("rt_call", body_fn, environment(), PACKAGE = "wtest_roundtrip")
  res <- outer()
  chain <- res$chain
  loop <- chain$callflag == 3L # CTXT_LOOP
  expect_true(any(loop))
  expect_false(any(chain$on_stack[loop]))
  # Function records are on the C stack with an owner frame, or (R >= 4.4:
  # calls made inline by the byte-code loop, such as body_fn's call of
  # context_chain()) on R's node stack with the frame of their loop.
  fun <- bitwAnd(chain$callflag, 4L) != 0L
  placed <- ifelse(
    chain$on_stack,
    !is.na(chain$native_frame),
    chain$on_node_stack & !is.na(chain$runner_frame)
  )
  expect_true(all(placed[fun]))
  expect_exact(res$calls)
  expect_identical(
    labels_from(joint_labels(res$calls), "outer"),
    c("outer", paste0(RT, "::rt_call"), paste0(RT, "::eval_fun"), "<inline>")
  )
})

test_that("subsets keep the class and the per-entry attributes", {
  f <- function() winch_call(function() winch_sys_calls())
  x <- f()
  last <- tail(x, 2)
  expect_s3_class(last, "winch_calls")
  expect_identical(attr(last, "native"), tail(attr(x, "native"), 2))
  expect_identical(attr(last, "status"), tail(attr(x, "status"), 2))
  expect_identical(unclass(last)[1:2], tail(unclass(x), 2))
  expect_identical(attr(x[attr(x, "native")], "status"), rep("exact", sum(attr(x, "native"))))
  expect_match(format(last), "`/winch.so`::winch_call()", fixed = TRUE, all = FALSE)
})

test_that("libr = TRUE adds R's own frames in place, but not the program's start code", {
  f <- function() winch_call(function() list(all = winch_sys_calls(libr = TRUE), calls = sys.calls()))
  res <- f()
  x <- res$all
  expect_s3_class(x, "winch_calls")
  expect_exact(x)
  labels <- labels_from(joint_labels(x), "f")
  # R's interpreter frames now appear between the R calls...
  expect_true(any(startsWith(labels, "/libR.so::")))
  # ...the foreign frame is still right under winch_call()...
  wc <- match("winch_call", labels)
  after <- labels[seq(wc + 1L, length(labels))]
  expect_identical(after[!startsWith(after, "/libR.so::")][1:2], c("/winch.so::winch_call", "<inline>"))
  # ...the R calls are those of sys.calls(), and the C library's start code
  # (outside R) is left out.
  expect_identical(unclass(x)[!attr(x, "native")], as.list(res$calls))
  expect_false(any(startsWith(joint_labels(x), "/libc.so")))
})
