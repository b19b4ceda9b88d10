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
    abort_winch(
      "`trace` must be a backtrace from `rlang::trace_back()` (a data frame with `call` and `parent` columns).",
      call = call
    )
  }
  invisible(trace)
}

has_native_rows <- function(trace) {
  !is.null(attr(trace, "winch"))
}

# A comparable key for the function part of a call: a symbol or `ns::fn`
# name, or "<inline>" for anything else (rlang rewrites inlined functions).
call_head_key <- function(x) {
  if (!is.call(x)) {
    return("<none>")
  }
  head <- x[[1L]]
  if (is.symbol(head)) {
    return(as.character(head))
  }
  if (is.call(head) && length(head) == 3L && is.symbol(head[[1L]]) &&
      as.character(head[[1L]]) %in% c("::", ":::")) {
    return(paste(deparse(head), collapse = ""))
  }
  "<inline>"
}

# Which frame of `calls` each row of `trace` is, or NULL if the trace does not
# describe the current stack. Rows are consecutive frames; the deepest
# alignment is preferred (the usual bottom is the caller's frame).
match_trace_rows <- function(trace, calls) {
  m <- nrow(trace)
  n <- length(calls)
  if (m > n) {
    return(NULL)
  }
  trace_keys <- vapply(trace$call, call_head_key, "")
  # rlang::trace_back() replaces inlined functions by the symbol `<fn>`.
  trace_keys[trace_keys == "<fn>"] <- "<inline>"
  frame_keys <- vapply(calls, call_head_key, "")
  for (end in seq(n, m)) {
    rows <- seq(end - m + 1L, end)
    if (identical(frame_keys[rows], trace_keys)) {
      return(rows)
    }
  }
  NULL
}

# Inserts the native frames of `native` (a joint capture) into `trace`, whose
# row j is R frame `row_frames[j]`. Only chunks under rows `first` and later
# are inserted, so rows before `first` keep their positions.
insert_native_rows <- function(trace, row_frames, native, first = 1L) {
  m <- nrow(trace)
  keep <- !native$is_libr & !native$host
  native <- native[keep, , drop = FALSE]
  # Outermost first within each chunk.
  native <- native[rev(seq_len(nrow(native))), , drop = FALSE]
  unplaced <- native[is.na(native$r_frame), , drop = FALSE]
  placed <- native[!is.na(native$r_frame), , drop = FALSE]

  chunk_rows <- vector("list", m)
  top_chunk <- integer()
  for (j in seq_len(m)) {
    if (j >= first) {
      chunk_rows[[j]] <- which(placed$r_frame == row_frames[[j]])
    }
  }
  if (first == 1L && row_frames[[1L]] == 1L) {
    top_chunk <- which(placed$r_frame == 0L)
  }
  n_added <- length(top_chunk) + sum(lengths(chunk_rows)) +
    if (nrow(unplaced)) nrow(unplaced) + 1L else 0L
  if (!n_added) {
    return(trace)
  }

  # New positions: `src` says where each new row comes from (positive: an R
  # row of `trace`, negative: a native row of `placed`, 0: the unplaced
  # marker, NA: an unplaced native row).
  src <- integer()
  parent <- integer()
  old_to_new <- integer(m)
  rewire <- integer(m) # new parent for R rows entered from a native chunk

  add_chunk <- function(rows, parent_row) {
    force(parent_row)
    for (r in rows) {
      src <<- c(src, -r)
      parent <<- c(parent, parent_row)
      parent_row <- length(src)
    }
    parent_row
  }
  if (length(top_chunk)) {
    innermost <- add_chunk(top_chunk, 0L)
    rewire[[1L]] <- innermost
  }
  for (j in seq_len(m)) {
    src <- c(src, j)
    parent <- c(parent, NA_integer_)
    old_to_new[[j]] <- length(src)
    if (length(chunk_rows[[j]])) {
      innermost <- add_chunk(chunk_rows[[j]], length(src))
      if (j < m) {
        rewire[[j + 1L]] <- innermost
      }
    }
  }
  if (nrow(unplaced)) {
    src <- c(src, 0L)
    parent <- c(parent, old_to_new[[m]])
    marker <- length(src)
    for (r in seq_len(nrow(unplaced))) {
      src <- c(src, NA_integer_)
      parent <- c(parent, marker)
      marker <- length(src)
    }
  }

  # R rows keep their parents (renumbered) unless native code entered them.
  is_r <- !is.na(src) & src > 0L
  old_parent <- trace$parent[src[is_r]]
  new_parent <- ifelse(old_parent > 0L, old_to_new[pmax(old_parent, 1L)], 0L)
  entered <- rewire[src[is_r]]
  parent[is_r] <- ifelse(entered > 0L, entered, new_parent)

  out <- trace_rows_from(trace, src, placed, unplaced)
  out$parent <- as.integer(parent)
  attr(out, "winch") <- winch_info(native, n_added)
  out
}

