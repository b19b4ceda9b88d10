# Child processes for the tests of winch from outside (winch_dump()): R
# scripts that never load winch, started in the background, killed when the
# calling test ends (whatever happens in it).

# Starts `Rscript` on `code` (lines) in the background with `env` (strings
# "NAME=value"); waits until the child has created the file whose path is
# in its variable `ready` (the code does `file.create(ready)` when it has
# reached the state the test reads). Returns list(pid, ready, out).
local_r_child <- function(code, env = character(), timeout = 60, frame = parent.frame()) {
  file <- tempfile(fileext = ".R")
  ready <- tempfile("ready-")
  out <- tempfile("child-out-")
  writeLines(c(sprintf("ready <- %s", deparse(ready)), code), file)
  local_child_command(
    sprintf("%s --vanilla %s", shQuote(file.path(R.home("bin"), "Rscript")), shQuote(file)),
    env = env, ready = ready, out = out, timeout = timeout, frame = frame
  )
}

# Starts `cmd` (a shell command line) in the background; see local_r_child.
local_child_command <- function(cmd, env = character(), ready = NULL, out = tempfile("child-out-"),
                                timeout = 60, frame = parent.frame()) {
  envs <- paste(vapply(env, shQuote, ""), collapse = " ")
  line <- sprintf("env %s %s > %s 2>&1 & echo $!", envs, cmd, shQuote(out))
  pid <- as.integer(system2("sh", c("-c", shQuote(line)), stdout = TRUE))
  withr::defer(kill_child(pid), envir = frame)
  if (!is.null(ready)) {
    deadline <- Sys.time() + timeout
    while (!file.exists(ready) && Sys.time() < deadline && process_alive(pid)) {
      Sys.sleep(0.05)
    }
    if (!file.exists(ready)) {
      stop("the child did not get ready: ", paste(readLines(out), collapse = "\n"))
    }
  }
  list(pid = pid, ready = ready, out = out)
}

process_alive <- function(pid) {
  # A zombie (exited, not yet reaped) counts as gone.
  st <- tryCatch(suppressWarnings(readLines(sprintf("/proc/%d/stat", pid), warn = FALSE)), error = function(e) "")
  nzchar(st[[1L]]) && !grepl("^[0-9]+ \\(.*\\) [ZX] ", st[[1L]])
}

kill_child <- function(pid) {
  if (process_alive(pid)) {
    tools::pskill(pid, tools::SIGKILL)
  }
  invisible()
}

# Waits until process `pid` has ended; TRUE if it did within `timeout`.
wait_exit <- function(pid, timeout = 30) {
  deadline <- Sys.time() + timeout
  while (process_alive(pid) && Sys.time() < deadline) {
    Sys.sleep(0.05)
  }
  !process_alive(pid)
}

# The state of process `pid` (the letter of /proc/PID/stat: R running,
# S sleeping, t stopped by a tracer, T stopped...).
process_state <- function(pid) {
  st <- readLines(sprintf("/proc/%d/stat", pid), warn = FALSE)[[1L]]
  sub("^[0-9]+ \\(.*\\) ([A-Za-z]) .*$", "\\1", st)
}

# The dump's calls of one thread as text, one per entry.
dump_lines <- function(calls) {
  vapply(calls, function(cl) paste(deparse(cl, width.cutoff = 500L), collapse = " "), "")
}

# Runs R code as user nobody (root only), with this session's libraries;
# its output lines.
run_as_nobody <- function(code) {
  file <- tempfile(fileext = ".R", tmpdir = "/tmp") # R's tempdir() is private
  writeLines(code, file)
  Sys.chmod(file, "0644")
  on.exit(unlink(file))
  suppressWarnings(system2("setpriv", c(
    "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--",
    file.path(R.home("bin"), "Rscript"), "--vanilla", file
  ), stdout = TRUE, stderr = TRUE, env = paste0("R_LIBS=", paste(.libPaths(), collapse = ":"))))
}

