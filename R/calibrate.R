# What the profiler learns about this R before it samples, by running small
# probes of R code: which native functions of R run each kind of AST loop
# and where R's byte-code interpreter keeps its loop counter (learnt once
# per session, when the first profile with `loops = TRUE` starts), and
# calls whose labels are known, with which the Rust side checks that it
# reads R objects the way this R lays them out (at every start). Used by
# profile_begin() (R/profile.R).

# Calls whose labels R's profiler writes known ways: the Rust side checks it
# reads R objects the way R lays them out before it samples.
label_probes <- function() {
  list(
    calls = list(quote(f()), quote(stats::median(x)), quote(obj$fit()), quote(x[["a"]](1))),
    labels = c("f", "stats::median", "obj$fit", 'x[["a"]]')
  )
}

# AST loops are named by the native function of R that runs them; learn
# which is which once per session by running one loop of each kind.
learn_loops <- function() {
  if (isTRUE(check_result(rs_profile_loops_known()))) {
    return(invisible(TRUE))
  }
  old <- compiler::enableJIT(0L)
  on.exit(compiler::enableJIT(old), add = TRUE)
  # Made from a quoted expression, so that it is not byte-compiled with the
  # package: these must be the AST interpreter's loops.
  run <- eval(quote(function(learn) {
    for (i in 1L) learn("for")
    i <- 0L
    while (i < 1L) {
      i <- i + 1L
      learn("while")
    }
    repeat {
      learn("repeat")
      break
    }
  }), baseenv())
  res <- tryCatch(run(rs_profile_learn_loop), winch_error = function(e) e)
  # Byte code: this package's functions are compiled; learn_bc() is called
  # from them, so R's interpreter loop holds the slots of their records.
  bc <- tryCatch(learn_bc(), winch_error = function(e) e)
  invisible(!inherits(res, "winch_error") && !inherits(bc, "winch_error"))
}

learn_bc <- function() {
  check_result(rs_profile_learn_bc(opcode_probe()))
}

# A body whose code is every instruction of R's byte code in order, as this
# R encodes it, with the number of operands of each and the opcodes of GOTO
# and STEPFOR: the sampler decodes byte code to find its loops. Made with
# the compiler's code buffer (never run). NULL if the compiler's internals
# are not as expected.
opcode_probe <- function() {
  tryCatch(
    {
      ns <- asNamespace("compiler")
      argc <- vapply(get("Opcodes.argc", ns), as.integer, 1L)
      gen <- function(cb, cntxt) {
        for (op in seq_along(argc) - 1L) {
          do.call(cb$putcode, as.list(c(op, integer(argc[[op + 1L]]))))
        }
      }
      cntxt <- get("make.toplevelContext", ns)(get("makeCenv", ns)(baseenv()), NULL)
      code <- get("genCode", ns)(NULL, cntxt, gen = gen)
      list(code, unname(argc), as.integer(get("GOTO.OP", ns)), as.integer(get("STEPFOR.OP", ns)))
    },
    error = function(e) NULL
  )
}
