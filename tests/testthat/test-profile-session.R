skip_if_not(winch_available(), "native unwinding is not available on this platform")

# A profiling session: arguments checked before `expr` runs, one profile at
# a time, errors, interrupts and forks in `expr`, starting and stopping by
# hand with winch_rprof().

profile_fixture()

test_that("bad arguments are errors before `expr` runs, and the session goes on", {
  ran <- FALSE
  bad <- list(
    list(interval = 0), list(interval = -0.01), list(interval = NA), list(interval = NA_real_),
    list(interval = "0.01"), list(interval = TRUE), list(interval = c(0.01, 0.02)),
    list(interval = numeric()), list(interval = Inf), list(interval = 0.0005), list(interval = 0.00099),
    list(event = "wall"), list(event = NA_character_), list(event = character()), list(event = 1),
    list(file = file.path(tempfile("no-such-dir-"), "prof.out")), list(file = NA_character_),
    list(file = c("a", "b")), list(loops = NA), list(lines = "yes")
  )
  for (args in bad) {
    what <- paste(deparse(args), collapse = "")
    expect_error(do.call(winch_profile, c(list(quote(ran <- TRUE)), args)),
      class = "winch_error_bad_argument", label = what
    )
    expect_false(ran, label = what)
  }
  expect_error(winch_profile(ran <- TRUE, unknown = 1))
  expect_false(ran)

  p <- winch_profile(r_a(0.01), interval = 0.002)
  for (f in list(winch_write_rprof, winch_write_pprof)) {
    expect_error(f(list(), tempfile()), class = "winch_error_bad_argument")
    expect_error(f(unclass(p), tempfile()), class = "winch_error_bad_argument")
    expect_error(f(p, file.path(tempfile("no-such-dir-"), "out")), class = "winch_error_bad_argument")
  }
  expect_error(winch_rprof(NULL), class = "winch_error_bad_argument")

  # The minimum interval works.
  p <- winch_profile(r_a(0.05), interval = 0.001)
  expect_gt(seconds_in(p, A), 0.03)
})

test_that("a profile cannot start while another one or Rprof() runs", {
  ran <- FALSE
  inner <- NULL
  p <- winch_profile(
    {
      r_a(0.05)
      inner <- tryCatch(winch_profile(ran <- TRUE), error = identity)
      r_a(0.05)
    },
    interval = 0.002
  )
  expect_s3_class(inner, "winch_error_busy")
  expect_false(ran)
  # The outer profile went on after the refusal.
  expect_gt(seconds_in(p, A), 0.07)

  out <- tempfile()
  winch_rprof(out, interval = 0.002)
  err <- tryCatch(winch_profile(ran <- TRUE), error = identity)
  err2 <- tryCatch(winch_rprof(tempfile()), error = identity)
  q <- winch_rprof(NULL)
  expect_s3_class(err, "winch_error_busy")
  expect_s3_class(err2, "winch_error_busy")
  expect_false(ran)
  expect_s3_class(q, "winch_profile")

  events <- if (getRversion() >= "4.4.0") c("cpu", "elapsed") else "default"
  for (event in events) {
    rp <- tempfile()
    if (event == "default") Rprof(rp, interval = 0.01) else Rprof(rp, interval = 0.01, event = event)
    err <- tryCatch(winch_profile(ran <- TRUE), error = identity)
    err2 <- tryCatch(winch_rprof(tempfile()), error = identity)
    Rprof(NULL)
    if (!inherits(err2, "error")) winch_rprof(NULL)
    what <- sprintf("Rprof(event = \"%s\") running:", event)
    expect_true(inherits(err, "winch_error_busy"), label = paste(what, "winch_profile() is a winch_error_busy"))
    expect_true(inherits(err2, "winch_error_busy"), label = paste(what, "winch_rprof() is a winch_error_busy"))
    expect_false(ran, label = paste(what, "`expr` ran"))
  }
  # And afterwards profiles work again.
  p <- winch_profile(r_a(0.05), interval = 0.002)
  expect_gt(seconds_in(p, A), 0.03)
})

