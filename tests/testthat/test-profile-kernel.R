skip_if_not(winch_available(), "native unwinding is not available on this platform")

# The kernel's share of a CPU profile: a sample that stands for the
# kernel's time has `[kernel]` innermost, under where the thread was (the
# system call's wrapper), and such samples are the share of the thread's
# CPU time the kernel counted as system time (clib/syscalls.c alternates
# its own arithmetic with sched_yield() calls and returns what the kernel
# counted).

syscalls <- function() compile_clib("wtest_syscalls", "syscalls.c")
mix <- function(secs, work) .Call("sys_mix", secs, as.integer(work), PACKAGE = "wtest_syscalls")

# Shares of `p`'s samples: in the kernel; of those, with a system call's
# wrapper as the frame outside `[kernel]`; and of the others, in the
# wrapper (what `[kernel]` placed at random would give).
kernel_shares <- function(p) {
  d <- as.data.frame(p)
  kernel <- endsWith(d$stack, ";[kernel]") | d$stack == "[kernel]"
  at_wrapper <- grepl("(sched_yield|clock_gettime)(;\\[kernel\\])?$", d$stack)
  c(
    kernel = sum(d$samples[kernel]) / sum(d$samples),
    wrapper = sum(d$samples[kernel & at_wrapper]) / max(1, sum(d$samples[kernel])),
    random = sum(d$samples[!kernel & at_wrapper]) / max(1, sum(d$samples[!kernel]))
  )
}

test_that("the kernel's share of the samples is the system share of the thread's CPU time", {
  syscalls()
  # Mostly system time, about half, and almost none.
  profiles <- list()
  for (work in c(0L, 2000L, 200000L)) {
    used <- NULL
    p <- profiles[[length(profiles) + 1L]] <- winch_profile(used <- mix(1, work), interval = 0.002)
    system <- used[[2L]] / sum(used)
    s <- kernel_shares(p)
    info <- sprintf("work %d: system share %.3f, [kernel] share %.3f", work, system, s[["kernel"]])
    expect_equal(s[["kernel"]], system, tolerance = 0.05 / max(system, 0.05), info = info)
    if (work == 2000L) {
      # Where the thread was: the system call's wrapper. The other samples
      # are away from it (1 - random) in a share that depends on what a
      # system call costs on this machine; `[kernel]` samples are away
      # from it at most half as often (placed at random: as often).
      away <- sprintf("[kernel] samples away from the wrapper (%s; at it: %.3f of [kernel], %.3f of the others)",
                      info, s[["wrapper"]], s[["random"]])
      expect_lte(1 - s[["wrapper"]], 0.5 * (1 - s[["random"]]), label = away)
    }
  }
  # `[kernel]` is a frame of its own kind.
  p <- profiles[[1L]]
  f <- p$functions[p$functions$name == "[kernel]", ]
  expect_identical(f$kind, "kernel")
  expect_identical(f$label, "[kernel]")
})

test_that("on a busy machine, samples are not moved to the system call where the scheduler stopped the thread", {
  # A burn that reads its CPU clock every few microseconds (a system call:
  # the vDSO cannot read a thread's CPU clock), among four busy processes.
  # The scheduler stops it most often on its way out of that call, and a
  # timer's signal sent meanwhile is delivered there: taken there, 5 % to
  # 30 % of the samples were on the clock's wrapper where the kernel
  # counted 3 % to 9 % of the time as system time (the wrapper's own code
  # takes nearly none). Such a sample is taken by the thread's watch, where
  # it runs (see ?winch_profile, "Threads").
  syscalls()
  for (i in 1:4) local_child_command("yes > /dev/null")
  at <- 0
  all <- 0
  system <- 0
  for (k in 1:4) {
    used <- NULL
    p <- winch_profile(used <- .Call("clock_mix", 1, 4000L, PACKAGE = "wtest_syscalls"), interval = 0.002)
    d <- as.data.frame(p)
    at <- at + sum(d$samples[grepl("clock_gettime(;\\[kernel\\])?$", d$stack)])
    all <- all + sum(d$samples)
    system <- system + used[[2L]] / sum(used) * sum(d$samples)
  }
  expect_lt(at / all, system / all + 0.05,
    label = sprintf("share of samples on the clock's wrapper (%.3f; system share %.3f)", at / all, system / all))
})

test_that("no [kernel] frame where samples do not stand for CPU time", {
  syscalls()
  p <- winch_profile(mix(0.3, 0L), interval = 0.002, event = "elapsed")
  expect_false("[kernel]" %in% p$functions$name)
  p <- winch_profile(for (i in 1:20) mix(0.01, 0L), event = "alloc", sample_bytes = 64)
  expect_false("[kernel]" %in% p$functions$name)
})

test_that("[kernel] is written to every format", {
  syscalls()
  p <- winch_profile(mix(0.5, 0L), interval = 0.002)
  expect_true("[kernel]" %in% p$functions$name)
  rprof <- tempfile()
  winch_write_rprof(p, rprof)
  expect_true(any(grepl("\"[kernel]\"", readLines(rprof), fixed = TRUE)))
  collapsed <- tempfile()
  winch_write_collapsed(p, collapsed)
  expect_true(any(grepl(";[kernel] ", readLines(collapsed), fixed = TRUE)))
})

test_that("a recording from outside shows the kernel's share as the thread's system ticks give it", {
  lib <- build_clib_once("wtest_syscalls", "syscalls.c")
  child <- local_r_child(c(
    sprintf("dyn.load(%s)", deparse(lib$path)),
    "file.create(ready)",
    "repeat .Call('sys_mix', 10, 2000L, PACKAGE = 'wtest_syscalls')"
  ))
  ticks <- function() {
    f <- strsplit(sub("^.*\\) ", "", readLines(sprintf("/proc/%d/stat", child$pid), warn = FALSE)[[1L]]), " ")[[1L]]
    as.numeric(f[12:13])
  }
  before <- ticks()
  p <- winch_record(child$pid, duration = 2, interval = 0.01)
  used <- ticks() - before
  # (A thread that yields the CPU at once to busy processes is rarely seen
  # running: on a loaded machine there may be nothing to compare.)
  skip_if(sum(p$stacks$count) < 50, "the child got too little CPU time to be sampled (a loaded machine)")
  system <- used[[2L]] / sum(used)
  s <- kernel_shares(p)
  info <- sprintf("system share %.3f, [kernel] share %.3f", system, s[["kernel"]])
  expect_gt(system, 0.2)
  expect_equal(s[["kernel"]], system, tolerance = 0.1 / system, info = info)
  # (From outside, `[kernel]` goes to the samples in turn as the thread's
  # system share comes due, wherever the thread was: see ?winch_record.)
})
