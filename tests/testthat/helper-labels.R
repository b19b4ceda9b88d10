# Readable summaries of joint traces for assertions.

# One label per entry of a winch_calls object: the function name of R calls
# ("<inline>" for anonymous functions) and "/module::func" for native frames.
joint_labels <- function(x) {
  native <- attr(x, "native")
  vapply(seq_along(x), function(i) {
    cl <- x[[i]]
    if (native[[i]]) {
      head <- cl[[1L]]
      paste0(as.character(head[[2L]]), "::", as.character(head[[3L]]))
    } else {
      head <- cl[[1L]]
      if (is.symbol(head)) as.character(head) else "<inline>"
    }
  }, "")
}

# The labels from the first R call named `from` on (drops testthat's frames).
labels_from <- function(labels, from) {
  start <- match(from, labels)
  if (is.na(start)) {
    stop("`", from, "` is not in: ", paste(labels, collapse = ", "))
  }
  labels[seq(start, length(labels))]
}

# Labels of an rlang trace: R calls by function name, native rows as
# "/module::func".
trace_labels <- function(trace) {
  vapply(seq_len(nrow(trace)), function(i) {
    cl <- trace$call[[i]]
    ns <- trace$namespace[[i]]
    head <- if (is.call(cl)) cl[[1L]] else NULL
    name <- if (is.symbol(head)) {
      as.character(head)
    } else if (is.call(head) && identical(head[[1L]], quote(`::`))) {
      paste(deparse(head), collapse = "")
    } else {
      "<inline>"
    }
    if (!is.na(ns) && startsWith(ns, "/")) paste0(ns, "::", name) else name
  }, "")
}