# A child whose main thread sleeps in wait() while a thread it started
# (threads.c's detached one) spins; skips the test when the fixture cannot
# be compiled.
local_threads_child <- function(frame = parent.frame()) {
  threads <- tryCatch(
    build_clib("wtest_threads", "threads.c", flags = "-g -O1 -fopenmp", ldflags = "-fopenmp -pthread"),
    error = function(e) NULL
  )
  skip_if(is.null(threads), "the threads fixture could not be compiled (gcc with -fopenmp needed)")
  local_r_child(c(
    sprintf("dyn.load(%s)", deparse(threads$path)),
    "invisible(.Call('thr_detach', 1e6, PACKAGE = 'wtest_threads'))",
    "wait <- function() { file.create(ready); Sys.sleep(100) }",
    "wait()"
  ), frame = frame)
}

# ---------------------------------------------------------------------------
# Children of this R process itself (not of a shell), for the tests that
# check how a target killed while it is read is reaped by its parent: see
# clib/parent.c. Their threads spin (clib/spinners.c).

parent_lib <- function() compile_clib("wtest_parent", "parent.c")
spinners_lib <- function() build_clib_once("wtest_spinners", "spinners.c", ldflags = "-pthread")

# build_clib() once per session (the library is not loaded here: children
# load it).
build_clib_once <- function(name, sources, ...) {
  key <- paste("built", name)
  if (is.null(clib_cache[[key]])) {
    clib_cache[[key]] <- build_clib(name, sources, ...)
  }
  clib_cache[[key]]
}

# Starts Rscript on `code` as a child of this R process; waits until it has
# created its `ready` file (see local_r_child). When the calling test ends
# it is killed and reaped. Returns list(pid, ready, out).
local_own_r_child <- function(code, env = character(), timeout = 60, frame = parent.frame()) {
  lib <- parent_lib()
  file <- tempfile(fileext = ".R")
  ready <- tempfile("ready-")
  out <- tempfile("child-out-")
  writeLines(c(sprintf("ready <- %s", deparse(ready)), code), file)
  cmd <- sprintf(
    "env %s %s --vanilla %s > %s 2>&1", paste(vapply(env, shQuote, ""), collapse = " "),
    shQuote(file.path(R.home("bin"), "Rscript")), shQuote(file), shQuote(out)
  )
  pid <- ccall(lib, "parent_spawn", cmd)
  withr::defer(
    {
      kill_child(pid)
      reap_own_child(pid, 5)
    },
    envir = frame
  )
  deadline <- Sys.time() + timeout
  while (!file.exists(ready) && Sys.time() < deadline && process_alive(pid)) {
    Sys.sleep(0.02)
  }
  if (!file.exists(ready)) {
    stop("the child did not get ready: ", paste(readLines(out), collapse = "\n"))
  }
  list(pid = pid, ready = ready, out = out)
}

# Waits up to `timeout` seconds for this R process's child `pid` to end:
# list(how = "signaled"/"exited"/"running"/"error", value, seconds).
reap_own_child <- function(pid, timeout) {
  ccall(parent_lib(), "parent_reap", as.integer(pid), as.numeric(timeout))
}

# R code for a child whose `threads` threads spin while its main thread
# runs R code 10 calls deep; with `die_after`, it kills itself (SIGKILL)
# that many seconds after it is ready; with `block`, one more thread is
# blocked in the kernel for that many seconds (its id in `blocked`).
spinning_child_code <- function(threads, die_after = NULL, block = NULL) {
  c(
    sprintf("dyn.load(%s)", deparse(spinners_lib()$path)),
    sprintf("invisible(.Call('spin_start', %dL, PACKAGE = 'wtest_spinners'))", as.integer(threads)),
    if (!is.null(block)) sprintf("blocked <- .Call('spin_block', %s, PACKAGE = 'wtest_spinners')", block),
    if (!is.null(die_after)) sprintf("invisible(.Call('spin_die_after', %s, PACKAGE = 'wtest_spinners'))", die_after),
    "f <- function(n) if (n > 0) f(n - 1) else repeat x <- sum(runif(100))",
    "file.create(ready)",
    "f(10)"
  )
}

