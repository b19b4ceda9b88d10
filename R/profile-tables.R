#' A profile as a table, and as collapsed stacks
#'
#' `as.data.frame()` gives one row per distinct stack of a profile, as
#' shown: its frames outermost first, joined by `;` (the labels of
#' [winch_write_rprof()]'s file: `f`, `f[for]`, `/module::function`,
#' `[thread_1]`), how many samples had it and the time they stand for.
#' Stacks that differ only in what the labels do not show (two addresses
#' in one function) are one row, per thread.
#' `winch_write_collapsed()` writes the same stacks in the collapsed-stack
#' text format, one `frame;frame;frame count` line per stack, which
#' `flamegraph.pl`, inferno, speedscope and many other viewers read.
#'
#' A `;` inside a label (rare: an R function named with one) is written as
#' `_`, so that frames stay apart.
#'
#' @param x,profile A `winch_profile`.
#' @param row.names,optional,... Not used (for compatibility with the
#'   generic): `row.names` must be `NULL` (rows are the stacks, heaviest
#'   first), `optional` `TRUE` or `FALSE`, and `...` may hold only
#'   `stringsAsFactors` (which [data.frame()] passes on; no column is a
#'   factor).
#' @param path The file to write: a regular file (replaced) or a new file in
#'   a directory that exists. Anything else (a directory, a FIFO, a device)
#'   is an error of class `winch_error_io`, and nothing is written.
#' @return `as.data.frame()`: a data frame with columns `stack` (character),
#'   `samples` (integer-valued double), `time` (seconds), `thread` (`"main"`,
#'   or `"thread N"` for a stack of another thread) and `process` (`"self"`,
#'   or `"process N"` for a stack of a child process: see `processes` in
#'   [winch_profile()]; `"process host:pid"` for a stack of a source of a
#'   merged profile: see [c()][c.winch_profile]), heaviest stack first.
#'   For a memory profile (`winch_profile(event = "alloc")`), instead of
#'   `time`: `alloc_bytes`, `alloc_count` (estimates of the bytes and
#'   allocations made there), `inuse_bytes` and `inuse_count` (of those
#'   still allocated when the profile ended), most bytes first; its
#'   collapsed stacks are weighted by `alloc_bytes`.
#'   `winch_write_collapsed()`: `path`, invisibly.
#' @seealso [winch_write_rprof()], [winch_write_pprof()].
#' @export
#' @examples
#' if (winch_available()) {
#'   p <- winch_profile(for (i in 1:100) sort(runif(1e4)), interval = 0.005)
#'   head(as.data.frame(p))
#'   out <- tempfile(fileext = ".folded")
#'   winch_write_collapsed(p, out)
#'   readLines(out, n = 3)
#' }
as.data.frame.winch_profile <- function(x, row.names = NULL, optional = FALSE, ...) {
  if (!is.null(row.names)) {
    abort_bad_argument("`row.names` must be `NULL`: the rows are the profile's stacks, heaviest first.")
  }
  check_flag(optional)
  check_dots_among(..., ignored = "stringsAsFactors", takes = "no argument of its own")
  p <- check_profile(x)
  stacks <- stack_functions(p)
  labels <- gsub(";", "_", p$functions$label, fixed = TRUE)
  stack <- vapply(stacks, function(f) paste(rev(labels[f]), collapse = ";"), "")
  th <- profile_threads(p)
  thread <- p$stacks$thread %||% rep(1L, length(stack))
  number <- th$number[thread]
  thread <- ifelse(is.na(number) | number == 0L, "main", paste("thread", number))
  pr <- profile_processes(p)
  process <- process_names(pr)[p$stacks$process %||% rep(1L, length(stack))]
  process[is.na(process)] <- "self"
  if (is_memory_profile(p)) {
    out <- merge_shown(stack, thread, process, cbind(
      alloc_bytes = as.double(p$stacks$alloc_bytes),
      alloc_count = as.double(p$stacks$alloc_count),
      inuse_bytes = as.double(p$stacks$inuse_bytes),
      inuse_count = as.double(p$stacks$inuse_count),
      samples = as.double(p$stacks$count)
    ))
    out <- out[order(-out$alloc_bytes, out$stack), , drop = FALSE]
    rownames(out) <- NULL
    return(out)
  }
  out <- merge_shown(stack, thread, process, cbind(samples = as.double(p$stacks$count)))
  out$time <- out$samples * p$interval
  out <- out[, c("stack", "samples", "time", "thread", "process")]
  out <- out[order(-out$samples, out$stack), , drop = FALSE]
  rownames(out) <- NULL
  out
}

# One row per stack as shown, per thread and process: stacks that differ
# only in what the table does not show (two addresses in one function, a
# line) are one row, their counts summed. `values`: a matrix, a column per
# count.
merge_shown <- function(stack, thread, process, values) {
  key <- paste(process, thread, stack, sep = "\r")
  first <- !duplicated(key)
  sums <- rowsum(values, factor(key, levels = unique(key)), reorder = FALSE)
  out <- data.frame(stack = stack[first], stringsAsFactors = FALSE)
  for (v in colnames(values)) out[[v]] <- unname(sums[, v])
  out$thread <- thread[first]
  out$process <- process[first]
  out
}

#' @rdname as.data.frame.winch_profile
#' @export
winch_write_collapsed <- function(profile, path) {
  check_required(profile, what = "a `winch_profile`")
  check_required(path, what = "the file to write")
  check_profile(profile)
  check_output_file(path)
  df <- as.data.frame(profile)
  # (A memory profile's weights are the bytes allocated.)
  df$weight <- if (is_memory_profile(profile)) df$alloc_bytes else df$samples
  df <- df[df$weight > 0, , drop = FALSE]
  # One line per distinct stack (two threads' stacks can come out alike).
  counts <- tapply(df$weight, df$stack, sum)
  lines <- sprintf("%s %s", names(counts), format(as.vector(counts), scientific = FALSE, trim = TRUE))
  # Looked at again just before R opens it (the table took time; R's
  # connections cannot open without blocking).
  check_output_file(path)
  check_writable(path)
  # (R reports a write that failed when the file is closed, as a warning:
  # the file is incomplete, which is an error here.)
  failed <- function(e) abort_io(sprintf("Cannot write `%s`: %s", path, conditionMessage(e)))
  tryCatch(writeLines(lines, path), error = failed, warning = failed)
  invisible(path)
}
