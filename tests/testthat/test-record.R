skip_if_not(winch_available(), "native unwinding is not available on this platform")
skip_if_not(Sys.info()[["sysname"]] == "Linux" && R.version$arch == "x86_64", "winch_record() reads x86_64 Linux processes")

# winch_record(): profiles of another process, which never loaded winch,
# sampled from outside. Children are R scripts (helper-outside.R), killed
# when each test ends.

burn <- build_clib("wtest_burn", "burn.c")

burn_child_code <- function(body) {
  c(
    sprintf("dyn.load(%s)", deparse(burn$path)),
    "r_a <- function(t) .Call('burn_a', t, PACKAGE = 'wtest_burn')",
    "r_b <- function(t) .Call('burn_b', t, PACKAGE = 'wtest_burn')",
    body
  )
}

test_that("a recording has the same stacks and labels as an in-process profile, in the right shares", {
  # 3:1 CPU between burn_a (under r_a) and burn_b (under r_b), from one
  # R function's loop.
  child <- local_r_child(burn_child_code(c(
    "work <- function() repeat { r_a(0.03); r_b(0.01) }",
    "file.create(ready)",
    "work()"
  )))
  p <- winch_record(child$pid, duration = 3, interval = 0.01)
  expect_s3_class(p, "winch_profile")
  expect_identical(p$target$pid, child$pid)
  expect_false(p$target$ended)
  expect_gt(sum(p$stacks$count), 50)
  A <- "/wtest_burn.so::burn_a"
  B <- "/wtest_burn.so::burn_b"
  expect_setequal(paths_from(p, A), path(A, "r_a", "work[repeat]", "work"))
  expect_setequal(paths_from(p, B), path(B, "r_b", "work[repeat]", "work"))
  a <- seconds_in(p, A)
  b <- seconds_in(p, B)
  expect_gt(a + b, 0.8 * sum(p$stacks$count) * p$interval)
  expect_equal(a / (a + b), 0.75, tolerance = 0.15 / 0.75)
  # The samples add up to the CPU time the process used (its kernel's
  # count), whatever its share of a core.
  th <- summary(p)$by_thread
  expect_equal(th$sampled[[1L]], th$cpu[[1L]], tolerance = 0.2)
  # It goes on running.
  expect_true(process_state(child$pid) %in% c("R", "S"))
  # The formats read it as they read in-process profiles.
  out <- tempfile(fileext = ".out")
  winch_write_rprof(p, out)
  s <- summaryRprof(out)
  expect_true(all(c("\"r_a\"", "\"work\"") %in% rownames(s$by.total)) || all(c("r_a", "work") %in% rownames(s$by.total)))
  expect_output(print(p), "samples of CPU time")
  expect_output(print(summary(p)), "By function")
})

# The R part of each sample of an Rprof file written with lines = TRUE
# that holds `leaf`: from the first R frame out, positions as "path#line"
# (file numbers differ between files).
r_parts <- function(out, leaf) {
  lines <- readLines(out)
  files <- lines[startsWith(lines, "#File ")]
  paths <- setNames(
    normalizePath(sub("^#File [0-9]+: ", "", files), mustWork = FALSE),
    sub("^#File ([0-9]+): .*$", "\\1", files)
  )
  samples <- lines[-1L][!startsWith(lines[-1L], "#")]
  samples <- samples[grepl(leaf, samples, fixed = TRUE)]
  parts <- vapply(samples, function(s) {
    tok <- regmatches(s, gregexpr('([0-9]+#[0-9]+ )?"[^"]*"', s))[[1L]]
    first_r <- which(!grepl('"/', tok, fixed = TRUE) & tok != '"[kernel]"')[1L]
    if (is.na(first_r)) return(NA_character_)
    tok <- tok[first_r:length(tok)]
    num <- sub("^([0-9]+)#.*$", "\\1", tok)
    has <- grepl("^[0-9]+#", tok)
    tok[has] <- paste0(paths[num[has]], substring(tok[has], nchar(num[has]) + 1L))
    paste(tok, collapse = " ")
  }, "", USE.NAMES = FALSE)
  sort(unique(parts[!is.na(parts)]))
}