test_that("an error in `expr` propagates with its class and stops the profiler", {
  err <- tryCatch(
    winch_profile({
      r_a(0.05)
      stop(errorCondition("boom", class = "winch_test_error"))
    }, interval = 0.002),
    error = identity
  )
  expect_s3_class(err, "winch_test_error")
  expect_identical(conditionMessage(err), "boom")
  expect_false(winch:::profile_active())

  # An error raised in a callback unwinds through native frames (burn_call).
  thrower <- function() {
    r_b(0.05)
    stop(errorCondition("deep", class = "winch_test_error"))
  }
  err <- tryCatch(
    winch_profile(.Call("burn_call", quote(thrower), environment(), PACKAGE = "wtest_burn"), interval = 0.002),
    error = identity
  )
  expect_s3_class(err, "winch_test_error")
  expect_false(winch:::profile_active())

  # A new profile starts, and holds nothing of the abandoned ones.
  p <- winch_profile(r_a(0.1), interval = 0.002)
  expect_identical(paths_from(p, A), path(A, "r_a"))
  expect_false(any(c(B, "thrower", CALL) %in% p$functions$label))
  expect_gt(seconds_in(p, A), 0.07)
})

test_that("an interrupt in `expr` stops the profiler, and the next profile works", {
  skip_if_sigint_ignored()
  res <- profile_interrupted(function() r_a(0.02), interval = 0.002)
  expect_identical(res, "interrupted")
  expect_false(winch:::profile_active())
  p <- winch_profile(r_a(0.05), interval = 0.002)
  expect_identical(paths_from(p, A), path(A, "r_a"))
})

test_that("with processes = 'self', fork children (mclapply) are not sampled, do not crash, and the parent's profile goes on", {
  skip_if_not_installed("parallel")
  loadNamespace("parallel")
  before <- function() r_a(0.15)
  after <- function() r_a(0.15)
  res <- NULL
  p <- winch_profile(
    {
      before()
      res <- parallel::mclapply(1:2, function(i) r_child(0.2), mc.cores = 2)
      after()
    },
    interval = 0.002, processes = "self"
  )
  # The children ran to the end and burned what they were asked to.
  expect_length(res, 2L)
  expect_true(all(vapply(res, is.numeric, NA)))
  expect_true(all(unlist(res) >= 0.2))
  # burn_child runs only in the children: no sample of the parent's
  # profile can be in it, nor in the R function around it.
  expect_false(CHILD %in% p$functions$label)
  expect_false("r_child" %in% p$functions$label)
  # The parent was sampled before and after the fork.
  expect_gt(seconds_in(p, "before"), 0.1)
  expect_gt(seconds_in(p, "after"), 0.1)
  expect_identical(paths_from(p, A), sort(c(path(A, "r_a", "before"), path(A, "r_a", "after"))))
  # Only the parent's own CPU time is in the profile.
  expect_lt(sum(p$stacks$count) * p$interval, 0.3 + 0.15)
})

test_that("winch_rprof() starts and stops by hand and writes the file", {
  out <- tempfile(fileext = ".out")
  expect_null(winch_rprof(out, interval = 0.002))
  r_a(0.2)
  p <- winch_rprof(NULL)
  expect_s3_class(p, "winch_profile")
  expect_false(winch:::profile_active())
  # Started by hand, the profile holds the caller's frames too.
  expect_true(all(startsWith(paths_from(p, A), path(A, "r_a"))))
  expect_lt(abs(seconds_in(p, A) - 0.2), 0.03)
  s <- summaryRprof(out)
  expect_equal(s$sampling.time, sum(p$stacks$count[lengths(p$stacks$locations) > 0]) * p$interval)
  expect_true(paste0('"', A, '"') %in% rownames(s$by.self))

  # Writing again gives the same file; the writers return the path invisibly.
  again <- tempfile(fileext = ".out")
  res <- withVisible(winch_write_rprof(p, again))
  expect_identical(res$value, again)
  expect_false(res$visible)
  expect_identical(readLines(again), readLines(out))
  res <- withVisible(winch_write_pprof(p, tempfile(fileext = ".pb.gz")))
  expect_false(res$visible)
  expect_true(file.exists(res$value))
  # The pprof file is gzipped.
  con <- file(res$value, "rb")
  magic <- readBin(con, "raw", 2L)
  close(con)
  expect_identical(magic, as.raw(c(0x1f, 0x8b)))
})

