skip_if_not(winch_available(), "native unwinding is not available on this platform")

# The writers: Rprof files read by summaryRprof() and profvis, pprof files
# read by go tool pprof, and the profile as they read it.

profile_fixture()

burn_workload()

# Go's pprof. Recent Go releases build pprof on first use (about 20 s on
# 2 cores) into Go's build cache: the default cache under HOME when HOME is
# writable (as go would use it anyway), else one temporary cache for this
# session (R CMD check may run with HOME unset or read-only).
go_env <- local({
  env <- NULL
  function() {
    if (is.null(env)) {
      home <- Sys.getenv("HOME")
      env <<- "GOTOOLCHAIN=local"
      if (!nzchar(home) || file.access(home, 2L) != 0L) {
        home <- tempfile("winch-go-home-")
        dir.create(home)
        env <<- c(env, paste0("HOME=", home), paste0("GOCACHE=", file.path(home, "cache")),
          paste0("GOPATH=", file.path(home, "go")))
      }
    }
    env
  }
})
run_pprof <- function(args) {
  out <- suppressWarnings(system2("go", c("tool", "pprof", args), stdout = TRUE, stderr = TRUE, env = go_env()))
  structure(out, status = attr(out, "status") %||% 0L)
}

test_that("summaryRprof() and profvis read the Rprof file", {
  out <- tempfile(fileext = ".out")
  p <- winch_profile(outer(), file = out, interval = 0.002)
  lines <- readLines(out)
  expect_identical(lines[[1L]], "sample.interval=2000")
  # One line per sample with frames (R writes no line for an empty sample).
  with_frames <- sum(p$stacks$count[lengths(p$stacks$locations) > 0L])
  expect_length(lines, 1L + with_frames)

  s <- summaryRprof(out)
  expect_equal(s$sampling.time, with_frames * p$interval)
  total <- stats::setNames(s$by.total$total.time, gsub('"', "", rownames(s$by.total), fixed = TRUE))
  expect_true(all(c(A, B, CALL, "r_a", "r_b", "cb", "outer") %in% names(total)))
  # Nearly every sample is under `outer` (a sample may land in the profiler
  # starting or stopping: see "the profiler's own frames" below).
  expect_gte(total[["outer"]], 0.95 * s$sampling.time)
  expect_equal(total[[A]], seconds_in(p, A))
  expect_equal(total[[B]], seconds_in(p, B))
  expect_equal(total[["cb"]], seconds_in(p, "cb"))

  skip_if_not_installed("profvis")
  parse_rprof <- getFromNamespace("parse_rprof", "profvis")
  pv <- parse_rprof(out)
  expect_equal(pv$interval, 2)
  expect_identical(max(pv$prof$time), length(lines) - 1L)
  expect_true(all(c(A, B, CALL, "r_a", "r_b", "cb", "outer") %in% pv$prof$label))
  # profvis's depth counts from the outermost frame: `outer` is depth 1 in
  # (nearly) every sample.
  expect_gte(mean(pv$prof$label[pv$prof$depth == 1L] == "outer"), 0.95)
})

test_that("go tool pprof reads the pprof file, with R and native frames in one call graph", {
  skip_if(!nzchar(Sys.which("go")), "go is not on the PATH (Debian: golang-go)")
  p <- winch_profile(outer(), interval = 0.002)
  pb <- tempfile(fileext = ".pb.gz")
  res <- withVisible(winch_write_pprof(p, pb))
  expect_identical(res$value, pb)
  expect_false(res$visible)

  top <- run_pprof(c("-top", pb))
  expect_identical(attr(top, "status"), 0L, info = paste(top, collapse = "\n"))
  fn <- function(x) sub("^.* ", "", trimws(x))
  rows <- fn(top[grepl("%", top, fixed = TRUE) & !grepl("total", top, fixed = TRUE)])
  expect_true(all(c("burn_a", "burn_b", "burn_call", "r_a", "r_b", "cb", "outer") %in% rows))
  expect_true(any(grepl("Type: cpu", top, fixed = TRUE)))
  # The profiled program is R's executable, not the first library sampled.
  expect_true(any(top == "File: R"), info = paste(head(top, 3), collapse = "\n"))

  traces <- run_pprof(c("-traces", pb))
  expect_identical(attr(traces, "status"), 0L, info = paste(traces, collapse = "\n"))
  # Traces are blocks separated by lines of dashes; the first line of a
  # block has the time and the leaf, the next ones the callers.
  sep <- grepl("^-+\\+-+$", traces)
  block <- cumsum(sep)
  # Each block starts with the sample's labels (`thread:`, `tid:`,
  # `process:`, `pid:`).
  label <- grepl("^\\s*(thread|tid|process|pid):", traces)
  stacks <- lapply(split(traces[!sep & !label], block[!sep & !label])[-1L], fn)
  stacks <- unique(vapply(stacks, paste, "", collapse = " < "))
  expect_true(path("burn_b", "r_b", "cb", "burn_call", "outer") %in% stacks)
  expect_true(path("burn_a", "r_a", "outer") %in% stacks)
})

