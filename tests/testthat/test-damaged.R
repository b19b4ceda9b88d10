skip_if_not(winch_available(), "native unwinding is not available on this platform")

# Damaged profiles (issue 33 item 8): a real profile damaged field by field
# is refused by every method that takes one, with an error of class
# winch_error_bad_argument that names the field, quickly, and with nothing
# written; a profile without its figures (`stats`) is still summarised.

profile_fixture()
burn_workload()

# The methods that take a profile, each called on `p` (files written to
# `out`; plots to a null device).
profile_methods <- list(
  print = function(p, out) print(p),
  summary = function(p, out) print(summary(p)),
  plot = function(p, out) {
    grDevices::pdf(NULL)
    on.exit(grDevices::dev.off())
    plot(p)
  },
  as.data.frame = function(p, out) as.data.frame(p),
  winch_write_rprof = function(p, out) winch_write_rprof(p, out),
  winch_write_pprof = function(p, out) winch_write_pprof(p, out),
  winch_write_collapsed = function(p, out) winch_write_collapsed(p, out)
)

# Runs `expr` with R's elapsed time limited to `seconds` (an R loop over a
# damaged profile's frames would be stopped there) and checks it took less.
quickly <- function(expr, seconds = 20) {
  setTimeLimit(elapsed = seconds, transient = TRUE)
  on.exit(setTimeLimit(elapsed = Inf), add = TRUE)
  t0 <- proc.time()[["elapsed"]]
  res <- tryCatch(expr, error = function(e) e)
  expect_lt(proc.time()[["elapsed"]] - t0, seconds)
  res
}

# Every method refuses `bad` with a classed error matching `message` (the
# field named), and writes nothing.
expect_refused <- function(bad, message, fixed, what, methods = names(profile_methods)) {
  for (m in methods) {
    out <- tempfile("damaged-")
    err <- quickly(profile_methods[[m]](bad, out))
    label <- paste(what, "by", m)
    expect_s3_class(err, "winch_error_bad_argument")
    if (inherits(err, "error")) {
      expect_match(conditionMessage(err), message, fixed = fixed, label = label)
    }
    expect_false(file.exists(out), label = label)
    unlink(out)
  }
}

# A damage: a function of the profile, and the message that names the field
# (a fixed string, or a regular expression).
damage <- function(f, message, fixed = TRUE) list(f = f, message = message, fixed = fixed)

