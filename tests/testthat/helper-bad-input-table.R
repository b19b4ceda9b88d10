# The table of test-bad-input.R (issue 33): every exported function and
# method, called from a valid call with one argument at a time replaced by
# a bad value, and damaged profiles and core files given to what reads
# them. The cases run in watched child processes (helper-bad-input-run.R).
#
# A case is a row: `fun` (what is called), `arg`, `value` (a label), `code`
# (R code run in the child), `area` (whose checks it needs: "args",
# "files" for file arguments, "damaged" for damaged profiles, "cores" for
# damaged core files, "base" for the valid calls themselves) and `expect`:
# "error" (an error of class winch_error; "args" and "damaged" cases
# winch_error_bad_argument), "accepted" (the value is legitimately
# accepted: `why` says why), "ok" (a valid call returns), "error_or_note"
# (a damaged core: refused, or read with a `note` that says why frames are
# missing) or "any" (a call that raises by design: winch_stop()).

# A value that stands for "the argument is left out".
bi_missing <- structure(list(), class = "bi_missing")

# Bad values by the kind of argument, as expressions evaluated in the
# child. Names are the labels in the table.
bi_values <- function(kind) {
  common <- list(
    "NULL" = NULL, "NA" = NA, "NA_character_" = NA_character_,
    "a list" = quote(list(1)), "a function" = quote(function() 1)
  )
  numbers <- list(
    "a string" = "1", "negative" = -1, "zero" = 0, "huge (1e308)" = 1e308,
    "integer.max + 1" = quote(.Machine$integer.max + 1), "Inf" = Inf, "NaN" = NaN,
    "length 0" = quote(numeric(0)), "length 2" = quote(c(1, 2))
  )
  strings <- list(
    "a number" = 1, "length 0" = quote(character(0)), "length 2" = quote(c("a", "b"))
  )
  switch(kind,
    flag = c(common, list(
      "a string" = "TRUE", "a number" = 1, "length 0" = quote(logical(0)), "length 2" = quote(c(TRUE, FALSE))
    )),
    number = c(common, numbers),
    count = c(common, numbers, list("a fraction" = 1.5)),
    choice = c(common, strings, list("unknown" = "nonexistent")),
    string = c(common, strings),
    pid = c(common, numbers, list(
      "a fraction" = 1.5, "this process" = quote(Sys.getpid()), "missing" = bi_missing
    )),
    profile = c(common, list(
      "a number" = 1, "a string" = "p", "a plain list" = quote(unclass(p)), "length 0" = quote(list()),
      "a data frame" = quote(data.frame(x = 1)), "missing" = bi_missing
    )),
    fun = c(common, list("a string" = "f", "needs an argument" = quote(function(x) x), "missing" = bi_missing)),
    env = c(common, list("a string" = "e", "a number" = 1)),
    trace = c(common, list("a number" = 1, "a string" = "t", "a data frame" = quote(data.frame(x = 1)))),
    expr = list("missing" = bi_missing),
    # Files written (`file`, `path`, `filename`).
    write = c(common, strings, list(
      "empty" = "", "a FIFO" = quote(FIFO), "/dev/zero" = "/dev/zero", "/dev/full" = "/dev/full",
      "a directory" = quote(DIR), "in a missing directory" = quote(file.path(MISSING, "out"))
    )),
    # Files read (`core`, `exe`, winch_init_library()'s `path`).
    read = c(common, strings, list(
      "empty" = "", "a FIFO" = quote(FIFO), "/dev/zero" = "/dev/zero", "a directory" = quote(DIR),
      "a missing path" = quote(MISSING)
    )),
    # Subscripts of a winch_calls list `cl`.
    index = list(
      "NA" = NA, "NA_integer_" = NA_integer_, "a string" = "a", "a list" = quote(list(1)),
      "a function" = quote(function() 1), "past the end" = quote(length(cl) + 1), "huge (1e308)" = 1e308,
      "integer.max + 1" = quote(.Machine$integer.max + 1), "a fraction" = 1.5, "mixed signs" = quote(c(1, -1)),
      "logical, too long" = quote(rep(TRUE, length(cl) + 1)), "NULL" = NULL, "zero" = 0, "negative" = -1
    ),
    stop("no bad values of kind ", kind)
  )
}

