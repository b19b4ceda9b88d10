#' The joint stack of another R process, from outside
#'
#' Reads the stacks of every thread of a running process that never loaded
#' winch: a hung or busy R session, a job on a cluster node, a Shiny or
#' plumber server that stopped answering. R's main thread shows as
#' [winch_sys_calls()] would show it inside that process: its R calls with
#' the native (C, C++, Fortran, Rust) frames in place among them; other
#' threads show their native frames. Works on any process (a program
#' without R gives native frames only).
#'
#' The process is stopped only while it is read (a few milliseconds; with
#' `ptrace`'s `PTRACE_SEIZE` and `PTRACE_INTERRUPT`: no signal reaches it)
#' and then goes on exactly as before; a system call it was blocked in
#' (`Sys.sleep()`, reading a socket) is resumed. Every thread is asked to
#' stop at once, then all are waited for, for as long as threads keep
#' stopping: a thread stops when it next gets a turn on a CPU, so a process
#' whose 500 threads spin on 2 busy cores takes about 1.5 s to stop (and
#' this R session, sharing the cores with them, needs more to build the
#' result). A thread that has not stopped when none has for 2 s (30 s at
#' the most) is not read: a thread blocked in the kernel (uninterruptibly:
#' disk or network I/O, waiting for a `vfork()` child), or one still
#' waiting for a CPU. It is listed with no frames and the reason as its
#' `fallback_reason` (printed as a note); for R's main thread, the dump's
#' `note` says so too. A process killed while it is read gives an error of
#' class `winch_error_no_process`, and nothing of it stays traced: its
#' parent reaps it as if it had never been read (a child of this R session,
#' as [parallel::mcparallel()] makes, keeps its exit status for this
#' session's own wait). Its memory is read with
#' `process_vm_readv()` (from `/proc/PID/mem` where a seccomp profile
#' refuses that call); native frames are unwound with the unwind tables
#' of the images it loaded, and named from the files on disk (debug files
#' and debuginfod as for in-process traces), and, for entry points of
#' stripped libraries, from the process's own table of routines registered
#' with R (read from its memory, checked before it is used, and given only
#' to a function starting exactly at a registered address, as in-process).
#' The vDSO's functions are named from this process's vDSO (the same
#' kernel's). R's state is found through
#' the dynamic symbols of its `libR.so` (which must be the file the
#' process loaded: their build-ids are compared) and its version from that
#' R's `Rversion.h`. R's frames are read from its context chain and shown
#' only if the chain reads through to the top level; otherwise the native
#' frames are listed and the reason is noted.
#'
#' @section Permissions:
#' Reading another process needs the right to trace it: the same user with
#' `kernel.yama.ptrace_scope` at 0, or root (or `CAP_SYS_PTRACE`; in a
#' container, `--cap-add SYS_PTRACE`). A refusal is an error of class
#' `winch_error_permission` that says which applies. A process already
#' traced (by a debugger) cannot be read (`winch_error_busy`).
#'
#' @section Child processes:
#' With `children = TRUE`, every process working for the process is read
#' too, each in turn, after it: its descendants and its workers.
#'
#' * Descendants: the workers of [parallel::mclapply()] or
#'   [parallel::mcparallel()] (forked: their R stack holds the parent's
#'   call that started them, then the work), [system2()]'s programs,
#'   callr's R sessions. They are those the kernel lists as children not
#'   yet waited for (`/proc/PID/task/TID/children`; on a kernel without
#'   these files none is found), children of children included.
#' * Workers: the R sessions of a PSOCK cluster ([parallel::makeCluster()],
#'   future's `multisession`), which are not descendants (the shell that
#'   starts them exits, and their parent becomes init). A worker is a
#'   process on this machine holding the other end of one of the
#'   process's TCP connections, running the same R executable, and started
#'   after it: a database server or a browser it talks to is not one, nor
#'   is a worker's own R session one of the worker's. Workers started with
#'   another R (`rscript =`) or on another machine are not found; dump
#'   those by their own pid, where they run.
#'
#' Workers' descendants and workers are read too, at most 4096 processes
#' in all. A process that ends before it is read, that may not be traced,
#' or that a debugger traces, is listed with the reason, and the others are
#' read all the same; those that are still there but could not be read
#' are named in a warning of class `winch_warning_children_missed`.
#'
#' @section Core files:
#' With `core`, the same is read from a core file (the process is gone: a
#' crash on a cluster node or in CI). Its threads' registers and memory are
#' in the core; what the kernel left out of it (code, read-only data) is
#' read from the files the process had mapped, as the core lists them, so
#' they must still be there, unchanged (a library whose build-id differs
#' from the loaded image's is not used for R's state). `exe` is the program
#' the process ran, when it is no longer where the core says. A core cut
#' short (a copy that stopped, a full disk) is read as far as it goes and
#' its `note` says how much is missing (gdb's `gcore` writes the threads'
#' registers last: a `gcore` core cut short cannot be read, and is refused
#' with the reason). A stack that is damaged (zeroed, overwritten) is
#' unwound as far as it holds together, and the `note` says where it
#' stopped.
#'
#' A core of an R process needs the kernel to write one: `ulimit -c
#' unlimited` (or `prlimit --core=unlimited`) before R starts, and a
#' `kernel.core_pattern` that writes a file (systemd's `coredumpctl dump`
#' or `gcore PID` from gdb give one too).
#'
#' @param pid The process id: one positive whole number, at most
#'   `.Machine$integer.max`, not this R process's own (use
#'   [winch_sys_calls()] for that). Required unless `core` is given.
#' @param core Instead of `pid`, the path of a core file (a regular file).
#' @param exe With `core`: the path of the executable it ran, if not where
#'   the core says (`NULL`): a regular file of at most 4 GiB, an x86_64 ELF
#'   program, the one the core's process ran (where the core records its
#'   build-id, they must agree).
#' @param libr Include frames of R's own library (the interpreter)?
#' @param children Read the process's descendants and workers too (see "Child
#'   processes")? `TRUE` or `FALSE`; not with `core`.
#' @return An object of class `winch_dump`: a list with one element per
#'   thread, R's main thread first (named `"main"`, the others by thread
#'   id), each a `winch_calls` list as [winch_sys_calls()] returns (R calls
#'   read from the process, native frames as `` `/module`::function() ``
#'   calls; a thread that did not stop has none, and its
#'   `fallback_reason` says why). Attributes: `pid`, `r_version` (`"4.5.1"`, or `NA` when the
#'   process is not R or its R could not be read), `tid` and
#'   `thread_name` (per thread), `note` (what could not be read and why, or
#'   `NA`: a core file cut short, R's state or R's frames not read, threads
#'   that did not stop (counted; each has its `fallback_reason`), a
#'   thread's stack that did not unwind whole; several reasons are joined
#'   by `"; "`), `core` (the core file, or `NULL`); with `children = TRUE`,
#'   `children` (a list of `winch_dump`s, one per process read, named by
#'   pid, each with attributes `parent`, the pid of the process it works
#'   for, and `relation`, `"child"` or `"worker"`) and `children_not_read`
#'   (a data frame: `pid`, `parent`, `relation`, `reason`). A thread whose native
#'   stack could not be unwound whole has attributes `truncated = TRUE`
#'   and `truncation` (why); a thread whose native frames could not be
#'   placed among R's has `fallback_reason`. `print()` shows them all.
#' @examples
#' \dontrun{
#' # Another R session, busy: what is it doing?
#' winch_dump(12345)
#' # A stuck mclapply() or parLapply(): the parent and every worker.
#' winch_dump(12345, children = TRUE)
#' # From a shell:
#' #   Rscript -e 'winch::winch_dump(12345)'
#' # A core file left by a crash:
#' winch_dump(core = "core.12345")
#' }
#' @export
winch_dump <- function(pid, libr = FALSE, core = NULL, exe = NULL, children = FALSE) {
  check_flag(libr)
  check_flag(children)
  if (is.null(core)) {
    check_required(pid, what = "a process id, or `core`, the path of a core file")
    pid <- check_pid(pid)
  } else {
    if (!missing(pid)) {
      abort_bad_argument("Give either `pid` or `core`, not both.")
    }
    # A core is read in bounded parts: no bound on its size.
    check_input_file(core, what = "a core file")
    check_input_file(exe, max_bytes = elf_max_bytes, what = "an executable", null_ok = TRUE)
  }
  if (is.null(core) && !is.null(exe)) {
    abort_bad_argument("`exe` goes with `core`: a running process's executable is known.")
  }
  if (children && !is.null(core)) {
    abort_bad_argument("`children` goes with `pid`: a core file holds one process.")
  }
  sync_options(capture_throws = FALSE)
  res <- if (is.null(core)) {
    check_result(rs_dump(pid, libr))
  } else {
    check_result(rs_dump_core(normalizePath(core), if (!is.null(exe)) normalizePath(exe), libr))
  }
  out <- new_winch_dump(res, core)
  if (children) {
    out <- dump_descendants(out, libr)
  }
  out
}

