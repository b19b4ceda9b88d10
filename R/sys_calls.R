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
  check_backend(backend)
  frames <- sys.frames()
  calls <- sys.calls()
  native <- joint_capture(frames, calls, libr = libr, backend = backend)
  n <- length(calls) - 1L # the caller's depth: this function's frame is dropped
  new_winch_calls(as.list(calls)[seq_len(n)], native, n)
}

new_winch_calls <- function(calls, native, n) {
  placed <- !is.na(native$r_frame)
  native <- native[(!placed | native$r_frame <= n) & !native$host, , drop = FALSE]
  placed <- !is.na(native$r_frame)
  # Outermost first, like sys.calls().
  native <- native[rev(seq_len(nrow(native))), , drop = FALSE]
  placed <- rev(placed)
  ncalls <- Map(native_call, native$func, native$pathname, native$offset)
  native_status <- ifelse(!placed, "unplaced", ifelse(native$approximate, "approximate", "exact"))

  out <- vector("list", 0L)
  status <- character()
  add <- function(k) {
    sel <- which(placed & native$r_frame == k)
    out <<- c(out, ncalls[sel])
    status <<- c(status, native_status[sel])
  }
  add(0L)
  for (k in seq_len(n)) {
    out <- c(out, calls[k])
    status <- c(status, "r")
    add(k)
  }
  unplaced <- which(!placed)
  out <- c(out, ncalls[unplaced])
  status <- c(status, native_status[unplaced])
  names(out) <- NULL

  structure(
    out,
    native = status != "r",
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
