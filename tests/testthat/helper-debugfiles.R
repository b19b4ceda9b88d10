# Helpers for the tests of source locations, separate debug files and damaged
# module files (test-names-srcloc.R, test-names-debugfiles.R,
# test-names-damaged.R).
#
# Libraries whose files are modified (split, stripped, deleted, replaced) are
# built here, not with compile_clib(): each needs a fresh build under its own
# name, loaded only after it was prepared.

# The tools of binutils a test needs, or a reason to skip when one is missing.
missing_tools_reason <- function(tools) {
  missing <- tools[!nzchar(Sys.which(tools))]
  if (length(missing) == 0L) {
    return(NULL)
  }
  paste0(paste(missing, collapse = ", "), " not installed (binutils)")
}

skip_without_tools <- function(tools = c("objcopy", "strip", "readelf")) {
  reason <- missing_tools_reason(tools)
  skip_if(!is.null(reason), reason %||% "")
}

# Runs a tool; stops with its output when it fails.
run_tool <- function(tool, args, wd = NULL) {
  if (!is.null(wd)) {
    old <- setwd(wd)
    on.exit(setwd(old))
  }
  out <- suppressWarnings(system2(Sys.which(tool), args, stdout = TRUE, stderr = TRUE))
  status <- attr(out, "status") %||% 0L
  if (status != 0L) {
    stop(tool, " ", paste(args, collapse = " "), " failed:\n", paste(out, collapse = "\n"))
  }
  invisible(out)
}

# Compiles `sources` into <dir>/<name>.so without loading it. `ldflags`
# replaces R's LDFLAGS (e.g. "-Wl,--build-id=none"); `prelude` lines are put
# before the first source (shifting its lines by `length(prelude)`).
build_fixture <- function(name, sources = "roundtrip.c", flags = "-g -O0", ldflags = NULL,
                          prelude = NULL) {
  build_clib(name, sources, flags, ldflags, prelude)
}

# dyn.loads a fixture built by build_fixture().
load_fixture <- function(lib) {
  lib$dll <- dyn.load(lib$path)
  lib
}

# Section names of an ELF file (readelf -S).
elf_sections <- function(path) {
  out <- run_tool("readelf", c("-S", "-W", shQuote(path)))
  m <- regmatches(out, regexpr("\\] +[^ ]+", out))
  sub("^\\] +", "", m)
}

# The GNU build-id of an ELF file as lowercase hex, NA when it has none.
elf_build_id <- function(path) {
  out <- run_tool("readelf", c("-n", "-W", shQuote(path)))
  hit <- grep("Build ID:", out, value = TRUE)
  if (length(hit) == 0L) {
    return(NA_character_)
  }
  tolower(trimws(sub(".*Build ID:", "", hit[[1L]])))
}

# Path of the debug file for `build_id` in the build-id layout under `root`.
build_id_path <- function(root, build_id) {
  file.path(
    root, ".build-id", substr(build_id, 1L, 2L),
    paste0(substring(build_id, 3L), ".debug")
  )
}

# Splits the DWARF of `lib` into `<lib>.debug` next to it:
#   strip = "debug": the library keeps .symtab, loses its DWARF;
#   strip = "all":   the library keeps only .dynsym.
# With `link`, the library gets a .gnu_debuglink to the debug file.
# Returns the path of the debug file.
split_debug <- function(lib, strip = c("debug", "all"), link = TRUE) {
  strip <- match.arg(strip)
  debug <- paste0(lib$path, ".debug")
  run_tool("objcopy", c("--only-keep-debug", shQuote(lib$path), shQuote(debug)))
  if (strip == "debug") {
    run_tool("objcopy", c("--strip-debug", shQuote(lib$path)))
  } else {
    run_tool("strip", c("--strip-all", shQuote(lib$path)))
  }
  if (link) {
    # objcopy records the base name and the CRC of the file it is given.
    run_tool("objcopy", c(paste0("--add-gnu-debuglink=", basename(debug)), basename(lib$path)), wd = lib$dir)
  }
  debug
}

