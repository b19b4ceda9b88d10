skip_if_not(winch_available(), "native unwinding is not available on this platform")
skip_if_not(Sys.info()[["sysname"]] == "Linux" && R.version$arch == "x86_64", "winch_dump() reads x86_64 Linux processes")

# winch_dump(): the joint stack of another process, which never loaded
# winch, read from outside. Children are R scripts started by the tests
# (helper-outside.R), killed when each test ends.

burn <- build_clib("wtest_burn", "burn.c")

# A child that reaches `leaf` (R code) under R -> C -> R: outer() burns,
# then calls back through burn_call into cb(), which signals it is ready
# and spins in burn_b for ever.
spin_child <- function(jit = 3L, frame = parent.frame()) {
  local_r_child(c(
    sprintf("dyn.load(%s)", deparse(burn$path)),
    "r_b <- function(t) .Call('burn_b', t, PACKAGE = 'wtest_burn')",
    "cb <- function() { file.create(ready); r_b(1e6) }",
    "outer <- function() .Call('burn_call', quote(cb), environment(), PACKAGE = 'wtest_burn')",
    "outer()"
  ), env = paste0("R_ENABLE_JIT=", jit), frame = frame)
}

test_that("the dump of a child stuck in native code under R -> C -> R is its exact joint stack", {
  for (jit in c(0L, 3L)) {
    child <- spin_child(jit)
    d <- winch_dump(child$pid)
    expect_s3_class(d, "winch_dump")
    expect_identical(names(d)[[1L]], "main")
    expect_identical(attr(d, "pid"), child$pid)
    expect_identical(attr(d, "r_version"), paste(R.version$major, R.version$minor, sep = "."))
    main <- d$main
    expect_s3_class(main, "winch_calls")
    expect_identical(attr(main, "placement"), "exact")
    # Exactly what winch_sys_calls() shows there: R's calls (sys.calls()),
    # each native frame right after the R call that entered it.
    # (burn_b may be reading its CPU clock: those frames follow it.)
    lines <- dump_lines(main)
    expect_identical(lines[1:5], c(
      "outer()",
      "`/wtest_burn.so`::burn_call()",
      "cb()",
      "r_b(1e+06)",
      "`/wtest_burn.so`::burn_b()"
    ), label = paste("JIT", jit))
    rest <- lines[-(1:5)]
    expect_true(all(grepl("^`/(wtest_burn.so`::thread_cpu|libc.so.6|linux-vdso.so.1)", rest)), info = paste(rest, collapse = "\n"))
    expect_identical(attr(main, "native"), c(FALSE, TRUE, FALSE, FALSE, rep(TRUE, length(lines) - 4L)))
    expect_identical(attr(main, "status"), c("r", "exact", "r", "r", rep("exact", length(lines) - 4L)))
    # It goes on running, not stopped.
    Sys.sleep(0.2)
    expect_true(process_state(child$pid) %in% c("R", "S"))
    kill_child(child$pid)
  }
})

test_that("a child blocked in Sys.sleep() is dumped and then finishes its sleep normally", {
  done <- tempfile("done-")
  child <- local_r_child(c(
    "f <- function(done) {",
    "  t0 <- Sys.time(); file.create(ready); Sys.sleep(2)",
    "  writeLines(format(as.numeric(Sys.time() - t0, units = 'secs')), done)",
    "}",
    sprintf("f(%s)", deparse(done))
  ))
  d <- winch_dump(child$pid)
  lines <- dump_lines(d$main)
  expect_identical(lines[1:2], c(sprintf("f(%s)", deparse(done)), "Sys.sleep(2)"))
  # The system call it waits in, under Sys.sleep().
  expect_true(all(attr(d$main, "native")[-(1:2)]))
  expect_gte(length(lines), 3L)
  expect_true(wait_exit(child$pid, 30))
  expect_true(file.exists(done), info = paste(readLines(child$out), collapse = "\n"))
  # It slept its two seconds: the interrupted wait was resumed, not cut.
  expect_gte(as.numeric(readLines(done)), 1.99)
})

