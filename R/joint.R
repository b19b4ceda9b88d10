# The joint capture of winch_sys_calls() (rlang traces get theirs with their
# rows spliced in, in one .Call: splice_native() in R/add_trace_back.R).

# Captures the native stack and places it among the caller's R frames.
# `frames` and `calls` must be `sys.frames()` and `sys.calls()` evaluated in
# the frame that calls this function (so that they include that frame).
#
# Returns the frames joint views show (frames of R's evaluation, outermost
# first; R's own only with `libr`), each with the R frame it sits under
# (`r_frame`, NA when unplaced) and whether that is approximate. Which
# frames are shown is decided in the core (winch_core::view). When a C++
# throw or Rust panic recorded earlier was caught by a frame still running,
# its frames as they were at the throw follow the catching frame's row,
# with `at_throw = TRUE`, and the attribute `throw` says what was thrown
# (`kind`, `type`, `location`).
joint_capture <- function(frames, calls, libr = FALSE,
                          backend = getOption("winch.backend", "auto"),
                          call = rlang::caller_env()) {
  # As in winch_trace_back(): R's checks and syncing only where the core
  # refuses the arguments or something changed since the last capture.
  if (!in_step()) {
    check_backend(backend, call = call)
    sync_options(call = call)
  }
  res <- rs_joint(backend, frames, calls, libr, use_contexts())
  if (is.null(oldClass(res))) {
    check_backend(backend, call = call)
    res <- check_result(res, call = call)
  }
  if (is.null(attr(res, "debug_files_would_help", exact = TRUE))) res else debuginfod_hint(res)
}

# Reading R's context chain can be turned off with
# `options(winch.use_contexts = FALSE)`: placement then falls back to what is
# certain without it (see ?winch_sys_calls).
use_contexts <- function() {
  !isFALSE(getOption("winch.use_contexts"))
}
