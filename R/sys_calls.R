#' The call stack with native frames
#'
#' Like [sys.calls()] evaluated where `winch_sys_calls()` is called, with the
#' native frames inserted where they really are: each native frame comes
#' right after the R call whose evaluation entered it, as a call of the form
#' `` `/libfoo.so`::fn() `` (or `` `/libfoo.so`::`+0x1a20`() `` when the
#' frame has no name: the start of its function relative to the module, the
#' same for every frame in that function; `` `+0x1a2b?` `` with the frame's
#' own offset where no unwind information covers it). Needs no rlang.
#'
#' The R calls are exactly those `sys.calls()` would list in the same place:
#' inside a promise (an argument being evaluated), they stop at the frame
#' that created the promise, not at the frames forcing it; native frames
#' under frames not listed are left out too.
#'
#' Frames of the program that runs R (its `main()`, the C library's start
#' code) are left out.
#'
#' Native frames are placed using the stack addresses of R's evaluation
#' contexts (see `vignette("winch")`). When R's context chain cannot be read
#' or does not match [sys.frames()], native frames that cannot be placed with
#' certainty are listed after the last R call and marked as unplaced.
#'
#' When the R error being handled was raised by native code that had just
#' caught a C++ exception or a Rust panic (see [winch_last_throw()]), the
#' frames of that throw, as they were when it was thrown, follow the frame
#' that caught it, with status `"throw"` (printed with `!`).
#'
#' @param libr Include frames of R's own library (the interpreter)?
#' @inheritParams winch_trace_back
#'
#' @return A list of calls of class `winch_calls`, outermost first. Attributes:
#'   `native` (logical, which entries are native frames), `status` (one of
#'   `"r"`, `"exact"`, `"approximate"`, `"unplaced"`, `"throw"` per entry),
#'   `placement` (`"exact"`, `"approximate"` or `"fallback"`), `truncated`,
#'   `truncation` and, when throw frames are shown, `throw` (a list: `kind`,
#'   `type` and `location` of what was thrown).
#' @export
#' @examples
#' f <- function() winch_call(function() winch_sys_calls())
#' if (winch_available()) f()
winch_sys_calls <- function(libr = FALSE, backend = getOption("winch.backend", "auto")) {
  check_flag(libr)
  frames <- sys.frames()
  calls <- sys.calls()
  n <- caller_frame_number(frames, parent.frame())
  native <- joint_capture(frames, calls, libr = libr, backend = backend)
  new_winch_calls(as.list(calls)[seq_len(n)], native, n)
}

# What sys.calls() sees where winch_sys_calls() was called: the frames up to
# the innermost one whose environment is the caller's. Inside a promise that
# is the frame that created the promise, not the frames forcing it; at top
# level, none. `frames` includes winch_sys_calls()'s own frame (last).
caller_frame_number <- function(frames, caller) {
  k <- length(frames) - 1L
  while (k > 0L && !identical(frames[[k]], caller)) {
    k <- k - 1L
  }
  k
}

# A winch_calls object: R calls `calls` (frames 1..n) with the native frames
# of `native` (a joint capture, outermost first) in their places.
new_winch_calls <- function(calls, native, n) {
  nat <- unclass(native)
  order <- check_result(rs_splice_calls(n, nat$r_frame))
  is_r <- order > 0L
  which_native <- -order[!is_r]
  out <- vector("list", length(order))
  out[is_r] <- calls[order[is_r]]
  out[!is_r] <- .mapply(native_call, list(nat$label[which_native], nat$pathname[which_native]), NULL)
  status <- rep("r", length(order))
  status[!is_r] <- "exact"
  status[!is_r][nat$approximate[which_native]] <- "approximate"
  status[!is_r][is.na(nat$r_frame[which_native])] <- "unplaced"
  status[!is_r][(nat$at_throw %||% logical(length(nat$r_frame)))[which_native]] <- "throw"
  winch_calls(out, !is_r, status, attributes(native))
}

