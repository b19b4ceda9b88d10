# Cost of the first capture in a fresh R session (reading the symbols and
# debug information of R, the C library, winch and five freshly built
# package libraries), the memory winch's caches then hold (cache_info(),
# measured by winch's allocator), and the growth of the process's resident
# memory (which also counts the code pages of winch and the libraries first
# touched, about 5 MB).
#
#   Rscript bench/first_capture.R
#
# Target (issue 4): first capture <= 100 ms; issue 23: <= 5 ms without
# separate debug files, <= 20 ms and < 10 MB held with libc6-dbg. The C library's separate debug
# file is read when it is installed (Debian: libc6-dbg); the run is repeated
# with the debug directory turned off to show its share.
library(winch)

build <- function(name) {
  dir <- tempfile("winch-bench-")
  dir.create(dir)
  src <- file.path(dir, paste0(name, ".c"))
  # Five libraries with the same shape: each calls back into R.
  writeLines(sub("other_call", paste0(name, "_call"), readLines(file.path("tests", "testthat", "clib", "other.c"))), src)
  old <- setwd(dir)
  on.exit(setwd(old))
  system2(file.path(R.home("bin"), "R"), c("CMD", "SHLIB", "-o", paste0(name, ".so"), basename(src)),
          stdout = TRUE, stderr = TRUE)
  normalizePath(paste0(name, ".so"))
}
names <- paste0("wbench", 1:5)
libs <- vapply(names, build, "")

child <- function(debug_dirs) sprintf(r"---(
  library(winch)
  invisible(compiler::enableJIT(0)) # time winch, not the byte-code compiler
  options(winch.debug_dirs = %s)
  libs <- %s
  for (l in libs) dyn.load(l)
  # R -> wbench1 -> R -> wbench2 -> ... -> wbench5 -> R, then capture.
  chain <- function(i) {
    if (i > length(libs)) return(winch_trace_back())
    name <- sub("[.]so$", "", basename(libs[[i]]))
    .Call(paste0(name, "_call"), function() chain(i + 1L), environment(), PACKAGE = name)
  }
  rss <- function() {
    s <- grep("^VmRSS", readLines("/proc/self/status"), value = TRUE)
    if (length(s)) as.numeric(gsub("[^0-9]", "", s)) / 1024 else NA_real_
  }
  rss0 <- rss()
  t0 <- proc.time()[["elapsed"]]
  tb <- chain(1L)
  first <- proc.time()[["elapsed"]] - t0
  rss1 <- rss()
  t0 <- proc.time()[["elapsed"]]
  for (i in 1:100) tb2 <- chain(1L)
  again <- (proc.time()[["elapsed"]] - t0) / 100
  info <- winch:::cache_info()
  cat(sprintf("  first capture %%.1f ms (%%d frames), later captures %%.3f ms\n", first * 1000, nrow(tb), again * 1000))
  cat(sprintf("  caches: %%d modules (%%d with DWARF), %%d addresses, %%.2f MB in all\n",
      info$modules, info$modules_with_dwarf, info$addresses, info$bytes / 2^20))
  cat(sprintf("  RSS: +%%.1f MB by the first capture, +%%.1f MB held after the later ones\n",
      rss1 - rss0, rss() - rss0))
  pm <- info$per_module
  for (i in seq_along(pm$path)) cat(sprintf("    %%-28s %%8.1f KB  %%s\n", basename(pm$path[[i]]), pm$bytes[[i]] / 1024,
      if (pm$dwarf[[i]]) paste("DWARF", if (!is.na(pm$debug_file[[i]])) "(separate file)" else "") else "symbols only"))
)---", deparse(debug_dirs), paste(deparse(unname(libs)), collapse = ""))

run <- function(label, debug_dirs) {
  script <- tempfile(fileext = ".R")
  writeLines(child(debug_dirs), script)
  cat(label, "\n")
  for (i in 1:3) cat(system2(file.path(R.home("bin"), "Rscript"), script, stdout = TRUE, stderr = TRUE), sep = "\n")
}
run("with /usr/lib/debug (separate debug files used when installed):", "/usr/lib/debug")
run("without separate debug files:", character())