time_damages <- list(
  # The issue's cases.
  deep_stack = damage(function(p) {
    p$stacks$locations[[1L]] <- rep(p$stacks$locations[[1L]][[1L]], 1e6)
    p
  }, "`stacks$locations` [1] has 1000000 frames, more than a sample can have"),
  no_duration = damage(function(p) {
    p$duration <- 0
    p
  }, "`duration` must be a positive number of seconds"),
  nanosecond_duration = damage(function(p) {
    p$duration <- 1e-9
    p
  }, "`stacks\\$count` counts [0-9]+ samples, more than [0-9]+ of 0.002 s each fit in its 0.000000001 s", fixed = FALSE),
  thread_na = damage(function(p) {
    p$stacks$thread[[1L]] <- NA
    p
  }, "`stacks$thread` [1] is NA"),
  negative_line = damage(function(p) {
    p$lines$line[[1L]] <- -7L
    p
  }, "`lines$line` [1] is -7: source lines count from 1"),
  fractional_location = damage(function(p) {
    p$stacks$locations[[1L]][[1L]] <- 1.5
    p
  }, "`stacks$locations` [1] holds 1.5, not a whole number"),
  huge_interval = damage(function(p) {
    p$interval <- 1e308
    p
  }, "`interval` must be between 0.001 and 3600 seconds, as winch_profile() samples (it is 1e+308)"),
  module_start_above_limit = damage(function(p) {
    p$modules$start[[1L]] <- "0x7fffffffffff"
    p$modules$limit[[1L]] <- "0x1000"
    p
  }, "`modules$start` [1] is 0x7fffffffffff, not below its limit 0x1000"),
  # The other fields.
  event = damage(function(p) {
    p$event <- "bogus"
    p
  }, "field `event`"),
  interval_na = damage(function(p) {
    p$interval <- NA_real_
    p
  }, "`interval` must be a single number"),
  interval_zero = damage(function(p) {
    p$interval <- 0
    p
  }, "`interval` must be between 0.001 and 3600 seconds"),
  interval_too_short = damage(function(p) {
    p$interval <- 1e-6
    p
  }, "`interval` must be between 0.001 and 3600 seconds"),
  interval_negative = damage(function(p) {
    p$interval <- -1
    p
  }, "`interval` must be between"),
  start_negative = damage(function(p) {
    p$start <- -5
    p
  }, "`start` is -5 seconds"),
  start_na = damage(function(p) {
    p$start <- NA_real_
    p
  }, "field `start`"),
  duration_negative = damage(function(p) {
    p$duration <- -1
    p
  }, "`duration` is -1 seconds"),
  duration_infinite = damage(function(p) {
    p$duration <- Inf
    p
  }, "`duration` is Inf seconds"),
  count_fractional = damage(function(p) {
    p$stacks$count[[1L]] <- 1.5
    p
  }, "`stacks$count` [1] is 1.5: it must be a whole number"),
  count_negative = damage(function(p) {
    p$stacks$count[[1L]] <- -1
    p
  }, "`stacks$count` [1] is -1"),
  count_huge = damage(function(p) {
    p$stacks$count[[1L]] <- 1e15
    p
  }, "`stacks\\$count` counts [0-9]+ samples", fixed = FALSE),
  thread_out_of_range = damage(function(p) {
    p$stacks$thread[[1L]] <- 99L
    p
  }, "`stacks\\$thread` \\[1\\] is 99, out of range \\(1 to [0-9]+\\)", fixed = FALSE),
  location_out_of_range = damage(function(p) {
    p$stacks$locations[[1L]][[1L]] <- nrow(p$locations) + 1L
    p
  }, "`stacks\\$locations` \\[1\\] is [0-9]+, out of range", fixed = FALSE),
  label_na = damage(function(p) {
    p$functions$label[[1L]] <- NA
    p
  }, "`functions$label` [1] is NA"),
  kind = damage(function(p) {
    p$functions$kind[[1L]] <- "bogus"
    p
  }, "`functions$kind` [1] is not one of"),
  function_module_fractional = damage(function(p) {
    p$functions$module[[which(!is.na(p$functions$module))[[1L]]]] <- 1.5
    p
  }, "`functions\\$module` \\[[0-9]+\\] is 1.5, not a whole number", fixed = FALSE),
  function_module_text = damage(function(p) {
    p$functions$module <- as.character(p$functions$module)
    p
  }, "`functions$module` must be numbers"),
  address = damage(function(p) {
    p$locations$address[[1L]] <- "zz"
    p
  }, "`locations$address` [1] is not an address"),
  line_function_zero = damage(function(p) {
    p$lines$`function`[[1L]] <- 0L
    p
  }, "`lines$function` [1] is 0, out of range"),
  line_location_na = damage(function(p) {
    p$lines$location[[1L]] <- NA
    p
  }, "`lines$location` [1] is NA"),
  no_files = damage(function(p) {
    p$files <- NULL
    p
  }, "field `files`"),
  module_path_na = damage(function(p) {
    p$modules$path[[1L]] <- NA
    p
  }, "`modules$path` [1] is NA"),
  module_limit = damage(function(p) {
    p$modules$limit[[1L]] <- "x"
    p
  }, "`modules$limit` [1] is not an address"),
  thread_number_na = damage(function(p) {
    p$threads$number[[1L]] <- NA
    p
  }, "`threads$number` [1] must be a whole number from 0"),
  thread_number_twice = damage(function(p) {
    p$threads <- rbind(p$threads[1L, ], p$threads)
    p
  }, "`threads$number` [2] is 0, a number another thread has"),
  thread_id = damage(function(p) {
    p$threads$tid[[1L]] <- 1.5
    p
  }, "`threads$tid` [1] is 1.5"),
  thread_cpu = damage(function(p) {
    p$threads$cpu[[1L]] <- -1
    p
  }, "`threads$cpu` [1] is -1"),
  labels_too_long = damage(function(p) {
    loc <- p$stacks$locations[[1L]][[1L]]
    p$functions$label[p$lines$`function`[p$lines$location == loc]] <- strrep("x", 2^20)
    p$stacks$locations[[1L]] <- rep(loc, 20L)
    p
  }, "`stacks\\$locations` \\[1\\] would take [0-9]+ bytes per sample in Rprof's format", fixed = FALSE),
  stats_figure = damage(function(p) {
    p$stats$samples <- "many"
    p
  }, "`stats$samples` must be one number"),
  stats_usage = damage(function(p) {
    p$stats$usage$user <- -1
    p
  }, "`stats$usage$user` must be one number"),
  stats_not_a_list = damage(function(p) {
    p$stats <- "x"
    p
  }, "field `stats`")
)

test_that("a time profile damaged field by field is refused by every method, naming the field", {
  p <- winch_profile(outer(), interval = 0.002)
  expect_gt(nrow(p$modules), 0L)
  # Undamaged, every method works.
  for (m in names(profile_methods)) {
    out <- tempfile()
    expect_false(inherits(quickly(capture.output(profile_methods[[m]](p, out))), "error"), label = m)
    unlink(out)
  }
  for (what in names(time_damages)) {
    d <- time_damages[[what]]
    expect_refused(d$f(p), d$message, d$fixed, what)
  }
})

