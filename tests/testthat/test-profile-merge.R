skip_if_not(winch_available(), "native unwinding is not available on this platform")
skip_if_not(Sys.info()[["sysname"]] == "Linux" && R.version$arch == "x86_64", "the profiler samples x86_64 Linux")

# c() of winch_profiles (R/profile-merge.R): profiles made in this process,
# in forked children and in another Rscript process combine into one, each
# source under its own [process host:pid] frame at the root.

work <- function(n) for (i in seq_len(n)) sort(runif(1e4))

# The label of a source's frame, from the fields the profile keeps.
source_label <- function(p) sprintf("[process_%s:%s]", p$host, format(p$pid, scientific = FALSE, trim = TRUE))

# The samples of `p` whose outermost frame is labelled `label`.
samples_under <- function(p, label) {
  outer <- vapply(stack_labels(p), function(s) if (length(s)) s[[length(s)]] else "", "")
  sum(p$stacks$count[outer == label])
}

# Every writer and method, on `p`: none fails, and the files say what the
# profile holds (the Rprof file a line per sample; the collapsed stacks'
# weights the samples).
expect_every_writer_works <- function(p) {
  expect_output(print(p), "<winch_profile>", fixed = TRUE)
  expect_output(print(summary(p)), "By function", fixed = TRUE)
  df <- as.data.frame(p)
  expect_identical(sum(df$samples), sum(p$stacks$count))
  grDevices::pdf(NULL)
  withr::defer(grDevices::dev.off())
  expect_identical(plot(p), p)
  out <- withr::local_tempfile()
  winch_write_rprof(p, out)
  rows <- readLines(out)
  expect_identical(length(rows) - 1L, as.integer(sum(p$stacks$count)))
  pb <- withr::local_tempfile(fileext = ".pb.gz")
  winch_write_pprof(p, pb)
  expect_gt(file.size(pb), 0)
  folded <- withr::local_tempfile(fileext = ".folded")
  winch_write_collapsed(p, folded)
  weights <- as.numeric(sub(".* ", "", readLines(folded)))
  expect_identical(sum(weights), sum(p$stacks$count))
}

test_that("a profile keeps the host and the process it was made in", {
  p <- winch_profile(work(20), interval = 0.005)
  expect_identical(p$host, Sys.info()[["nodename"]])
  expect_identical(p$pid, as.double(Sys.getpid()))
  # Checked when present.
  for (bad in list(1, c("a", "b"), "")) {
    q <- p
    q$host <- bad
    expect_error(print(q), "field `host`", class = "winch_error_bad_argument")
  }
  for (bad in list("1", 0, 1.5, c(1, 2), -3)) {
    q <- p
    q$pid <- bad
    expect_error(summary(q), "field `pid`", class = "winch_error_bad_argument")
  }
})

test_that("profiles of this process and of forked children merge, each under its own [process host:pid]", {
  skip_if(parallel::detectCores() < 2, "mclapply() needs 2 cores")
  here <- winch_profile(work(150), interval = 0.005)
  kids <- parallel::mclapply(1:2, function(i) winch_profile(work(100), interval = 0.005), mc.cores = 2)
  for (k in kids) expect_s3_class(k, "winch_profile")
  pids <- c(here$pid, kids[[1]]$pid, kids[[2]]$pid)
  expect_identical(length(unique(pids)), 3L)
  expect_identical(pids[[1]], as.double(Sys.getpid()))

  p <- c(here, kids[[1]], kids[[2]])
  expect_s3_class(p, "winch_profile")
  sources <- list(here, kids[[1]], kids[[2]])
  # Every stack is under one source's frame, with that source's samples.
  for (s in sources) {
    expect_identical(samples_under(p, source_label(s)), sum(s$stacks$count), label = source_label(s))
    expect_gt(sum(s$stacks$count), 0)
  }
  expect_identical(sum(p$stacks$count), sum(vapply(sources, function(s) sum(s$stacks$count), 0)))
  # The processes: one per source, each its own source, with its id and
  # host, its samples and its CPU time.
  pr <- p$processes
  expect_identical(pr$pid, pids)
  expect_identical(pr$host, rep(Sys.info()[["nodename"]], 3L))
  expect_identical(pr$source, pr$number)
  by <- summary(p)$by_process
  expect_identical(by$process, sprintf("[process %s:%s]", pr$host, format(pr$pid, scientific = FALSE, trim = TRUE)))
  expect_equal(by$sampled, vapply(sources, function(s) sum(s$stacks$count), 0) * 0.005)
  expect_true(all(by$cpu > 0))
  expect_setequal(unique(as.data.frame(p)$process), sub("^\\[(.*)\\]$", "\\1", by$process))
  # Time and duration add up; the merged profile was made in no one process.
  expect_identical(p$interval, 0.005)
  expect_equal(p$duration, sum(vapply(sources, `[[`, 0, "duration")))
  expect_true(is.na(p$host) && is.na(p$pid))
  expect_every_writer_works(p)
})