test_that("a non-R process is dumped with native frames only", {
  child <- local_child_command("sleep 60")
  Sys.sleep(0.3)
  d <- winch_dump(child$pid)
  expect_identical(attr(d, "r_version"), NA_character_)
  expect_identical(names(d), "main")
  expect_true(all(attr(d$main, "native")))
  expect_gt(length(d$main), 0L)
  # The frames walked to the program's start: no truncation.
  expect_false(isTRUE(attr(d$main, "truncated")))
  expect_true(any(grepl("libc.so", dump_lines(d$main), fixed = TRUE)))
  expect_snapshot(cat(format(d)[[1L]]), transform = function(x) gsub("[0-9]+", "<n>", x))
})

test_that("other threads of the process are listed with their native frames", {
  child <- local_threads_child()
  d <- winch_dump(child$pid)
  expect_gte(length(d), 2L)
  expect_identical(dump_lines(d$main)[1:2], c("wait()", "Sys.sleep(100)"))
  expect_identical(attr(d, "tid")[[1L]], child$pid)
  others <- d[-1L]
  expect_true(all(names(others) == as.character(attr(d, "tid")[-1L])))
  spinning <- vapply(others, function(t) any(grepl("/wtest_threads.so`::detached_main", dump_lines(t), fixed = TRUE)), NA)
  expect_true(any(spinning))
  t <- others[[which(spinning)[[1L]]]]
  expect_true(all(attr(t, "native")))
  expect_true(all(attr(t, "status") == "exact"))
  out <- format(d)
  expect_true(any(grepl("^\nThread \\(tid [0-9]+", out)))
})

test_that("bad input is refused before any process is touched", {
  expect_error(winch_dump("1"), class = "winch_error_bad_argument")
  expect_error(winch_dump(-1), class = "winch_error_bad_argument")
  expect_error(winch_dump(0), class = "winch_error_bad_argument")
  expect_error(winch_dump(NA), class = "winch_error_bad_argument")
  expect_error(winch_dump(1.5), class = "winch_error_bad_argument")
  expect_error(winch_dump(c(1, 2)), class = "winch_error_bad_argument")
  expect_error(winch_dump(Inf), class = "winch_error_bad_argument")
  expect_error(winch_dump(Sys.getpid()), "winch_sys_calls", class = "winch_error_bad_argument")
  expect_error(winch_dump(1, libr = NA), class = "winch_error_bad_argument")
  expect_error(winch_dump(1, children = NA), class = "winch_error_bad_argument")
  expect_error(winch_dump(1, children = c(TRUE, TRUE)), class = "winch_error_bad_argument")
  # A process that has exited.
  child <- local_child_command("true")
  expect_true(wait_exit(child$pid))
  expect_error(winch_dump(child$pid), class = "winch_error_no_process")
})

test_that("a refusal to trace says what to do, and leaves the target alone", {
  skip_if(Sys.info()[["effective_user"]] != "root", "needs root to run the dump as another user")
  skip_if(!nzchar(Sys.which("setpriv")), "setpriv is not installed (Debian: util-linux)")
  child <- local_child_command("sleep 60")
  Sys.sleep(0.2)
  probe <- run_as_nobody("cat(requireNamespace('winch', quietly = TRUE))")
  skip_if(!identical(probe, "TRUE"), "user nobody cannot load winch from this library")
  out <- run_as_nobody(sprintf(
    "r <- tryCatch(winch::winch_dump(%d), error = function(e) e); cat(class(r)[[1L]], conditionMessage(r), sep = '\\n')",
    child$pid
  ))
  expect_identical(out[[1L]], "winch_error_permission", info = paste(out, collapse = "\n"))
  expect_match(paste(out, collapse = " "), "sudo|root")
  expect_true(process_state(child$pid) %in% c("R", "S"))
})

test_that("a process traced by another tracer is refused with a clear error", {
  skip_if(!nzchar(Sys.which("strace")), "strace is not installed")
  child <- local_child_command("sleep 60")
  tracer <- local_child_command(sprintf("strace -p %d -o /dev/null", child$pid))
  deadline <- Sys.time() + 10
  traced <- function() {
    st <- readLines(sprintf("/proc/%d/status", child$pid))
    as.integer(sub("TracerPid:\\s*", "", grep("^TracerPid:", st, value = TRUE))) != 0L
  }
  while (!traced() && Sys.time() < deadline) Sys.sleep(0.05)
  skip_if(!traced(), "strace did not attach")
  expect_error(winch_dump(child$pid), "already being traced", class = "winch_error_busy")
})

