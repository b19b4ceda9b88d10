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
  # Cannot change while winch is loaded: asked once.
  the$available %||% (the$available <- isTRUE(rs_available()))
}

#' The native stack as a data frame
#'
#' Captures the native (C, C++, Fortran, Rust, ...) call stack of the current
#' R session at the point of the call, without the frames of the capture
#' itself.
#'
#' A frame gets a name in `func` only if the name is certainly its own: its
#' address lies inside a function of the debug information or a symbol
#' (`.symtab`, `.dynsym`, the compressed `.symtab` of `.gnu_debugdata`), or
#' its function starts exactly at a routine registered with R
#' (`R_registerRoutines()`); with `options(winch.debuginfod = TRUE)`, debug
#' files are also fetched from debuginfod servers. Other frames get `NA`
#' (never the name of a neighbouring function) and are identified by
#' `start`, the start of their function. `offset` is the address relative to
#' the module, usable with `addr2line -e <pathname> <offset>`. See "How
#' frames are named" in `vignette("winch")`.
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
#'   * `column`: source column from debug information, `NA` if absent;
#'   * `start`: the start of the function holding `ip`, relative to the
#'     module, as `"0x..."`, from the unwind information (which stripping
#'     keeps): every frame in one function has the same `start`. `NA` where
#'     no unwind entry covers `ip`;
#'   * `source`: where `func` came from: `"dwarf"`, `"debuginfod"` (DWARF of
#'     a file fetched from a debuginfod server), `"symtab"`, `"dynsym"`,
#'     `"minidebuginfo"` (`.gnu_debugdata`) or `"registration"` (R's table
#'     of registered routines); `NA` when `func` is.
#'
#'   Attributes: `backend` (the unwinder that walked the stack), `truncated` (`TRUE` when
#'   unwinding stopped before the outermost frame) and `truncation` (why).
#'
#'   The frames are named when captured; the columns are made when R first
#'   reads them (they are ALTREP vectors), so a trace kept and never looked
#'   at costs less. They behave as ordinary vectors when read, copied,
#'   compared or saved (`saveRDS()` writes plain vectors). While such a column is alive, unloading winch leaves its
#'   library loaded.
#' @export
#' @examples
#' if (winch_available()) {
#'   head(winch_trace_back())
#' }
winch_trace_back <- function(backend = getOption("winch.backend", "auto"), libr = TRUE) {
  # The arguments are checked by the core too, which also says whether the
  # options or loaded libraries changed since the last capture: R's checks,
  # with their messages, and its syncing run only then or where the core
  # refuses the arguments. Called here, not through a wrapper in
  # R/low-level.R: the frames of R's interpreter evaluating this call are
  # part of the result (libr = TRUE).
  # A backend left at its default is read by the core (NULL): no call of
  # getOption() per capture.
  # (NULL given is refused: NA_character_ stands for it.)
  x <- .Call(C_rs_trace_back, if (missing(backend)) NULL else backend %||% NA_character_, libr, FALSE)
  # Only primitives on the usual path (it runs on every capture): a result
  # without a class is not the data frame ("sync", an error, or NULL).
  if (is.null(oldClass(x))) {
    check_backend(backend)
    check_flag(libr)
    if (identical(x, "sync")) {
      sync_options(capture_throws = FALSE)
      x <- .Call(C_rs_trace_back, backend, libr, TRUE)
    }
    x <- check_result(x)
  }
  # The core sets this attribute only where the hint may have something to
  # say (a server is named, the option unset).
  if (is.null(attr(x, "debug_files_would_help", exact = TRUE))) x else debuginfod_hint(x)
}
