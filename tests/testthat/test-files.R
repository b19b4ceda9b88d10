# Every file argument of every exported function (and of the command line)
# takes a regular file only, checked before anything opens, reads or writes
# it: a FIFO without its other end, a device, a directory, a missing file
# or directory, an empty file (and for `exe`, a program that is not the
# core's, or no program) is a classed error, returned at once. The calls
# run in a child R process with a hard time limit: a call that hangs
# (opening a FIFO blocks for ever, and interrupts do not reach it) fails
# the test instead of hanging the suite.

skip_if_not(Sys.info()[["sysname"]] == "Linux", "FIFOs and devices as Linux has them")

# Runs `code` (lines of R) in a fresh Rscript with winch, killed after
# `timeout` seconds; its output lines, with attribute "status" (124 or 137
# when it was killed).
run_bounded <- function(code, timeout = 60) {
  file <- tempfile(fileext = ".R")
  on.exit(unlink(file))
  writeLines(c("suppressPackageStartupMessages(library(winch))", code), file)
  rscript <- file.path(R.home("bin"), "Rscript")
  env <- paste0("R_LIBS=", paste(.libPaths(), collapse = .Platform$path.sep))
  out <- if (nzchar(Sys.which("timeout"))) {
    suppressWarnings(system2("timeout", c("-s", "KILL", timeout, shQuote(rscript), "--vanilla", shQuote(file)),
      stdout = TRUE, stderr = TRUE, env = env
    ))
  } else {
    suppressWarnings(system2(rscript, c("--vanilla", shQuote(file)),
      stdout = TRUE, stderr = TRUE, env = env, timeout = timeout
    ))
  }
  structure(out, status = attr(out, "status") %||% 0L)
}

# The R code that calls `calls` (named strings of R code) one by one and
# prints, for each, a line "name<TAB>class<TAB>seconds<TAB>message" as soon
# as it returned ("ok" as class when it did not fail).
calls_code <- function(calls) {
  c(
    "try_call <- function(name, expr) {",
    "  started <- Sys.time()",
    "  cnd <- tryCatch({ force(expr); NULL }, error = function(e) e)",
    "  secs <- as.numeric(Sys.time() - started, units = 'secs')",
    "  class <- if (is.null(cnd)) 'ok' else paste(setdiff(class(cnd), c('rlang_error', 'error', 'condition')), collapse = ',')",
    "  msg <- if (is.null(cnd)) '' else gsub('[\\t\\n]', ' ', conditionMessage(cnd))",
    "  cat(name, '\\t', class, '\\t', format(secs), '\\t', msg, '\\n', sep = '')",
    "  flush(stdout())",
    "}",
    sprintf("try_call(%s, %s)", vapply(names(calls), deparse, ""), calls)
  )
}

# Runs `calls` (see calls_code) after `setup` in a child; a data frame of
# what each call gave, one row per call, in order. A call that hangs shows
# as the first one missing (the child was killed).
run_calls <- function(calls, setup = character(), timeout = 60) {
  out <- run_bounded(c(setup, calls_code(calls)), timeout = timeout)
  rows <- strsplit(grep("\t", out, value = TRUE, fixed = TRUE), "\t", fixed = TRUE)
  got <- data.frame(
    name = vapply(rows, `[`, "", 1L),
    class = vapply(rows, `[`, "", 2L),
    secs = as.numeric(vapply(rows, `[`, "", 3L)),
    message = vapply(rows, function(r) if (length(r) >= 4L) r[[4L]] else "", ""),
    stringsAsFactors = FALSE
  )
  missing <- setdiff(names(calls), got$name)
  if (length(missing)) {
    fail(sprintf(
      "the child ended (status %s) before %s returned:\n%s", attr(out, "status"), missing[[1L]],
      paste(out, collapse = "\n")
    ))
  }
  got
}

# Expects every row of `got` to be an error of class `class` (its first
# winch class) that returned within `secs` seconds, whose message matches
# `message` (a pattern per row, or one for all).
expect_refused <- function(got, class, message = ".", secs = 5) {
  message <- rep_len(message, nrow(got))
  for (i in seq_len(nrow(got))) {
    what <- sprintf("%s: %s (%s)", got$name[[i]], got$class[[i]], got$message[[i]])
    expect_true(class %in% strsplit(got$class[[i]], ",", fixed = TRUE)[[1L]], label = what)
    expect_lt(got$secs[[i]], secs, label = paste(got$name[[i]], "took (seconds)"))
    expect_match(got$message[[i]], message[[i]], label = what)
  }
}