test_that("a kernel thread is refused with the reason: it has no user memory to read", {
  stat <- tryCatch(readLines("/proc/2/stat", warn = FALSE)[[1L]], error = function(e) "")
  flags <- suppressWarnings(as.numeric(strsplit(sub("^.*\\) ", "", stat), " ")[[1L]][7L]))
  # PF_KTHREAD (0x00200000) among its flags: pid 2 is kthreadd (not in a
  # container with its own pid namespace).
  skip_if(is.na(flags) || (flags %/% 2^21) %% 2 != 1, "process 2 is not a kernel thread here")
  expect_error(winch_dump(2), "is a kernel thread: it has no user memory", class = "winch_error_bad_argument")
})

# A child R process whose 500 threads spin, niced (19) so that this R
# session, which shares the cores with them, is not starved of its own
# CPU: at the same priority each of the 501 runnable threads gets an equal
# share, and the ~0.1 s of CPU this session needs to build the dump takes
# about 30 s of wall time on 2 cores.
local_busy_child <- function(threads, frame = parent.frame()) {
  file <- tempfile(fileext = ".R")
  ready <- tempfile("ready-")
  writeLines(c(sprintf("ready <- %s", deparse(ready)), spinning_child_code(threads)), file)
  local_child_command(
    sprintf("nice -n 19 %s --vanilla %s", shQuote(file.path(R.home("bin"), "Rscript")), shQuote(file)),
    ready = ready, frame = frame
  )
}

test_that("a process with 500 spinning threads is dumped whole, and goes on", {
  child <- local_busy_child(500L)
  Sys.sleep(0.5)
  tids <- as.integer(list.files(sprintf("/proc/%d/task", child$pid)))
  expect_gte(length(tids), 501L)
  elapsed <- system.time(d <- winch_dump(child$pid))[["elapsed"]]
  # Each thread stops when it gets a turn on a CPU: all were asked at once
  # and waited for together, 1.3 to 1.9 s here (2 cores, shared); waiting
  # ends when no thread has stopped for 2 s, at 30 s at the most.
  expect_lt(elapsed, 40)
  # Every thread is there, read (it stopped) or with the reason it was not.
  expect_setequal(attr(d, "tid"), tids)
  read <- lengths(d) > 0L
  notes <- vapply(d, function(t) attr(t, "fallback_reason") %||% NA_character_, "")
  expect_true(all(read | grepl("^not read: it did not stop within", notes)))
  expect_gt(sum(read), 250L)
  expect_identical(dump_lines(d$main)[1:2], c("f(10)", "f(n - 1)"))
  spinning <- vapply(d[-1L], function(t) any(grepl("wtest_spinners.so`::spin_forever", dump_lines(t), fixed = TRUE)), NA)
  expect_gt(sum(spinning), 250L)
  # Afterwards no thread is traced or stopped, and they spin on.
  expect_true(all(tracer_pids(child$pid) == 0L))
  expect_false(any(thread_states(child$pid) %in% c("t", "T")))
  ticks <- process_ticks(child$pid)
  Sys.sleep(0.5)
  expect_gt(process_ticks(child$pid), ticks)
})

