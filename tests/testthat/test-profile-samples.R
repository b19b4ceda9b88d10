skip_if_not(winch_available(), "native unwinding is not available on this platform")

# What the samples hold: time in native functions in the proportions they
# burned, under the R functions that called them, with the clock the event
# asks for, and never the profiler's own frames.

profile_fixture()

burn_workload()

test_that("no CPU time goes unsampled when busy processes compete for the cores", {
  # Four processes burning CPU on this machine's cores: the kernel checks
  # a thread's CPU timer rarely, and delivered 0 to 20 of a 0.1 s burn's
  # 50 intervals' signals (their expirations counted as overruns only
  # when one was delivered; those after the last, lost; one profile in
  # twelve had no sample). Samples now stand for the thread's CPU clock,
  # and the collector asks for one when they fall behind: at most the
  # last 2 intervals and 8 ms may go unsampled.
  for (i in 1:4) local_child_command("yes > /dev/null")
  for (k in 1:8) {
    used <- NULL
    p <- winch_profile(used <- r_a(0.1), interval = 0.002)
    a <- seconds_in(p, A)
    expect_gt(a, used - 0.002 * 3 - 0.008 - 0.001, label = sprintf("sampled %.3f s of %.3f s", a, used))
    expect_lt(a, used + 0.002 + 0.001, label = sprintf("sampled %.3f s of %.3f s", a, used))
  }
})

test_that("time in native functions comes out in the proportions they burned", {
  # Linux checks CPU-time timers at its scheduler tick (4 ms at HZ = 250):
  # a sample lands on the first tick after its interval expired, and stands
  # for every interval that expired since. Each burn's count is then right
  # to a tick or so at each of its ends. Burns of random lengths, so that
  # those errors do not add up (a fixed rhythm can lock onto the ticks).
  used <- NULL
  len <- cbind(a = stats::runif(3L, 0.12, 0.2), b = stats::runif(3L, 0.04, 0.07))
  p <- winch_profile(
    used <- vapply(1:3, function(i) c(a = r_a(len[i, "a"]), b = r_b(len[i, "b"])), c(a = 0, b = 0)),
    interval = 0.002
  )
  truth <- rowSums(used) # CPU seconds each burned, as it measured them
  a <- seconds_in(p, A)
  b <- seconds_in(p, B)
  expect_lt(abs(a / (a + b) - truth[["a"]] / sum(truth)), 0.03)
  # Each function's sampled time is its CPU time, within 10% and 10 ms.
  expect_lt(abs(a - truth[["a"]]), 0.1 * truth[["a"]] + 0.01)
  expect_lt(abs(b - truth[["b"]]), 0.1 * truth[["b"]] + 0.01)
  expect_identical(p$event, "cpu")
  expect_identical(p$interval, 0.002)
})

test_that("every native sample is under the R function that called it, through callbacks", {
  p <- winch_profile(outer(), interval = 0.002)
  # The whole stack, outermost frame `outer`: the profiler's own frames
  # and those of its caller are left out.
  expect_identical(paths_from(p, A), path(A, "r_a", "outer"))
  expect_identical(paths_from(p, B), path(B, "r_b", "cb", CALL, "outer"))
  expect_gt(seconds_in(p, A), 0.07)
  expect_gt(seconds_in(p, B), 0.15)
})

test_that("100 nested round trips R -> C -> R are all in every sample", {
  # step(k) calls back into burn_nest, which evaluates step(k - 1): 101
  # frames of step and 100 of burn_nest, then r_a burns at the bottom.
  step <- function(k) {
    if (k == 0L) r_a(0.3) else .Call("burn_nest", quote(step), k - 1L, environment(), PACKAGE = "wtest_burn")
  }
  p <- winch_profile(step(100L), interval = 0.002)
  expect_identical(paths_from(p, A), path(A, "r_a", "step", rep(c(NEST, "step"), 100L)))
  expect_gt(seconds_in(p, A), 0.2)
  expect_identical(p$stats$truncated, 0)
})

test_that("event = \"elapsed\" samples sleeping, event = \"cpu\" does not", {
  work <- function() {
    Sys.sleep(0.25)
    r_a(0.1)
  }
  pe <- winch_profile(work(), interval = 0.005, event = "elapsed")
  pc <- winch_profile(work(), interval = 0.005, event = "cpu")
  expect_identical(pe$event, "elapsed")
  expect_identical(pc$event, "cpu")
  # Elapsed: the sleep is sampled (at least 80% of it; a busy machine can
  # only make it longer), and so is the burn (wall time >= CPU time).
  expect_gte(seconds_in(pe, "Sys.sleep"), 0.2)
  expect_lt(seconds_in(pe, "Sys.sleep"), 1)
  expect_gte(seconds_in(pe, A), 0.08)
  # CPU: sleeping costs no CPU time; the burn is sampled as it burned.
  expect_lte(seconds_in(pc, "Sys.sleep"), 0.015)
  expect_lt(abs(seconds_in(pc, A) - 0.1), 0.025)
  expect_output(print(pe), "samples of elapsed time")
  expect_output(print(pc), "samples of CPU time of R's main thread")
})

test_that("the profiler's own frames are not in the profile, even when stopping is slow", {
  # A sample can land after `expr` has returned, while winch_profile()
  # stops the timer (in about 1 of 100 profiles of a few ms). To make that
  # certain, check_result(), which the stop runs through, burns 20 ms of
  # CPU (in burn_b) each time it is called; it runs before sampling starts
  # and after it stops too, where nothing is sampled.
  suppressMessages(capture.output(trace("check_result", where = asNamespace("winch"), print = FALSE,
    tracer = quote(.Call("burn_b", 0.02, PACKAGE = "wtest_burn"))
  )))
  on.exit(suppressMessages(capture.output(untrace("check_result", where = asNamespace("winch")))), add = TRUE)
  p <- winch_profile(r_a(0.05), interval = 0.002)
  own <- ls(asNamespace("winch"), all.names = TRUE)
  labels <- p$functions$label
  expect_identical(intersect(labels, c(own, ".doTrace")), character())
  expect_identical(labels[startsWith(labels, "/winch.so::")], character())
  expect_false(B %in% labels)
  expect_identical(paths_from(p, A), path(A, "r_a"))
  # The samples taken while it stopped were counted, not kept.
  expect_gt(summary(p)$outside, 0)
})
