#' Is native unwinding available?
#'
#' Checks whether winch can capture the native stack in this build and on
#' this platform (currently Linux, with the system libunwind or libgcc's
#' unwinder).
#'
#' @return A scalar logical.
#' @export
#' @examples
#' winch_available()
winch_available <- function() {
  isTRUE(.Call(C_rs_available))
}

#' The native stack as a data frame
#'
#' Captures the native (C, C++, Fortran, Rust, ...) call stack of the current
#' R session at the point of the call, without the frames of the capture
#' itself.
#'
#' A frame gets a name in `func` only if its address lies inside a symbol or
#' a function in the debug information; frames in stripped code get `NA`
#' (never the name of a neighbouring function). `offset` is the address
#' relative to the module, usable with `addr2line -e <pathname> <offset>`.
#'
#' @param backend The unwinder: `"cfi"` (winch's own cached unwinder, which
#'   hands stacks it cannot walk to libgcc's), `"libunwind"` (the system
#'   libunwind), `"backtrace"` (libgcc's unwinder) or `"auto"` for the first
#'   of these that works here. Defaults to the `winch.backend` option.
#' @param libr Include frames of R's own library and executable?
#' @return A data frame, innermost frame first, with one row per frame and,
#'   for code inlined by the compiler, one more row per inlined call (same
#'   `ip`, `inlined = TRUE`, innermost first). Columns:
#'   * `func`: function name (demangled), `NA` when unknown;
#'   * `ip`: instruction pointer, 16 lowercase hex digits;
#'   * `pathname`: full path of the module (shared library or executable);
#'   * `is_libr`: `TRUE` for R's shared library and R's executable;
#'   * `file`, `line`: source location from debug information, `NA` if absent;
#'   * `inlined`: the row is an inlined call inside the frame's function;
#'   * `offset`: `ip` relative to the module, as `"0x..."`;
#'   * `column`: source column from debug information, `NA` if absent.
#'
#'   Attributes: `backend` (the unwinder that walked the stack), `truncated` (`TRUE` when
#'   unwinding stopped before the outermost frame) and `truncation` (why).
#' @export
#' @examples
#' if (winch_available()) {
#'   head(winch_trace_back())
#' }
winch_trace_back <- function(backend = getOption("winch.backend", "auto"), libr = TRUE) {
  check_backend(backend)
  check_flag(libr)
  sync_debug_dirs()
  check_result(.Call(C_rs_trace_back, backend, libr))
}