test_that("a thread blocked in the kernel is listed with the reason, not read, and goes on when it can", {
  # One thread waits for a vfork() child for 6 s (uninterruptibly: it does
  # not stop for a tracer), two spin, the main thread runs R code.
  child <- local_r_child(spinning_child_code(2L, block = 6))
  t0 <- Sys.time()
  states <- thread_states(child$pid)
  blocked <- names(states)[states == "D"]
  expect_length(blocked, 1L)
  d <- winch_dump(child$pid)
  took <- as.numeric(Sys.time() - t0, units = "secs")
  expect_lt(took, 6)
  tids <- as.character(attr(d, "tid"))
  expect_setequal(tids, names(states))
  t <- d[[match(blocked, tids)]]
  expect_length(t, 0L)
  expect_match(attr(t, "fallback_reason"), "^not read: it did not stop within [0-9.]+ s: it is blocked in the kernel")
  out <- format(d)
  expect_true(any(grepl("note: not read: it did not stop", out, fixed = TRUE)))
  # The others are read: R's calls on the main thread, the spinning ones.
  expect_identical(dump_lines(d$main)[1:2], c("f(10)", "f(n - 1)"))
  # The dump's note counts it (never silent: a thread without frames has
  # its reason in the note), and says nothing else is missing.
  expect_identical(attr(d, "note"), "1 thread did not stop and was not read (each says why)")
  expect_identical(sum(lengths(d) > 0L), length(d) - 1L)
  # It is not traced any more; once its wait is over, it runs (it does not
  # stop for the request it could not take in time).
  expect_identical(tracer_pids(child$pid)[[blocked]], 0L)
  Sys.sleep(max(0, 7 - as.numeric(Sys.time() - t0, units = "secs")))
  expect_identical(thread_states(child$pid)[[blocked]], "R")
  expect_true(all(tracer_pids(child$pid) == 0L))
})

# A core file of a child stuck as spin_child() is: the kernel's (when it
# writes core files to the working directory), else gdb's gcore; NULL when
# neither can make one here. `how`: "kernel" or "gcore" for that one only.
core_of_spin_child <- function(frame = parent.frame(), how = c("any", "kernel", "gcore")) {
  how <- match.arg(how)
  dir <- tempfile("core-")
  dir.create(dir)
  withr::defer(unlink(dir, recursive = TRUE), envir = frame)
  pattern <- readLines("/proc/sys/kernel/core_pattern", warn = FALSE)
  script <- tempfile(fileext = ".R")
  ready <- tempfile("ready-")
  writeLines(c(
    sprintf("ready <- %s", deparse(ready)),
    sprintf("dyn.load(%s)", deparse(burn$path)),
    "r_b <- function(t) .Call('burn_b', t, PACKAGE = 'wtest_burn')",
    "cb <- function() { file.create(ready); r_b(1e6) }",
    "outer <- function() .Call('burn_call', quote(cb), environment(), PACKAGE = 'wtest_burn')",
    "outer()"
  ), script)
  cmd <- sprintf(
    "cd %s && ulimit -c unlimited && exec %s --vanilla %s",
    shQuote(dir), shQuote(file.path(R.home("bin"), "Rscript")), shQuote(script)
  )
  child <- local_child_command(sprintf("sh -c %s", shQuote(cmd)), ready = ready, frame = frame)
  if (how != "gcore" && !grepl("^[|/]", pattern) && nzchar(pattern)) {
    tools::pskill(child$pid, 6L) # SIGABRT
    wait_exit(child$pid)
    deadline <- Sys.time() + 20
    while (!length(cores <- list.files(dir, pattern = "^core", full.names = TRUE)) && Sys.time() < deadline) {
      Sys.sleep(0.1)
    }
    # The kernel may still be writing it: wait until its size settles.
    if (length(cores)) {
      repeat {
        s <- file.size(cores[[1L]])
        Sys.sleep(0.3)
        if (identical(s, file.size(cores[[1L]]))) break
      }
      return(cores[[1L]])
    }
  }
  if (how != "kernel" && nzchar(Sys.which("gcore")) && process_alive(child$pid)) {
    out <- file.path(dir, "gcore")
    suppressWarnings(system2("gcore", c("-o", shQuote(out), child$pid), stdout = FALSE, stderr = FALSE))
    made <- list.files(dir, pattern = "^gcore", full.names = TRUE)
    if (length(made)) return(made[[1L]])
  }
  NULL
}