# The writers read the profile from a named list (profile_parts(), read by
# from_r() in src/rust/src/profile.rs): every field by its name.
test_that("the writers read the profile's fields by name: order is free, a missing field is a clear error", {
  p <- winch_profile(outer(), interval = 0.002)
  write <- function(parts, format = "rprof") {
    out <- tempfile()
    winch:::check_result(winch:::rs_profile_write(parts, out, format, FALSE))
    readBin(out, "raw", file.size(out))
  }
  parts <- winch:::profile_parts(p)
  expect_named(parts, c(
    "event", "interval", "sample_bytes", "start", "duration", "functions", "locations", "lines",
    "stacks", "threads", "processes", "files", "modules"
  ))
  # The same bytes whatever the order of the fields (and of the columns).
  shuffled <- rev(parts)
  shuffled$functions <- rev(shuffled$functions)
  shuffled$modules <- rev(shuffled$modules)
  for (format in c("rprof", "pprof")) {
    expect_identical(write(shuffled, format), write(parts, format))
  }
  # A field that is missing, misnamed or not where it belongs: an error of
  # class winch_error_bad_argument that names it, and nothing is written.
  expect_missing <- function(parts, field) {
    out <- tempfile()
    err <- tryCatch(
      winch:::check_result(winch:::rs_profile_write(parts, out, "rprof", FALSE)),
      error = function(e) e
    )
    expect_s3_class(err, "winch_error_bad_argument")
    expect_identical(conditionMessage(err), sprintf("`profile` has no field `%s`", field))
    expect_false(file.exists(out))
  }
  no_event <- parts
  no_event$event <- NULL
  expect_missing(no_event, "event")
  misnamed <- parts
  names(misnamed)[names(misnamed) == "stacks"] <- "stack"
  expect_missing(misnamed, "stacks")
  no_column <- parts
  no_column$lines$`function` <- NULL
  expect_missing(no_column, "lines$function")
  unnamed <- unname(parts)
  expect_missing(unnamed, "event")
  # A field of the wrong type names its path too.
  wrong <- parts
  wrong$functions$label <- 1
  expect_error(write(wrong), "`functions$label` must be a character vector", fixed = TRUE,
    class = "winch_error_bad_argument"
  )
  flat <- parts
  flat$modules <- "x"
  expect_error(write(flat), "`modules` must be a list", fixed = TRUE, class = "winch_error_bad_argument")
  expect_error(write(list()), "`profile` has no field `event`", fixed = TRUE, class = "winch_error_bad_argument")
  expect_error(write(1), "`profile` must be a list", fixed = TRUE, class = "winch_error_bad_argument")
})

# The profile's R form is described once (src/rust/src/profile_form.rs):
# the profiler makes it, the writers read it back, and profile_parts()
# follows it with its list `profile_form` (R/profile.R).
test_that("the profiler, profile_parts() and the writers follow one description of the profile's R form", {
  form <- profile_form_description()
  expect_named(form, c("path", "type", "optional", "read_back", "holds"))
  expect_true(all(nzchar(form$holds)))
  # profile_form names the parts the writers read back, in their order.
  r_form <- winch:::profile_form
  r_paths <- unlist(lapply(names(r_form), function(part) {
    c(part, if (is.list(r_form[[part]])) paste0(part, "$", names(r_form[[part]])))
  }))
  expect_identical(r_paths, form$path[form$read_back])
  # profile_parts() gives the parts the description says, of its types:
  # every one that is not optional, and of the optional ones those a CPU
  # profile of every process has (not the memory profiles' columns).
  p <- winch_profile(outer(), interval = 0.002)
  types <- part_types(winch:::profile_parts(p))
  has <- form$read_back & (!form$optional | form$path %in% names(types))
  expect_identical(names(types), form$path[has])
  expect_true(all(c("processes", "stacks$process") %in% names(types)))
  expect_false(any(grepl("^stacks\\$(alloc|inuse)_", names(types))))
  expect_identical(unname(types), form$type[match(names(types), form$path)])
  # The profile made of the profiler's form has every part that is not
  # optional, and its statistics, each of its type (tables as data frames,
  # the start as POSIXct: both of those types still).
  made <- part_types(unclass(p))
  expected <- form$path[!form$optional | startsWith(form$path, "stats")]
  expect_true(all(expected %in% names(made)), info = paste(setdiff(expected, names(made)), collapse = ", "))
  expect_identical(unname(made[expected]), form$type[match(expected, form$path)])
})

