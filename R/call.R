#' Call an R function from native code
#'
#' `winch_call()` calls `fun()` from a C function in winch's own shared
#' library, so that the call stack contains a real native frame between the
#' caller and `fun`. Useful to try joint traces and in tests.
#'
#' @param fun A function that can be called without arguments.
#' @param env The environment in which `fun()` is evaluated.
#' @return The value of `fun()`. An error raised by `fun` propagates unchanged
#'   (same condition object and class).
#' @export
#' @examples
#' winch_call(function() "called from C")
winch_call <- function(fun, env = parent.frame()) {
  check_required(fun, what = "a function to call")
  if (!is.function(fun)) {
    abort_bad_argument("`fun` must be a function.")
  }
  required <- required_args(fun)
  if (length(required)) {
    abort_bad_argument(sprintf(
      "`fun` must be callable without arguments; it needs %s.",
      paste0("`", required, "`", collapse = ", ")
    ))
  }
  if (!is.environment(env)) {
    abort_bad_argument("`env` must be an environment.")
  }
  # Called here, not through a wrapper in R/low-level.R: this frame is the
  # R frame right above the native one in joint traces.
  .Call(C_winch_call, fun, env)
}

#' Raise an error from native code
#'
#' @param message The error message, a single string.
#' @return Does not return.
#' @export
#' @examples
#' try(winch_stop("boom from C"))
winch_stop <- function(message) {
  check_required(message, what = "the error message")
  if (!is.character(message) || length(message) != 1L || is.na(message)) {
    abort_bad_argument("`message` must be a single string.")
  }
  # Called here, not through a wrapper in R/low-level.R (see winch_call()).
  .Call(C_winch_stop, message, sys.call())
}

# Names of the arguments of `fun` that have no default (`...` excepted).
required_args <- function(fun) {
  fmls <- formals(if (is.primitive(fun)) args(fun) else fun)
  if (is.null(fmls)) {
    return(character())
  }
  missing_default <- vapply(fmls, function(x) identical(x, quote(expr = )), logical(1))
  setdiff(names(fmls)[missing_default], "...")
}

#' Prepare a library for native traces (compatibility)
#'
#' In winch 0.1 this loaded the symbols of one library. Now every loaded
#' module is covered automatically, so this function only checks that `path`
#' is an existing, non-empty regular file (of at most 4 GiB).
#'
#' @param path Path to a shared library, or `NULL`.
#' @param force Kept for compatibility; must be `TRUE` or `FALSE`.
#' @return `path`, invisibly.
#' @export
#' @examples
#' winch_init_library()
winch_init_library <- function(path = NULL, force = FALSE) {
  check_flag(force)
  if (!is.null(path)) {
    if (!is.character(path) || length(path) != 1L || is.na(path)) {
      abort_bad_argument("`path` must be `NULL` or a single string.")
    }
    check_input_file(path, max_bytes = elf_max_bytes, what = "a shared library")
  }
  invisible(path)
}
