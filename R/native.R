# Internal helpers around the Rust glue (src/rust/src). Every entry point
# returns its result, or `list(error = <message>, class = <class>)`, or NULL
# when R could not allocate the result; errors are raised here, in R, with
# the user's call and a class (see ?winch for the classes).

`%||%` <- function(x, y) if (is.null(x)) y else x

abort_winch <- function(message, class = NULL, call = rlang::caller_env()) {
  rlang::abort(message, class = unique(c(class, "winch_error")), call = call)
}

# A bad argument from the user (checked in R before reaching native code).
abort_bad_argument <- function(message, call = rlang::caller_env()) {
  abort_winch(message, class = "winch_error_bad_argument", call = call)
}

check_result <- function(x, call = rlang::caller_env()) {
  if (is.null(x)) {
    abort_winch("winch could not allocate its result (out of memory?).",
      class = "winch_error_out_of_memory", call = call
    )
  }
  if (is.list(x) && !is.data.frame(x) && !is.null(x[["error"]])) {
    abort_winch(x[["error"]], class = x[["class"]], call = call)
  }
  x
}

check_backend <- function(backend, call = rlang::caller_env()) {
  ok <- c("auto", "cfi", "libunwind", "backtrace")
  if (!is.character(backend) || length(backend) != 1L || is.na(backend) || !backend %in% ok) {
    abort_bad_argument(
      sprintf("`backend` must be one of %s.", paste0('"', ok, '"', collapse = ", ")),
      call = call
    )
  }
  invisible(backend)
}

check_flag <- function(x, arg = rlang::caller_arg(x), call = rlang::caller_env()) {
  if (!is.logical(x) || length(x) != 1L || is.na(x)) {
    abort_bad_argument(sprintf("`%s` must be `TRUE` or `FALSE`.", arg), call = call)
  }
  invisible(x)
}

# What stands for a native frame's function in joint traces: its name, or
# for a frame without one the start of its function relative to the module
# (`+0x1a20`, from the unwind information: the same for every frame in that
# function), or where no unwind entry covers the frame its own offset marked
# `?` (`+0x1a2b?`).
native_label <- function(func, start, offset) {
  ifelse(!is.na(func), func, ifelse(!is.na(start), paste0("+", start), paste0("+", offset, "?")))
}

# The call that stands for a native frame in joint traces:
# `/libfoo.so`::fn(), or `/libfoo.so`::`+0x1a20`() when the frame has no name.
native_call <- function(func, pathname, start, offset) {
  module <- paste0("/", basename(pathname))
  as.call(list(call("::", as.symbol(module), as.symbol(native_label(func, start, offset)))))
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

# Figures about winch's symbol caches (bench/first_capture.R).
cache_info <- function() {
  check_result(rs_cache_info())
}

# Passes the `winch.debug_dirs` option to the Rust side when it changed.
sync_debug_dirs <- function(call = rlang::caller_env()) {
  dirs <- getOption("winch.debug_dirs", "/usr/lib/debug")
  if (!identical(dirs, the$debug_dirs)) {
    if (!is.character(dirs) || anyNA(dirs)) {
      abort_bad_argument("The `winch.debug_dirs` option must be a character vector of directories.", call = call)
    }
    check_result(rs_set_debug_dirs(dirs), call = call)
    the$debug_dirs <- dirs
  }
  invisible(dirs)
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