# The constructor: `x` a list of calls, `native` and `status` per entry,
# `from` a list holding the stack-wide attributes.
winch_calls <- function(x, native, status, from) {
  structure(
    x,
    native = native,
    status = status,
    placement = from$placement,
    truncated = from$truncated,
    truncation = from$truncation,
    throw = from$throw,
    class = "winch_calls"
  )
}

#' @export
format.winch_calls <- function(x, ...) {
  check_dots_among(..., ignored = default_method_args(format.default), takes = "no argument of its own")
  check_winch_calls(x)
  status <- attr(x, "status")
  text <- vapply(x, function(cl) paste(deparse(cl, width.cutoff = 500L), collapse = " "), "")
  text <- ifelse(nchar(text) > 120L, paste0(substr(text, 1L, 117L), "..."), text)
  marker <- c(r = "", exact = "  ", approximate = "  ~ ", unplaced = "  ? ", throw = "  ! ")[status]
  lines <- sprintf("%*d: %s%s", nchar(length(x)), seq_along(x), marker, text)
  notes <- character()
  if (any(status == "approximate")) {
    notes <- c(notes, "~ placement approximate (several possible parents)")
  }
  if (any(status == "throw")) {
    type <- attr(x, "throw")$type %||% NA_character_
    what <- if (identical(type, "Rust panic")) {
      "the Rust panic"
    } else if (!is.na(type)) {
      paste("the throw of", type)
    } else {
      "the throw"
    }
    notes <- c(notes, sprintf("! taken at %s; those frames have been unwound since", what))
  }
  if (any(status == "unplaced")) {
    notes <- c(notes, "? unplaced: R's context chain was not usable, position unknown")
  }
  if (isTRUE(attr(x, "truncated"))) {
    notes <- c(notes, paste0("native stack truncated: ", attr(x, "truncation")))
  }
  c(lines, notes)
}

#' @export
print.winch_calls <- function(x, ...) {
  check_dots_among(..., ignored = default_method_args(print.default), takes = "no argument of its own")
  writeLines(format(x))
  invisible(x)
}

#' @export
`[.winch_calls` <- function(x, i, ...) {
  check_no_dots(...)
  check_winch_calls(x)
  keep <- if (missing(i)) seq_along(x) else check_entries(i, length(x))
  winch_calls(unclass(x)[keep], attr(x, "native")[keep], attr(x, "status")[keep], attributes(x))
}

# A winch_calls list as winch_calls() makes it: `native` and `status` one
# per entry (a list given the class by hand, or one whose attributes were
# dropped, is refused rather than printed or subset wrongly).
check_winch_calls <- function(x, call = rlang::caller_env()) {
  n <- length(x)
  status <- attr(x, "status")
  ok <- is.list(x) && is.logical(attr(x, "native")) && length(attr(x, "native")) == n &&
    is.character(status) && length(status) == n && all(status %in% c("r", "exact", "approximate", "unplaced", "throw"))
  if (!ok) {
    abort_bad_argument(
      "`x` must be a `winch_calls` list (from `winch_sys_calls()` or `winch_dump()`), with its attributes `native` and `status`.",
      call = call
    )
  }
  invisible(x)
}

# Which entries of a list of `n` to keep for `x[i]`: `i` whole numbers from
# 1 to `n`, or from -`n` to -1 to leave entries out (zeros ignored, as R
# does), or a logical vector no longer than `n` (recycled). Indices R would
# turn into NULL entries (out of range, NA, names: the entries have none)
# are refused.
check_entries <- function(i, n, call = rlang::caller_env()) {
  if (is.null(i)) {
    return(integer())
  }
  if (is.logical(i) && !anyNA(i) && length(i) <= n) {
    return(seq_len(n)[i])
  }
  if (is.numeric(i) && !anyNA(i) && all(i == trunc(i)) && all(abs(i) <= n) && (all(i >= 0) || all(i <= 0))) {
    return(seq_len(n)[i])
  }
  abort_bad_argument(sprintf(
    "`i` must pick entries of `x` (%d of them): whole numbers from 1 to %d, or from -%d to -1 to leave entries out, or a logical vector no longer than `x`, without `NA`.",
    n, n, n
  ), call = call)
}