# R code with loops, in a file sourced with keep.source = TRUE, AST or byte
# code: recorded from outside and profiled in this process, the same R
# frames, loops and lines.
for (mode in c("ast", "bytecode")) {
  test_that(paste0("loops and source lines are read from outside as in-process (", mode, ")"), {
    src <- tempfile(fileext = ".R")
    writeLines(c(
      "r_a <- function(t) .Call(\"burn_a\", t, PACKAGE = \"wtest_burn\")",
      "r_b <- function(t) .Call(\"burn_b\", t, PACKAGE = \"wtest_burn\")",
      "work <- function(n) {",
      "  for (i in seq_len(n)) {",
      "    r_a(0.03)",
      "    j <- 0",
      "    while (j < 1) {",
      "      j <- j + 1",
      "      r_b(0.01)",
      "    }",
      "  }",
      "}"
    ), src)
    setup <- c(
      if (mode == "ast") "compiler::enableJIT(0L)",
      sprintf("e <- new.env(); sys.source(%s, envir = e, keep.source = TRUE)", deparse(src)),
      if (mode == "bytecode") "for (f in c('r_a', 'r_b', 'work')) e[[f]] <- compiler::cmpfun(e[[f]])"
    )
    child <- local_r_child(c(
      sprintf("dyn.load(%s)", deparse(burn$path)),
      setup,
      "file.create(ready)",
      "work <- e$work",
      "work(1e6)"
    ))
    rec <- tempfile(fileext = ".out")
    p <- winch_record(child$pid, duration = 2, interval = 0.01, file = rec, lines = TRUE)
    expect_true(p$options$lines)
    A <- "/wtest_burn.so::burn_a"
    B <- "/wtest_burn.so::burn_b"
    expect_setequal(paths_from(p, A), path(A, "r_a", "work[for]", "work"))
    expect_setequal(paths_from(p, B), path(B, "r_b", "work[while]", "work[for]", "work"))

    # The same code in this process.
    dyn.load(burn$path)
    on.exit(dyn.unload(burn$path), add = TRUE)
    old <- compiler::enableJIT(if (mode == "ast") 0L else compiler::enableJIT(-1L))
    on.exit(compiler::enableJIT(old), add = TRUE)
    e <- new.env()
    sys.source(src, envir = e, keep.source = TRUE)
    if (mode == "bytecode") for (f in c("r_a", "r_b", "work")) e[[f]] <- compiler::cmpfun(e[[f]])
    here <- tempfile(fileext = ".out")
    work <- e$work
    winch_profile(work(12), file = here, interval = 0.01, lines = TRUE)
    for (leaf in c("burn_a", "burn_b")) {
      expect_identical(r_parts(rec, leaf), r_parts(here, leaf), label = paste("recorded", leaf))
    }
    # Positions are the file's lines: r_a's .Call, work's call of r_a.
    at <- function(line, label) paste0(normalizePath(src), "#", line, " \"", label, "\"")
    expect_match(r_parts(rec, "burn_a"), at(1, "r_a"), fixed = TRUE)
    expect_match(r_parts(rec, "burn_a"), at(5, "work"), fixed = TRUE)
  })
}

test_that("a recording ends when the process ends, and writes Rprof's file on request", {
  child <- local_r_child(burn_child_code(c(
    "file.create(ready)",
    # Long enough to outlast the recorder's start on a loaded machine (2 s
    # did not once on CI: the file had no sample of the burn).
    "r_a(4)"
  )))
  out <- tempfile(fileext = ".out")
  t0 <- Sys.time()
  p <- winch_record(child$pid, duration = 30, file = out)
  expect_lt(as.numeric(Sys.time() - t0, units = "secs"), 25)
  expect_true(p$target$ended)
  expect_true(file.exists(out))
  lines <- readLines(out)
  expect_true(
    any(grepl("burn_a", lines, fixed = TRUE)),
    info = paste(c(sprintf("%d lines written:", length(lines)), utils::head(lines, 5)), collapse = "\n")
  )
})

