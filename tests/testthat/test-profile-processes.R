skip_if_not(winch_available(), "native unwinding is not available on this platform")
skip_if_not(Sys.info()[["sysname"]] == "Linux" && R.version$arch == "x86_64", "the profiler samples x86_64 Linux")
skip_on_os("windows")

# Child processes in a profile (winch_profile(processes = "all")): children
# forked by parallel sample themselves and show under [process N] under the
# R call that forked them. burn_a() burns a known amount of its thread's
# CPU time (clib/burn.c), so each child's share is known.

burn <- build_clib("wtest_burn", "burn.c")
dyn.load(burn$path)
withr::defer(dyn.unload(burn$path), teardown_env())

r_burn <- function(seconds) .Call("burn_a", seconds, PACKAGE = "wtest_burn")

# The stacks of a profile as text, with their samples and process.
process_rows <- function(p) {
  df <- as.data.frame(p)
  df[df$process != "self", , drop = FALSE]
}

test_that("mclapply()'s children are sampled under [process N] under the call that forked them", {
  skip_if(parallel::detectCores() < 2, "mclapply() needs 2 cores")
  task <- function(i) r_burn(0.3)
  work <- function() parallel::mclapply(1:4, task, mc.cores = 2)
  p <- winch_profile(work(), interval = 0.005)
  rows <- process_rows(p)
  expect_gt(nrow(rows), 0)
  # Every child's stack: the call that forked it, mclapply, its [process N]
  # frame, the task (lapply's FUN) and its own native frame, with none of
  # mclapply's plumbing (lapply, the forking function, try(), sendMaster).
  main_paths <- rows$stack[grepl("burn_a", rows$stack, fixed = TRUE)]
  expect_gt(length(main_paths), 0)
  expect_true(all(grepl("^work;(parallel::)?mclapply;\\[process_[0-9]+\\];FUN;r_burn;/wtest_burn\\.so::burn_a", main_paths)),
    info = paste(head(main_paths), collapse = "\n")
  )
  # The framework's frames show only in a sample of a child that ran
  # nothing else (sending its result back, between two tasks): right under
  # its [process N], never around a task.
  plumbing <- grepl("sendMaster|tryCatch|mcfork|;lapply;", rows$stack)
  expect_false(any(plumbing & grepl(";FUN;", rows$stack, fixed = TRUE)))
  expect_true(all(grepl("^work;(parallel::)?mclapply;\\[process_[0-9]+\\];(sendMaster|mcexit|serialize|try|tryCatch|lapply)", rows$stack[plumbing])),
    info = paste(rows$stack[plumbing], collapse = "\n")
  )
  expect_lt(sum(rows$samples[plumbing]), 0.1 * sum(rows$samples))
  # Each child's samples are its CPU time (within 15 % and 20 ms): two
  # children of mc.cores = 2 ran two tasks of 0.3 s each.
  s <- summary(p)
  pr <- s$by_process
  children <- pr[pr$process != "self", , drop = FALSE]
  expect_identical(nrow(children), 2L)
  for (i in seq_len(nrow(children))) {
    expect_equal(children$sampled[[i]], children$cpu[[i]], tolerance = 0.15 * children$cpu[[i]] + 0.02,
      info = children$process[[i]]
    )
    expect_gt(children$cpu[[i]], 0.55)
  }
  expect_true(all(children$pid != Sys.getpid()))
  expect_true(all(nzchar(children$command)))
  # Almost nothing of the tree's CPU time is unseen.
  expect_lt(s$unseen, 0.2)
  # Every child's samples are in the Rprof file under its frame.
  out <- tempfile()
  winch_write_rprof(p, out)
  expect_true(any(grepl("\"[process_1]\"", readLines(out), fixed = TRUE)))
})

test_that("no child's CPU time goes unsampled when busy processes compete for the cores", {
  skip_if(parallel::detectCores() < 2, "mclapply() needs 2 cores")
  # Four processes burning CPU: a child's CPU timer then goes tens of ms
  # without a signal; its next sample stands for the time, but what it
  # burned after its last one was lost when it ended (0.34 s of a child's
  # 0.59 s once). A child's watch asks for a sample two intervals of wall
  # time after the last while it runs: at most its last intervals and
  # what it ran after its watch's last signal (sending its result,
  # exiting) may go unsampled, and the kernel's figure is in 10 ms ticks.
  for (i in 1:4) local_child_command("yes > /dev/null")
  task <- function(i) r_burn(0.3)
  for (k in 1:3) {
    p <- winch_profile(parallel::mclapply(1:2, task, mc.cores = 2), interval = 0.005)
    pr <- summary(p)$by_process
    children <- pr[pr$process != "self", , drop = FALSE]
    expect_identical(nrow(children), 2L)
    for (i in seq_len(nrow(children))) {
      got <- sprintf("%s: sampled %.3f s of %.3f s", children$process[[i]], children$sampled[[i]], children$cpu[[i]])
      expect_gt(children$sampled[[i]], children$cpu[[i]] - 3 * 0.005 - 0.01, label = got)
      expect_lte(children$sampled[[i]], children$cpu[[i]] + 0.001, label = got)
    }
  }
})

test_that("a child of mcparallel() is under mcparallel, and mccollect() waits in the parent", {
  start <- function() parallel::mcparallel(r_burn(0.4))
  p <- winch_profile(
    {
      job <- start()
      parallel::mccollect(job)
    },
    interval = 0.005
  )
  rows <- process_rows(p)
  burning <- rows[grepl("burn_a", rows$stack, fixed = TRUE), , drop = FALSE]
  expect_gt(sum(burning$samples) * p$interval, 0.3)
  expect_true(all(grepl("^start;(parallel::)?mcparallel;\\[process_1\\];r_burn;", burning$stack)),
    info = paste(burning$stack, collapse = "\n")
  )
})