# Never stuck: however a session ends (an interrupt at any point, winch
# unloaded, R's record of it lost), the profiler can start again, and no
# timer or collector thread is left behind.

test_that("an interrupt that lands just after the profiler started stops it", {
  ns <- asNamespace("winch")
  traced <- c("rs_profile_start", "profile_begin")
  withr::defer({
    for (f in traced) try(suppressMessages(untrace(f, where = ns)), silent = TRUE)
    stop_left_running()
  })
  ran <- FALSE
  starters <- list(
    winch_profile = function() winch_profile(ran <<- TRUE, interval = 0.002),
    winch_rprof = function() winch_rprof(tempfile(), interval = 0.002)
  )
  # The interrupt lands when the native start has returned, before the
  # caller has its result.
  for (f in traced) {
    for (s in names(starters)) {
      what <- sprintf("%s(), interrupted at the exit of %s():", s, f)
      suppressMessages(trace(f, exit = quote(rlang::interrupt()), where = ns, print = FALSE))
      res <- tryCatch(starters[[s]](), interrupt = function(e) "interrupted")
      suppressMessages(untrace(f, where = ns))
      left <- c(active = winch:::profile_active(), collector = collector_running())
      stop_left_running()
      expect_identical(res, "interrupted", label = paste(what, "the result"))
      expect_false(left[["active"]], label = paste(what, "a session left running"))
      expect_false(left[["collector"]], label = paste(what, "a collector thread left running"))
    }
  }
  expect_false(ran)
  # Nothing was started, and the next profile works.
  expect_error(winch_rprof(NULL), class = "winch_error_bad_argument")
  p <- winch_profile(r_a(0.05), interval = 0.002)
  expect_gt(seconds_in(p, A), 0.03)
})

test_that("winch_rprof(NULL) stops a session R does not know about, and no other", {
  withr::defer(stop_left_running())
  # Inside winch_profile(), winch_rprof(NULL) has nothing to stop.
  err <- NULL
  p <- winch_profile(
    {
      r_a(0.03)
      err <- tryCatch(winch_rprof(NULL), error = identity)
      r_a(0.03)
    },
    interval = 0.002
  )
  expect_s3_class(err, "winch_error_bad_argument")
  expect_gt(seconds_in(p, A), 0.04)

  # A session R's state lost (orphaned) makes starting a profile busy, and
  # winch_rprof(NULL) stops it.
  winch_rprof(tempfile(), interval = 0.002)
  forget_r_session()
  expect_error(winch_profile(NULL), class = "winch_error_busy")
  expect_warning(res <- winch_rprof(NULL), class = "winch_warning")
  expect_null(res)
  expect_false(winch:::profile_active())
  expect_false(collector_running())
  expect_error(winch_rprof(NULL), class = "winch_error_bad_argument")
  p <- winch_profile(r_a(0.05), interval = 0.002)
  expect_gt(seconds_in(p, A), 0.03)
})

test_that("unloading winch stops a running winch_rprof(), and winch loaded again can profile", {
  collector <- paste(deparse(collector_running), collapse = "\n")
  out <- run_rscript_timeout(c(
    "library(winch)",
    paste("collector_running <-", collector),
    "winch_rprof(tempfile(), interval = 0.002)",
    "x <- sort(runif(1e6))",
    "unloadNamespace('winch')",
    "cat('collector after unload:', collector_running(), '\\n')",
    "library(winch)",
    "cat('active after reload:', winch:::profile_active(), '\\n')",
    "e <- tryCatch(winch_rprof(NULL), error = function(e) class(e)[[1L]])",
    "cat('stop after reload:', e, '\\n')",
    "p <- tryCatch(winch_profile(sort(runif(1e6)), interval = 0.002), error = function(e) e)",
    "cat('profile after reload:', class(p)[[1L]], '\\n')"
  ))
  expect_identical(attr(out, "status"), 0L)
  expect_line(out, "collector after unload: FALSE")
  expect_line(out, "active after reload: FALSE")
  expect_line(out, "stop after reload: winch_error_bad_argument")
  expect_line(out, "profile after reload: winch_profile")
})

