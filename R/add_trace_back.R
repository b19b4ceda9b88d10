#' Add native frames to an rlang backtrace
#'
#' Inserts the native frames of the current call stack into a backtrace made
#' by [rlang::trace_back()]. Each native chunk goes right under the R call
#' whose evaluation entered it, and the R call that the native code called
#' back becomes a child of the innermost native frame of that chunk. Native
#' rows have `namespace = "/<module basename>"`, `scope = "::"` and
#' `call = <func>()`, so rlang prints them as `` `/libfoo.so`::fn() ``, with
#' `at file:line` when the frame has debug information. Frames of R's own
#' library are left out (they are the interpreter, not your code).
#'
#' The native frames must still exist: call this while the stack that `trace`
#' describes is live (e.g. in a calling handler), never after an error has
#' unwound it. The trace is returned unchanged when there is no native code
#' to add, when it does not belong to the current stack, and when it already
#' has native frames.
#'
#' Every column and attribute of `trace` is kept. The attribute `winch` of
#' the result tells how the native frames were placed.
#'
#' @param trace A backtrace from [rlang::trace_back()] (rlang >= 1.0 format).
#'   Traces in rlang's pre-1.0 list format are returned unchanged.
#' @return The trace with native frames added.
#' @seealso [winch_sys_calls()] for the same without rlang;
#'   `vignette("winch")` for how frames are placed and the rlang hook.
#' @export
#' @examples
#' f <- function() winch_call(function() winch_add_trace_back())
#' if (winch_available()) print(f())
winch_add_trace_back <- function(trace = rlang::trace_back(bottom = parent.frame())) {
  frames <- sys.frames()
  calls <- sys.calls()
  force(trace)
  if (is_old_rlang_trace(trace)) {
    return(trace)
  }
  check_rlang_trace(trace)
  # Called by rlang's own hook (an rlang whose add_winch_trace() works):
  # rlang::trace_back() two frames up will trim the trace next, which the
  # insertion must respect.
  me <- sys.nframe()
  if (me >= 3L && identical(sys.function(me - 2L), rlang_trace_back_fn())) {
    return(add_native_in_trace_back(trace, sys.frame(me - 2L)))
  }
  n <- length(frames) - 1L
  if (!nrow(trace) || has_native_rows(trace) || !winch_available()) {
    return(trace)
  }
  row_frames <- match_trace_rows(trace, as.list(calls)[seq_len(n)])
  if (is.null(row_frames)) {
    return(trace)
  }
  splice_native(trace, row_frames, frames, calls, first = 1L)
}

is_old_rlang_trace <- function(x) {
  inherits(x, "rlang_trace") && is.list(x) && !is.data.frame(x) && !is.null(x$calls)
}

check_rlang_trace <- function(trace, call = rlang::caller_env()) {
  ok <- is.data.frame(trace) && all(c("call", "parent") %in% names(trace)) &&
    is.list(trace$call) && is.numeric(trace$parent)
  if (!ok) {
    abort_bad_argument(
      "`trace` must be a backtrace from `rlang::trace_back()` (a data frame with `call` and `parent` columns).",
      call = call
    )
  }
  invisible(trace)
}

has_native_rows <- function(trace) {
  !is.null(attr(trace, "winch"))
}

# Which frame of `calls` each row of `trace` is, or NULL if that is not
# certain. Rows are consecutive frames; the heads of their calls (a symbol,
# `pkg::fn`, or an inlined function, which rlang writes as `<fn>`) must
# match the stack's at exactly one position. In recursive code a trace made
# only of identical calls can match at several: then nothing is added
# rather than guessed. Compared by the core (winch_core::splice::match_rows;
# in R, a key per call cost a microsecond or two each).
match_trace_rows <- function(trace, calls) {
  rows <- check_result(rs_match_rows(trace$call, calls))
  if (is.integer(rows)) rows else NULL
}

# `trace` with the native frames of the current stack inserted: its row j
# is R frame `row_frames[j]` (frame j when NULL), and `frames` and `calls`
# are as for joint_capture(). Only chunks under rows `first` and later are
# inserted, so rows before `first` keep their positions. The core captures,
# places and splices in one .Call (src/rust/src/spliced.rs; where rows go
# and who their parents are: winch_core::splice) and returns the new trace,
# or FALSE when there is nothing to add.
splice_native <- function(trace, row_frames, frames, calls, first = 1L,
                          backend = getOption("winch.backend", "auto"),
                          call = rlang::caller_env()) {
  if (!is.integer(.subset2(trace, "parent"))) {
    trace$parent <- as.integer(trace$parent)
  }
  # As in winch_trace_back(), the core says whether the options and loaded
  # libraries changed since the last capture: R's checks and syncing run
  # only then (or where the core refuses the arguments). One .Call in the
  # usual case: this runs inside every hooked rlang trace.
  # (Whether throw capture is as the option says is R's to know.)
  use_contexts <- !isFALSE(getOption("winch.use_contexts"))
  attr_names <- names(attributes(trace))
  out <- if (throws_in_step()) {
    .Call(C_rs_splice_native, trace, attr_names, row_frames, frames, calls, first, backend, use_contexts, FALSE)
  } else {
    "sync"
  }
  if (identical(out, "sync")) {
    check_backend(backend, call = call)
    sync_options(call = call)
    out <- .Call(C_rs_splice_native, trace, attr_names, row_frames, frames, calls, first, backend, use_contexts, TRUE)
  }
  if (!is.data.frame(out)) {
    if (isFALSE(out)) {
      return(trace)
    }
    check_backend(backend, call = call)
    out <- check_result(out, call = call)
  }
  # Columns with a class are subset here, as `[` would.
  plan <- attr(out, "winch_plan", exact = TRUE)
  if (!is.null(plan)) {
    attr(out, "winch_plan") <- NULL
    attrs <- attributes(out)
    # (attributes() expands compact row names: compact and automatic again.)
    attrs$row.names <- .set_row_names(length(plan$kind))
    cols <- unclass(out)
    for (j in seq_along(cols)) {
      if (is.null(cols[[j]])) {
        col <- .subset2(trace, j)[plan$src]
        if (is.logical(col)) col[plan$kind != 1L] <- FALSE
        cols[j] <- list(col)
      }
    }
    attributes(cols) <- attrs
    out <- cols
  }
  if (isTRUE(attr(out, "debug_files_would_help", exact = TRUE))) {
    attr(out, "debug_files_would_help") <- NULL
    debuginfod_hint(structure(list(), debug_files_would_help = TRUE))
  }
  out
}
