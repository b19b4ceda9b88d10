# Runs the table of helper-bad-input-table.R (test-bad-input.R): each
# case in a child R process watched from here, so that a case that crashes
# its process or hangs it is named, and the cases after it run in a new
# process; the verdicts; and the core files the table damages.

# Runs the cases (rows of bi_table()) in children, a new one after a case
# that crashed or hung one; each case has `case_limit` seconds (R's
# elapsed time limit in the child; a child that makes no progress for
# 5 s more is killed). Returns the table with `got` ("value", "error",
# "timeout", "crash", "hang"), `class` and `message`.
bi_run <- function(table, setup, case_limit = 10, file_limit_blocks = 204800, memory_limit_kb = 4194304) {
  results <- tempfile("bad-input-")
  on.exit(unlink(results))
  done <- data.frame(id = integer(), got = character(), class = character(), message = character(),
    stringsAsFactors = FALSE
  )
  pending <- table
  while (nrow(pending)) {
    script <- tempfile(fileext = ".R")
    out <- tempfile("bad-input-out-")
    writeLines(c(
      setup,
      sprintf(".bi_log <- %s", deparse(results)),
      sprintf(".bi_limit <- %d", case_limit),
      sprintf(".bi_ids <- %s", paste(deparse(pending$id), collapse = " ")),
      sprintf(".bi_codes <- %s", paste(deparse(pending$code, width.cutoff = 500L), collapse = "\n")),
      sprintf(".bi_cleanups <- %s", paste(deparse(pending$cleanup, width.cutoff = 500L), collapse = "\n")),
      deparse_function_def(".bi_case", bi_child_case),
      "for (.k in seq_along(.bi_ids)) .bi_case(.bi_ids[[.k]], .bi_codes[[.k]], .bi_cleanups[[.k]])",
      "cat('END\\n', file = .bi_log, append = TRUE)"
    ), script)
    # Writes are bounded (100 MB in the shell's 512-byte blocks: a damaged
    # profile must not fill the disk before it is refused), and exceeding
    # the bound is an error of the write,
    # not a signal that kills; so is memory (a read without end must not
    # take the machine's).
    cmd <- sprintf(
      "ulimit -f %d; ulimit -v %d; trap '' XFSZ; exec %s --vanilla %s",
      file_limit_blocks, memory_limit_kb, shQuote(file.path(R.home("bin"), "Rscript")), shQuote(script)
    )
    unlink(results)
    file.create(results)
    line <- sprintf(
      "env %s sh -c %s > %s 2>&1 & echo $!",
      shQuote(paste0("R_LIBS=", paste(.libPaths(), collapse = ":"))), shQuote(cmd), shQuote(out)
    )
    pid <- as.integer(system2("sh", c("-c", shQuote(line)), stdout = TRUE))
    seen <- 0L
    last <- Sys.time()
    killed <- FALSE
    repeat {
      Sys.sleep(0.1)
      n <- length(readLines(results, warn = FALSE))
      if (n > seen) {
        seen <- n
        last <- Sys.time()
      }
      if (!process_alive(pid)) break
      # (Setting up, before the first case, may take longer on a busy
      # machine.)
      if (as.numeric(Sys.time() - last, units = "secs") > if (seen) case_limit + 5 else 120) {
        kill_child(pid)
        wait_exit(pid, 10)
        killed <- TRUE
        break
      }
    }
    log <- strsplit(readLines(results, warn = FALSE), "\t", fixed = TRUE)
    for (f in log) {
      if (f[[1L]] == "RESULT") {
        done[nrow(done) + 1L, ] <- list(as.integer(f[[2L]]), f[[3L]], f[[4L]], f[5L] %|NA|% "")
      }
    }
    starts <- vapply(Filter(function(f) f[[1L]] == "START", log), function(f) as.integer(f[[2L]]), 0L)
    finished <- any(vapply(log, function(f) identical(f[[1L]], "END"), NA))
    if (finished) break
    if (!length(starts)) {
      stop("the child could not set up the cases:\n", paste(utils::tail(readLines(out), 20L), collapse = "\n"))
    }
    stuck <- starts[[length(starts)]]
    if (!stuck %in% done$id) {
      tail <- paste(utils::tail(readLines(out, warn = FALSE), 3L), collapse = " | ")
      done[nrow(done) + 1L, ] <- list(stuck, if (killed) "hang" else "crash", "", tail)
    }
    pending <- pending[pending$id > stuck, , drop = FALSE]
  }
  merge(table, done, by = "id", all.x = TRUE, sort = TRUE)
}