# A function's cases: `call` a valid call, `args` the kind of each argument
# mutated (named as in the call; `i@3` for the third element of a call
# whose arguments have no names, as `cl[1]`), `area` of each
# argument (default "args"), `accept` the values legitimately accepted
# (list(arg = c(label = "why"))), `dots` the bad extra arguments of a
# method with `...` (label = list of arguments), `cleanup` code run after
# each case.
bi_function <- function(fun, call, args = list(), area = list(), accept = list(), dots = list(),
                        cleanup = "", base = "ok") {
  deparse1 <- function(x) paste(deparse(x, width.cutoff = 500L), collapse = " ")
  row <- function(arg, value, code, area, expect, why = "") {
    data.frame(
      fun = fun, arg = arg, value = value, code = code, area = area, expect = expect, why = why,
      cleanup = cleanup, stringsAsFactors = FALSE
    )
  }
  rows <- list(row("", "valid call", deparse1(call), "base", base))
  for (arg in names(args)) {
    values <- bi_values(args[[arg]])
    at <- if (grepl("@", arg, fixed = TRUE)) as.integer(sub(".*@", "", arg)) else arg
    shown <- sub("@.*", "", arg)
    for (label in names(values)) {
      v <- values[[label]]
      mutated <- call
      if (inherits(v, "bi_missing")) {
        mutated[[at]] <- NULL
      } else {
        mutated[at] <- list(v)
      }
      why <- accept[[arg]][label]
      ok <- !is.null(why) && !is.na(why)
      rows[[length(rows) + 1L]] <- row(
        shown, label, deparse1(mutated), area[[arg]] %||% "args",
        if (ok) "accepted" else "error", if (ok) why else ""
      )
    }
  }
  for (label in names(dots)) {
    extended <- as.call(c(as.list(call), dots[[label]]))
    rows[[length(rows) + 1L]] <- row("...", label, deparse1(extended), "args", "error")
  }
  do.call(rbind, rows)
}

# Cases given as code.
bi_cases <- function(fun, arg, codes, area = "args", expect = "error") {
  data.frame(
    fun = fun, arg = arg, value = names(codes), code = unname(codes), area = area, expect = expect,
    why = "", cleanup = "", stringsAsFactors = FALSE
  )
}

# The damages done to a real profile `p` (or memory profile `pm`), each
# the code of a damaged copy.
bi_damages <- c(
  "a 1e6-frame stack" = "{ q <- p; q$stacks$locations[[1]] <- rep(q$stacks$locations[[1]], length.out = 1e6); q }",
  "duration 0" = "{ q <- p; q$duration <- 0; q }",
  "duration 1e-9" = "{ q <- p; q$duration <- 1e-9; q }",
  "thread NA" = "{ q <- p; q$stacks$thread[1] <- NA_integer_; q }",
  "line -7" = "{ q <- p; q$lines$line[1] <- -7L; q }",
  "location 1.5" = "{ q <- p; q$stacks$locations[[1]][1] <- 1.5; q }",
  "interval 1e308" = "{ q <- p; q$interval <- 1e308; q }",
  "module start > limit" = "{ q <- p; q$modules$start[1] <- '0xffffffffffff0000'; q }",
  "stats NULL" = "{ q <- p; q$stats <- NULL; q }",
  "in-use > allocated" = "{ q <- pm; q$stacks$inuse_bytes[1] <- q$stacks$alloc_bytes[1] + 1; q }"
)

# Damages that leave a usable profile, and why.
bi_damages_accepted <- c(
  "stats NULL" = "the figures of the run are optional: summary() shows NA for them"
)

