# Memory profiles (winch_profile(event = "alloc")): their values are bytes
# and allocations, not samples of time. The methods of R/profile-methods.R
# and R/profile-tables.R call these for such a profile.

is_memory_profile <- function(p) identical(p$event, "alloc")

# Each stack's value: bytes allocated ("alloc") or still allocated at the
# end ("inuse").
stack_bytes <- function(p, what = c("alloc", "inuse")) {
  what <- match.arg(what)
  as.double(p$stacks[[paste0(what, "_bytes")]] %||% rep(0, length(p$stacks$count)))
}

# R's heap, in bytes, as gc() tells it (a full collection first): cells
# in use (a cons cell or vector header is 56 bytes on 64-bit platforms),
# vector data in use (8 bytes a cell), and the most held at any
# collection since the last reset. `reset = TRUE` starts that maximum
# anew.
r_heap <- function(reset = FALSE) {
  g <- gc(reset = reset, full = TRUE)
  size <- c(Ncells = if (.Machine$sizeof.pointer == 8L) 56 else 28, Vcells = 8)
  c(
    used = sum(g[c("Ncells", "Vcells"), "used"] * size),
    max_used = sum(g[c("Ncells", "Vcells"), "max used"] * size)
  )
}

# What R's heap held before the run, after it (its value included), and
# at most at a collection in between.
r_heap_change <- function(before, after) {
  list(before = before[["used"]], after = after[["used"]], peak = max(after[["max_used"]], after[["used"]]))
}

format_r_heap <- function(h) {
  if (is.null(h)) {
    return(NULL)
  }
  sprintf(
    "R's heap (gc()): %s before, %s after, at most %s at a collection during the run",
    format_bytes(h$before), format_bytes(h$after), format_bytes(h$peak)
  )
}

format_bytes <- function(x) {
  unit <- function(v) {
    if (is.na(v)) {
      return("NA")
    }
    a <- abs(v)
    if (a < 1024) sprintf("%.0f B", v) else if (a < 1024^2) sprintf("%.1f KiB", v / 1024) else if (a < 1024^3) {
      sprintf("%.1f MiB", v / 1024^2)
    } else {
      sprintf("%.2f GiB", v / 1024^3)
    }
  }
  vapply(x, unit, "")
}

# Bytes in one unit, the one that suits the largest, right-aligned.
format_bytes_column <- function(x) {
  top <- suppressWarnings(max(abs(x), na.rm = TRUE))
  if (!is.finite(top)) {
    return(rep("NA", length(x)))
  }
  unit <- if (top >= 1024^3) list(1024^3, "GiB", 2L) else if (top >= 1024^2) list(1024^2, "MiB", 1L) else
    if (top >= 1024) list(1024, "KiB", 1L) else list(1, "B", 0L)
  out <- ifelse(is.na(x), "NA", paste(formatC(x / unit[[1L]], format = "f", digits = unit[[3L]]), unit[[2L]]))
  formatC(out, width = max(nchar(out)))
}

# Bytes allocated (self: in the innermost frame; total: under it) and
# still allocated at the end (total) per function.
by_function_bytes <- function(p) {
  stacks <- stack_functions(p)
  alloc <- function_counts(p, stacks, stack_bytes(p, "alloc"))
  inuse <- function_counts(p, stacks, stack_bytes(p, "inuse"))
  f <- p$functions
  data.frame(
    label = f$label,
    kind = f$kind,
    module = ifelse(is.na(f$module), NA_character_, basename(p$modules$path[f$module])),
    self = alloc$self,
    total = alloc$total,
    inuse = inuse$total,
    stringsAsFactors = FALSE
  )
}

format_bytes_table <- function(tab, total) {
  out <- format_time_table(tab, total, format_bytes_column)
  out$inuse <- format_bytes_column(tab$inuse)
  out
}

memory_header <- function(p) {
  sprintf(
    "<winch_profile> %s samples of allocations (one per %s on average): %s allocated in %s allocations, %s still allocated at the end, over %s",
    format(sum(p$stacks$count), big.mark = ","), format_bytes(p$sample_bytes),
    format_bytes(sum(stack_bytes(p, "alloc"))),
    format(round(sum(as.double(p$stacks$alloc_count))), big.mark = ",", scientific = FALSE),
    format_bytes(sum(stack_bytes(p, "inuse"))), format_seconds(p$duration)
  )
}

# What a memory profile says of the processes it forked: their
# allocations are their own, not sampled.
forked_note <- function(forked) {
  forked <- forked %||% 0
  if (is.na(forked) || forked == 0) {
    return(character())
  }
  sprintf(
    "Not in this profile: the allocations of the %s child process%s forked while it ran (a memory profile samples this process only).",
    format(forked, big.mark = ","), if (forked == 1) "" else "es"
  )
}