test_that("where the kernel refuses process_vm_readv, the process is read through /proc/PID/mem", {
  child <- spin_child()
  # WINCH_NO_PROCESS_VM_READV=1 makes winch take the kernel's refusal (as
  # a seccomp profile gives it) in the session that dumps.
  code <- sprintf(
    "d <- winch::winch_dump(%d)$main; cat(vapply(d, function(cl) paste(deparse(cl, width.cutoff = 500L), collapse = ' '), ''), sep = '\\n')",
    child$pid
  )
  out <- suppressWarnings(system2(file.path(R.home("bin"), "Rscript"), c("-e", shQuote(code)),
    stdout = TRUE, stderr = TRUE,
    env = c(paste0("R_LIBS=", paste(.libPaths(), collapse = ":")), "WINCH_NO_PROCESS_VM_READV=1")
  ))
  expect_null(attr(out, "status"), info = paste(out, collapse = "\n"))
  expect_identical(out[1:5], c(
    "outer()",
    "`/wtest_burn.so`::burn_call()",
    "cb()",
    "r_b(1e+06)",
    "`/wtest_burn.so`::burn_b()"
  ))
})

test_that("a stripped library's entry point is named from the process's registration table", {
  skip_without_tools("strip")
  # Built as installed packages are (hidden, registered, stripped), and
  # never loaded here: only the child's own table can name st_entry.
  name <- "wtest_out_stripped"
  lib <- build_fixture(name, "stripped.c",
    flags = "-g -O2 -fvisibility=hidden",
    prelude = sprintf("#define INIT_NAME R_init_%s", name)
  )
  run_tool("strip", c("--strip-all", shQuote(lib$path)))
  child <- local_r_child(c(
    sprintf("dll <- dyn.load(%s)", deparse(lib$path)),
    "entry <- getNativeSymbolInfo('st_entry', PACKAGE = dll)",
    "spin <- function() { file.create(ready); repeat NULL }",
    ".Call(entry, spin, environment())"
  ))
  expect_false(name %in% names(getLoadedDLLs()))
  lines <- dump_lines(winch_dump(child$pid)$main)
  at <- match(sprintf("`/%s.so`::st_entry()", name), lines)
  expect_false(is.na(at), label = paste(lines, collapse = "\n"))
  expect_identical(lines[at + 2L], "(`<fn>`)()") # st_helper between them, unnamed
  p <- winch_record(child$pid, duration = 0.5, interval = 0.01)
  expect_true(any(vapply(stack_labels(p), function(s) sprintf("/%s.so::st_entry", name) %in% s, NA)))
})

test_that("a core file is dumped as the process was: R's calls with native frames in place", {
  core <- core_of_spin_child()
  skip_if(is.null(core), "no core file can be made here (core_pattern pipes to a program and gdb's gcore is not installed)")
  d <- winch_dump(core = core)
  expect_s3_class(d, "winch_dump")
  expect_identical(attr(d, "core"), core)
  lines <- dump_lines(d$main)
  expect_identical(lines[1:5], c(
    "outer()",
    "`/wtest_burn.so`::burn_call()",
    "cb()",
    "r_b(1e+06)",
    "`/wtest_burn.so`::burn_b()"
  ))
  expect_match(format(d)[[1L]], "from core file", fixed = TRUE)
})

# The dump of a damaged core: a winch_dump or a classed error, never a
# crash; and never silent: a main thread with no frames, its native stack
# cut short, or R's frames (there were `r_calls`) missing or unplaced, has
# its reason in the dump's note, which print() shows.
expect_damage_said <- function(d, r_calls, label) {
  if (inherits(d, "error")) {
    expect_s3_class(d, "winch_error_bad_argument")
    return(invisible())
  }
  expect_s3_class(d, "winch_dump")
  main <- d[[1L]]
  lost <- length(main) == 0L || sum(!attr(main, "native")) < r_calls || isTRUE(attr(main, "truncated")) ||
    !is.na(attr(main, "fallback_reason") %||% NA)
  note <- attr(d, "note")
  expect_length(note, 1L)
  if (lost) {
    expect_false(is.na(note), label = label)
    out <- capture.output(print(d))
    expect_match(out[[2L]], "^Note: ", label = label)
    expect_true(any(grepl(substr(note, 1L, 30L), out, fixed = TRUE)), label = label)
  }
  if (isTRUE(attr(main, "truncated"))) {
    expect_false(is.na(attr(main, "truncation")), label = label)
  }
  invisible(lost)
}

