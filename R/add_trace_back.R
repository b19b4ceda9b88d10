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
  native <- joint_capture(frames, calls)
  insert_native_rows(trace, row_frames, native, first = 1L)
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

# Inserts the native frames of `native` (a joint capture's view: the frames
# to show, outermost first) into `trace`, whose row j is R frame
# `row_frames[j]`. Only chunks under rows `first` and later are inserted, so
# rows before `first` keep their positions. Where rows go and who their
# parents are is decided by winch_core::splice (src/rust/core/src/splice.rs).
insert_native_rows <- function(trace, row_frames, native, first = 1L) {
  tr <- unclass(trace)
  nat <- unclass(native)
  at_throw <- nat$at_throw %||% logical(length(nat$r_frame))
  plan <- rs_splice_trace(as.integer(row_frames), as.integer(tr$parent), nat$r_frame, at_throw, as.integer(first))
  n <- length(plan$kind)
  added <- sum(plan$kind == 2L)
  if (!added) {
    return(trace)
  }
  # The columns are made by the core (src/rust/src/trace_rows.rs) but for
  # those with a class, subset here.
  out <- check_result(rs_trace_rows(tr, plan, nat))
  for (j in seq_along(out)) {
    if (is.null(out[[j]])) {
      col <- tr[[j]][plan$src]
      if (is.logical(col)) col[plan$kind != 1L] <- FALSE
      out[[j]] <- col
    }
  }
  attrs <- out_attrs(trace, n)
  attrs$names <- names(out)
  attributes(out) <- attrs
  attr(out, "winch") <- winch_info(native, added)
  out
}

out_attrs <- function(trace, n) {
  attrs <- attributes(trace)
  attrs$row.names <- .set_row_names(n)
  attrs
}

winch_info <- function(native, added) {
  list(
    placement = attr(native, "placement"),
    fallback_reason = attr(native, "fallback_reason"),
    truncated = attr(native, "truncated"),
    truncation = attr(native, "truncation"),
    added = added,
    throw = attr(native, "throw")
  )
}