test_that("unloading winch inside winch_profile() ends the call with winch_error_profile_lost, and loads nothing again", {
  # The unload hook stops the profile; the call's exit path used to stop
  # it again through functions read from the unloaded namespace's lazy-load
  # database, which loaded winch again (whose stop found no profile:
  # winch_error_bad_argument "no winch profile is running").
  out <- run_rscript_timeout(c(
    "library(winch)",
    "e <- tryCatch(winch_profile({ unloadNamespace('winch'); x <- sort(runif(1e5)) }, interval = 0.002), error = function(e) e)",
    "cat('class:', class(e)[[1L]], '\\n')",
    "cat('winch_error:', inherits(e, 'winch_error'), '\\n')",
    "cat('message:', conditionMessage(e), '\\n')",
    "cat('loaded after:', 'winch' %in% loadedNamespaces(), '\\n')",
    "library(winch)",
    "p <- winch_profile(sort(runif(1e6)), interval = 0.002)",
    "cat('profile after reload:', class(p)[[1L]], '\\n')"
  ))
  expect_identical(attr(out, "status"), 0L, info = paste(out, collapse = "\n"))
  expect_line(out, "class: winch_error_profile_lost")
  expect_line(out, "winch_error: TRUE")
  expect_line(out, "message: The profile was stopped before `expr` ended (winch was unloaded while it ran): its samples are lost.")
  expect_line(out, "loaded after: FALSE")
  expect_line(out, "profile after reload: winch_profile")
})

test_that("a fork child (mclapply) starts with no session: it profiles itself; the parent's goes on", {
  skip_if_not_installed("parallel")
  loadNamespace("parallel")
  withr::defer(stop_left_running())
  # A child that hangs is killed: the time limit stops mclapply(), whose
  # cleanup kills its children.
  withr::defer(setTimeLimit())
  before <- function() r_a(0.1)
  after <- function() r_a(0.1)
  out <- tempfile()
  winch_rprof(out, interval = 0.002)
  before()
  setTimeLimit(elapsed = 120, transient = TRUE)
  res <- parallel::mclapply(1:2, function(i) {
    class1 <- function(x) if (inherits(x, "error")) class(x)[[1L]] else "ok"
    # Nothing runs in the child: winch_profile() works ...
    p <- tryCatch(winch_profile(r_child(0.1), interval = 0.002), error = identity)
    # ... and winch_rprof(NULL) finds nothing to stop.
    stop_none <- tryCatch(winch_rprof(NULL), error = identity)
    # The child's own winch_rprof() session.
    f <- tempfile()
    q <- tryCatch(
      {
        winch_rprof(f, interval = 0.002)
        r_child(0.1)
        winch_rprof(NULL)
      },
      error = identity
    )
    list(
      profile = class1(p),
      profile_child = if (class1(p) == "ok") seconds_in(p, CHILD) else NA,
      stop_none = class1(stop_none),
      rprof = class1(q),
      rprof_child = if (class1(q) == "ok") seconds_in(q, CHILD) else NA,
      rprof_file = file.exists(f),
      active = winch:::profile_active()
    )
  }, mc.cores = 2)
  setTimeLimit()
  after()
  # The children's work is in their own profiles, not in the parent's:
  # said.
  expect_warning(
    p <- winch_rprof(NULL),
    "sampled children or workers most of whose CPU time",
    class = "winch_warning_processes_unsampled"
  )
  # Each child's profiles hold its own work. (Two children share two cores
  # with whatever else runs: their proportions are tested elsewhere, here
  # only that they sampled.)
  for (r in res) {
    expect_type(r, "list")
    expect_identical(r$profile, "ok")
    expect_gt(r$profile_child, 0)
    expect_identical(r$stop_none, "winch_error_bad_argument")
    expect_identical(r$rprof, "ok")
    expect_gt(r$rprof_child, 0)
    expect_true(r$rprof_file)
    expect_false(r$active)
  }
  # The parent's profile went on, without the children's samples, and
  # its file was written.
  expect_false(CHILD %in% p$functions$label)
  expect_gt(seconds_in(p, "before"), 0.07)
  expect_gt(seconds_in(p, "after"), 0.07)
  expect_true(file.exists(out))
  expect_false(winch:::profile_active())
})