# What is called with a damaged profile `q`.
bi_readers <- c(
  "print" = "print(q)", "summary" = "summary(q)", "plot" = "plot(q)", "as.data.frame" = "as.data.frame(q)",
  "winch_write_rprof" = "winch_write_rprof(q, OUT)", "winch_write_pprof" = "winch_write_pprof(q, OUT)",
  "winch_write_collapsed" = "winch_write_collapsed(q, OUT)", "c" = "c(p, q)"
)

# The whole table. `core` is the path of a core file of an R process
# (NULL: the cases that need one are left out).
bi_table <- function(core = NULL) {
  accept_huge_count <- c(
    "huge (1e308)" = "as many as there are", "integer.max + 1" = "as many as there are", "Inf" = "as many as there are",
    "zero" = "none listed"
  )
  accept_huge_width <- c(
    "huge (1e308)" = "labels never shortened", "integer.max + 1" = "labels never shortened",
    "Inf" = "labels never shortened"
  )
  file_null <- c("NULL" = "no file (the default)")
  rows <- list(
    bi_function("winch_add_trace_back", quote(winch_add_trace_back(trace = rlang::trace_back())),
      args = list(trace = "trace")
    ),
    bi_function("winch_call", quote(winch_call(fun = function() 1, env = globalenv())),
      args = list(fun = "fun", env = "env"), accept = list(fun = c("a function" = "a function without arguments"))
    ),
    bi_function("winch_crash_report", quote(winch_crash_report(enable = FALSE)), args = list(enable = "flag")),
    bi_function("winch_dump", quote(winch_dump(pid = PID, libr = FALSE, children = FALSE)),
      args = list(pid = "pid", libr = "flag", children = "flag")
    ),
    bi_cases("winch_dump", "pid", c(
      "missing, and no core" = "winch_dump()", "missing, core NULL" = "winch_dump(core = NULL)"
    )),
    bi_function("winch_init_library", quote(winch_init_library(path = NULL, force = FALSE)),
      args = list(path = "read", force = "flag"), area = list(path = "files"),
      accept = list(path = c("NULL" = "the default: nothing to check"))
    ),
    bi_function("winch_profile", quote(winch_profile(
      expr = sort(runif(1000)), file = NULL, interval = 0.01, event = "cpu", loops = TRUE, lines = FALSE,
      threads = "all", libr = FALSE, gc = TRUE, sample_bytes = 524288, processes = "all"
    )),
    args = list(
      expr = "expr", file = "write", interval = "number", event = "choice", loops = "flag", lines = "flag",
      threads = "choice", libr = "flag", gc = "flag", sample_bytes = "number", processes = "choice"
    ),
    area = list(file = "files"),
    accept = list(
      file = file_null,
      sample_bytes = c("integer.max + 1" = "2^31 bytes between samples is within 1 to 1e15")
    ),
    dots = list("misspelled `interval`" = list(intervl = 0.1))
    ),
    bi_function("winch_rprof", quote(winch_rprof(
      filename = OUT, interval = 0.02, event = "cpu", loops = TRUE, lines = FALSE, threads = "all",
      libr = FALSE, gc = TRUE, processes = "all"
    )),
    args = list(
      filename = "write", interval = "number", event = "choice", loops = "flag", lines = "flag",
      threads = "choice", libr = "flag", gc = "flag", processes = "choice"
    ),
    area = list(filename = "files"),
    cleanup = "if (winch:::profile_active()) winch_rprof(NULL)"
    ),
    bi_function("winch_record", quote(winch_record(
      pid = PID, duration = 0.05, interval = 0.01, file = NULL, threads = "all", idle = FALSE, loops = TRUE,
      lines = FALSE, children = FALSE
    )),
    args = list(
      pid = "pid", duration = "number", interval = "number", file = "write", threads = "choice",
      idle = "flag", loops = "flag", lines = "flag", children = "flag"
    ),
    area = list(file = "files"), accept = list(file = file_null)
    ),
    bi_cases("winch_record", "duration", c("missing" = "winch_record(PID)")),
    bi_function("winch_stop", quote(winch_stop(message = "boom")), args = list(message = "string"), base = "any"),
    bi_function("winch_sys_calls", quote(winch_sys_calls(libr = FALSE, backend = "auto")),
      args = list(libr = "flag", backend = "choice")
    ),
    bi_function("winch_trace_back", quote(winch_trace_back(backend = "auto", libr = TRUE)),
      args = list(backend = "choice", libr = "flag")
    ),
    bi_function("winch_write_rprof", quote(winch_write_rprof(profile = p, path = OUT, lines = FALSE)),
      args = list(profile = "profile", path = "write", lines = "flag"), area = list(path = "files")
    ),
    bi_function("winch_write_pprof", quote(winch_write_pprof(profile = p, path = OUT)),
      args = list(profile = "profile", path = "write"), area = list(path = "files")
    ),
    bi_function("winch_write_collapsed", quote(winch_write_collapsed(profile = p, path = OUT)),
      args = list(profile = "profile", path = "write"), area = list(path = "files")
    ),
    bi_function("print.winch_profile", quote(print(x = p, n = 10, width = 40)),
      args = list(n = "count", width = "count"),
      accept = list(n = accept_huge_count, width = c(accept_huge_width, "NULL" = "the default: fits the console")),
      dots = list("misspelled `n`" = list(m = 3), "unnamed" = list(5))
    ),
    bi_function("summary.winch_profile", quote(summary(object = p)),
      dots = list("an argument" = list(n = 3), "unnamed" = list(5))
    ),
    bi_function("print.summary.winch_profile", quote(print(x = s, n = 15)),
      args = list(n = "count"), accept = list(n = accept_huge_count),
      dots = list("misspelled `n`" = list(m = 3), "unnamed" = list(5))
    ),
    bi_function("plot.winch_profile", quote(plot(x = p, min_width = 0.002, focus = NULL, what = "alloc")),
      args = list(min_width = "number", focus = "choice", what = "choice"),
      accept = list(
        min_width = c("zero" = "every frame drawn"),
        focus = c("NULL" = "the default: the whole profile")
      ),
      dots = list("misspelled `focus`" = list(focs = "sort"), "`xlim`" = list(xlim = c(0, 1)), "unnamed" = list(5))
    ),
    bi_function("c.winch_profile", quote(c(p, p)),
      args = list("...@3" = "profile"),
      accept = list("...@3" = c(
        "NULL" = "dropped, as c() drops NULL", "missing" = "c(p) of one profile: it, under its [process host:pid] frame"
      ))
    ),
    bi_function("as.data.frame.winch_profile", quote(as.data.frame(x = p, row.names = NULL, optional = FALSE)),
      args = list(row.names = "string", optional = "flag"),
      accept = list(row.names = c("NULL" = "the default")),
      dots = list("an argument" = list(n = 3), "unnamed" = list(5))
    ),
    bi_function("format.winch_calls", quote(format(x = cl)),
      dots = list("an argument" = list(n = 3), "unnamed" = list(5))
    ),
    bi_function("print.winch_calls", quote(print(x = cl)),
      dots = list("an argument" = list(n = 3), "unnamed" = list(5))
    ),
    bi_cases("format.winch_calls", "x", c(
      "no attributes" = "format(structure(list(quote(f())), class = 'winch_calls'))",
      "not a list" = "format(structure(1:3, class = 'winch_calls'))"
    )),
    bi_function("[.winch_calls", quote(cl[1]),
      args = list("i@3" = "index"),
      accept = list("i@3" = c("NULL" = "no entry, as for lists", "zero" = "no entry, as R does", "negative" = "all but the first")),
      dots = list("a second subscript" = list(2))
    ),
    bi_cases("[.winch_calls", "x", c("no attributes" = "structure(list(quote(f())), class = 'winch_calls')[1]")),
    bi_function("format.winch_dump", quote(format(x = d)), dots = list("an argument" = list(n = 3), "unnamed" = list(5))),
    bi_function("print.winch_dump", quote(print(x = d)), dots = list("an argument" = list(n = 3), "unnamed" = list(5))),
    bi_cases("Ops.winch_rprof_probe", "e1, e2", c("valid call" = "probe + 0"), area = "base", expect = "ok"),
    bi_cases("Ops.winch_rprof_probe", "e1, e2", c(
      "another operator" = "probe * 0", "a string" = "probe + 'a'", "unary" = "-probe",
      "length 2" = "probe + c(0, 0)"
    ))
  )
  if (!is.null(core)) {
    rows <- c(rows, list(
      bi_function("winch_dump (core)", quote(winch_dump(core = CORE, exe = NULL, libr = FALSE)),
        args = list(core = "read", exe = "read"), area = list(core = "files", exe = "files"),
        accept = list(exe = c("NULL" = "the default: the program the core names"))
      ),
      bi_cases("winch_dump (core)", "exe", c("another program" = "winch_dump(core = CORE, exe = '/bin/ls')"),
        area = "files"
      ),
      bi_cases("winch_dump (core)", "core", c(
        "truncated at 10%" = "winch_dump(core = CORE_CUT[['10']])",
        "truncated at 50%" = "winch_dump(core = CORE_CUT[['50']])",
        "truncated at 90%" = "winch_dump(core = CORE_CUT[['90']])",
        "its ELF header only" = "winch_dump(core = CORE_CUT[['header']])",
        "empty" = "winch_dump(core = CORE_CUT[['empty']])"
      ), area = "cores", expect = "error_or_note")
    ))
  }
  # (NULL for core in the core cases is `winch_dump(core = NULL)`, pid
  # missing: an "args" case.)
  table <- do.call(rbind, rows)
  table$area[table$fun == "winch_dump (core)" & table$arg == "core" & table$value == "NULL"] <- "args"
  for (d in names(bi_damages)) {
    for (r in names(bi_readers)) {
      table <- rbind(table, data.frame(
        fun = r, arg = "damaged profile", value = d,
        code = sprintf("local({ q <- %s; %s })", bi_damages[[d]], bi_readers[[r]]),
        area = "damaged", expect = if (d %in% names(bi_damages_accepted)) "accepted" else "error",
        why = if (d %in% names(bi_damages_accepted)) bi_damages_accepted[[d]] else "",
        cleanup = "", stringsAsFactors = FALSE
      ))
    }
  }
  table$id <- seq_len(nrow(table))
  table
}

