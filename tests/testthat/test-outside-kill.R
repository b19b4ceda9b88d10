skip_if_not(winch_available(), "native unwinding is not available on this platform")
skip_if_not(Sys.info()[["sysname"]] == "Linux" && R.version$arch == "x86_64", "winch reads x86_64 Linux processes")

# A target killed while winch_dump() or winch_record() reads it must be
# released at once: no thread of it left traced, and its parent reaps it
# with its real status (SIGKILL) as if winch had never been there. Targets
# are R children of this test process (so it is the parent that reaps,
# helper-outside.R), 8 threads spinning and the main thread in R code;
# each kills itself at a random moment after it is ready, while it is read
# in a loop: by this R process (then the tracer is the parent too, whose
# own waitpid() must still get the status), or by another R process (the
# case of a target that is not the reader's child).

# After a target has died: no thread of it traced, and its parent (this
# process) reaps it at once, killed by SIGKILL.
expect_released <- function(pid, info) {
  tracers <- tracer_pids(pid)
  expect_true(all(tracers == 0L), info = paste(info, "traced:", paste(names(tracers), tracers, collapse = " ")))
  reaped <- reap_own_child(pid, 3)
  expect_identical(reaped[c("how", "value")], list(how = "signaled", value = 9L), info = paste(info, reaped$seconds))
  reaped
}

# Reads process `pid` with `read` until it is gone (at most `limit`
# seconds): how many reads returned, and the classes of the errors.
read_until_gone <- function(pid, read, limit = 15) {
  deadline <- Sys.time() + limit
  ok <- 0L
  errors <- character()
  while (Sys.time() < deadline) {
    r <- tryCatch(read(pid), error = identity)
    if (inherits(r, "error")) {
      errors <- c(errors, class(r)[[1L]])
      if (inherits(r, "winch_error_no_process")) break
    } else {
      ok <- ok + 1L
    }
    if (!process_alive(pid)) break
  }
  list(ok = ok, errors = unique(errors))
}

dump_it <- function(pid) winch_dump(pid)
record_it <- function(pid) {
  p <- winch_record(pid, duration = 10, interval = 0.001)
  if (!isTRUE(p$target$ended)) stop("the recording did not see the process end")
  p
}

test_that("a target killed while this process reads it is released and reaped by its parent (this process)", {
  set.seed(33)
  rounds <- c(dump = 8L, record = 6L)
  for (what in names(rounds)) {
    read <- if (what == "dump") dump_it else record_it
    for (i in seq_len(rounds[[what]])) {
      delay <- round(runif(1, 0.05, 0.6), 3)
      child <- local_own_r_child(spinning_child_code(8L, die_after = delay))
      got <- read_until_gone(child$pid, read)
      info <- sprintf("%s round %d (killed %.3f s after ready)", what, i, delay)
      # Every error on the way is a classed one.
      expect_true(all(grepl("^winch_error_", got$errors)), info = paste(info, paste(got$errors, collapse = " ")))
      expect_released(child$pid, info)
    }
  }
})

test_that("a target killed while another R process reads it is released and reaped by its parent (this process)", {
  # The reader: an R process of its own that reads each target it is given
  # (file job-K: "pid what") until it is gone, then says so (done-K), and
  # stays alive: what it left traced would stay so.
  dir <- tempfile("reader-")
  dir.create(dir)
  reader <- local_r_child(c(
    "library(winch)",
    sprintf("dir <- %s", deparse(dir)),
    "alive <- function(pid) { st <- tryCatch(readLines(sprintf('/proc/%d/stat', pid)), error = function(e) ''); nzchar(st[[1L]]) && !grepl('^[0-9]+ \\\\(.*\\\\) [ZX] ', st[[1L]]) }",
    "read <- list(dump = function(pid) winch_dump(pid), record = function(pid) winch_record(pid, duration = 10, interval = 0.001))",
    "file.create(ready)",
    "for (k in 1:1000) {",
    "  job <- file.path(dir, paste0('job-', k))",
    "  while (!file.exists(job)) Sys.sleep(0.005)",
    "  args <- strsplit(readLines(job), ' ')[[1L]]",
    "  pid <- as.integer(args[[1L]])",
    "  ok <- 0L; errors <- character(); t0 <- Sys.time()",
    "  while (Sys.time() - t0 < 15) {",
    "    r <- tryCatch(read[[args[[2L]]]](pid), error = identity)",
    "    if (inherits(r, 'error')) { errors <- c(errors, class(r)[[1L]]); if (inherits(r, 'winch_error_no_process')) break } else ok <- ok + 1L",
    "    if (!alive(pid)) break",
    "  }",
    "  tmp <- file.path(dir, paste0('tmp-done-', k))",
    "  writeLines(c(ok, unique(errors)), tmp)",
    "  file.rename(tmp, file.path(dir, paste0('done-', k)))",
    "}"
  ), env = paste0("R_LIBS=", paste(.libPaths(), collapse = ":")))
  set.seed(34)
  rounds <- c(dump = 8L, record = 6L)
  k <- 0L
  for (what in names(rounds)) {
    for (i in seq_len(rounds[[what]])) {
      k <- k + 1L
      delay <- round(runif(1, 0.05, 0.6), 3)
      child <- local_own_r_child(spinning_child_code(8L, die_after = delay))
      # Written whole, then renamed into place: the reader polls for the
      # name and could read a file created but not yet written.
      job <- file.path(dir, paste0("tmp-job-", k))
      writeLines(paste(child$pid, what), job)
      file.rename(job, file.path(dir, paste0("job-", k)))
      done <- file.path(dir, paste0("done-", k))
      deadline <- Sys.time() + 30
      while (!file.exists(done) && Sys.time() < deadline && process_alive(reader$pid)) Sys.sleep(0.01)
      info <- sprintf("%s round %d (killed %.3f s after ready)", what, i, delay)
      expect_true(file.exists(done), info = paste(info, paste(readLines(reader$out), collapse = "\n")))
      Sys.sleep(0.01) # (the file is written)
      errors <- readLines(done)[-1L]
      expect_true(all(grepl("^winch_error_", errors)), info = paste(info, paste(errors, collapse = " ")))
      # The reader is still there: nothing was released by its end.
      expect_true(process_alive(reader$pid), info = info)
      expect_released(child$pid, info)
    }
  }
})