damaged_dump <- function(core) tryCatch(winch_dump(core = core), winch_error = function(e) e)

test_that("a kernel core cut short, or with its stack zeroed, looping or bit-flipped, says what is wrong", {
  core <- core_of_spin_child(how = "kernel")
  skip_if(is.null(core), "the kernel writes no core file here (core_pattern pipes to a program, or core files are off)")
  whole <- winch_dump(core = core)
  expect_true(is.na(attr(whole, "note")))
  r_calls <- sum(!attr(whole$main, "native"))
  expect_identical(r_calls, 3L)
  # Cut short: every thread's stack is at its end.
  for (share in c(0.1, 0.5, 0.9)) {
    d <- damaged_dump(core_cut(core, share))
    what <- paste0("cut to ", 100 * share, "%")
    expect_s3_class(d, "winch_dump")
    expect_match(attr(d, "note"), "^the core file is cut short: it has [0-9]+ bytes, its contents reach byte [0-9]+; [0-9]+% of the memory it holds is missing", label = what)
    expect_true(expect_damage_said(d, r_calls, what))
    out <- format(d)
    expect_match(out[[2L]], "Note: the core file is cut short", fixed = TRUE)
    if (!length(d$main)) expect_true(any(grepl("^  \\(no frames: .+\\)$", out)), label = what)
  }
  # The main thread's stack zeroed: one frame, then a return address 0.
  d <- damaged_dump(core_zeroed_stack(core))
  expect_true(isTRUE(attr(d$main, "truncated")))
  expect_match(attr(d$main, "truncation"), "return address of 0", fixed = TRUE)
  expect_match(attr(d, "note"), "the main thread's native stack is cut short", fixed = TRUE)
  expect_match(attr(d, "note"), "R's frames are not shown: R's context chain could not be read", fixed = TRUE)
  expect_true(expect_damage_said(d, r_calls, "zeroed"))
  # Looping frames.
  d <- damaged_dump(core_looping_stack(core))
  expect_true(isTRUE(attr(d$main, "truncated")))
  expect_true(expect_damage_said(d, r_calls, "looping"))
  # Bits flipped: whatever is lost is said.
  for (seed in 1:20) {
    expect_damage_said(damaged_dump(core_bitflipped(core, seed)), r_calls, paste("bit flips, seed", seed))
  }
})

test_that("a gcore core cut short is refused with the reason; its damaged stacks say what is wrong", {
  skip_if(!nzchar(Sys.which("gcore")), "gdb's gcore is not installed")
  core <- core_of_spin_child(how = "gcore")
  skip_if(is.null(core), "gcore could not make a core file here")
  r_calls <- sum(!attr(winch_dump(core = core)$main, "native"))
  expect_identical(r_calls, 3L)
  # gdb writes the notes (the threads' registers) last: a cut core has none.
  for (share in c(0.1, 0.5, 0.9)) {
    expect_error(
      winch_dump(core = core_cut(core, share)),
      "is cut short: it has [0-9]+ bytes, but its notes \\(which hold the threads' registers\\) reach byte",
      class = "winch_error_bad_argument"
    )
  }
  d <- damaged_dump(core_zeroed_stack(core))
  expect_match(attr(d$main, "truncation"), "return address of 0", fixed = TRUE)
  expect_true(expect_damage_said(d, r_calls, "zeroed"))
  expect_true(expect_damage_said(damaged_dump(core_looping_stack(core)), r_calls, "looping"))
  for (seed in 1:20) {
    expect_damage_said(damaged_dump(core_bitflipped(core, seed)), r_calls, paste("bit flips, seed", seed))
  }
})