# The code every child runs first: a real profile `p` (and memory profile
# `pm`), its summary `s`, a joint stack `cl`, a dump `d` of process `PID`,
# a probe, and the special files.
bi_setup <- function(pid, core, core_cut, dir) {
  c(
    "suppressPackageStartupMessages(library(winch))",
    "`%||%` <- function(x, y) if (is.null(x)) y else x",
    "options(warn = 1)",
    "grDevices::pdf(NULL)",
    sprintf("PID <- %d", pid),
    sprintf("CORE <- %s", deparse(core %||% NA_character_)),
    sprintf("CORE_CUT <- %s", paste(deparse(core_cut), collapse = " ")),
    sprintf("DIR <- %s", deparse(dir)),
    sprintf("FIFO <- %s", deparse(file.path(dir, "fifo"))),
    sprintf("MISSING <- %s", deparse(file.path(dir, "no-such-dir", "no-such-file"))),
    sprintf("OUT <- %s", deparse(file.path(dir, "out"))),
    "busy <- function() for (i in 1:30) sort(runif(2e4))",
    "p <- winch_profile(busy(), interval = 0.002)",
    "pm <- winch_profile(x <- lapply(1:2000, function(i) numeric(200)), event = 'alloc', sample_bytes = 4096)",
    "s <- summary(p)",
    "cl <- winch_call(function() winch_sys_calls())",
    "d <- winch_dump(PID)",
    "probe <- structure(list(), class = 'winch_rprof_probe')"
  )
}
