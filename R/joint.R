# The joint capture shared by winch_sys_calls(), winch_add_trace_back() and
# the rlang hook.

# Captures the native stack and places it among the caller's R frames.
# `frames` and `calls` must be `sys.frames()` and `sys.calls()` evaluated in
# the frame that calls this function (so that they include that frame).
#
# With `view = TRUE`, only the frames that joint traces show are returned:
# foreign frames of R's evaluation (not R's own, not the program running R),
# outermost first.
joint_capture <- function(frames, calls, libr = FALSE, view = FALSE,
                          backend = getOption("winch.backend", "auto"),
                          call = rlang::caller_env()) {
  check_backend(backend, call = call)
  sync_debug_dirs(call = call)
  check_result(
    .Call(C_rs_joint, backend, as.list(frames), as.list(calls), libr, use_contexts(), view),
    call = call
  )
}

# Reading R's context chain can be turned off with
# `options(winch.use_contexts = FALSE)`: placement then falls back to what is
# certain without it (see ?winch_sys_calls).
use_contexts <- function() {
  !isFALSE(getOption("winch.use_contexts"))
}