test_that("other threads are recorded under [thread_N]; idle = TRUE samples waiting threads too", {
  child <- local_threads_child()
  p <- winch_record(child$pid, duration = 1)
  stacks <- stack_labels(p)
  spin <- vapply(stacks, function(s) "/wtest_threads.so::detached_main" %in% s, NA)
  expect_true(any(spin))
  expect_true(all(vapply(stacks[spin], function(s) grepl("^\\[thread_[0-9]+\\]$", s[[length(s)]]), NA)))
  # The main thread sleeps: not sampled by default.
  expect_false(any(vapply(stacks, function(s) "wait" %in% s, NA)))
  p_idle <- winch_record(child$pid, duration = 1, idle = TRUE)
  expect_identical(p_idle$event, "elapsed")
  expect_true(any(vapply(stack_labels(p_idle), function(s) all(c("Sys.sleep", "wait") %in% s), NA)))
  expect_true(nrow(p$threads) >= 2L)
})

test_that("a CPU profile of a process that works and sleeps in turn has its work and none of its sleep", {
  # Half the time burning in burn_a, half asleep: a thread that ran since
  # the last sample but sleeps now is not sampled in its sleep (it was: a
  # quarter of the samples were in Sys.sleep()).
  child <- local_r_child(burn_child_code(c(
    "serve <- function() repeat { Sys.sleep(0.02); r_a(0.02) }",
    "file.create(ready)",
    "serve()"
  )))
  p <- winch_record(child$pid, duration = 2)
  stacks <- stack_labels(p)
  asleep <- vapply(stacks, function(s) "Sys.sleep" %in% s, NA)
  working <- vapply(stacks, function(s) "/wtest_burn.so::burn_a" %in% s, NA)
  # (A thread seen running just as it goes to sleep may be stopped in the
  # call: a few samples, 0 to 5 % in the runs seen.)
  expect_lte(sum(p$stacks$count[asleep]), 0.1 * sum(p$stacks$count))
  expect_gt(sum(p$stacks$count[working]), 0.9 * sum(p$stacks$count))
  # The samples add up to the CPU time it used (the kernel's count: about
  # half the time on a quiet machine, less on a busy one), its sleep not
  # among them.
  th <- summary(p)$by_thread
  expect_gt(th$cpu[[1L]], 0.1)
  expect_equal(th$sampled[[1L]], th$cpu[[1L]], tolerance = 0.1,
    info = sprintf("sampled %.3f s, CPU %.3f s", th$sampled[[1L]], th$cpu[[1L]])
  )
  # With idle = TRUE, its sleep too.
  p_idle <- winch_record(child$pid, duration = 1, idle = TRUE)
  expect_true(any(vapply(stack_labels(p_idle), function(s) "Sys.sleep" %in% s, NA)))
})

test_that("an error while recording leaves the process running and nothing recording", {
  child <- local_r_child(burn_child_code(c("file.create(ready)", "r_a(100)")))
  n <- 0
  ns <- asNamespace("winch")
  real <- ns$rs_record_tick
  unlockBinding("rs_record_tick", ns)
  assign("rs_record_tick", function() {
    n <<- n + 1
    if (n > 3) stop("boom")
    real()
  }, envir = ns)
  on.exit({
    assign("rs_record_tick", real, envir = ns)
    lockBinding("rs_record_tick", ns)
  }, add = TRUE)
  expect_error(winch_record(child$pid, duration = 5), "boom")
  expect_false(winch:::rs_record_discard())
  Sys.sleep(0.1)
  expect_true(process_state(child$pid) %in% c("R", "S"))
})