test_that("a source's own children stay under it, renumbered with its threads", {
  skip_if(parallel::detectCores() < 2, "mclapply() needs 2 cores")
  forks <- function() parallel::mclapply(1:2, function(i) work(80), mc.cores = 2)
  a <- winch_profile(forks(), interval = 0.005)
  b <- winch_profile(forks(), interval = 0.005)
  skip_if(nrow(a$processes) < 2L || nrow(b$processes) < 2L, "no child was sampled")
  p <- c(a, b)
  # Every number once, each child pointing at its source.
  pr <- p$processes
  expect_identical(pr$number, seq_len(nrow(pr)))
  expect_identical(nrow(pr), nrow(a$processes) + nrow(b$processes))
  expect_identical(pr$source, rep(c(1L, nrow(a$processes) + 1L), c(nrow(a$processes), nrow(b$processes))))
  # A child's frame is its new number, under its source's frame.
  df <- as.data.frame(p)
  kids <- df[!grepl("^process .*:", df$process), , drop = FALSE]
  expect_gt(nrow(kids), 0)
  n <- sub("^process ", "", kids$process)
  expect_true(all(mapply(function(stack, n) grepl(sprintf(";\\[process_%s\\](;|$)", n), stack), kids$stack, n)))
  from_b <- as.integer(n) > nrow(a$processes)
  expect_true(all(startsWith(kids$stack[from_b], paste0(source_label(b), ";"))))
  expect_true(all(startsWith(kids$stack[!from_b], paste0(source_label(a), ";"))))
  expect_identical(sum(p$stacks$count), sum(a$stacks$count) + sum(b$stacks$count))
  expect_every_writer_works(p)
})

test_that("a profile saved by another Rscript process merges under that process", {
  dir <- withr::local_tempdir()
  pid_file <- file.path(dir, "pid")
  rds <- file.path(dir, "p.rds")
  script <- file.path(dir, "worker.R")
  writeLines(c(
    "library(winch)",
    sprintf("writeLines(as.character(Sys.getpid()), %s)", deparse(pid_file)),
    "work <- function(n) for (i in seq_len(n)) sort(runif(1e4))",
    "p <- winch_profile(work(100), interval = 0.005)",
    sprintf("saveRDS(p, %s)", deparse(paste0(rds, ".part"))),
    sprintf("file.rename(%s, %s)", deparse(paste0(rds, ".part")), deparse(rds)),
    # Waits to be killed: the test ends it, whatever happens.
    "Sys.sleep(120)"
  ), script)
  system2(file.path(R.home("bin"), "Rscript"), c("--vanilla", shQuote(script)),
    wait = FALSE, stdout = file.path(dir, "out"), stderr = file.path(dir, "out"),
    env = paste0("R_LIBS=", paste(.libPaths(), collapse = .Platform$path.sep))
  )
  withr::defer({
    if (file.exists(pid_file)) {
      pid <- suppressWarnings(as.integer(readLines(pid_file, warn = FALSE)))
      if (length(pid) == 1L && !is.na(pid)) tools::pskill(pid, tools::SIGKILL)
    }
  })
  deadline <- Sys.time() + 90
  while (!file.exists(rds) && Sys.time() < deadline) Sys.sleep(0.1)
  expect_true(file.exists(rds), label = paste(c("the worker's profile was saved", readLines(file.path(dir, "out"))), collapse = "\n"))
  other <- readRDS(rds)
  worker_pid <- as.double(readLines(pid_file))
  expect_identical(other$pid, worker_pid)
  expect_false(identical(other$pid, as.double(Sys.getpid())))

  here <- winch_profile(work(60), interval = 0.005)
  p <- c(here, other)
  expect_identical(samples_under(p, source_label(other)), sum(other$stacks$count))
  expect_identical(samples_under(p, source_label(here)), sum(here$stacks$count))
  expect_identical(sum(p$stacks$count), sum(here$stacks$count) + sum(other$stacks$count))
  expect_identical(p$processes$pid, c(here$pid, worker_pid))
  expect_every_writer_works(p)
})

