# A real debuginfod server (Debian package `debuginfod`) for
# test-names-debuginfod.R: started on 127.0.0.1 serving the files of one
# directory, its requests logged. No other test talks to any server:
# whatever the environment says, DEBUGINFOD_URLS is unset for the suite.
Sys.unsetenv("DEBUGINFOD_URLS")

skip_without_debuginfod <- function() {
  skip_if(!nzchar(Sys.which("debuginfod")), "the debuginfod server is not installed (Debian: debuginfod)")
  skip_if(!winch:::debuginfod_available(), "libdebuginfod.so.1 cannot be loaded (Debian: libdebuginfod1)")
}

# Reads http://127.0.0.1:<port>/<path>, or NULL when nothing answers.
http_lines <- function(port, path) {
  con <- url(sprintf("http://127.0.0.1:%d/%s", port, path))
  on.exit(close(con))
  tryCatch(suppressWarnings(readLines(con)), error = function(e) NULL)
}

# Starts `debuginfod` serving the ELF files in `dir` and waits until it has
# scanned them (its /metrics, not /buildid/, are read for that). Returns the
# server: url, pid, port, log.
start_debuginfod <- function(dir, files = 1L) {
  for (attempt in 1:5) {
    port <- sample(20000:60000, 1L)
    log <- tempfile("debuginfod-", fileext = ".log")
    cmd <- sprintf(
      "debuginfod -F -p %d -d :memory: -t 0 -v %s > %s 2>&1 & echo $!",
      port, shQuote(dir), shQuote(log)
    )
    pid <- as.integer(system2("sh", c("-c", shQuote(cmd)), stdout = TRUE))
    server <- list(url = sprintf("http://127.0.0.1:%d", port), pid = pid, port = port, log = log)
    deadline <- Sys.time() + 20
    while (Sys.time() < deadline) {
      m <- http_lines(port, "metrics")
      scanned <- as.numeric(sub(".* ", "", grep("^scanned_files_total", m, value = TRUE)))
      pending <- as.numeric(sub(".* ", "", grep('^thread_work_pending\\{role="scan"\\}', m, value = TRUE)))
      scanned_all <- sum(scanned) >= files && length(pending) && all(pending == 0)
      if (!is.null(m) && (files == 0L || scanned_all)) {
        return(server)
      }
      Sys.sleep(0.1)
    }
    stop_debuginfod(server)
  }
  stop("debuginfod did not start")
}

stop_debuginfod <- function(server) {
  tools::pskill(server$pid)
  deadline <- Sys.time() + 5
  while (Sys.time() < deadline && !is.null(http_lines(server$port, "metrics"))) {
    Sys.sleep(0.05)
  }
  invisible()
}

# The build-id requests in the server's log (of one build-id, if given).
# Requests for other modules of a trace (R's own libraries, stripped and
# with build-ids) depend on the system: tests count those of their fixture.
buildid_requests <- function(server, id = "") {
  grep(paste0("GET /buildid/", id), readLines(server$log), value = TRUE, fixed = TRUE)
}

# Whether no build-id was asked for twice.
each_asked_once <- function(server) {
  ids <- sub(".*GET /buildid/([0-9a-f]+)/.*", "\\1", buildid_requests(server))
  !anyDuplicated(ids)
}

# The URL of a server that is not there: a port on 127.0.0.1 where nothing
# answers.
dead_server_url <- function() {
  repeat {
    port <- sample(20000:60000, 1L)
    if (is.null(http_lines(port, "metrics"))) {
      return(sprintf("http://127.0.0.1:%d", port))
    }
  }
}

# Forgets that winch said `id` this session (say_once()).
forget_said <- function(id) {
  the <- winch:::the
  the[[paste0("said_", id)]] <- NULL
}
