#' Print a joint native and R trace when native code crashes
#'
#' With the crash report on, when R's main thread receives `SIGSEGV`,
#' `SIGBUS`, `SIGILL`, `SIGFPE` or `SIGABRT` (a segfault, a failed
#' assertion, ...), winch writes the native frames (module, function where
#' its symbol is known, offset) to standard error, each followed by the R
#' calls it was evaluating, innermost first. Then the process dies as it
#' would have: R's own `*** caught segfault ***` report and traceback still
#' follow for the signals R handles, and the exit status is unchanged.
#' Modelled on Python's faulthandler.
#'
#' The report is also turned on when winch is loaded with the option
#' `winch.crash_report` set to `TRUE` (read at load).
#'
#' @section How it works:
#' Turning the report on prepares everything the signal handler needs: the
#' list of loaded modules with their unwind tables and symbol tables
#' (refreshed, outside the handler, when R loads a library), buffers, and an
#' alternate signal stack when the thread has none. The handler itself
#' only reads memory and calls `write(2)`; output is bounded (100 native
#' frames, 100 R calls, 200 characters per name). It then gives the signal
#' back to the handler it replaced: for a fault, by restoring that handler
#' and returning, so that the instruction faults again and R's handler sees
#' the genuine fault; `SIGABRT` (which R does not report) and signals sent
#' by `kill()` are sent again. A segfault that R recognises as a C stack
#' overflow gets no report: R recovers from it as usual, and winch installs
#' its handler again after the next top-level expression. A crash in
#' another thread gets a report of its native frames only.
#'
#' winch replaces only R's own handlers and the default action: a signal
#' whose handler belongs to another library (a Java VM started by rJava
#' uses `SIGSEGV` internally) is left alone, and the returned status says
#' so. The report is best effort: a crash that damaged the stack or R's
#' memory may cut it short.
#'
#' Covered: Linux on x86_64. Elsewhere `winch_crash_report(TRUE)` raises an
#' error of class `winch_error_unavailable` and nothing changes.
#'
#' @param enable `TRUE` to turn the report on, `FALSE` to turn it off (the
#'   previous handlers are restored exactly).
#' @return Invisibly, a list: `enabled` (logical), `signals` (the signals
#'   reported, e.g. `"SIGSEGV"`), `skipped` and `reasons` (signals left
#'   alone, and why).
#' @seealso [winch_last_throw()] for C++ exceptions and Rust panics.
#' @export
#' @examples
#' \dontrun{
#' winch_crash_report(TRUE)
#' # A crash in native code now prints native frames and R calls.
#' winch_crash_report(FALSE)
#' }
winch_crash_report <- function(enable) {
  check_required(enable, what = "`TRUE` or `FALSE`")
  check_flag(enable)
  res <- check_result(rs_crash_set(enable))
  the$crash_on <- enable
  invisible(res)
}

# What the crash report covers now.
crash_report_status <- function() {
  check_result(rs_crash_status())
}

# The handlers installed for the report's signals (to check exact restore).
crash_handlers <- function() {
  check_result(rs_crash_handlers())
}

# At load: the option `winch.crash_report`. A value other than TRUE/FALSE
# is warned about and ignored; failing to turn the report on never fails
# loading (it warns).
crash_report_at_load <- function() {
  opt <- getOption("winch.crash_report", FALSE)
  if (isFALSE(opt)) {
    return(invisible(FALSE))
  }
  if (!isTRUE(opt)) {
    rlang::warn(
      "The option `winch.crash_report` must be `TRUE` or `FALSE`; the crash report stays off.",
      class = c("winch_warning_bad_option", "winch_warning")
    )
    return(invisible(FALSE))
  }
  res <- rs_crash_set(TRUE)
  if (is.list(res) && !is.null(res[["error"]])) {
    rlang::warn(
      c("The crash report could not be turned on.", i = res[["error"]]),
      class = c("winch_warning_crash_report", "winch_warning")
    )
    return(invisible(FALSE))
  }
  the$crash_on <- TRUE
  invisible(TRUE)
}

# After each top-level expression (task callback): handlers R took back
# (C stack overflow recovery) are taken again.
crash_report_rearm <- function() {
  if (isTRUE(the$crash_on)) {
    rs_crash_rearm()
  }
  invisible()
}

# At unload: nothing may point into winch's library afterwards.
crash_report_off_at_unload <- function() {
  if (isTRUE(the$crash_on)) {
    rs_crash_set(FALSE)
  }
  the$crash_on <- NULL
  invisible()
}