test_that("bad core files are refused with classed errors", {
  expect_error(winch_dump(core = tempfile()), "does not exist", class = "winch_error_bad_argument")
  not_core <- tempfile()
  writeLines("hello", not_core)
  expect_error(winch_dump(core = not_core), "not an ELF core", class = "winch_error_bad_argument")
  expect_error(winch_dump(core = burn$path), "not an ELF core", class = "winch_error_bad_argument")
  expect_error(winch_dump(1, core = not_core), "either", class = "winch_error_bad_argument")
  expect_error(winch_dump(core = 1), class = "winch_error_bad_argument")
  expect_error(winch_dump(core = c("a", "b")), class = "winch_error_bad_argument")
  expect_error(winch_dump(2, exe = "/bin/sh"), "core", class = "winch_error_bad_argument")
  expect_error(winch_dump(core = not_core, children = TRUE), "one process", class = "winch_error_bad_argument")
})

test_that("children = TRUE dumps every worker of a stuck mclapply() after its parent", {
  skip_if(!length(Sys.glob("/proc/self/task/*/children")), "this kernel does not list children in /proc")
  child <- local_r_child(mclapply_child_code("Sys.sleep(120)"))
  workers <- child_pids(child$pid)
  withr::defer(for (w in workers) kill_child(w))
  expect_length(workers, 2L)
  d <- winch_dump(child$pid, children = TRUE)
  kids <- attr(d, "children")
  expect_identical(sort(as.integer(names(kids))), sort(workers))
  expect_identical(nrow(attr(d, "children_not_read")), 0L)
  for (k in kids) {
    expect_s3_class(k, "winch_dump")
    expect_identical(attr(k, "parent"), child$pid)
    # A forked worker's stack: the parent's call that forked it, then the work.
    lines <- dump_lines(k$main)
    expect_identical(lines[[1L]], "hold()")
    expect_true(any(grepl("mclapply(", lines, fixed = TRUE)), info = paste(lines, collapse = "\n"))
    expect_true("Sys.sleep(120)" %in% lines, info = paste(lines, collapse = "\n"))
  }
  # The parent still waits for them, in mclapply().
  expect_true(any(grepl("mclapply(", dump_lines(d$main), fixed = TRUE)))
  out <- format(d)
  expect_match(out[[1L]], ", 2 child processes$")
  for (w in workers) {
    expect_true(sprintf("== Child process %d (of %d) ==", w, child$pid) %in% out)
  }
  # Both workers go on sleeping, not stopped.
  expect_true(all(vapply(workers, process_state, "") == "S"))
  # Without children = TRUE: the parent alone, as before.
  expect_null(attr(winch_dump(child$pid), "children"))
})

test_that("children = TRUE dumps the workers of a stuck parLapply(), which are not its descendants", {
  child <- local_r_child(psock_child_code("Sys.sleep(120)"))
  workers <- local_psock_workers(child)
  # Their parent is not the R session that made the cluster.
  expect_false(any(workers %in% child_pids(child$pid)))
  d <- winch_dump(child$pid, children = TRUE)
  kids <- attr(d, "children")
  expect_identical(sort(as.integer(names(kids))), sort(workers))
  expect_identical(nrow(attr(d, "children_not_read")), 0L)
  for (k in kids) {
    expect_identical(attr(k, "parent"), child$pid)
    expect_identical(attr(k, "relation"), "worker")
    # A worker's stack: parallel's loop, then the work (`work` as
    # parLapply() calls it).
    lines <- dump_lines(k$main)
    expect_true(any(grepl("workLoop(", lines, fixed = TRUE)), info = paste(lines, collapse = "\n"))
    expect_true("FUN(X[[i]], ...)" %in% lines, info = paste(lines, collapse = "\n"))
    expect_true("Sys.sleep(120)" %in% lines, info = paste(lines, collapse = "\n"))
  }
  # The parent waits for them, in parLapply().
  expect_true(any(grepl("parLapply(", dump_lines(d$main), fixed = TRUE)))
  out <- format(d)
  expect_match(out[[1L]], ", 2 child processes$")
  for (w in workers) {
    expect_true(sprintf("== Worker process %d (of %d) ==", w, child$pid) %in% out)
  }
  expect_true(all(vapply(workers, process_state, "") == "S"))
  # A worker's own dump does not take its R session for its worker.
  expect_identical(names(attr(winch_dump(workers[[1L]], children = TRUE), "children")), character())
})