test_that("c() of one profile puts it under its frame; merged profiles merge again as their sources", {
  a <- winch_profile(work(40), interval = 0.005)
  b <- winch_profile(work(20), interval = 0.005)
  one <- c(a)
  expect_identical(samples_under(one, source_label(a)), sum(a$stacks$count))
  expect_identical(nrow(one$processes), 1L)
  # NULLs are dropped; c() of a merged profile alone changes nothing.
  expect_identical(c(a, NULL), one)
  expect_identical(c(one), one)
  # (Equal, not identical: sums of figures in another order round apart.)
  expect_equal(c(c(a, b), a), c(a, b, a))
  # Two profiles of one process share its frame; summary() lists both.
  both <- c(a, b)
  expect_identical(samples_under(both, source_label(a)), sum(a$stacks$count) + sum(b$stacks$count))
  expect_identical(nrow(summary(both)$by_process), 2L)
  expect_identical(sum(both$functions$label == source_label(a)), 1L)
})

test_that("profiles sampled at different intervals are counted in the finest", {
  a <- synthetic_profile()
  b <- synthetic_profile()
  b$interval <- 0.005
  p <- c(a, b)
  expect_identical(p$interval, 0.005)
  # a's samples (every 10 ms) count twice; every time is kept.
  expect_identical(sum(p$stacks$count), 2 * sum(a$stacks$count) + sum(b$stacks$count))
  expect_equal(sum(as.data.frame(p)$time), sum(a$stacks$count) * 0.01 + sum(b$stacks$count) * 0.005)
  b$interval <- 0.003
  expect_error(c(a, b), "not a whole multiple", class = "winch_error_bad_argument")
})

test_that("profiles saved before profiles kept where they were made merge as unknown, or by their process", {
  old <- synthetic_profile()
  expect_null(old$host)
  expect_null(old$processes)
  p <- c(old, old)
  expect_identical(samples_under(p, "[process_unknown:unknown]"), 2 * sum(old$stacks$count))
  expect_identical(p$processes$pid, c(0, 0))
  expect_identical(summary(p)$by_process$process, rep("[process unknown:unknown]", 2L))
  expect_every_writer_works(p)
  # A profile with a processes table but without the fields (made before
  # they were kept): its own process's row says where.
  q <- winch_profile(work(20), interval = 0.005)
  q$host <- NULL
  q$pid <- NULL
  expect_identical(samples_under(c(q), source_label(list(host = Sys.info()[["nodename"]], pid = Sys.getpid()))), sum(q$stacks$count))
})

test_that("the figures combine: counts and resource use summed, the largest RSS and handler percentiles", {
  a <- synthetic_profile()
  b <- synthetic_profile()
  b$stats$usage$max_rss <- 2^28
  b$stats$handler_p99 <- 1e-4
  b$threads$cpu <- 1
  p <- c(a, b)
  expect_identical(p$stats$samples, 404)
  expect_identical(p$stats$usage$user, 4)
  expect_identical(p$stats$usage$max_rss, 2^28)
  expect_identical(p$stats$handler_p99, 1e-4)
  expect_identical(p$stats$gc_count, 4)
  expect_identical(p$duration, 5)
  expect_equal(p$threads$cpu, 3.03)
  # Each source's CPU time, its collector thread's (0.004 s) left out.
  expect_equal(p$processes$cpu, c(2.046, 2.046))
  expect_equal(p$stats$collector_cpu, 0.008)
  # A source without its collector's time had no collector in the process:
  # a recording from outside (NaN) or an older profile (none).
  b2 <- b
  b2$stats$collector_cpu <- NaN
  expect_equal(c(a, b2)$stats$collector_cpu, 0.004)
  expect_equal(c(a, b2)$processes$cpu, c(2.046, 2.05))
  b2$stats$collector_cpu <- NULL
  expect_equal(c(a, b2)$stats$collector_cpu, 0.004)
  # A figure one source lacks is unknown in the sum.
  b$stats$gc_time <- NULL
  expect_true(is.na(c(a, b)$stats$gc_time))
  # Workers read from outside: counts summed, the largest median and 99th
  # percentile; a source without them (an older profile) read none.
  a$stats[c("worker_stops", "worker_stop_total", "worker_stop_median", "worker_stop_p99")] <- list(10, 0.004, 3e-4, 8e-4)
  b$stats[c("worker_stops", "worker_stop_total", "worker_stop_median", "worker_stop_p99")] <- list(30, 0.015, 5e-4, 6e-4)
  m <- c(a, b)$stats
  expect_identical(c(m$worker_stops, m$worker_stop_median, m$worker_stop_p99), c(40, 5e-4, 8e-4))
  expect_equal(m$worker_stop_total, 0.019)
  b$stats[c("worker_stops", "worker_stop_total", "worker_stop_median", "worker_stop_p99")] <- NULL
  m <- c(a, b)$stats
  expect_identical(c(m$worker_stops, m$worker_stop_median, m$worker_stop_p99), c(10, 3e-4, 8e-4))
  a$stats[c("worker_stops", "worker_stop_total", "worker_stop_median", "worker_stop_p99")] <- NULL
  expect_null(c(a, b)$stats$worker_stops)
})