winch_info <- function(native, added) {
  list(
    placement = attr(native, "placement"),
    fallback_reason = attr(native, "fallback_reason"),
    truncated = attr(native, "truncated"),
    truncation = attr(native, "truncation"),
    added = added
  )
}

# Builds the rows of the new trace: R rows copied from `trace`, native rows
# made up with the same columns (defaults for columns winch knows nothing
# about: NA, FALSE for logicals, NULL in list columns).
trace_rows_from <- function(trace, src, placed, unplaced) {
  is_r <- !is.na(src) & src > 0L
  native_idx <- ifelse(!is.na(src) & src < 0L, -src, NA_integer_)
  unplaced_idx <- cumsum(is.na(src))
  n <- length(src)

  calls <- vector("list", n)
  ns <- rep(NA_character_, n)
  calls[is_r] <- trace$call[src[is_r]]
  for (i in which(!is.na(native_idx))) {
    calls[[i]] <- native_row_call(placed[native_idx[[i]], ])
    ns[[i]] <- native_row_namespace(placed[native_idx[[i]], ])
  }
  for (i in which(is.na(src))) {
    row <- unplaced[unplaced_idx[[i]], ]
    calls[[i]] <- native_row_call(row)
    ns[[i]] <- native_row_namespace(row)
  }
  marker <- which(!is.na(src) & src == 0L)
  if (length(marker)) {
    calls[[marker]] <- call("<unplaced native frames>")
  }

  cols <- lapply(names(trace), function(col) {
    x <- trace[[col]]
    if (identical(col, "call")) {
      return(calls)
    }
    if (is.list(x)) {
      y <- vector("list", n)
    } else {
      y <- rep(if (is.logical(x)) FALSE else x[NA_integer_], n)
    }
    y[is_r] <- x[src[is_r]]
    native_value <- switch(col,
      namespace = ns,
      scope = ifelse(is.na(ns), NA_character_, "::"),
      visible = rep(TRUE, n),
      NULL
    )
    if (!is.null(native_value)) {
      y[!is_r] <- native_value[!is_r]
    }
    y
  })
  # Keep every attribute of the input (class, version, ...), with new row names.
  attrs <- attributes(trace)
  attrs$row.names <- .set_row_names(n)
  attributes(cols) <- attrs
  cols
}

native_row_namespace <- function(row) {
  ns <- paste0("/", basename(row$pathname))
  if (isTRUE(row$approximate)) paste0(ns, " (approx.)") else ns
}

# `fn()` for a native frame (rlang prefixes the namespace), with a srcref
# pointing at the frame's file and line when the debug info has them.
native_row_call <- function(row) {
  name <- if (is.na(row$func)) paste0("+", row$offset) else row$func
  cl <- as.call(list(as.symbol(name)))
  if (!is.na(row$file) && !is.na(row$line)) {
    col <- if (is.na(row$column)) 1L else row$column
    attr(cl, "srcref") <- srcref(
      srcfile(row$file),
      c(row$line, col, row$line, col, col, col, row$line, row$line)
    )
  }
  cl
}
