# Fixture libraries (tests/testthat/clib) compiled during the tests, so the
# tests see real foreign frames: R CMD SHLIB into tempdir(), with -g.

clib_cache <- new.env(parent = emptyenv())

clib_source <- function(file) {
  normalizePath(test_path("clib", file), mustWork = TRUE)
}

# Line number of the "@line:<tag>" marker in a fixture source.
marker_line <- function(file, tag) {
  lines <- readLines(clib_source(file))
  hit <- grep(paste0("@line:", tag, "\\b"), lines)
  stopifnot(length(hit) == 1L)
  hit
}

r_cmd <- function(args, env = character(), wd = NULL) {
  if (!is.null(wd)) {
    old <- setwd(wd)
    on.exit(setwd(old))
  }
  out <- suppressWarnings(system2(
    file.path(R.home("bin"), "R"), c("CMD", args),
    stdout = TRUE, stderr = TRUE, env = env
  ))
  status <- attr(out, "status") %||% 0L
  list(status = status, output = paste(out, collapse = "\n"))
}

`%||%` <- function(x, y) if (is.null(x)) y else x

# Compiles `sources` into <dir>/<name>.so without loading it. `flags`
# replace R's CFLAGS, CXXFLAGS and FFLAGS (so -O levels and unwind-table
# options really apply), `ldflags` R's LDFLAGS (e.g. "-Wl,--build-id=none");
# `prelude` lines are put before the first source (shifting its lines);
# `generated` (file name = text) are more sources, written there first.
build_clib <- function(name, sources, flags = "-g -O0", ldflags = NULL, prelude = NULL,
                       generated = character()) {
  dir <- tempfile(paste0("winch-", name, "-"))
  dir.create(dir)
  dir <- normalizePath(dir)
  file.copy(vapply(sources, clib_source, ""), dir)
  for (f in names(generated)) writeLines(generated[[f]], file.path(dir, f))
  sources <- c(sources, names(generated))
  if (length(prelude) > 0L) {
    first <- file.path(dir, sources[[1L]])
    writeLines(c(prelude, readLines(first)), first)
  }
  makevars <- file.path(dir, "Makevars.user")
  writeLines(c(
    paste("CFLAGS =", flags, "-fPIC"),
    paste("CXXFLAGS =", flags, "-fPIC"),
    paste("FFLAGS =", flags, "-fPIC"),
    paste("FCFLAGS =", flags, "-fPIC"),
    if (!is.null(ldflags)) paste("LDFLAGS =", ldflags)
  ), makevars)
  so <- file.path(dir, paste0(name, .Platform$dynlib.ext))
  res <- r_cmd(
    c("SHLIB", "-o", basename(so), sources),
    env = paste0("R_MAKEVARS_USER=", makevars),
    wd = dir
  )
  if (res$status != 0L || !file.exists(so)) {
    stop("compiling ", name, " failed:\n", res$output)
  }
  list(name = name, path = normalizePath(so), dir = dir, source = file.path(dir, sources[[1L]]))
}

# A fixture library, built once per session and loaded.
compile_clib <- function(name, sources, flags = "-g -O0", load = TRUE) {
  key <- paste(name, flags)
  if (!is.null(clib_cache[[key]])) {
    return(clib_cache[[key]])
  }
  lib <- build_clib(name, sources, flags)
  lib$dll <- if (load) dyn.load(lib$path)
  clib_cache[[key]] <- lib
  lib
}

roundtrip_lib <- function() compile_clib("wtest_roundtrip", "roundtrip.c")
other_lib <- function() compile_clib("wtest_other", "other.c")

# .Call into a fixture library.
ccall <- function(lib, symbol, ...) {
  .Call(symbol, ..., PACKAGE = lib$name)
}

# Compiles a Rust fixture with plain rustc into <name>.so and loads it, or
# returns NULL (with the reason as attribute) when rustc is not available.
compile_rustlib <- function(file = "rustlib.rs", name = "wtest_rust") {
  if (!is.null(clib_cache[[name]])) {
    return(clib_cache[[name]])
  }
  rustc <- Sys.which("rustc")
  if (!nzchar(rustc) && file.exists("~/.cargo/bin/rustc")) {
    rustc <- path.expand("~/.cargo/bin/rustc")
  }
  if (!nzchar(rustc)) {
    return(structure(list(), reason = "rustc not found"))
  }
  dir <- tempfile("winch-rust-")
  dir.create(dir)
  src <- file.path(dir, file)
  file.copy(clib_source(file), src)
  so <- file.path(dir, paste0(name, ".so"))
  out <- suppressWarnings(system2(rustc, c(
    "--edition", "2021", "--crate-type", "cdylib", "-g", "-C", "opt-level=0",
    "-o", so, src, "-L", file.path(R.home("lib")), "-l", "R"
  ), stdout = TRUE, stderr = TRUE))
  if (!file.exists(so)) {
    return(structure(list(), reason = paste("rustc failed:", paste(out, collapse = "\n"))))
  }
  lib <- list(name = name, path = normalizePath(so), dir = dir, src = src, dll = dyn.load(so))
  clib_cache[[name]] <- lib
  lib
}