test_that("the issue's 1e6-frame stack is refused at once, before any file is written or frame drawn", {
  p <- winch_profile(outer(), interval = 0.002)
  bad <- time_damages$deep_stack$f(p)
  out <- tempfile()
  t0 <- proc.time()[["elapsed"]]
  expect_error(winch_write_rprof(bad, out), "1000000 frames", class = "winch_error_bad_argument")
  expect_false(file.exists(out))
  grDevices::pdf(NULL)
  expect_error(plot(bad), "1000000 frames", class = "winch_error_bad_argument")
  grDevices::dev.off()
  expect_lt(proc.time()[["elapsed"]] - t0, 10)
})

test_that("a stack as deep as a sample can be is drawn without recursion and written at its size", {
  p <- winch_profile(outer(), interval = 0.002)
  # One sample of 40,000 frames (below the 40,976 a sample can have): the
  # flame graph's layout once recursed per frame.
  deep <- p
  deep$stacks <- lapply(p$stacks, function(column) column[1L])
  deep$stacks$count <- 1
  deep$stacks$locations[[1L]] <- rep(p$stacks$locations[[1L]], length.out = 40000L)
  grDevices::pdf(NULL)
  res <- quickly(plot(deep))
  grDevices::dev.off()
  expect_false(inherits(res, "error"), info = if (inherits(res, "error")) conditionMessage(res))
  df <- as.data.frame(deep)
  expect_identical(max(lengths(strsplit(df$stack, ";", fixed = TRUE))), 40000L)
  # The Rprof file: its one sample's line, as long as its stack.
  out <- tempfile()
  winch_write_rprof(deep, out)
  longest <- max(nchar(deep$functions$label))
  expect_lt(file.size(out), 40000 * (longest + 3) * 4 + 1000)
  expect_gt(file.size(out), 40000 * 3)
  unlink(out)
})

test_that("a memory profile damaged field by field is refused, naming the field", {
  m <- winch_profile(for (i in 1:50) x <- runif(1e4), event = "alloc", sample_bytes = 4096)
  skip_if(!length(m$stacks$count), "no allocation was sampled")
  methods <- setdiff(names(profile_methods), "winch_write_rprof") # (Rprof's format holds time)
  memory_damages <- list(
    inuse_above_alloc = damage(function(m) {
      m$stacks$inuse_bytes[[1L]] <- m$stacks$alloc_bytes[[1L]] + 1
      m
    }, "`stacks\\$inuse_bytes` \\[1\\] is [0-9]+, more than the [0-9]+ bytes allocated there", fixed = FALSE),
    inuse_count_above_alloc = damage(function(m) {
      m$stacks$inuse_count[[1L]] <- m$stacks$alloc_count[[1L]] + 1
      m
    }, "`stacks\\$inuse_count` \\[1\\] is [0-9]+, more than the [0-9]+ allocations", fixed = FALSE),
    negative_bytes = damage(function(m) {
      m$stacks$alloc_bytes[[1L]] <- -1
      m
    }, "`stacks$alloc_bytes` [1] is -1: it must be a whole number"),
    sample_bytes_zero = damage(function(m) {
      m$sample_bytes <- 0
      m
    }, "`sample_bytes` must be between 1 and"),
    sample_bytes_huge = damage(function(m) {
      m$sample_bytes <- 1e16
      m
    }, "`sample_bytes` must be between 1 and"),
    no_duration = damage(function(m) {
      m$duration <- 0
      m
    }, "`duration` must be a positive number of seconds")
  )
  for (what in names(memory_damages)) {
    d <- memory_damages[[what]]
    expect_refused(d$f(m), d$message, d$fixed, what, methods)
  }
})

test_that("a profile without its figures (stats = NULL) is summarised with NA for them", {
  p <- winch_profile(outer(), interval = 0.002)
  p$stats <- NULL
  s <- summary(p)
  expect_s3_class(s, "summary.winch_profile")
  expect_identical(s$handler_runs, NA_real_)
  expect_identical(s$usage$user, NA_real_)
  out <- capture.output(print(s))
  expect_match(out[[1L]], "NA with a truncated stack, NA dropped, NA distinct stacks", fixed = TRUE)
  expect_false(any(grepl("NULL", out, fixed = TRUE)))
  expect_output(print(p), "winch_profile")
  m <- winch_profile(for (i in 1:20) x <- runif(1e4), event = "alloc", sample_bytes = 4096)
  m$stats <- NULL
  out <- capture.output(print(summary(m)))
  expect_match(out[[2L]], "^Allocations seen: NA \\(NA sampled\\)")
  expect_false(any(grepl("NULL", out, fixed = TRUE)))
})