# Each descendant of the dumped process read in turn (listed once, after
# the process itself): `children`, their dumps by pid, each with its
# `parent`; `children_not_read`, those that could not be read (ended
# meanwhile, not allowed, traced by a debugger) with the reason.
dump_descendants <- function(dump, libr) {
  found <- check_result(rs_descendants(attr(dump, "pid")))
  reasons <- rep(NA_character_, length(found$pid))
  dumps <- vector("list", length(found$pid))
  for (i in seq_along(found$pid)) {
    if (found$pid[[i]] == Sys.getpid()) {
      reasons[[i]] <- "it is this R process (see winch_sys_calls())"
      next
    }
    dumps[i] <- list(tryCatch(
      {
        d <- new_winch_dump(check_result(rs_dump(found$pid[[i]], libr)), NULL)
        attr(d, "parent") <- found$parent[[i]]
        attr(d, "relation") <- found$relation[[i]]
        d
      },
      winch_error = function(e) {
        reasons[[i]] <<- if (inherits(e, "winch_error_no_process")) "it ended while it was read" else conditionMessage(e)
        NULL
      }
    ))
  }
  read <- is.na(reasons)
  ended <- reasons %in% "it ended while it was read"
  warn_children_missed(found$pid[!read & !ended], reasons[!read & !ended], "read")
  attr(dump, "children") <- stats::setNames(dumps[read], found$pid[read])
  attr(dump, "children_not_read") <- data.frame(
    pid = found$pid[!read], parent = found$parent[!read], relation = found$relation[!read], reason = reasons[!read],
    stringsAsFactors = FALSE
  )
  dump
}

