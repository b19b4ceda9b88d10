# Native frames in joint views, and diagnostics of the native side.

# The call that stands for a native frame in joint traces:
# `/libfoo.so`::fn(), or `/libfoo.so`::`+0x1a20`() when the frame has no
# name. `label` is the joint table's column: the function's name, or the
# label the core gives every unnamed frame, in traces, profiles and crash
# reports alike: the start of its function relative to the module
# (`+0x1a20`, the same for every frame in that function), or where no unwind
# entry covers the frame its own offset marked `?` (`+0x1a2b?`).
native_call <- function(label, pathname) {
  module <- paste0("/", basename(pathname))
  as.call(list(call("::", as.symbol(module), as.symbol(label))))
}

# Names of the unwinding backends that work in this build, preferred first.
winch_backends <- function() {
  check_result(rs_backends())
}

# The Rust entry points and their numbers of arguments (test-registration.R
# compares them with R's registration table).
rust_entry_points <- function() {
  check_result(rs_entry_points())
}

# Captures on a fresh thread (the Rust side does not touch R there): shows
# that capture away from R's main thread is safe.
capture_on_thread <- function(backend = "auto") {
  check_backend(backend)
  check_result(rs_thread_capture(backend))
}

# Nanoseconds per capture spent unwinding, checking frames and symbolizing,
# at the caller's depth (bench/stages.R).
stage_times <- function(backend = "auto", n = 200L) {
  check_backend(backend)
  # Called here, not through a wrapper in R/low-level.R: at the caller's depth.
  unlist(check_result(.Call(C_rs_stage_times, backend, as.integer(n))))
}

# How the columns of a frame table are held ("lazy": column not made
# yet, "made", "plain"), and `live`: how many tables lazy columns hold (for
# tests; see src/rust/src/lazy_columns.rs).
lazy_columns <- function(x = NULL) {
  res <- check_result(rs_lazy_columns(if (is.null(x)) NULL else unclass(x)))
  if (!is.null(x)) names(res$state) <- names(x)
  res
}

# Figures about winch's symbol caches (bench/first_capture.R).
cache_info <- function() {
  check_result(rs_cache_info())
}

# R's context chain at the caller, innermost first: `callflag` (R's CTXT_*
# bits: 4 is a function call, 3 a loop, 64 a builtin, 0 the top level),
# whether the record is on the C stack or on R's node stack, the native
# frame that owns it and the one that owns its runner (the byte-code loop
# running it), numbered innermost first. For diagnosing placement problems.
context_chain <- function(backend = "auto") {
  check_backend(backend)
  # Called here, not through a wrapper in R/low-level.R: the chain starts
  # with this function's own record.
  res <- check_result(.Call(C_rs_context_chain, backend))
  attr(res, "row.names") <- .set_row_names(length(res$callflag))
  class(res) <- "data.frame"
  res
}