test_that("a file that cannot be written is an error before `expr` runs, and no session is left", {
  ran <- FALSE
  dir <- tempfile("a-directory-")
  dir.create(dir)
  on.exit(unlink(dir, recursive = TRUE), add = TRUE)
  expect_error(winch_profile(ran <- TRUE, file = dir), class = "winch_error_io")
  expect_false(ran)
  expect_error(winch_rprof(dir), class = "winch_error_io")
  expect_false(winch:::profile_active())
  # The check leaves no file behind where there was none.
  out <- tempfile()
  p <- winch_profile(r_a(0.01), interval = 0.002)
  expect_false(file.exists(out))
  expect_s3_class(winch_profile(r_a(0.01), file = out, interval = 0.002), "winch_profile")
  expect_true(file.exists(out))
})

test_that("writing that fails after the profiled code ran returns the profile with a warning", {
  # In a child whose files may not grow (`ulimit -f 0`, SIGXFSZ ignored):
  # the file passes the checks and opens, then every write fails (EFBIG).
  # (This used /dev/full, a device, which winch now refuses before the
  # profiled code runs: test-files.R.)
  skip_if(!nzchar(Sys.which("sh")), "no sh to set a file size limit")
  script <- tempfile(fileext = ".R")
  on.exit(unlink(script), add = TRUE)
  writeLines(c(
    "library(winch)",
    "caught <- character()",
    "quietly <- function(expr) withCallingHandlers(expr, warning = function(w) {",
    "  caught <<- c(caught, class(w)[[1L]]); invokeRestart('muffleWarning') })",
    "work <- function() for (i in 1:30) sort(runif(1e4))",
    "p <- quietly(winch_profile(work(), file = tempfile(), interval = 0.002))",
    "cat('profile', class(p)[[1L]], sum(p$stacks$count) > 0, caught, '\\n')",
    "caught <- character()",
    "winch_rprof(tempfile(), interval = 0.002)",
    "work()",
    "p2 <- quietly(winch_rprof(NULL))",
    "cat('rprof', class(p2)[[1L]], winch:::profile_active(), caught, '\\n')",
    "e <- function(expr) tryCatch({ expr; 'none' }, error = function(e) class(e)[[1L]])",
    "cat('writers', e(winch_write_rprof(p, tempfile())), e(winch_write_pprof(p, tempfile())),",
    "  e(winch_write_collapsed(p, tempfile())), '\\n')"
  ), script)
  cmd <- sprintf(
    "trap '' XFSZ; ulimit -f 0 && exec %s --vanilla %s",
    shQuote(file.path(R.home("bin"), "Rscript")), shQuote(script)
  )
  out <- suppressWarnings(system2("sh", c("-c", shQuote(cmd)),
    stdout = TRUE, stderr = TRUE,
    env = paste0("R_LIBS=", paste(.libPaths(), collapse = .Platform$path.sep))
  ))
  out <- trimws(out)
  # The profile is returned, with a warning.
  expect_line(out, "profile winch_profile TRUE winch_warning_io")
  expect_line(out, "rprof winch_profile FALSE winch_warning_io")
  # The writers say it is an I/O error.
  expect_line(out, "writers winch_error_io winch_error_io winch_error_io")
})

test_that("an interval beyond an hour is refused with the bound", {
  ran <- FALSE
  for (interval in c(3601, 1e308)) {
    expect_error(winch_profile(ran <- TRUE, interval = interval), "at most 3600 seconds", class = "winch_error_bad_argument")
  }
  expect_false(ran)
})

test_that("Rprof() started after winch_rprof() runs beside it: both files are written, winch's samples unchanged", {
  f <- function() r_a(0.15)
  w <- tempfile()
  r <- tempfile()
  on.exit(unlink(c(w, r)), add = TRUE)
  winch_rprof(w, interval = 0.005)
  Rprof(r, interval = 0.01)
  f()
  Rprof(NULL)
  p <- winch_rprof(NULL)
  expect_gt(file.size(w), 0)
  expect_gt(file.size(r), 0)
  # (winch_rprof() samples everything but itself: the test's callers too.)
  expect_true(all(startsWith(paths_from(p, A), path(A, "r_a", "f"))))
  expect_gt(seconds_in(p, A), 0.1)
  expect_true("f" %in% rownames(summaryRprof(r)$by.total) || "\"f\"" %in% rownames(summaryRprof(r)$by.total))
  expect_false(winch:::profile_active())
})
