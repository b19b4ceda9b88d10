# Checking a winch_profile before it is printed, summarised, plotted or
# written: a profile is a plain list that users can edit or damage, and a
# damaged one must be refused with a classed error, never written out at any
# size or shown with frames silently dropped.

# The fields of a winch_profile, each with what it must be. Tables are data
# frames (lists of equal-length columns) with the columns the writers read
# (`profile_form`, R/profile.R).
profile_fields <- list(
  event = function(x) is.character(x) && length(x) == 1L && x %in% c("cpu", "elapsed", "alloc"),
  # (NA in a memory profile, whose samples are spaced by bytes.)
  interval = function(x) is.numeric(x) && length(x) == 1L && (is.na(x) || (is.finite(x) && x > 0)),
  start = function(x) (is.numeric(x) || inherits(x, "POSIXct")) && length(x) == 1L && is.finite(unclass(x)),
  duration = function(x) is.numeric(x) && length(x) == 1L && is.finite(x) && x >= 0,
  stacks = function(x) {
    is.list(x) && is.numeric(x$count) && is.list(x$locations) &&
      length(x$count) == length(x$locations) && all(vapply(x$locations, is.numeric, logical(1))) &&
      (is.null(x$thread) || (is.numeric(x$thread) && length(x$thread) == length(x$count)))
  },
  functions = function(x) is_table(x, names(profile_form$functions)),
  locations = function(x) is_table(x, names(profile_form$locations)),
  lines = function(x) is_table(x, names(profile_form$lines)),
  files = function(x) is.character(x),
  modules = function(x) is_table(x, names(profile_form$modules)),
  # Absent from profiles made before threads were sampled.
  threads = function(x) is.null(x) || is_table(x, names(profile_form$threads))
)

is_table <- function(x, columns) {
  is.data.frame(x) && all(columns %in% names(x))
}

# Checks `profile` whole: its class, every field's type, then (in the core)
# indices in range and counts that fit its duration. Returns it invisibly.
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
  check_result(rs_profile_check(profile_parts(profile)), call = call)
  invisible(profile)
}