print_memory_profile <- function(x, n, width) {
  cat(memory_header(x), "\n", sep = "")
  total <- sum(stack_bytes(x, "alloc"))
  if (total > 0) {
    tab <- by_function_bytes(x)
    tab <- utils::head(tab[order(-tab$self, -tab$total), ], n)
    cat("Functions by bytes allocated (self: in the function itself; inuse: under it, still allocated at the end):\n")
    tab[[1L]] <- shorten(tab[[1L]], width)
    print(format_bytes_table(tab, total), row.names = FALSE, right = FALSE)
  }
  heap <- format_r_heap(x$stats$r_heap)
  if (!is.null(heap)) cat(heap, "\n", sep = "")
  forked <- forked_note(x$stats$forked)
  if (length(forked)) cat(forked, "\n", sep = "")
  cat("summary() for modules and the profiler's figures; plot() for a flame graph of bytes.\n")
  invisible(x)
}

summary_memory_profile <- function(p) {
  s <- p$stats
  fun <- by_function_bytes(p)
  structure(
    list(
      event = "alloc",
      sample_bytes = p$sample_bytes,
      duration = p$duration,
      samples = sum(p$stacks$count),
      alloc_bytes = sum(stack_bytes(p, "alloc")),
      inuse_bytes = sum(stack_bytes(p, "inuse")),
      allocations = s$allocations,
      sampled_allocations = s$sampled_allocations,
      untracked = s$untracked,
      forked = s$forked %||% 0,
      dropped = s$dropped,
      truncated = s$truncated,
      by_function = fun[order(-fun$self, -fun$total), ],
      by_module = by_module_table(p, stack_bytes(p, "alloc"), 1),
      largest_inuse = largest_inuse(p),
      r_heap = s$r_heap,
      usage = c(s$usage, list(gc_count = s$gc_count, gc_time = s$gc_time)),
      cost = list(handler_total = s$handler_total, handler_median = s$handler_median, handler_p99 = s$handler_p99)
    ),
    class = "summary.winch_profile"
  )
}

# The stacks holding the most bytes still allocated at the end (at most
# `n`, those holding any).
largest_inuse <- function(p, n = 5L) {
  df <- as.data.frame(p)
  df <- df[df$inuse_bytes > 0, c("stack", "inuse_bytes", "inuse_count", "thread"), drop = FALSE]
  df <- utils::head(df[order(-df$inuse_bytes), , drop = FALSE], n)
  rownames(df) <- NULL
  df
}

print_memory_summary <- function(x, n) {
  cat(sprintf(
    "%s samples of allocations (one per %s on average) over %s: %s allocated, %s still allocated at the end\n",
    format(x$samples, big.mark = ","), format_bytes(x$sample_bytes), format_seconds(x$duration),
    format_bytes(x$alloc_bytes), format_bytes(x$inuse_bytes)
  ))
  cat(sprintf(
    "Allocations seen: %s (%s sampled); sampled blocks not followed to their free: %s; samples lost: %s; truncated stacks: %s\n",
    format(x$allocations, big.mark = ",", scientific = FALSE), format(x$sampled_allocations, big.mark = ","),
    format(x$untracked, big.mark = ","), format(x$dropped, big.mark = ","), format(x$truncated, big.mark = ",")
  ))
  cat("\nBy function:\n")
  print(format_bytes_table(utils::head(x$by_function, n), x$alloc_bytes), row.names = FALSE, right = FALSE)
  mods <- x$by_module[order(-x$by_module$total), ]
  mods <- mods[mods$total > 0, , drop = FALSE]
  if (nrow(mods)) {
    cat("\nBy native module (bytes allocated in it, and under it):\n")
    out <- data.frame(
      module = basename(mods$module), self = format_bytes_column(mods$self),
      total = format_bytes_column(mods$total), stringsAsFactors = FALSE
    )
    print(out, row.names = FALSE, right = FALSE)
  }
  big <- x$largest_inuse
  if (!is.null(big) && nrow(big)) {
    cat("\nLargest still allocated at the end (stack, outermost first):\n")
    out <- data.frame(
      inuse = format_bytes_column(big$inuse_bytes), count = format(round(big$inuse_count), big.mark = ","),
      stack = shorten(big$stack, max(30L, getOption("width", 80L) - 25L)),
      stringsAsFactors = FALSE
    )
    print(out, row.names = FALSE, right = FALSE)
  }
  heap <- format_r_heap(x$r_heap)
  if (!is.null(heap)) cat("\n", heap, "\n", sep = "")
  forked <- forked_note(x$forked)
  if (length(forked)) cat("\n", forked, "\n", sep = "")
  u <- x$usage
  cat(sprintf(
    "\nResource use over the run: max RSS %.1f MB; R garbage collections: %d, %s\n",
    u$max_rss / 2^20, as.integer(u$gc_count), format_seconds(u$gc_time)
  ))
  k <- x$cost
  cat(sprintf(
    "Profiler's own cost: %s taking samples, %s median and %s 99th percentile per sample\n",
    format_seconds(k$handler_total), format_seconds(k$handler_median), format_seconds(k$handler_p99)
  ))
  invisible(x)
}