`%|NA|%` <- function(x, y) if (length(x) && !is.na(x)) x else y

# The definition of `fun` as code for a child, named `name`.
deparse_function_def <- function(name, fun) {
  paste(c(paste(name, "<-"), deparse(fun)), collapse = "\n")
}

# One case in the child: its result, as a line of the log.
bi_child_case <- function(id, code, cleanup) {
  cat("START\t", id, "\n", sep = "", file = .bi_log, append = TRUE)
  warned <- character()
  res <- tryCatch(
    {
      setTimeLimit(elapsed = .bi_limit)
      v <- withCallingHandlers(
        withVisible(eval(parse(text = code)[[1L]], globalenv()))$value,
        warning = function(w) {
          warned <<- c(warned, conditionMessage(w))
          invokeRestart("muffleWarning")
        }
      )
      setTimeLimit()
      note <- if (inherits(v, "winch_dump")) {
        if (is.na(attr(v, "note") %||% NA_character_)) "no note" else paste("note:", attr(v, "note"))
      } else {
        ""
      }
      list(got = "value", class = class(v)[[1L]], message = paste(c(note, warned), collapse = "; "))
    },
    error = function(e) {
      setTimeLimit()
      timeout <- grepl("reached elapsed time limit", conditionMessage(e), fixed = TRUE)
      list(got = if (timeout) "timeout" else "error", class = paste(class(e), collapse = ","), message = conditionMessage(e))
    }
  )
  if (nzchar(cleanup)) try(eval(parse(text = cleanup)[[1L]], globalenv()), silent = TRUE)
  message <- substr(gsub("[\t\r\n]+", " ", paste(res$message, collapse = " ")), 1L, 300L)
  cat("RESULT\t", id, "\t", res$got, "\t", res$class, "\t", message, "\n", sep = "", file = .bi_log, append = TRUE)
}

# Whether each case ended as the table expects; a reason where not.
bi_verdict <- function(res) {
  classes <- strsplit(ifelse(is.na(res$class), "", res$class), ",", fixed = TRUE)
  has <- function(cls) vapply(classes, function(k) cls %in% k, NA)
  got <- ifelse(is.na(res$got), "not run", res$got)
  winch <- got == "error" & has("winch_error")
  bad_arg <- got == "error" & has("winch_error_bad_argument")
  noted <- got == "value" & grepl("^note:", res$message)
  ok <- switch_vec(res$expect, list(
    ok = got == "value",
    any = got %in% c("value", "error"),
    accepted = got == "value",
    error = ifelse(res$area %in% c("args", "damaged"), bad_arg, winch),
    error_or_note = winch | noted
  ))
  res$ok <- ok
  res$got <- got
  res
}

switch_vec <- function(key, values) {
  out <- logical(length(key))
  for (k in names(values)) out[key == k] <- values[[k]][key == k]
  out
}

# A case as one line, for failure messages.
bi_describe <- function(res) {
  sprintf(
    "[%s] %s, %s = %s: expected %s, got %s %s%s",
    res$area, res$fun, ifelse(nzchar(res$arg), res$arg, "-"), res$value, res$expect, res$got,
    ifelse(is.na(res$class), "", res$class),
    ifelse(!is.na(res$message) & nzchar(res$message), paste0(" (", substr(res$message, 1L, 120L), ")"), "")
  )
}