# What every recording of a process's workers shows: exactly `workers`
# recorded, each working for `parent`, none left out, and each worker's
# samples adding up to the CPU time it used while recorded (its kernel's
# count), as a single process's do. Returns each worker's stacks (as
# as.data.frame() writes them), by pid.
expect_workers_recorded <- function(p, workers, parent) {
  kids <- p$target$children
  expect_identical(sort(kids$pid), sort(workers))
  expect_true(all(kids$parent == parent))
  expect_identical(nrow(p$target$not_recorded), 0L)
  pr <- summary(p)$by_process
  for (w in workers) {
    row <- pr[pr$pid == w, ]
    expect_equal(row$sampled, row$cpu, tolerance = 0.1, info = sprintf("sampled %.3f, CPU %.3f", row$sampled, row$cpu))
    expect_gt(row$sampled, 0.3)
  }
  d <- as.data.frame(p)
  host <- Sys.info()[["nodename"]]
  stats::setNames(lapply(workers, function(w) d$stack[d$process == sprintf("process %s:%d", host, w)]), workers)
}

test_that("children = TRUE records every worker of mclapply() under its own [process] frame", {
  skip_if(!length(Sys.glob("/proc/self/task/*/children")), "this kernel does not list children in /proc")
  child <- local_r_child(c(burn_child_code(character()), mclapply_child_code("r_a(100)")))
  workers <- child_pids(child$pid)
  withr::defer(for (w in workers) kill_child(w))
  expect_length(workers, 2L)
  p <- winch_record(child$pid, duration = 1.5, children = TRUE)
  stacks <- expect_workers_recorded(p, workers, child$pid)
  expect_false(any(p$target$children$ended))
  expect_identical(sort(summary(p)$by_process$pid), sort(as.double(c(child$pid, workers))))
  # A worker's stack: its own frame, then its parent's calls that forked
  # it, then the work.
  host <- Sys.info()[["nodename"]]
  for (w in workers) {
    mine <- stacks[[as.character(w)]]
    expect_true(any(startsWith(mine, sprintf("[process_%s:%d];hold;parallel::mclapply;", host, w)) &
      grepl("/wtest_burn.so::burn_a", mine, fixed = TRUE)), info = paste(mine, collapse = "\n"))
  }
  # Without children = TRUE: the process alone, as before.
  q <- winch_record(child$pid, duration = 0.2)
  expect_null(q$target$children)
  expect_identical(nrow(summary(q)$by_process), 1L)
})

test_that("children = TRUE records the workers of parLapply(), which are not its descendants", {
  setup <- burn_child_code(character())
  child <- local_r_child(c(setup, psock_child_code("r_a(100)", setup = setup)))
  workers <- local_psock_workers(child)
  p <- winch_record(child$pid, duration = 1.5, children = TRUE)
  # (Found within a quarter of a second of the start.)
  stacks <- expect_workers_recorded(p, workers, child$pid)
  expect_identical(p$target$children$relation, c("worker", "worker"))
  # A worker's stack: its own frame, parallel's loop, the work, the
  # native function it burns in.
  host <- Sys.info()[["nodename"]]
  for (w in workers) {
    mine <- stacks[[as.character(w)]]
    expect_true(any(startsWith(mine, sprintf("[process_%s:%d];", host, w)) & grepl(";workLoop;", mine, fixed = TRUE) &
      grepl(";FUN;r_a;", mine, fixed = TRUE) & grepl("/wtest_burn.so::burn_a", mine, fixed = TRUE)), info = paste(mine, collapse = "\n"))
  }
})

test_that("bad arguments are refused before the process is touched", {
  expect_error(winch_record(Sys.getpid(), 1), class = "winch_error_bad_argument")
  expect_error(winch_record("1", 1), class = "winch_error_bad_argument")
  for (d in list(0, -1, NA, "1", c(1, 2), Inf)) {
    expect_error(winch_record(1, d), class = "winch_error_bad_argument")
  }
  for (i in list(0, 0.0001, NA, "0.1", 2)) {
    expect_error(winch_record(1, 1, interval = i), class = "winch_error_bad_argument")
  }
  expect_error(winch_record(1, 1, threads = "some"), class = "winch_error_bad_argument")
  expect_error(winch_record(1, 1, idle = NA), class = "winch_error_bad_argument")
  expect_error(winch_record(1, 1, children = NA), class = "winch_error_bad_argument")
  expect_error(winch_record(1, 1, file = file.path(tempfile(), "x.out")), class = "winch_error_bad_argument")
  child <- local_child_command("true")
  expect_true(wait_exit(child$pid))
  expect_error(winch_record(child$pid, 1), class = "winch_error_no_process")
})