test_that("a damaged profile is refused before anything is written or printed", {
  p <- winch_profile(outer(), interval = 0.002)
  damage <- list(
    # Counts no profile of this duration could hold (once: 25 GB written).
    huge_count = function(p) {
      p$stacks$count[[1L]] <- 1e15
      p
    },
    astronomic_count = function(p) {
      p$stacks$count[[1L]] <- 1e300
      p
    },
    fractional_count = function(p) {
      p$stacks$count[[1L]] <- 0.5
      p
    },
    no_stacks = function(p) {
      p$stacks <- NULL
      p
    },
    no_files = function(p) {
      p$files <- NULL
      p
    },
    frame_out_of_range = function(p) {
      p$stacks$locations[[1L]] <- c(p$stacks$locations[[1L]], nrow(p$locations) + 5L)
      p
    },
    function_out_of_range = function(p) {
      p$lines$`function`[[1L]] <- nrow(p$functions) + 1L
      p
    },
    no_interval = function(p) {
      p$interval <- 0
      p
    },
    not_a_list = function(p) structure("x", class = "winch_profile")
  )
  for (what in names(damage)) {
    bad <- damage[[what]](p)
    out <- tempfile()
    expect_error(winch_write_rprof(bad, out, lines = TRUE), class = "winch_error_bad_argument", label = what)
    expect_error(winch_write_pprof(bad, out), class = "winch_error_bad_argument", label = what)
    expect_false(file.exists(out), label = what)
    expect_error(print(bad), class = "winch_error_bad_argument", label = what)
    expect_error(summary(bad), class = "winch_error_bad_argument", label = what)
  }
  # The message says what is wrong.
  expect_error(winch_write_rprof(damage$huge_count(p), tempfile()), "counts [0-9]+ samples, more than [0-9]+ of")
  expect_error(print(damage$no_stacks(p)), "field `stacks`")
  # The undamaged profile still prints and writes.
  expect_output(print(p), "winch_profile")
  expect_silent(winch_write_rprof(p, tempfile()))
})

test_that("as.data.frame() has one row per stack as shown, and its totals are the Rprof file's", {
  p <- winch_profile(outer(), interval = 0.002)
  df <- as.data.frame(p)
  expect_s3_class(df, "data.frame")
  expect_named(df, c("stack", "samples", "time", "thread", "process"))
  expect_false(anyDuplicated(paste(df$thread, df$stack)) > 0)
  expect_lte(nrow(df), length(p$stacks$count))
  expect_equal(sum(df$samples), sum(p$stacks$count))
  expect_equal(df$time, df$samples * p$interval)
  expect_false(is.unsorted(-df$samples))
  # Outermost first: every stack starts at `outer`, burn_a's ends in it.
  # (Those that do not are named: one CI run in many had one, not seen
  # in 600 profiles here, quiet and loaded, under R 4.2 and R 4.6.)
  other <- !startsWith(df$stack, "outer")
  expect_true(!any(other), info = paste(df$stack[other], df$samples[other], collapse = "\n"))
  expect_true(paste("outer", "r_a", A, sep = ";") %in% df$stack)
  expect_true(all(df$thread == "main"))
  out <- tempfile()
  winch_write_rprof(p, out)
  rprof_lines <- readLines(out)
  samples <- length(rprof_lines) - sum(grepl("^(sample\\.interval|#)", rprof_lines))
  expect_identical(as.integer(sum(df$samples)), samples)
})