test_that("a descendant that cannot be read is named in a classed warning, and the others are read", {
  skip_if(!length(Sys.glob("/proc/self/task/*/children")), "this kernel does not list children in /proc")
  skip_if(!nzchar(Sys.which("strace")), "strace is not installed")
  parent <- local_child_command("sh -c 'sleep 60 & sleep 61 & wait'")
  deadline <- Sys.time() + 10
  while (length(child_pids(parent$pid)) < 2L && Sys.time() < deadline) Sys.sleep(0.05)
  kids <- child_pids(parent$pid)
  withr::defer(for (k in kids) kill_child(k))
  expect_length(kids, 2L)
  # The first one traced by strace: winch cannot trace it too.
  local_child_command(sprintf("strace -p %d -o /dev/null", kids[[1L]]))
  traced <- function() {
    st <- readLines(sprintf("/proc/%d/status", kids[[1L]]))
    as.integer(sub("TracerPid:\\s*", "", grep("^TracerPid:", st, value = TRUE))) != 0L
  }
  while (!traced() && Sys.time() < deadline) Sys.sleep(0.05)
  skip_if(!traced(), "strace did not attach")
  expect_warning(d <- winch_dump(parent$pid, children = TRUE), "already being traced", class = "winch_warning_children_missed")
  expect_identical(names(attr(d, "children")), as.character(kids[[2L]]))
  missed <- attr(d, "children_not_read")
  expect_identical(missed$pid, kids[[1L]])
  expect_match(missed$reason, "already being traced")
  expect_true(sprintf("Child process %d (of %d) not read: %s", kids[[1L]], parent$pid, missed$reason) %in% format(d))
  expect_warning(p <- winch_record(parent$pid, duration = 0.2, children = TRUE), "already being traced",
    class = "winch_warning_children_missed"
  )
  expect_identical(p$target$children$pid, kids[[2L]])
  expect_identical(p$target$not_recorded$pid, kids[[1L]])
})

test_that("children = TRUE of a process without children says so", {
  child <- local_child_command("sleep 60")
  d <- winch_dump(child$pid, children = TRUE)
  expect_identical(attr(d, "children"), stats::setNames(list(), character()))
  expect_identical(nrow(attr(d, "children_not_read")), 0L)
  out <- format(d)
  expect_match(out[[1L]], ", 0 child processes$")
  expect_identical(out[[length(out)]], "No child processes.")
})

test_that("the command line installed with the package dumps a process and says how to use it", {
  cli <- system.file("bin", "winch", package = "winch")
  skip_if(!nzchar(cli), "winch's command line is not installed")
  run <- function(...) {
    out <- suppressWarnings(system2(cli, c(...), stdout = TRUE, stderr = TRUE, env = c(
      paste0("R_LIBS=", paste(.libPaths(), collapse = ":")),
      paste0("RSCRIPT=", file.path(R.home("bin"), "Rscript"))
    )))
    structure(out, status = attr(out, "status") %||% 0L)
  }
  child <- spin_child()
  out <- run("dump", child$pid)
  expect_identical(attr(out, "status"), 0L, info = paste(out, collapse = "\n"))
  expect_true(any(grepl("^<winch_dump> process [0-9]+ \\(R [0-9.]+\\)", out)))
  expect_true(any(grepl("cb()", out, fixed = TRUE)))
  expect_true(any(grepl("`/wtest_burn.so`::burn_call()", out, fixed = TRUE)))
  kids <- run("dump", "--children", child$pid)
  expect_identical(attr(kids, "status"), 0L, info = paste(kids, collapse = "\n"))
  expect_true("No child processes." %in% kids)
  expect_identical(attr(run("dump", "--core", tempfile(), "--children"), "status"), 2L)
  help <- run("help")
  expect_identical(attr(help, "status"), 0L)
  expect_true(any(grepl("--children", help, fixed = TRUE)))
  expect_true(any(grepl("winch record PID", help, fixed = TRUE)))
  bad <- run("frobnicate")
  expect_identical(attr(bad, "status"), 2L)
  expect_true(any(grepl("unknown command", bad, fixed = TRUE)))
  gone <- run("dump", "999999999")
  expect_identical(attr(gone, "status"), 1L)
})
