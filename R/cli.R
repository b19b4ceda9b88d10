# The command line installed with the package (inst/bin/winch): parses its
# arguments, runs winch_dump() or winch_record(), prints or writes the
# result, and exits with a status (0 done, 1 an error, 2 bad usage: a
# command line it cannot parse, or an argument winch refuses).

cli_usage <- function() {
  c(
    "Usage:",
    "  winch dump PID [--libr] [--children]    the joint stack of every thread of process PID",
    "                                          (--children: and of every process working for it)",
    "  winch dump --core FILE [--exe PROGRAM]  the same from a core file",
    "  winch record PID [-d SECONDS] [-i SECONDS] [-o FILE] [--idle] [--main] [--children]",
    "                                          profile process PID for SECONDS (default 10);",
    "                                          FILE ending .pb.gz: pprof, .folded: collapsed stacks,",
    "                                          else Rprof's format; without -o, a summary is printed",
    "  winch help",
    "Exit status: 0 done, 1 an error, 2 bad usage (a wrong or missing argument)."
  )
}

cli_main <- function(args, quit = TRUE) {
  status <- tryCatch(cli_run(args), winch_cli_usage = function(e) {
    writeLines(c(paste("winch:", conditionMessage(e)), cli_usage()), con = stderr())
    2L
  }, winch_error_bad_argument = function(e) {
    # An argument the command line passed on and winch refused (a core
    # file that is not one, an interval longer than the recording).
    writeLines(c(paste("winch:", conditionMessage(e)), "Run 'winch help' for usage."), con = stderr())
    2L
  }, error = function(e) {
    writeLines(paste("winch:", conditionMessage(e)), con = stderr())
    1L
  })
  if (quit) base::quit(save = "no", status = status) else status
}

cli_abort <- function(message) {
  rlang::abort(message, class = "winch_cli_usage")
}

# The value after option `name` in `args`, or `default`; options and their
# values are removed from `rest` (an environment's `args`).
cli_take <- function(state, names, default = NULL, flag = FALSE) {
  at <- which(state$args %in% names)
  if (!length(at)) {
    return(if (flag) FALSE else default)
  }
  at <- at[[1L]]
  if (flag) {
    state$args <- state$args[-at]
    return(TRUE)
  }
  if (at == length(state$args)) cli_abort(sprintf("%s needs a value", names[[1L]]))
  value <- state$args[[at + 1L]]
  state$args <- state$args[-c(at, at + 1L)]
  value
}

cli_number <- function(x, what) {
  v <- suppressWarnings(as.numeric(x))
  if (is.na(v)) cli_abort(sprintf("%s must be a number, not '%s'", what, x))
  v
}

# A positive number of seconds (-d, -i).
cli_seconds <- function(x, what) {
  v <- cli_number(x, what)
  if (!is.finite(v) || v <= 0) cli_abort(sprintf("%s must be a positive number of seconds, not '%s'", what, x))
  v
}

# A process id: digits only (`-5` is neither a pid nor an option).
cli_pid <- function(x) {
  if (!grepl("^[0-9]+$", x) || as.numeric(x) < 1 || as.numeric(x) > .Machine$integer.max) {
    cli_abort(sprintf("PID must be a process id, a whole number from 1 to %d, not '%s'", .Machine$integer.max, x))
  }
  as.numeric(x)
}

cli_run <- function(args) {
  if (!length(args) || args[[1L]] %in% c("help", "--help", "-h")) {
    writeLines(cli_usage())
    return(0L)
  }
  state <- new.env()
  state$args <- args[-1L]
  switch(args[[1L]],
    dump = {
      libr <- cli_take(state, "--libr", flag = TRUE)
      children <- cli_take(state, "--children", flag = TRUE)
      core <- cli_take(state, "--core")
      exe <- cli_take(state, "--exe")
      if (is.null(core)) {
        if (length(state$args) != 1L) cli_abort("dump needs one PID (or --core FILE)")
        print(winch_dump(cli_pid(state$args[[1L]]), libr = libr, children = children))
      } else {
        if (length(state$args)) cli_abort("dump --core takes no PID")
        if (children) cli_abort("dump --core takes no --children (a core file holds one process)")
        print(winch_dump(core = core, exe = exe, libr = libr))
      }
      0L
    },
    record = {
      duration <- cli_seconds(cli_take(state, c("-d", "--duration"), "10"), "-d")
      interval <- cli_seconds(cli_take(state, c("-i", "--interval"), "0.01"), "-i")
      out <- cli_take(state, c("-o", "--output"))
      idle <- cli_take(state, "--idle", flag = TRUE)
      main <- cli_take(state, "--main", flag = TRUE)
      children <- cli_take(state, "--children", flag = TRUE)
      if (length(state$args) != 1L) cli_abort("record needs one PID")
      pid <- cli_pid(state$args[[1L]])
      if (!is.null(out)) {
        # Before recording, not after: a FIFO or a directory is refused now.
        check_output_file(out, "-o")
        check_writable(out, "-o")
      }
      p <- winch_record(pid, duration,
        interval = interval, threads = if (main) "main" else "all", idle = idle, children = children
      )
      if (is.null(out)) {
        print(summary(p))
      } else if (grepl("\\.pb(\\.gz)?$", out)) {
        winch_write_pprof(p, out)
      } else if (grepl("\\.(folded|collapsed)$", out)) {
        winch_write_collapsed(p, out)
      } else {
        winch_write_rprof(p, out)
      }
      if (!is.null(out)) {
        message(sprintf("winch: %d samples of process %d written to %s", sum(p$stacks$count), as.integer(pid), out))
      }
      0L
    },
    cli_abort(sprintf("unknown command '%s'", args[[1L]]))
  )
}