# Offsets and sizes of the sections of an ELF file whose names match `pattern`.
elf_section_ranges <- function(path, pattern) {
  out <- run_tool("readelf", c("-S", "-W", shQuote(path)))
  out <- sub("^ *\\[ *[0-9]+\\] *", "", grep("^ *\\[ *[0-9]+\\]", out, value = TRUE))
  fields <- strsplit(out, " +")
  # name type address offset size ...
  keep <- vapply(fields, function(f) length(f) >= 5L && grepl(pattern, f[[1L]]), NA)
  fields <- fields[keep]
  data.frame(
    name = vapply(fields, `[[`, "", 1L),
    type = vapply(fields, `[[`, "", 2L),
    offset = vapply(fields, function(f) as.numeric(strtoi(f[[4L]], 16L)), 0),
    size = vapply(fields, function(f) as.numeric(strtoi(f[[5L]], 16L)), 0)
  )
}

# Overwrites `size` bytes of `path` at `offset` with `byte`.
overwrite_bytes <- function(path, offset, size, byte = 0xff) {
  con <- file(path, "r+b")
  on.exit(close(con))
  seek(con, offset, rw = "write")
  writeBin(rep(as.raw(byte), size), con)
  invisible(path)
}

# Moves `file` to `dest`, creating directories.
move_file <- function(file, dest) {
  dir.create(dirname(dest), recursive = TRUE, showWarnings = FALSE)
  stopifnot(file.rename(file, dest))
  dest
}

# A fresh directory to use as a debug root (the `winch.debug_dirs` option).
new_debug_root <- function(name = "root") {
  root <- tempfile(paste0("winch-debug-", name, "-"))
  dir.create(root)
  normalizePath(root)
}

# Captures inside the roundtrip.c fixture `lib` (R -> rt_call -> eval_fun ->
# R) and returns the whole trace.
capture_in_roundtrip <- function(lib) {
  .Call("rt_call", function() winch_trace_back(), environment(), PACKAGE = lib$name)
}

# The rows of `tb` that belong to module `path`.
module_rows <- function(tb, path) {
  rows <- tb[tb$pathname == path, , drop = FALSE]
  rownames(rows) <- NULL
  rows
}

# What the symbol cache says about module `path` (one row), or NULL.
module_cache_entry <- function(path) {
  pm <- winch:::cache_info()$per_module
  i <- which(pm$path == path)
  if (length(i) == 0L) {
    return(NULL)
  }
  lapply(pm, `[[`, i[[1L]])
}

# Expected file:line of the roundtrip.c frames (eval_fun, rt_call) of `lib`.
roundtrip_expected <- function(lib) {
  list(
    func = c("eval_fun", "rt_call"),
    file = file.path(lib$dir, "roundtrip.c"),
    line = c(marker_line("roundtrip.c", "static_eval"), marker_line("roundtrip.c", "rt_call"))
  )
}

# Checks that the roundtrip.c frames of `lib` in `tb` have names and lines.
expect_roundtrip_located <- function(tb, lib) {
  rows <- module_rows(tb, lib$path)
  want <- roundtrip_expected(lib)
  expect_identical(rows$func, want$func)
  expect_identical(rows$line, want$line)
  expect_identical(normalizePath(rows$file, mustWork = FALSE), rep(want$file, 2L))
  invisible(rows)
}

# Captures in `lib` and checks that its frames got names and lines, read from
# the separate debug file `debug`.
expect_located_via <- function(lib, debug) {
  tb <- capture_in_roundtrip(lib)
  expect_roundtrip_located(tb, lib)
  expect_identical(module_cache_entry(lib$path)$debug_file, debug)
  invisible(tb)
}

# Checks that the roundtrip.c frames of `lib` in `tb` still have their names
# (from the library's own .symtab) but no source location.
expect_roundtrip_named_without_lines <- function(tb, lib) {
  rows <- module_rows(tb, lib$path)
  expect_identical(rows$func, c("eval_fun", "rt_call"))
  expect_identical(rows$file, rep(NA_character_, 2L))
  expect_identical(rows$line, rep(NA_integer_, 2L))
  expect_identical(rows$column, rep(NA_integer_, 2L))
  invisible(rows)
}

# A healthy library, loaded once per test file, for "the session still works"
# checks after faults.
healthy_env <- new.env(parent = emptyenv())
healthy_lib <- function() {
  if (is.null(healthy_env$lib)) {
    healthy_env$lib <- load_fixture(build_fixture("wtest_healthy"))
  }
  healthy_env$lib
}

# A normal capture after a fault still names frames and finds lines.
expect_session_works <- function() {
  lib <- healthy_lib()
  tb <- capture_in_roundtrip(lib)
  expect_roundtrip_located(tb, lib)
  expect_true("Rf_eval" %in% tb$func)
  expect_identical(tb$func[[nrow(tb)]], "_start")
  invisible(tb)
}