# The special files, made in a fresh directory: a FIFO that nothing has
# open (made with mkfifo), a symbolic link to it, an empty file, a file
# of random bytes, paths that do not exist; and the devices.
local_special_files <- function(frame = parent.frame()) {
  skip_if(!nzchar(Sys.which("mkfifo")), "mkfifo is not on the PATH: no FIFO can be made")
  dir <- tempfile("winch-files-")
  dir.create(dir)
  withr::defer(unlink(dir, recursive = TRUE), envir = frame)
  dir <- normalizePath(dir)
  f <- list(
    fifo = file.path(dir, "fifo"),
    fifo_link = file.path(dir, "fifo-link"),
    zero = "/dev/zero",
    full = "/dev/full",
    null = "/dev/null",
    directory = dir,
    missing = file.path(dir, "missing"),
    missing_dir = file.path(dir, "no-such-dir", "file"),
    empty = file.path(dir, "empty"),
    random = file.path(dir, "random")
  )
  status <- system2("mkfifo", shQuote(f$fifo))
  skip_if(status != 0L || !file.exists(f$fifo), "mkfifo could not make a FIFO here")
  file.symlink(f$fifo, f$fifo_link)
  file.create(f$empty)
  set.seed(33)
  writeBin(as.raw(sample(0:255, 8192, replace = TRUE)), f$random)
  f
}

# Where each kind of bad path is refused, and the words that say why.
output_refusals <- list(
  fifo = c("winch_error_io", "a FIFO"),
  fifo_link = c("winch_error_io", "a FIFO"),
  zero = c("winch_error_io", "a character device"),
  full = c("winch_error_io", "a character device"),
  null = c("winch_error_io", "a character device"),
  directory = c("winch_error_io", "a directory"),
  missing_dir = c("winch_error_bad_argument", "directory .* does not exist")
)
input_refusals <- list(
  fifo = c("winch_error_bad_argument", "a FIFO"),
  fifo_link = c("winch_error_bad_argument", "a FIFO"),
  zero = c("winch_error_bad_argument", "a character device"),
  full = c("winch_error_bad_argument", "a character device"),
  null = c("winch_error_bad_argument", "a character device"),
  directory = c("winch_error_bad_argument", "a directory"),
  missing = c("winch_error_bad_argument", "does not exist"),
  missing_dir = c("winch_error_bad_argument", "does not exist"),
  empty = c("winch_error_bad_argument", "is empty")
)

# The calls of `template` (R code with PATH where the path goes) for the
# files named in `refusals`, named "<kind>".
calls_for <- function(template, f, refusals) {
  kinds <- names(refusals)
  stats::setNames(vapply(kinds, function(k) gsub("PATH", deparse(f[[k]]), template, fixed = TRUE), ""), kinds)
}

expect_refusals <- function(got, refusals, label) {
  for (k in names(refusals)) {
    row <- got[got$name == k, , drop = FALSE]
    if (!nrow(row)) next # (run_calls() said it hung)
    row$name <- paste(label, k)
    expect_refused(row, refusals[[k]][[1L]], refusals[[k]][[2L]])
  }
}

