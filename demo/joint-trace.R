# A round trip R -> native -> R -> native -> R. winch_call() calls its
# argument from a C function in winch's own library, so the stack really
# alternates between R and native frames.
library(winch)

outer_r <- function() winch_call(middle_r)
middle_r <- function() winch_call(inner_r)
inner_r <- function() {
  cat("== winch_trace_back(): the native stack, innermost first",
      "(frames of R's own library left out)\n")
  native <- winch_trace_back(libr = FALSE)
  native$pathname <- basename(native$pathname)
  print(native[, c("func", "ip", "pathname", "file", "line")], right = FALSE)

  cat("\n== winch_sys_calls(): R calls with the native frames in place\n")
  print(winch_sys_calls())

  cat("\n== rlang::trace_back() with options(rlang_trace_use_winch = TRUE)\n")
  old <- options(rlang_trace_use_winch = TRUE)
  on.exit(options(old))
  print(rlang::trace_back())
}

outer_r()
