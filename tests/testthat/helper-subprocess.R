# Runs R code in a fresh Rscript process (same library paths) and returns its
# output lines; the status is attached as attribute "status".
run_rscript <- function(code) {
  file <- tempfile(fileext = ".R")
  on.exit(unlink(file))
  writeLines(code, file)
  out <- suppressWarnings(system2(
    file.path(R.home("bin"), "Rscript"), c("--vanilla", shQuote(file)),
    stdout = TRUE, stderr = TRUE,
    env = paste0("R_LIBS=", paste(.libPaths(), collapse = .Platform$path.sep))
  ))
  structure(out, status = attr(out, "status") %||% 0L)
}

# Makes printed traces independent of where things were built: keeps the
# file name of source locations but drops directories, line and column.
scrub_locations <- function(x) {
  gsub("at ([^ ]*/)?([^/ ]+):[0-9]+:[0-9]+", "at <dir>/\\2:<line>", x)
}