test_that("every output path refuses FIFOs, devices, directories and missing directories at once", {
  skip_if_not(winch_available(), "native unwinding is not available on this platform")
  f <- local_special_files()
  rds <- tempfile(fileext = ".rds")
  on.exit(unlink(rds), add = TRUE)
  saveRDS(winch_profile(for (i in 1:50) sort(runif(1e4)), interval = 0.002), rds)
  sleeper <- local_child_command("sleep 60")
  writers <- c(
    winch_profile = "winch_profile(NULL, file = PATH)",
    winch_rprof = "winch_rprof(PATH)",
    winch_write_rprof = "winch_write_rprof(p, PATH)",
    winch_write_pprof = "winch_write_pprof(p, PATH)",
    winch_write_collapsed = "winch_write_collapsed(p, PATH)",
    winch_record = sprintf("winch_record(%d, 5, file = PATH)", sleeper$pid)
  )
  for (fn in names(writers)) {
    got <- run_calls(calls_for(writers[[fn]], f, output_refusals), setup = sprintf("p <- readRDS(%s)", deparse(rds)))
    expect_refusals(got, output_refusals, fn)
  }
  # A new file, and an existing regular one (replaced), are written.
  good <- run_calls(c(
    rprof_new = sprintf("winch_write_rprof(p, %s)", deparse(file.path(f$directory, "new.out"))),
    rprof_existing = sprintf("winch_write_rprof(p, %s)", deparse(f$empty)),
    pprof_new = sprintf("winch_write_pprof(p, %s)", deparse(file.path(f$directory, "new.pb.gz"))),
    collapsed_new = sprintf("winch_write_collapsed(p, %s)", deparse(file.path(f$directory, "new.folded")))
  ), setup = sprintf("p <- readRDS(%s)", deparse(rds)))
  expect_identical(good$class, rep("ok", 4L), label = paste(good$message, collapse = "; "))
  expect_gt(file.size(f$empty), 0)
  # The native writer refuses them too, when R's checks are bypassed (or
  # the path changed since): it opens without blocking and looks again.
  native <- "winch:::check_result(winch:::rs_profile_write(winch:::profile_parts(p), PATH, FORMAT, FALSE))"
  for (format in c("rprof", "pprof")) {
    refusals <- output_refusals[c("fifo", "fifo_link", "zero", "null", "directory")]
    got <- run_calls(calls_for(sub("FORMAT", deparse(format), native, fixed = TRUE), f, refusals),
      setup = sprintf("p <- readRDS(%s)", deparse(rds))
    )
    expect_refusals(got, refusals, paste("rs_profile_write", format))
  }
})

test_that("the command line refuses a bad -o before recording", {
  f <- local_special_files()
  sleeper <- local_child_command("sleep 60")
  cases <- c(fifo = f$fifo, null = f$null, directory = f$directory)
  calls <- vapply(cases, function(path) {
    sprintf("{ s <- winch:::cli_main(c('record', '%d', '-d', '5', '-o', %s), quit = FALSE); if (s != 1L) stop('status ', s) }",
      sleeper$pid, deparse(path))
  }, "")
  got <- run_calls(calls)
  expect_refused(got, "ok", "^$", secs = 4)
})

test_that("`core` and `exe` of winch_dump() refuse every file that is not a regular one at once", {
  skip_if_not(winch_available(), "native unwinding is not available on this platform")
  skip_if_not(R.version$arch == "x86_64", "winch_dump() reads x86_64 Linux processes")
  f <- local_special_files()
  refusals <- input_refusals
  got <- run_calls(calls_for("winch_dump(core = PATH)", f, refusals))
  expect_refusals(got, refusals, "core")
  # `exe`, with a core that is a regular file (checked before it is read).
  exe_refusals <- lapply(refusals, function(r) c(r[[1L]], paste0("`exe`.*", r[[2L]])))
  got <- run_calls(calls_for(sprintf("winch_dump(core = %s, exe = PATH)", deparse(f$random)), f, exe_refusals))
  expect_refusals(got, exe_refusals, "exe")
  # The command line says the same.
  # (A bad argument is the usage status, 2.)
  got <- run_calls(c(fifo = sprintf(
    "{ s <- winch:::cli_main(c('dump', '--core', %s), quit = FALSE); if (s != 2L) stop('status ', s) }", deparse(f$fifo)
  )))
  expect_refused(got, "ok", "^$")
})

test_that("winch_init_library() refuses every path that is not a non-empty regular file", {
  f <- local_special_files()
  got <- run_calls(calls_for("winch_init_library(PATH)", f, input_refusals))
  expect_refusals(got, input_refusals, "winch_init_library")
})