# A core file of an R process sleeping in Sys.sleep(): the kernel's (when
# it writes core files to the working directory), else gdb's gcore; NULL
# when neither can make one here.
bi_core <- function(dir, frame = parent.frame()) {
  pattern <- readLines("/proc/sys/kernel/core_pattern", warn = FALSE)
  ready <- file.path(dir, "ready")
  script <- file.path(dir, "sleeper.R")
  writeLines(c(
    sprintf("ready <- %s", deparse(ready)),
    "nap <- function() { file.create(ready); Sys.sleep(300) }",
    "nap()"
  ), script)
  cores <- file.path(dir, "cores")
  dir.create(cores)
  cmd <- sprintf(
    "cd %s && ulimit -c unlimited && exec %s --vanilla %s",
    shQuote(cores), shQuote(file.path(R.home("bin"), "Rscript")), shQuote(script)
  )
  child <- tryCatch(local_child_command(sprintf("sh -c %s", shQuote(cmd)), ready = ready, frame = frame),
    error = function(e) NULL
  )
  if (is.null(child)) {
    return(NULL)
  }
  if (!grepl("^[|/]", pattern) && nzchar(pattern)) {
    tools::pskill(child$pid, 6L) # SIGABRT
    wait_exit(child$pid)
    deadline <- Sys.time() + 20
    while (!length(made <- list.files(cores, pattern = "^core", full.names = TRUE)) && Sys.time() < deadline) {
      Sys.sleep(0.1)
    }
    if (length(made)) {
      repeat {
        size <- file.size(made[[1L]])
        Sys.sleep(0.3)
        if (identical(size, file.size(made[[1L]]))) break
      }
      return(made[[1L]])
    }
  }
  if (nzchar(Sys.which("gcore")) && process_alive(child$pid)) {
    suppressWarnings(system2("gcore", c("-o", shQuote(file.path(cores, "gcore")), child$pid), stdout = FALSE, stderr = FALSE))
    made <- list.files(cores, pattern = "^gcore", full.names = TRUE)
    if (length(made)) return(made[[1L]])
  }
  NULL
}

# Damaged copies of `core`: cut at 10, 50 and 90 % of its size, its ELF
# header only, empty.
bi_core_cuts <- function(core, dir) {
  size <- file.size(core)
  cut <- function(name, n) {
    path <- file.path(dir, paste0("core-", name))
    con <- file(core, "rb")
    on.exit(close(con))
    writeBin(if (n > 0) readBin(con, "raw", n) else raw(), path)
    path
  }
  list(
    "10" = cut("10", floor(size * 0.1)), "50" = cut("50", floor(size * 0.5)), "90" = cut("90", floor(size * 0.9)),
    header = cut("header", 64), empty = cut("empty", 0)
  )
}

# The table run once per test file (its cases take a minute or so): the
# results with their verdicts.
bi_results <- local({
  memo <- NULL
  function() {
    if (is.null(memo)) memo <<- bi_compute()
    memo
  }
})

bi_compute <- function(frame = globalenv()) {
  dir <- tempfile("bad-input-")
  dir.create(dir)
  withr::defer(unlink(dir, recursive = TRUE), envir = frame)
  if (system2("mkfifo", shQuote(file.path(dir, "fifo"))) != 0L) stop("mkfifo failed")
  target <- local_child_command("sleep 600", frame = frame)
  core <- bi_core(dir, frame = frame)
  cuts <- if (!is.null(core)) bi_core_cuts(core, dir) else list()
  table <- bi_table(core)
  res <- bi_verdict(bi_run(table, bi_setup(target$pid, core, cuts, dir)))
  attr(res, "core") <- core
  out <- Sys.getenv("WINCH_BAD_INPUT_TABLE")
  if (nzchar(out)) {
    utils::write.table(res[c("id", "area", "fun", "arg", "value", "expect", "why", "got", "class", "message", "ok", "code")],
      out,
      sep = "\t", quote = FALSE, row.names = FALSE
    )
  }
  res
}