test_that("stacks that differ only below what is shown are one row", {
  p <- winch_profile(outer(), interval = 0.002)
  before <- as.data.frame(p)
  # A copy of the heaviest stack whose innermost location is another
  # address in the same function (as two samples in one function give).
  i <- which.max(p$stacks$count)
  inner <- p$stacks$locations[[i]][[1L]]
  loc <- nrow(p$locations) + 1L
  p$locations[loc, ] <- p$locations[inner, ]
  p$locations$address[loc] <- "0xfffffffffff0"
  lines <- p$lines[p$lines$location == inner, , drop = FALSE]
  lines$location <- loc
  p$lines <- rbind(p$lines, lines)
  k <- length(p$stacks$count) + 1L
  p$stacks$count[k] <- 3
  p$stacks$thread[k] <- p$stacks$thread[[i]]
  p$stacks$process[k] <- p$stacks$process[[i]]
  p$stacks$locations[[k]] <- c(loc, p$stacks$locations[[i]][-1L])
  df <- as.data.frame(p)
  expect_false(anyDuplicated(paste(df$thread, df$stack)) > 0)
  expect_equal(sum(df$samples), sum(p$stacks$count))
  # The same rows as before, the copied stack's with 3 samples more.
  expect_setequal(df$stack, before$stack)
  grown <- df$samples[match(before$stack, df$stack)] - before$samples
  expect_equal(sort(grown, decreasing = TRUE), c(3, rep(0, nrow(before) - 1L)))
  # The collapsed stacks agree.
  out <- tempfile(fileext = ".folded")
  winch_write_collapsed(p, out)
  folded <- readLines(out)
  expect_false(anyDuplicated(sub(" [0-9]+$", "", folded)) > 0)
})

test_that("winch_write_collapsed() writes stacks that read back to the profile", {
  p <- winch_profile(outer(), interval = 0.002)
  out <- tempfile(fileext = ".folded")
  res <- withVisible(winch_write_collapsed(p, out))
  expect_identical(res$value, out)
  expect_false(res$visible)
  lines <- readLines(out)
  stack <- sub(" [0-9]+$", "", lines)
  count <- as.numeric(sub("^.* ", "", lines))
  expect_false(anyDuplicated(stack) > 0)
  df <- as.data.frame(p)
  expect_equal(sum(count), sum(df$samples))
  expect_setequal(stack, df$stack)
  want <- tapply(df$samples, df$stack, sum)
  expect_equal(unname(stats::setNames(count, stack)[names(want)]), as.vector(want))
  expect_error(winch_write_collapsed(p, tempdir()), class = "winch_error_io")
  expect_error(winch_write_collapsed(list(), out), class = "winch_error_bad_argument")
})

test_that("go tool pprof shows R's own labels as they are: <Anonymous>, <GC>, calls in parentheses", {
  skip_if(!nzchar(Sys.which("go")), "go is not on the PATH (Debian: golang-go)")
  # pprof rewrites names that look like C++ (angle brackets, `::`):
  # `<Anonymous>` became `<unknown>`, `(function(x) x[1])` lost its
  # parentheses.
  work <- function() {
    x <- list()
    for (i in 1:2e4) x[[i]] <- c(i, i)
    x
  }
  p <- winch_profile({
    (function() r_a(0.05))()
    (function(x) x[[1]])(list(work))()
  }, interval = 0.002)
  labels <- unique(unlist(stack_labels(p)))
  expect_true("<Anonymous>" %in% labels)
  pb <- tempfile(fileext = ".pb.gz")
  winch_write_pprof(p, pb)
  top <- run_pprof(c("-top", "-nodecount=1000", pb))
  expect_identical(attr(top, "status"), 0L, info = paste(top, collapse = "\n"))
  rows <- sub("^\\s*\\S+\\s+\\S+\\s+\\S+\\s+\\S+\\s+\\S+\\s+", "", top[grepl("%", top, fixed = TRUE) &
    !grepl("total", top, fixed = TRUE)])
  expect_false("<unknown>" %in% rows, info = paste(rows, collapse = "\n"))
  expect_true("<Anonymous>" %in% rows, info = paste(rows, collapse = "\n"))
  for (l in intersect(labels, c("<GC>", "(function(x) x[[1]])(list(work))"))) {
    expect_true(l %in% rows, info = l)
  }
})
