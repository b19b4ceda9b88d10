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
