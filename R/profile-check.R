# Checking a winch_profile before it is printed, summarised, plotted or
# written: a profile is a plain list that users can edit or damage, and a
# damaged one must be refused with a classed error that names the field,
# never written out at any size, drawn until the C stack overflows, or
# shown with frames silently dropped. Here: each field's R type and shape;
# then every value against its meaning in the core (`rs_profile_check()`:
# src/rust/src/profile/read.rs and `Profile::check`), which reads the
# profile as the writers do.

# The fields of a winch_profile, each with what it must be. Tables are data
# frames (lists of equal-length columns) with the columns the writers read
# (`profile_form`, R/profile.R).
profile_fields <- list(
  event = function(x) is.character(x) && length(x) == 1L && x %in% c("cpu", "elapsed", "alloc"),
  # (Their values are the core's to judge, which says what is wrong; the
  # interval is NA in a memory profile, whose samples are spaced by bytes.)
  interval = function(x) is.numeric(x) && length(x) == 1L,
  start = function(x) (is.numeric(x) || inherits(x, "POSIXct")) && length(x) == 1L && !is.na(unclass(x)),
  duration = function(x) is.numeric(x) && length(x) == 1L && !is.na(x),
  stacks = function(x) {
    is.list(x) && is.numeric(x$count) && is.list(x$locations) &&
      length(x$count) == length(x$locations) && all(vapply(x$locations, is_index_vector, logical(1))) &&
      (is.null(x$thread) || (is_index_vector(x$thread) && length(x$thread) == length(x$count))) &&
      (is.null(x$process) || (is_index_vector(x$process) && length(x$process) == length(x$count)))
  },
  functions = function(x) is_table(x, names(profile_form$functions)),
  locations = function(x) is_table(x, names(profile_form$locations)),
  lines = function(x) is_table(x, names(profile_form$lines)),
  files = function(x) is.character(x),
  modules = function(x) is_table(x, names(profile_form$modules)),
  # Absent from profiles made before threads were sampled.
  threads = function(x) is.null(x) || is_table(x, names(profile_form$threads)),
  # Absent from profiles made before processes were sampled.
  processes = function(x) is.null(x) || is_table(x, names(profile_form$processes)),
  # Where it was made (absent from profiles made before winch kept it; NA
  # in a merged profile, made in several processes).
  host = function(x) is.null(x) || (is.character(x) && length(x) == 1L && (is.na(x) || nzchar(x))),
  pid = function(x) {
    is.null(x) || (is.numeric(x) && length(x) == 1L && (is.na(x) || (x >= 1 && x == trunc(x) && x <= 2^53)))
  },
  # Figures about the session (summary()'s): absent, they are NA there.
  stats = function(x) is.null(x) || is.list(x),
  options = function(x) is.null(x) || is.list(x)
)

is_table <- function(x, columns) {
  is.data.frame(x) && all(columns %in% names(x))
}

# Numbers (or all NA) that can stand for indices.
is_index_vector <- function(x) {
  is.numeric(x) || (is.logical(x) && all(is.na(x)))
}

# The position of the first element of `x` that is not a whole number an
# R integer holds (NA is allowed), or 0.
first_not_whole <- function(x) {
  if (!is.numeric(x)) {
    return(0L)
  }
  bad <- !is.na(x) & (x != trunc(x) | abs(x) > .Machine$integer.max)
  if (any(bad)) which(bad)[[1L]] else 0L
}

# The columns the writers read as integers (those `profile_form` takes with
# as.integer(), which would make 1.5 a 1, 1e10 an NA and "a" an NA): each
# numbers, each element a whole number, checked before they are taken.
check_whole_columns <- function(profile, call) {
  bad <- function(where, what) {
    abort_bad_argument(sprintf("`profile` is damaged: %s %s.", where, what), call = call)
  }
  for (table in names(profile_form)) {
    take <- profile_form[[table]]
    if (!is.list(take)) next
    for (column in names(take)) {
      x <- profile[[table]][[column]]
      path <- sprintf("`%s$%s`", table, column)
      if (identical(take[[column]], as.integer)) {
        if (!is.null(x) && !is_index_vector(x)) bad(path, "must be numbers (indices)")
        at <- first_not_whole(x)
        if (at > 0L) bad(sprintf("%s [%d]", path, at), sprintf("is %s, not a whole number", format(x[[at]], digits = 15L)))
      } else if (table == "stacks" && column == "locations") {
        for (i in seq_along(x)) {
          at <- first_not_whole(x[[i]])
          if (at > 0L) {
            bad(sprintf("%s [%d]", path, i), sprintf("holds %s, not a whole number (a location)", format(x[[i]][[at]], digits = 15L)))
          }
        }
      }
    }
  }
}

