skip_if_not(winch_available(), "native unwinding is not available on this platform")

# How frames of installed, stripped binaries are named: R's registration
# table for entry points, the function's start (from the unwind information)
# for everything else, MiniDebugInfo where a binary carries it, and a check
# on a real installed package.

# Captures inside the stripped fixture: R -> st_entry -> st_helper -> R.
capture_stripped <- function(lib, fun) {
  .Call(routine(lib, "st_entry"), fun, environment())
}

test_that("stripped: the entry point is named from the registration table, its helper by its start", {
  skip_without_tools(c("strip", "nm", "readelf"))
  lib <- stripped_lib()
  expect_false(".symtab" %in% elf_sections(lib$path))
  expect_true(is.na(nm_address(lib$path, "st_entry")))
  tb <- capture_stripped(lib, function() winch_trace_back(libr = FALSE))
  rows <- module_rows(tb, lib$path)
  expect_identical(nrow(rows), 2L)
  # Innermost first: the static helper (no name anywhere), then the entry.
  expect_identical(rows$func, c(NA, "st_entry"))
  expect_identical(rows$source, c(NA, "registration"))
  # Both starts are the real ones (the unstripped copy's symbol table).
  expect_identical(as.numeric(rows$start), c(
    nm_address(lib$unstripped, "st_helper"),
    nm_address(lib$unstripped, "st_entry")
  ))
  # The offset is the ip's own, inside the function, not its start.
  expect_true(all(as.numeric(rows$offset) > as.numeric(rows$start)))
})

test_that("stripped: a function prints one way, wherever the frame is in it", {
  skip_without_tools(c("strip", "nm", "readelf"))
  lib <- stripped_lib()
  labels <- function(x) joint_labels(x)[attr(x, "native")]
  a <- capture_stripped(lib, function() winch_sys_calls())
  b <- capture_stripped(lib, function() identity(winch_sys_calls()))
  start <- sprintf("+0x%x", nm_address(lib$unstripped, "st_helper"))
  expected <- c("/wtest_stripped.so::st_entry", paste0("/wtest_stripped.so::", start))
  expect_identical(tail(labels(a), 2L), expected)
  expect_identical(tail(labels(b), 2L), expected)
})

test_that("stripped: rlang traces show the registered name and the start", {
  skip_without_tools(c("strip", "nm", "readelf"))
  lib <- stripped_lib()
  withr::local_options(rlang_trace_use_winch = TRUE)
  err <- tryCatch(
    capture_stripped(lib, function() rlang::abort("boom", class = "winch_test")),
    winch_test = function(e) e
  )
  labels <- trace_labels(err$trace)
  start <- sprintf("+0x%x", nm_address(lib$unstripped, "st_helper"))
  i <- match("/wtest_stripped.so::st_entry", labels)
  expect_false(is.na(i))
  expect_identical(labels[[i + 1L]], paste0("/wtest_stripped.so::", start))
})

test_that("the registration table follows DLLs as they are loaded and unloaded", {
  skip_without_tools(c("strip", "nm", "readelf"))
  lib <- stripped_lib("wtest_stripped_reload")
  tb <- capture_stripped(lib, function() winch_trace_back(libr = FALSE))
  expect_identical(module_rows(tb, lib$path)$func[[2L]], "st_entry")
  known <- names(winch:::the$registrations)
  expect_true(any(grepl("wtest_stripped_reload", known)))
  dyn.unload(lib$path)
  winch_trace_back()
  expect_false(any(grepl("wtest_stripped_reload", names(winch:::the$registrations))))
})

test_that("a DLL unloaded, rebuilt in place and loaded again: the new entry point is named", {
  skip_without_tools(c("strip", "nm", "readelf"))
  name <- "wtest_stripped_rebuilt"
  lib <- stripped_lib(name)
  tb <- capture_stripped(lib, function() winch_trace_back(libr = FALSE))
  expect_identical(module_rows(tb, lib$path)$func, c(NA, "st_entry"))
  # Another build of the same library with more code before the entry
  # point (functions in source order), stripped, put where the first one
  # was.
  new <- build_fixture(
    name, "stripped.c",
    flags = "-g -O2 -fvisibility=hidden -fno-toplevel-reorder",
    prelude = c(
      sprintf("#define INIT_NAME R_init_%s", name),
      "__attribute__((used, noinline)) static double st_pad(double x) {",
      "  for (int i = 0; i < 100; i++) x = x * 1.0001 + i / (x + 3.0);",
      "  return x;",
      "}"
    )
  )
  starts <- c(nm_address(new$path, "st_helper"), nm_address(new$path, "st_entry"))
  expect_false(starts[[2L]] == nm_address(lib$unstripped, "st_entry"))
  run_tool("strip", c("--strip-all", shQuote(new$path)))
  dyn.unload(lib$path)
  unlink(lib$path)
  file.copy(new$path, lib$path)
  lib$dll <- dyn.load(lib$path)
  tb <- capture_stripped(lib, function() winch_trace_back(libr = FALSE))
  rows <- module_rows(tb, lib$path)
  expect_identical(rows$func, c(NA, "st_entry"))
  expect_identical(as.numeric(rows$start), starts)
  dyn.unload(lib$path)
})

