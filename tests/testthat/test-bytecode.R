skip_if_not(winch_available(), "native unwinding is not available on this platform")

# Since R 4.4, a byte-compiled closure called from byte code runs inside its
# caller's interpreter loop, with its context on R's node stack and no C
# frame of its own. Placement must stay exact there, with the same results
# as in the AST interpreter and on older R. Every scenario runs three ways:
# not compiled with the JIT off ("ast"), compiled with compiler::cmpfun()
# ("bytecode"), and not compiled with the JIT at level 3 ("jit"), and must
# give identical joint stacks.

rt <- roundtrip_lib()
RT <- "/wtest_roundtrip.so"

expect_exact <- function(x, label = NULL) {
  expect_identical(attr(x, "placement"), "exact", label = label)
  expect_false(any(attr(x, "status") %in% c("approximate", "unplaced")), label = label)
}

modes <- c("ast", "bytecode", "jit")

# Runs `make()` (which returns the entry function of a scenario, defining
# its helpers inside) in `mode` and returns what the entry function returns.
in_mode <- function(mode, make) {
  old <- compiler::enableJIT(if (mode == "jit") 3L else 0L)
  on.exit(compiler::enableJIT(old), add = TRUE)
  entry <- make(compile = mode == "bytecode")
  entry()
}

# cmpfun() where asked, the function itself otherwise.
maybe_cmp <- function(f, compile) if (compile) compiler::cmpfun(f) else f

for (mode in modes) {
  test_that(paste0("compiled h() -> g() -> .Call / winch_call() is exact (", mode, ")"), {
    make <- function(compile) {
      cb <- function() winch_sys_calls()
      g <- maybe_cmp(function() .Call("rt_call", cb, environment(), PACKAGE = "wtest_roundtrip"), compile)
      h <- maybe_cmp(function() g(), compile)
      g2 <- maybe_cmp(function() winch_call(cb), compile)
      h2 <- maybe_cmp(function() g2(), compile)
      function() list(call = h(), winch = h2())
    }
    res <- in_mode(mode, make)
    expect_exact(res$call, mode)
    expect_identical(
      labels_from(joint_labels(res$call), "h"),
      c("h", "g", paste0(RT, "::rt_call"), paste0(RT, "::eval_fun"), "<inline>")
    )
    expect_exact(res$winch, mode)
    expect_identical(
      labels_from(joint_labels(res$winch), "h2"),
      c("h2", "g2", "winch_call", "/winch.so::winch_call", "<inline>")
    )
  })

  test_that(paste0("30 round trips R <-> C through byte-code calls are exact (", mode, ")"), {
    make <- function(compile) {
      env <- environment()
      step <- maybe_cmp(function(k) if (k == 0L) winch_sys_calls() else hop(k), compile)
      hop <- maybe_cmp(function(k) .Call("rt_nest", step, k - 1L, env, PACKAGE = "wtest_roundtrip"), compile)
      function() step(30L)
    }
    x <- in_mode(mode, make)
    expect_exact(x, mode)
    expect_identical(
      labels_from(joint_labels(x), "step"),
      c("step", rep(c("hop", paste0(RT, "::rt_nest"), "<inline>"), 30L))
    )
  })

  # A promise forced by C code: directly (rt_force evaluates `x`) or with
  # R_forceAndCall(), as lapply() and friends do. caller() passes g() as a
  # promise; C code forces it in a new interpreter loop; g calls h, which
  # calls C again. The first C chunk belongs to `takes`, not to g or h.
  for (via in c("rt_force", "rt_force_and_call")) {
    test_that(paste0("a promise forced by C code (", via, ") is exact (", mode, ")"), {
      make <- function(compile) {
        cb <- function() winch_sys_calls()
        h <- maybe_cmp(function() .Call("rt_call", cb, environment(), PACKAGE = "wtest_roundtrip"), compile)
        g <- maybe_cmp(function() h(), compile)
        use <- function(v) v
        takes <- maybe_cmp(function(x) {
          if (via == "rt_force") {
            .Call("rt_force", environment(), PACKAGE = "wtest_roundtrip")
          } else {
            .Call("rt_force_and_call", use, environment(), PACKAGE = "wtest_roundtrip")
          }
        }, compile)
        maybe_cmp(function() takes(g()), compile)
      }
      x <- in_mode(mode, make)
      expect_exact(x, mode)
      expect_identical(
        labels_from(joint_labels(x), "takes"),
        c("takes", paste0(RT, "::", via), "g", "h", paste0(RT, c("::rt_call", "::eval_fun")), "<inline>")
      )
    })
  }

  test_that(paste0("lapply() from byte code calling back through C is exact (", mode, ")"), {
    make <- function(compile) {
      cb <- function() winch_sys_calls()
      g <- maybe_cmp(function(i) .Call("rt_call", cb, environment(), PACKAGE = "wtest_roundtrip"), compile)
      maybe_cmp(function() lapply(1L, g)[[1L]], compile)
    }
    x <- in_mode(mode, make)
    expect_exact(x, mode)
    expect_identical(
      labels_from(joint_labels(x), "entry"),
      c("entry", "lapply", "FUN", paste0(RT, c("::rt_call", "::eval_fun")), "<inline>")
    )
  })
}