test_that("memory profiles merge with memory profiles", {
  a <- synthetic_memory_profile()
  b <- synthetic_memory_profile()
  b$sample_bytes <- 4096
  p <- c(a, b)
  expect_identical(p$event, "alloc")
  expect_identical(p$sample_bytes, 4096)
  expect_identical(sum(p$stacks$alloc_bytes), sum(a$stacks$alloc_bytes) + sum(b$stacks$alloc_bytes))
  expect_identical(p$stats$r_heap$peak, 2 * a$stats$r_heap$peak)
  df <- as.data.frame(p)
  expect_identical(sum(df$alloc_bytes), 2 * sum(a$stacks$alloc_bytes))
  expect_true(all(startsWith(df$stack, "[process_unknown:unknown];")))
  expect_output(print(p), "<winch_profile>", fixed = TRUE)
  expect_output(print(summary(p)), "sample", fixed = TRUE)
  grDevices::pdf(NULL)
  withr::defer(grDevices::dev.off())
  plot(p)
  winch_write_pprof(p, withr::local_tempfile(fileext = ".pb.gz"))
  winch_write_collapsed(p, withr::local_tempfile())
})

test_that("c() refuses what is not a profile, profiles of different kinds and no profile at all", {
  p <- synthetic_profile()
  m <- synthetic_memory_profile()
  e <- synthetic_profile()
  e$event <- "elapsed"
  expect_error(c(p, 1), "argument 2 is a double vector", class = "winch_error_bad_argument")
  expect_error(c(p, p, list(p)), "argument 3 is a list", class = "winch_error_bad_argument")
  expect_error(c(p, as.data.frame(p)), "argument 2 is a data frame", class = "winch_error_bad_argument")
  expect_error(c(p, m), "one event only", class = "winch_error_bad_argument")
  expect_error(c(m, p), "one event only", class = "winch_error_bad_argument")
  expect_error(c(p, e), "one event only", class = "winch_error_bad_argument")
  # (R calls the method only when the first argument is a profile.)
  expect_error(winch:::c.winch_profile(NULL, NULL), "all arguments are NULL", class = "winch_error_bad_argument")
  expect_error(winch:::c.winch_profile(), "at least one", class = "winch_error_bad_argument")
  # A damaged profile is refused, saying which argument.
  d <- p
  d$duration <- 0
  err <- expect_error(c(p, d), "Argument 2 of `c()` is not a valid profile", fixed = TRUE, class = "winch_error_bad_argument")
  expect_match(conditionMessage(err$parent), "duration")
  # A merged profile whose processes say nothing true of their sources.
  q <- c(p, p)
  q$processes$source[[2]] <- 7L
  expect_error(print(q), "processes$source", fixed = TRUE, class = "winch_error_bad_argument")
  q$processes$source <- c(2L, 1L)
  expect_error(as.data.frame(q), "not a source", class = "winch_error_bad_argument")
  q$processes$source <- c("1", "2")
  expect_error(summary(q), "processes$source", fixed = TRUE, class = "winch_error_bad_argument")
})

test_that("print() of a merged profile", {
  p <- synthetic_profile()
  b <- synthetic_profile()
  b$host <- "worker-1"
  b$pid <- 4321
  withr::local_options(width = 80)
  withr::local_envvar(DEBUGINFOD_URLS = "")
  expect_snapshot(print(c(p, b)))
  expect_snapshot(print(summary(c(p, b))$by_process))
})