test_that("profiles name frames of stripped libraries as traces do", {
  skip_without_tools(c("strip", "nm", "readelf"))
  lib <- stripped_lib("wtest_stripped_prof")
  burn <- function() {
    t0 <- proc.time()[[1L]]
    while (proc.time()[[1L]] - t0 < 0.3) NULL
  }
  p <- winch_profile(capture_stripped(lib, burn), interval = 0.005)
  labels <- p$functions$label
  helper <- sprintf("/wtest_stripped_prof.so::+0x%x", nm_address(lib$unstripped, "st_helper"))
  expect_true("/wtest_stripped_prof.so::st_entry" %in% labels)
  expect_true(helper %in% labels)
  # The same labels as the joint views'.
  calls <- capture_stripped(lib, function() winch_sys_calls())
  expect_true(all(c("/wtest_stripped_prof.so::st_entry", helper) %in% joint_labels(calls)))
})

test_that("a frame outside every unwind entry is marked, never given an invented start", {
  skip_without_tools(c("strip", "readelf"))
  # Hidden and registered: even the registration table cannot name it, as
  # nothing shows where its function starts.
  lib <- build_fixture(
    "wtest_nounwind_stripped", "nounwind.c",
    flags = "-O2 -fno-asynchronous-unwind-tables -fno-unwind-tables -fomit-frame-pointer -fvisibility=hidden",
    prelude = c(
      "#include <R.h>",
      "#include <Rinternals.h>",
      "#include <R_ext/Rdynload.h>",
      "SEXP nu_call(SEXP, SEXP);",
      "static const R_CallMethodDef nu_methods[] = {{\"nu_call\", (DL_FUNC) &nu_call, 2}, {NULL, NULL, 0}};",
      "__attribute__((visibility(\"default\"))) void R_init_wtest_nounwind_stripped(DllInfo *dll) {",
      "  R_registerRoutines(dll, NULL, nu_methods, NULL, NULL);",
      "}"
    )
  )
  run_tool("strip", c("--strip-all", shQuote(lib$path)))
  lib <- load_fixture(lib)
  x <- NULL
  inner <- function() x <<- winch_sys_calls()
  .Call("nu_call", inner, environment(), PACKAGE = lib$name)
  mine <- grep("^/wtest_nounwind_stripped.so::", joint_labels(x), value = TRUE)
  expect_length(mine, 1L)
  expect_match(mine, "::\\+0x[0-9a-f]+\\?$")
})

test_that("MiniDebugInfo (.gnu_debugdata) names static functions of a stripped library", {
  skip_without_tools(c("strip", "nm", "objcopy", "readelf", "xz", "awk", "comm"))
  lib <- minidebug_lib()
  expect_true(".gnu_debugdata" %in% elf_sections(lib$path))
  expect_false(".symtab" %in% elf_sections(lib$path))
  tb <- capture_stripped(lib, function() winch_trace_back(libr = FALSE))
  rows <- module_rows(tb, lib$path)
  expect_identical(rows$func, c("st_helper", "st_entry"))
  expect_identical(rows$source, c("minidebuginfo", "minidebuginfo"))
  expect_identical(as.numeric(rows$start), c(
    nm_address(lib$unstripped, "st_helper"),
    nm_address(lib$unstripped, "st_entry")
  ))
})

test_that("a damaged .gnu_debugdata names nothing (and breaks nothing)", {
  skip_without_tools(c("strip", "objcopy", "readelf"))
  lib <- prepared_lib("wtest_minidebug_bad", function(lib) {
    run_tool("strip", c("--strip-all", shQuote(lib$path)))
    bad <- file.path(lib$dir, "bad.xz")
    writeBin(as.raw(c(0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00, 1:64)), bad)
    run_tool("objcopy", c(paste0("--add-section .gnu_debugdata=", shQuote(bad)), shQuote(lib$path)))
  })
  tb <- capture_stripped(lib, function() winch_trace_back(libr = FALSE))
  rows <- module_rows(tb, lib$path)
  expect_identical(rows$func, c(NA, "st_entry"))
  expect_identical(rows$source, c(NA, "registration"))
})

test_that("an installed package's .Call entry points are named (vctrs)", {
  skip_if_not_installed("vctrs")
  path <- NULL
  tb <- NULL
  try(withCallingHandlers(
    vctrs::vec_ptype2(1, "a"),
    error = function(e) {
      tb <<- winch_trace_back(libr = FALSE)
      path <<- getLoadedDLLs()[["vctrs"]][["path"]]
    }
  ), silent = TRUE)
  rows <- module_rows(tb, normalizePath(path))
  expect_gt(nrow(rows), 0L)
  # The outermost vctrs frame is the routine .Call entered: named, by a
  # name R knows it by when the binary is stripped.
  entry <- rows[nrow(rows), ]
  expect_false(is.na(entry$func))
  if (identical(entry$source, "registration")) {
    expect_true(entry$func %in% names(getDLLRegisteredRoutines("vctrs")$.Call))
  }
  # Frames without a name are identified by their function's start.
  unnamed <- rows[is.na(rows$func), ]
  expect_true(all(!is.na(unnamed$start)))
})