test_that("many short children are counted, and every one is let go of", {
  quick <- function(i) r_burn(0.005)
  p <- winch_profile(parallel::mclapply(1:60, quick, mc.cores = 2, mc.preschedule = FALSE), interval = 0.002)
  s <- summary(p)
  pr <- s$by_process
  # Sampled or not, their CPU time is in the profile's account.
  expect_gt(nrow(pr), 1L)
  expect_false(is.na(s$unseen))
  # The slots are free again: the next profile samples its children.
  again <- winch_profile(parallel::mclapply(1:2, function(i) r_burn(0.2), mc.cores = 2), interval = 0.005)
  expect_identical(nrow(summary(again)$by_process), 3L)
})

test_that("processes = \"self\" samples this process only, and the children's CPU time is unseen", {
  work <- function() parallel::mclapply(1:2, function(i) r_burn(0.3), mc.cores = 2)
  p <- winch_profile(work(), interval = 0.005, processes = "self")
  expect_identical(nrow(process_rows(p)), 0L)
  expect_false(any(grepl("[process_", as.data.frame(p)$stack, fixed = TRUE)))
  # The children ended: their CPU time is the profile's unseen share,
  # whether mclapply() had waited for both of them by then or not.
  expect_gt(summary(p)$unseen, 0.5)
})

test_that("a child not waited for when the profile ends is in the unseen share with the CPU time it used", {
  job <- NULL
  # The child burns 0.3 s; the profile ends once it has used 0.25 s (its
  # own account, /proc), before anyone waits for it.
  child_cpu <- function(pid) {
    u <- winch:::rs_target_usage(pid)
    u$user + u$system
  }
  p <- winch_profile(
    {
      job <- parallel::mcparallel(r_burn(0.3))
      deadline <- Sys.time() + 60
      while (child_cpu(job$pid) < 0.25 && Sys.time() < deadline) Sys.sleep(0.01)
    },
    interval = 0.005, processes = "self"
  )
  on.exit(parallel::mccollect(job), add = TRUE)
  u <- p$stats$usage
  # (Sums of clock ticks and microseconds: the exact 0.25 can come out a
  # few 1e-15 below it; compared to the microsecond.)
  expect_gte(round(u$children_user + u$children_system, 6), 0.25)
  expect_gt(summary(p)$unseen, 0.5)
})

test_that("the parent's wait for its workers shows in an elapsed-time profile, under mclapply", {
  skip_if(parallel::detectCores() < 2, "mclapply() needs 2 cores")
  work <- function() parallel::mclapply(1:2, function(i) r_burn(0.3), mc.cores = 2)
  p <- winch_profile(work(), interval = 0.005, event = "elapsed")
  d <- as.data.frame(p)
  self <- d[d$process == "self", , drop = FALSE]
  waiting <- grepl("^work;(parallel::)?mclapply;.*selectChildren", self$stack)
  # The workers burn 0.3 s of CPU each, side by side: the parent waits
  # that long at least (longer on a busy machine).
  expect_gt(sum(self$samples[waiting]) * p$interval, 0.15)
  # A CPU profile has no samples of the wait (it uses no CPU).
  q <- winch_profile(work(), interval = 0.005)
  cpu <- as.data.frame(q)
  expect_lt(sum(cpu$samples[cpu$process == "self" & grepl("selectChildren", cpu$stack)]) * q$interval, 0.05)
})

test_that("a child that profiles itself stops sampling for its parent", {
  inner <- function(i) {
    q <- winch_profile(r_burn(0.2), interval = 0.005)
    sum(as.data.frame(q)$samples[grepl("burn_a", as.data.frame(q)$stack, fixed = TRUE)])
  }
  counts <- NULL
  # The children's burns are in their own profiles, not in this one: said.
  expect_warning(
    p <- winch_profile(counts <- parallel::mclapply(1:2, inner, mc.cores = 2), interval = 0.005),
    "sampled children or workers most of whose CPU time",
    class = "winch_warning_processes_unsampled"
  )
  # Each child lived to return (a child killed by the sampling signal
  # returns a try-error), and its own profile saw its burn.
  expect_length(counts, 2)
  for (n in counts) {
    expect_type(n, "double")
    expect_gt(n * 0.005, 0.12)
  }
  expect_s3_class(p, "winch_profile")

  # mcparallel()'s child too: its sampling timer for the parent is the
  # child's first, whose id is 0, and it is deleted all the same.
  q <- NULL
  expect_warning(
    p <- winch_profile({
      job <- parallel::mcparallel(inner(1))
      q <- parallel::mccollect(job, wait = TRUE)[[1]]
    }, interval = 0.005),
    "sampled children or workers most of whose CPU time",
    class = "winch_warning_processes_unsampled"
  )
  expect_type(q, "double")
  expect_gt(q * 0.005, 0.12)
})

test_that("bad values of `processes` are refused before expr runs", {
  ran <- FALSE
  for (bad in list("none", NA, 1, c("all", "self", "x"), NULL)) {
    expect_error(winch_profile(ran <- TRUE, processes = bad), class = "winch_error_bad_argument")
  }
  expect_error(winch_rprof(tempfile(), processes = "x"), class = "winch_error_bad_argument")
  expect_false(ran)
})
