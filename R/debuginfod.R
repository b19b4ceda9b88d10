# debuginfod: separate debug files fetched by build-id from the servers in
# DEBUGINFOD_URLS, only with `options(winch.debuginfod = TRUE)` (never a
# network request otherwise). The fetching, its time limits and the checks
# are in the core (src/rust/core/src/debuginfod.rs); the option is passed
# on by sync_debuginfod() (R/utils.R), and here the once-per-session hint
# is given.

# After a capture `x`: if debug files could name frames it shows without a
# name, debuginfod servers are configured and the option is not set, says
# once per session how to turn fetching on.
debuginfod_hint <- function(x) {
  # Cheapest tests first: this runs on every capture.
  if (!isTRUE(the$said_debuginfod_hint) &&
      isTRUE(attr(x, "debug_files_would_help")) &&
      is.null(getOption("winch.debuginfod")) &&
      nzchar(urls <- Sys.getenv("DEBUGINFOD_URLS")) && nzchar(trimws(urls))) {
    say_once("debuginfod_hint", paste0(
      "Some native frames have no name, and DEBUGINFOD_URLS names debuginfod servers ",
      "that may have their debug files. Set `options(winch.debuginfod = TRUE)` to let ",
      "winch fetch them (or `FALSE` to silence this)."
    ))
  }
  # Visibly: winch_trace_back() at the console prints its frames.
  x
}

# Says `text` once per session. Inside the rlang hook, where a condition
# could be caught by the code whose error is being traced, it is written to
# the error stream instead of being signalled as a message.
say_once <- function(id, text) {
  key <- paste0("said_", id)
  if (isTRUE(the[[key]])) {
    return(invisible(FALSE))
  }
  the[[key]] <- TRUE
  if (isTRUE(the$in_hook)) {
    cat(text, "\n", sep = "", file = stderr())
  } else {
    rlang::inform(text, class = "winch_message")
  }
  invisible(TRUE)
}

# What the session fetched: fetches started and, per build-id, what came of
# it (for tests and diagnostics).
debuginfod_info <- function() {
  check_result(rs_debuginfod_info())
}

# Whether libdebuginfod can be loaded here (turns fetching on and back off,
# as the option says).
debuginfod_available <- function() {
  res <- check_result(rs_set_debuginfod(TRUE))
  the$debuginfod <- NULL
  sync_debuginfod()
  isTRUE(res$available)
}