# A classed warning naming the descendants that could not be read or
# recorded (`what`), with the reasons: never silently less.
warn_children_missed <- function(pids, reasons, what) {
  if (!length(pids)) {
    return(invisible())
  }
  rlang::warn(
    c(
      sprintf("%d child process%s could not be %s:", length(pids), if (length(pids) == 1L) "" else "es", what),
      stats::setNames(sprintf("process %d: %s", pids, reasons), rep("*", length(pids)))
    ),
    class = c("winch_warning_children_missed", "winch_warning")
  )
}

# A dump's R form from what the core read (`res`).
new_winch_dump <- function(res, core) {
  pid <- res$pid
  threads <- lapply(res$threads, dump_thread)
  tids <- vapply(res$threads, function(t) t$tid, 0L)
  names(threads) <- ifelse(tids == pid, "main", as.character(tids))
  structure(
    threads,
    pid = res$pid,
    r_version = res$r_version,
    tid = tids,
    thread_name = vapply(res$threads, function(t) t$name, ""),
    note = if (length(res$notes)) paste(res$notes, collapse = "; ") else NA_character_,
    core = core,
    class = "winch_dump"
  )
}

# One positive whole number that fits a pid, and not our own.
check_pid <- function(pid, call = rlang::caller_env()) {
  ok <- is.numeric(pid) && length(pid) == 1L && !is.na(pid) && is.finite(pid) &&
    pid == round(pid) && pid >= 1 && pid <= .Machine$integer.max
  if (!ok) {
    abort_bad_argument(sprintf(
      "`pid` must be one process id: a whole number, at least 1 and at most %d.", .Machine$integer.max
    ), call = call)
  }
  pid <- as.integer(pid)
  if (pid == Sys.getpid()) {
    abort_bad_argument(
      "`pid` is this R process: use `winch_sys_calls()` or `winch_trace_back()` to see its own stack.",
      call = call
    )
  }
  pid
}