test_that("repeated captures of one stack agree while the JIT compiles", {
  old <- compiler::enableJIT(3L)
  on.exit(compiler::enableJIT(old), add = TRUE)
  # Loops make the JIT compile these functions on first use.
  cb <- function() winch_sys_calls()
  g <- function() {
    for (i in 1:2) out <- .Call("rt_call", cb, environment(), PACKAGE = "wtest_roundtrip")
    out
  }
  h <- function() {
    for (i in 1:2) out <- g()
    out
  }
  runs <- lapply(1:3, function(i) h())
  labels <- lapply(runs, function(x) labels_from(joint_labels(x), "h"))
  for (x in runs) expect_exact(x)
  expect_identical(labels[[1L]], c("h", "g", paste0(RT, c("::rt_call", "::eval_fun")), "<inline>"))
  expect_identical(labels[[2L]], labels[[1L]])
  expect_identical(labels[[3L]], labels[[1L]])
})

test_that("rlang traces of byte-code calls have no approximate rows", {
  cb <- function() rlang::trace_back()
  g <- compiler::cmpfun(function() .Call("rt_call", cb, environment(), PACKAGE = "wtest_roundtrip"))
  h <- compiler::cmpfun(function() g())
  withr::local_options(rlang_trace_use_winch = TRUE)
  tr <- h()
  expect_false(any(grepl("approx", tr$namespace, fixed = TRUE)))
  expect_identical(attr(tr, "winch")$placement, "exact")
  labels <- trace_labels(tr)
  expect_identical(
    labels[seq(match("h", labels), length(labels))],
    c("h", "g", paste0(RT, c("::rt_call", "::eval_fun")), "<fn>")
  )
})

test_that("on R >= 4.4, byte-code call records are on the node stack and placed by their loop", {
  g <- compiler::cmpfun(function() winch:::context_chain())
  h <- compiler::cmpfun(function() g())
  chain <- h()
  fun <- bitwAnd(chain$callflag, 4L) != 0L
  off <- fun & !chain$on_stack
  if (getRversion() >= "4.4.0") {
    # g's record (called inline by h's loop) is off the C stack, on R's node
    # stack, and its loop's frame is known.
    expect_true(any(off))
    expect_true(all(chain$on_node_stack[off]))
    expect_false(anyNA(chain$runner_frame[off]))
  } else {
    # Older R makes every call's record in a C frame.
    expect_false(any(off))
  }
  # Every record that says byte code was running names a loop frame older
  # than its own frame (frames are numbered innermost first).
  both <- !is.na(chain$native_frame) & !is.na(chain$runner_frame)
  expect_true(all(chain$runner_frame[both] > chain$native_frame[both]))
})

test_that("without process_vm_readv, placement of byte-code calls stays exact", {
  # A fresh R process where winch may not read memory through the kernel:
  # the node stack is read in place, within its bounds.
  code <- c(
    "library(winch)",
    sprintf("dyn.load(%s)", deparse(rt$path)),
    "cb <- function() winch_sys_calls()",
    "g <- compiler::cmpfun(function() .Call('rt_call', cb, environment(), PACKAGE = 'wtest_roundtrip'))",
    "h <- compiler::cmpfun(function() g())",
    "x <- h()",
    "cat(attr(x, 'placement'), '\\n')",
    "cat(attr(x, 'status'), '\\n')"
  )
  out <- withr::with_envvar(c(WINCH_NO_PROCESS_VM_READV = "1"), run_rscript(code))
  expect_identical(attr(out, "status"), 0L)
  expect_identical(trimws(out[[1L]]), "exact")
  expect_false(grepl("approximate|unplaced", out[[2L]]))
})