# The TracerPid of each thread of process `pid` now (named by thread id;
# empty when the process is gone).
tracer_pids <- function(pid) {
  tids <- list.files(sprintf("/proc/%d/task", pid))
  pids <- vapply(tids, function(tid) {
    # (A thread that ended since it was listed has no file any more.)
    st <- tryCatch(suppressWarnings(readLines(sprintf("/proc/%d/task/%s/status", pid, tid), warn = FALSE)),
      error = function(e) ""
    )
    line <- grep("^TracerPid:", st, value = TRUE)
    if (length(line)) as.integer(sub("^TracerPid:\\s*", "", line)) else 0L
  }, 0L)
  pids
}

# The state letter of each thread of process `pid` (named by thread id).
thread_states <- function(pid) {
  tids <- list.files(sprintf("/proc/%d/task", pid))
  vapply(tids, function(tid) {
    st <- tryCatch(suppressWarnings(readLines(sprintf("/proc/%d/task/%s/stat", pid, tid), warn = FALSE)[[1L]]),
      error = function(e) ""
    )
    if (nzchar(st)) sub("^[0-9]+ \\(.*\\) ([A-Za-z]) .*$", "\\1", st) else NA_character_
  }, "")
}

# CPU time used by process `pid` so far, in clock ticks (utime + stime).
process_ticks <- function(pid) {
  st <- readLines(sprintf("/proc/%d/stat", pid), warn = FALSE)[[1L]]
  f <- strsplit(sub("^.*\\) ", "", st), " ")[[1L]]
  as.numeric(f[[12L]]) + as.numeric(f[[13L]])
}

# The pids of process `pid`'s children (not yet waited for), from /proc.
child_pids <- function(pid) {
  files <- Sys.glob(sprintf("/proc/%d/task/*/children", pid))
  as.integer(unlist(strsplit(unlist(lapply(files, readLines, warn = FALSE)), " +")))
}

# Code for local_r_child(): `hold()` runs mclapply() of two workers, each
# running `work` (a line of R code); the second worker to start says
# ready. The workers are the caller's to kill (child_pids()).
mclapply_child_code <- function(work) {
  c(
    "work <- function(i) {",
    "  file.create(sprintf('%s-%d', ready, i))",
    "  if (all(file.exists(sprintf('%s-%d', ready, 1:2)))) file.create(ready)",
    paste0("  ", work),
    "}",
    "hold <- function() parallel::mclapply(1:2, work, mc.cores = 2)",
    "hold()"
  )
}

# Code for local_r_child(): `hold()` runs parallel::parLapply() on a PSOCK
# cluster of two workers, each running `work` (a line of R code) after
# `setup` (lines each worker runs first). Each worker writes its pid to
# `ready`-I (whole: written aside and renamed into place), and the second
# to start says ready. The workers are not the child's descendants (their
# parent is init): the caller kills them (psock_worker_pids()).
psock_child_code <- function(work, setup = character()) {
  c(
    "cl <- parallel::makeCluster(2)",
    "parallel::clusterExport(cl, 'ready')",
    if (length(setup)) sprintf("invisible(parallel::clusterEvalQ(cl, { %s }))", paste(setup, collapse = "; ")),
    "work <- function(i) {",
    "  tmp <- sprintf('%s-%d.tmp', ready, i)",
    "  writeLines(as.character(Sys.getpid()), tmp)",
    "  file.rename(tmp, sprintf('%s-%d', ready, i))",
    "  if (all(file.exists(sprintf('%s-%d', ready, 1:2)))) file.create(ready)",
    paste0("  ", work),
    "}",
    "hold <- function() parallel::parLapply(cl, 1:2, work)",
    "hold()"
  )
}

# The pids of the workers of a child started with psock_child_code(),
# killed when the calling test ends.
local_psock_workers <- function(child, frame = parent.frame()) {
  pids <- as.integer(vapply(sprintf("%s-%d", child$ready, 1:2), readLines, "", warn = FALSE))
  withr::defer(for (w in pids) kill_child(w), envir = frame)
  pids
}