# A merged profile's `processes$source` (see c.winch_profile()): for each
# process, the number of the source it belongs to, a process of the table
# that is its own source.
check_process_sources <- function(processes, call) {
  source <- processes$source
  if (is.null(source)) {
    return(invisible())
  }
  bad <- function(at, what) {
    abort_bad_argument(sprintf("`profile` is damaged: `processes$source` [%d] %s.", at, what), call = call)
  }
  if (!is.numeric(source)) {
    bad(1L, "must be a number (a process's)")
  }
  at <- match(source, processes$number)
  for (i in seq_along(source)) {
    if (is.na(at[[i]])) bad(i, "is no process's number")
    if (!identical(as.double(source[[at[[i]]]]), as.double(processes$number[[at[[i]]]]))) {
      bad(i, "is a process that is not a source (its own `source` is another)")
    }
  }
  invisible()
}

# The figures of `stats`, each a single number that is not negative (NA:
# not measured). Those summary() shows are NA when a profile lacks them
# (the other-thread counts are 0 there: profiles made before threads were
# sampled lack them).
stats_figures <- c(
  "samples", "intervals", "truncated", "dropped", "outside", "distinct_stacks", "handler_total",
  "handler_median", "handler_p99", "memory", "references", "allocations", "sampled_allocations",
  "untracked", "gc_time", "gc_count"
)
stats_counts <- c(
  "thread_joined", "thread_alone", "thread_dropped", "forked", "collector_cpu", "worker_stops",
  "worker_stop_total", "worker_stop_median", "worker_stop_p99"
)
usage_figures <- c(
  "user", "system", "max_rss", "minor_faults", "major_faults", "block_input", "block_output",
  "voluntary_switches", "involuntary_switches"
)

is_figure <- function(x) is.numeric(x) && length(x) == 1L && (is.na(x) || x >= 0)

# `stats` checked field by field, and completed: a figure it lacks (or all
# of them: `stats = NULL`, a profile whose figures were dropped) is NA, so
# that summary() shows NA for it.
check_stats <- function(stats, call) {
  bad <- function(field, what) {
    abort_bad_argument(sprintf("`profile` is damaged: `stats$%s` %s.", field, what), call = call)
  }
  stats <- stats %||% list()
  for (f in stats_figures) {
    if (is.null(stats[[f]])) {
      stats[[f]] <- NA_real_
    } else if (!is_figure(stats[[f]])) {
      bad(f, "must be one number, not negative (or NA)")
    }
  }
  for (f in stats_counts) {
    if (!is.null(stats[[f]]) && !is_figure(stats[[f]])) {
      bad(f, "must be one number, not negative (or NA)")
    }
  }
  if (!is.null(stats$labels_full) && !(is.logical(stats$labels_full) && length(stats$labels_full) == 1L)) {
    bad("labels_full", "must be TRUE, FALSE or NA")
  }
  usage <- stats$usage %||% list()
  if (!is.list(usage)) {
    bad("usage", "must be a list of figures")
  }
  for (f in usage_figures) {
    if (is.null(usage[[f]])) {
      usage[[f]] <- NA_real_
    } else if (!is_figure(usage[[f]])) {
      bad(paste0("usage$", f), "must be one number, not negative (or NA)")
    }
  }
  stats$usage <- usage
  heap <- stats$r_heap
  if (!is.null(heap)) {
    ok <- is.list(heap) && all(vapply(c("before", "after", "peak"), function(f) is_figure(heap[[f]]), NA))
    if (!ok) bad("r_heap", "must be a list of `before`, `after` and `peak` (bytes)")
  }
  stats
}

# Checks `profile` whole: its class, every field's type, whole numbers
# where indices and counts go, its figures, then (in the core) every value
# against its meaning: indices in range, counts that fit its duration, an
# interval the profiler samples at, stacks no deeper than a sample, lines,
# bytes, modules and threads that say what they mean. Returns it
# invisibly, with `stats` completed (figures it lacks as NA).
check_profile <- function(profile, call = rlang::caller_env()) {
  if (!inherits(profile, "winch_profile") || !is.list(profile)) {
    abort_bad_argument("`profile` must be a `winch_profile` (from `winch_profile()` or `winch_rprof()`).",
      call = call
    )
  }
  for (field in names(profile_fields)) {
    if (!isTRUE(profile_fields[[field]](profile[[field]]))) {
      abort_bad_argument(sprintf("`profile` is damaged: its field `%s` is missing or invalid.", field), call = call)
    }
  }
  check_whole_columns(profile, call)
  check_process_sources(profile$processes, call)
  stats <- check_stats(profile$stats, call)
  check_result(rs_profile_check(profile_parts(profile)), call = call)
  profile$stats <- stats
  invisible(profile)
}