# A core file of a `sleep` process: the kernel's (when it writes core files
# to the working directory), else gdb's gcore; NULL when neither can make
# one here. Its program is `sleep` (the path is its attribute "exe").
core_of_sleep <- function(frame = parent.frame()) {
  dir <- tempfile("core-")
  dir.create(dir)
  withr::defer(unlink(dir, recursive = TRUE), envir = frame)
  sleep <- normalizePath(Sys.which("sleep"))
  pattern <- readLines("/proc/sys/kernel/core_pattern", warn = FALSE)
  cmd <- sprintf("cd %s && ulimit -c unlimited && exec %s 60", shQuote(dir), shQuote(sleep))
  child <- local_child_command(sprintf("sh -c %s", shQuote(cmd)), frame = frame)
  deadline <- Sys.time() + 10
  while (!identical(tryCatch(normalizePath(sprintf("/proc/%d/exe", child$pid)), error = function(e) ""), sleep) &&
    Sys.time() < deadline) {
    Sys.sleep(0.05)
  }
  core <- NULL
  if (!grepl("^[|/]", pattern) && nzchar(pattern)) {
    tools::pskill(child$pid, 6L) # SIGABRT
    wait_exit(child$pid)
    deadline <- Sys.time() + 20
    while (!length(cores <- list.files(dir, pattern = "^core", full.names = TRUE)) && Sys.time() < deadline) {
      Sys.sleep(0.1)
    }
    if (length(cores)) {
      repeat {
        s <- file.size(cores[[1L]])
        Sys.sleep(0.3)
        if (identical(s, file.size(cores[[1L]]))) break
      }
      core <- cores[[1L]]
    }
  }
  if (is.null(core) && nzchar(Sys.which("gcore")) && process_alive(child$pid)) {
    out <- file.path(dir, "gcore")
    suppressWarnings(system2("gcore", c("-o", shQuote(out), child$pid), stdout = FALSE, stderr = FALSE))
    made <- list.files(dir, pattern = "^gcore", full.names = TRUE)
    if (length(made)) core <- made[[1L]]
  }
  if (!is.null(core)) attr(core, "exe") <- sleep
  core
}

test_that("`exe` must be an x86_64 program, and the one the core's process ran", {
  skip_if_not(winch_available(), "native unwinding is not available on this platform")
  skip_if_not(R.version$arch == "x86_64", "winch_dump() reads x86_64 Linux processes")
  f <- local_special_files()
  core <- core_of_sleep()
  skip_if(is.null(core), "no core file can be made here (core_pattern pipes to a program and gdb's gcore is not installed)")
  sleep <- attr(core, "exe")
  ls <- normalizePath(Sys.which("ls"))
  skip_if(!nzchar(ls), "no ls to give as the wrong program")
  got <- run_calls(c(
    ls = sprintf("winch_dump(core = %s, exe = %s)", deparse(c(core)), deparse(ls)),
    random = sprintf("winch_dump(core = %s, exe = %s)", deparse(c(core)), deparse(f$random)),
    core_as_exe = sprintf("winch_dump(core = %s, exe = %s)", deparse(c(core)), deparse(c(core))),
    right = sprintf("winch_dump(core = %s, exe = %s)", deparse(c(core)), deparse(sleep)),
    recorded = sprintf("winch_dump(core = %s)", deparse(c(core)))
  ))
  expect_refused(got[got$name == "ls", ], "winch_error_bad_argument", "not the program the core's process ran")
  # The native side refuses them too, when R's checks are bypassed (or the
  # path changed since): nothing waits for a writer or reads without end.
  native <- sprintf("winch:::check_result(winch:::rs_dump_core(%s, PATH, FALSE))", deparse(c(core)))
  refusals <- input_refusals[c("fifo", "fifo_link", "zero", "null", "directory", "missing_dir")]
  got_native <- run_calls(calls_for(native, f, refusals))
  expect_refusals(got_native, lapply(refusals, function(r) c(r[[1L]], paste0("executable.*", r[[2L]]))), "rs_dump_core exe")
  got_native <- run_calls(calls_for("winch:::check_result(winch:::rs_dump_core(PATH, NULL, FALSE))", f, refusals))
  expect_refusals(got_native, lapply(refusals, function(r) c(r[[1L]], paste0("core file.*", r[[2L]]))), "rs_dump_core core")
  expect_refused(got[got$name %in% c("random", "core_as_exe"), ], "winch_error_bad_argument", "not an x86_64 ELF program")
  # The right program, given or where the core says: the dump is made.
  expect_identical(got$class[got$name %in% c("right", "recorded")], c("ok", "ok"),
    label = paste(got$message, collapse = "; ")
  )
})
