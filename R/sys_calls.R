#' The call stack with native frames
#'
#' Like [sys.calls()] for the caller of `winch_sys_calls()`, with the native
#' frames inserted where they really are: each native frame comes right after
#' the R call whose evaluation entered it, as a call of the form
#' `` `/libfoo.so`::fn() `` (or `` `/libfoo.so`::`+0x1a2b`() `` when the
#' frame has no name). Needs no rlang.
#'
#' Frames of the program that runs R (its `main()`, the C library's start
#' code) are left out.
#'
#' Native frames are placed using the stack addresses of R's evaluation
#' contexts (see `vignette("winch")`). When R's context chain cannot be read
#' or does not match [sys.frames()], native frames that cannot be placed with
#' certainty are listed after the last R call and marked as unplaced.
#'
#' @param libr Include frames of R's own library (the interpreter)?
#' @inheritParams winch_trace_back
#' @return A list of calls of class `winch_calls`, outermost first. Attributes:
#'   `native` (logical, which entries are native frames), `status` (one of
#'   `"r"`, `"exact"`, `"approximate"`, `"unplaced"` per entry), `placement`
#'   (`"exact"`, `"approximate"` or `"fallback"`), `truncated` and
#'   `truncation`.
#' @export
#' @examples
#' f <- function() winch_call(function() winch_sys_calls())
#' if (winch_available()) f()
winch_sys_calls <- function(libr = FALSE, backend = getOption("winch.backend", "auto")) {
  check_flag(libr)
  frames <- sys.frames()
  calls <- sys.calls()
  native <- joint_capture(frames, calls, libr = libr, view = !libr, backend = backend)
  n <- length(calls) - 1L # the caller's depth: this function's frame is dropped
  if (libr) {
    # Outermost first, without the frames of the program running R.
    keep <- rev(which(!native$host))
    shown <- lapply(unclass(native), `[`, keep)
    for (a in c("placement", "truncated", "truncation")) {
      attr(shown, a) <- attr(native, a)
    }
    native <- shown
  }
  new_winch_calls(as.list(calls)[seq_len(n)], native, n)
}

# `native`: the frames to show, outermost first (a joint capture's view).
new_winch_calls <- function(calls, native, n) {
  nat <- unclass(native)
  order <- .Call(C_rs_splice_calls, n, nat$r_frame)
  is_r <- order > 0L
  which_native <- -order[!is_r]
  out <- vector("list", length(order))
  out[is_r] <- calls[order[is_r]]
  out[!is_r] <- .mapply(native_call, list(nat$func[which_native], nat$pathname[which_native], nat$offset[which_native]), NULL)
  status <- rep("r", length(order))
  status[!is_r] <- "exact"
  status[!is_r][nat$approximate[which_native]] <- "approximate"
  status[!is_r][is.na(nat$r_frame[which_native])] <- "unplaced"

  structure(
    out,
    native = !is_r,
    status = status,
    placement = attr(native, "placement"),
    truncated = attr(native, "truncated"),
    truncation = attr(native, "truncation"),
    class = "winch_calls"
  )
}

#' @export
format.winch_calls <- function(x, ...) {
  status <- attr(x, "status")
  text <- vapply(x, function(cl) paste(deparse(cl, width.cutoff = 500L), collapse = " "), "")
  text <- ifelse(nchar(text) > 120L, paste0(substr(text, 1L, 117L), "..."), text)
  marker <- c(r = "", exact = "  ", approximate = "  ~ ", unplaced = "  ? ")[status]
  lines <- sprintf("%*d: %s%s", nchar(length(x)), seq_along(x), marker, text)
  notes <- character()
  if (any(status == "approximate")) {
    notes <- c(notes, "~ placement approximate (several possible parents)")
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
  writeLines(format(x, ...))
  invisible(x)
}

#' @export
`[.winch_calls` <- function(x, i) {
  keep <- seq_along(x)[i]
  structure(
    unclass(x)[keep],
    native = attr(x, "native")[keep],
    status = attr(x, "status")[keep],
    placement = attr(x, "placement"),
    truncated = attr(x, "truncated"),
    truncation = attr(x, "truncation"),
    class = "winch_calls"
  )
}
