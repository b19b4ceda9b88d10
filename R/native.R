# Internal helpers around the Rust glue (src/rust/src/lib.rs). Every glue
# function returns its result or `list(error = "...")`; errors are raised here,
# in R, with the user's call.

native_columns <- c("func", "ip", "pathname", "is_libr", "file", "line", "inlined", "offset", "column")

abort_winch <- function(message, call = rlang::caller_env(), class = NULL) {
  rlang::abort(message, class = c(class, "winch_error"), call = call)
}

check_result <- function(x, call = rlang::caller_env()) {
  if (!is.null(x$error)) {
    abort_winch(x$error, call = call)
  }
  x
}

check_backend <- function(backend, call = rlang::caller_env()) {
  ok <- c("auto", "libunwind", "backtrace")
  if (!is.character(backend) || length(backend) != 1L || is.na(backend) || !backend %in% ok) {
    abort_winch(
      sprintf("`backend` must be one of %s.", paste0('"', ok, '"', collapse = ", ")),
      call = call
    )
  }
  invisible(backend)
}

check_flag <- function(x, arg = rlang::caller_arg(x), call = rlang::caller_env()) {
  if (!is.logical(x) || length(x) != 1L || is.na(x)) {
    abort_winch(sprintf("`%s` must be `TRUE` or `FALSE`.", arg), call = call)
  }
  invisible(x)
}

# A data frame from a list of equal-length columns, without data.frame()'s
# checks (the columns come from Rust and are known to be well formed).
new_frames_df <- function(x, columns) {
  df <- x[columns]
  attr(df, "row.names") <- .set_row_names(length(df[[1L]]))
  class(df) <- "data.frame"
  df
}

# The call that stands for a native frame in joint traces:
# `/libfoo.so`::fn(), or `/libfoo.so`::`+0x1a2b`() when the frame has no name.
native_call <- function(func, pathname, offset) {
  module <- paste0("/", basename(pathname))
  name <- if (is.na(func)) paste0("+", offset) else func
  as.call(list(call("::", as.symbol(module), as.symbol(name))))
}

# Names of the unwinding backends that work in this build, preferred first.
winch_backends <- function() {
  .Call(C_rs_backends)
}

# Captures on a fresh thread (the Rust side does not touch R there): shows
# that capture away from R's main thread is safe.
capture_on_thread <- function(backend = "auto") {
  check_backend(backend)
  res <- check_result(.Call(C_rs_thread_capture, backend))
  out <- new_frames_df(res, native_columns)
  attr(out, "backend") <- res$backend
  attr(out, "truncated") <- !is.na(res$truncated)
  attr(out, "truncation") <- res$truncated
  attr(out, "main_thread") <- res$main_thread
  out
}