test_that("a kernel thread is refused with the reason: it has no user memory to read", {
  stat <- tryCatch(readLines("/proc/2/stat", warn = FALSE)[[1L]], error = function(e) "")
  flags <- suppressWarnings(as.numeric(strsplit(sub("^.*\\) ", "", stat), " ")[[1L]][7L]))
  skip_if(is.na(flags) || (flags %/% 2^21) %% 2 != 1, "process 2 is not a kernel thread here")
  expect_error(winch_record(2, 0.1), "is a kernel thread", class = "winch_error_bad_argument")
})

test_that("the command line records a process into the file format its name says", {
  cli <- system.file("bin", "winch", package = "winch")
  skip_if(!nzchar(cli), "winch's command line is not installed")
  child <- local_r_child(burn_child_code(c("file.create(ready)", "r_a(100)")))
  out <- tempfile(fileext = ".pb.gz")
  res <- suppressWarnings(system2(cli, c("record", child$pid, "-d", "1", "-o", out), stdout = TRUE, stderr = TRUE, env = c(
    paste0("R_LIBS=", paste(.libPaths(), collapse = ":")),
    paste0("RSCRIPT=", file.path(R.home("bin"), "Rscript"))
  )))
  expect_null(attr(res, "status"), info = paste(res, collapse = "\n"))
  expect_true(file.exists(out))
  expect_identical(readBin(out, "raw", 2L), as.raw(c(0x1f, 0x8b))) # gzip
  expect_true(any(grepl("samples of process", res, fixed = TRUE)))
  # --children: a summary by process (this child has none: itself alone).
  kids <- suppressWarnings(system2(cli, c("record", child$pid, "-d", "0.3", "--children"), stdout = TRUE, stderr = TRUE, env = c(
    paste0("R_LIBS=", paste(.libPaths(), collapse = ":")),
    paste0("RSCRIPT=", file.path(R.home("bin"), "Rscript"))
  )))
  expect_null(attr(kids, "status"), info = paste(kids, collapse = "\n"))
  expect_true(any(grepl(sprintf("[process_%s:%d]", Sys.info()[["nodename"]], child$pid), kids, fixed = TRUE)),
    info = paste(kids, collapse = "\n")
  )
})

test_that("garbage collection in the recorded process is a <GC> frame under the code that allocated", {
  child <- local_r_child(c(
    "work <- function() repeat x <- lapply(1:2000, function(i) numeric(50))",
    "file.create(ready)",
    "work()"
  ))
  p <- winch_record(child$pid, duration = 2)
  stacks <- stack_labels(p)
  in_gc <- vapply(stacks, function(s) "<GC>" %in% s, NA)
  expect_true(any(in_gc))
  # (Innermost but for the collector's kernel time under it.)
  expect_true(all(vapply(stacks[in_gc], function(s) own_labels(s)[[1L]] == "<GC>" && "work" %in% s, NA)))
  # The collector's own functions are not shown.
  expect_false(any(grepl("R_gc|RunGenCollect", unlist(stacks))))
})

test_that("another process's resource use is read as this process's is", {
  # This process, through /proc and through getrusage(): the same figures
  # (CPU times to a tick or two, peak RSS to a page).
  t0 <- proc.time()
  while ((proc.time() - t0)[["user.self"]] < 0.2) NULL
  mine <- winch:::resource_usage()
  there <- winch:::target_usage(Sys.getpid())
  expect_identical(names(there), names(mine))
  expect_true(all(vapply(there, is.double, logical(1))))
  expect_equal(there$user, mine$user, tolerance = 0.05 / mine$user)
  expect_gt(there$max_rss, 0)
  expect_equal(there$max_rss, mine$max_rss, tolerance = 0.05)
  expect_gte(there$minor_faults, 1)
  expect_true(is.na(there$block_input) && is.na(there$block_output))
  # A process that is gone: every figure NA.
  gone <- winch:::target_usage(.Machine$integer.max)
  expect_true(all(vapply(gone, is.na, logical(1))))
})