# A thread of a dump as a winch_calls list: R calls parsed from the text
# read from the process (a call that cannot be written out is its label
# called with no arguments), native frames in their places.
dump_thread <- function(t) {
  calls <- .mapply(dump_call, list(t$calls, t$labels), NULL)
  out <- new_winch_calls(calls, t$frames, length(calls))
  if (!t$r) {
    # No R frames: nothing to place the native frames among.
    attr(out, "status")[] <- "exact"
  }
  attr(out, "fallback_reason") <- attr(t$frames, "fallback_reason")
  out
}

dump_call <- function(text, label) {
  if (!is.na(text)) {
    call <- tryCatch(str2lang(text), error = function(e) NULL)
    if (is.call(call)) {
      return(call)
    }
  }
  as.call(list(as.name(label)))
}

#' @export
format.winch_dump <- function(x, ...) {
  check_dots_among(..., ignored = default_method_args(format.default), takes = "no argument of its own")
  pid <- attr(x, "pid")
  rv <- attr(x, "r_version")
  what <- if (is.na(rv)) "not R, or R not readable" else paste("R", rv)
  kids <- NROW(attr(x, "children_not_read")) + length(attr(x, "children"))
  head <- sprintf(
    "<winch_dump> process %d (%s), %d thread%s%s%s", pid, what, length(x), if (length(x) == 1L) "" else "s",
    if (is.null(attr(x, "core"))) "" else paste0(", from core file ", attr(x, "core")),
    if (is.null(attr(x, "children"))) "" else sprintf(", %d child process%s", kids, if (kids == 1L) "" else "es")
  )
  note <- attr(x, "note")
  if (length(note) == 1L && !is.na(note)) {
    head <- c(head, strwrap(note, width = max(40L, getOption("width", 80L) - 2L), initial = "Note: ", prefix = "      "))
  }
  tids <- attr(x, "tid")
  names <- attr(x, "thread_name")
  body <- unlist(lapply(seq_along(x), function(i) {
    title <- sprintf(
      "\n%s (tid %d, \"%s\")", if (names(x)[[i]] == "main") "Main thread" else "Thread", tids[[i]], names[[i]]
    )
    lines <- if (length(x[[i]])) {
      format(x[[i]])
    } else if (isTRUE(attr(x[[i]], "truncated"))) {
      paste0("  (no frames: ", attr(x[[i]], "truncation"), ")")
    } else {
      "  (no frames)"
    }
    why <- attr(x[[i]], "fallback_reason")
    if (!is.null(why) && !is.na(why)) lines <- c(lines, paste("note:", why))
    c(title, lines)
  }))
  c(head, body, format_descendants(x))
}

# The dumps of a process's descendants (`winch_dump(children = TRUE)`),
# each under a rule naming it and its parent, then those not read.
format_descendants <- function(x) {
  kids <- attr(x, "children")
  missed <- attr(x, "children_not_read")
  if (is.null(kids) && is.null(missed)) {
    return(character())
  }
  read <- unlist(lapply(kids, function(k) {
    what <- relation_title(attr(k, "relation"))
    c("", sprintf("== %s process %d (of %d) ==", what, attr(k, "pid"), attr(k, "parent")), format(k))
  }))
  not_read <- if (NROW(missed)) {
    what <- relation_title(missed$relation)
    c("", sprintf("%s process %d (of %d) not read: %s", what, missed$pid, missed$parent, missed$reason))
  }
  none <- if (!length(kids) && !NROW(missed)) c("", "No child processes.")
  c(read, not_read, none)
}

# "Child" or "Worker", as a dump's title names a process read with it
# (dumps saved before workers were read have no relation: children).
relation_title <- function(relation) {
  ifelse(relation %in% "worker", "Worker", "Child")
}

#' @export
print.winch_dump <- function(x, ...) {
  check_dots_among(..., ignored = default_method_args(print.default), takes = "no argument of its own")
  writeLines(format(x))
  invisible(x)
}
