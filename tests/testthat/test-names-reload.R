# Names after an unload and a load at the same address (issue 22, item 3):
# a recorded throw and a profile's samples are named with the library that
# was loaded when they were made, never with the one loaded at that address
# later (or earlier).

skip_if_not(winch_available(), "native unwinding is not available on this platform")

# The two fixture libraries, built (not loaded): the same source, functions
# named rela::* and relb::*, the same size.
reload_libs <- function() {
  if (is.null(clib_cache$reload)) {
    clib_cache$reload <- list(
      a = build_clib("wtest_rela", "reload.cpp", flags = "-g -O0 -DWHO=rela"),
      b = build_clib("wtest_relb", "reload.cpp", flags = "-g -O0 -DWHO=relb")
    )
  }
  clib_cache$reload
}

where <- function(lib) .Call("rel_where", PACKAGE = lib$name)

# Loads `lib` where `at` (the other library's address) was, or skips.
load_at <- function(lib, at) {
  dyn.load(lib$path)
  now <- where(lib)
  if (now != at) {
    dyn.unload(lib$path)
    skip(sprintf(
      "%s was loaded at another address (%.0f, not %.0f): nothing to test",
      basename(lib$path), now, at
    ))
  }
  invisible(now)
}

# Every library of the pair unloaded (a failed test leaves none behind).
unload_all <- function(libs) {
  for (lib in libs) {
    if (lib$name %in% names(getLoadedDLLs())) dyn.unload(lib$path)
  }
}

test_that("a throw recorded in an unloaded library is not named after the library loaded there since", {
  skip_if_not(winch:::throw_capture_status()$supported, "capturing throws needs x86_64 Linux")
  libs <- reload_libs()
  on.exit(unload_all(libs))
  dyn.load(libs$a$path)
  at <- where(libs$a)
  expect_identical(.Call("rel_throw", 1L, PACKAGE = "wtest_rela"), -1L)
  before <- winch_last_throw()
  expect_true(all(c("rela::level3(int)", "rela::level1(int)") %in% before$func))
  dyn.unload(libs$a$path)
  load_at(libs$b, at)
  after <- winch_last_throw()
  # The same frames, none named after the library loaded now.
  expect_identical(after$ip, before$ip)
  expect_false(any(grepl("relb::", after$func)), info = paste(after$func, collapse = ", "))
  expect_false(any(grepl("wtest_relb", after$pathname)), info = paste(after$pathname, collapse = ", "))
  # The frames of the unloaded library keep its path and offsets, unnamed.
  mine <- which(before$pathname == libs$a$path)
  expect_true(length(mine) >= 4L)
  expect_identical(after$pathname[mine], before$pathname[mine])
  expect_identical(after$offset[mine], before$offset[mine])
  expect_true(all(is.na(after$func[mine])))
  # Frames of libraries still loaded keep their names.
  others <- setdiff(which(!is.na(before$func)), mine)
  expect_identical(after$func[others], before$func[others])
  # A throw of the library loaded now is named after it.
  expect_identical(.Call("rel_throw", 1L, PACKAGE = "wtest_relb"), -1L)
  expect_true("relb::level3(int)" %in% winch_last_throw()$func)
})

test_that("a profile names each sample after the library loaded when it was taken", {
  libs <- reload_libs()
  on.exit(unload_all(libs))
  dyn.load(libs$a$path)
  at <- where(libs$a)
  dyn.unload(libs$a$path)
  load_at(libs$b, at)
  dyn.unload(libs$b$path)
  dyn.load(libs$a$path)
  run_a <- function() .Call("rel_burn", 0.15, PACKAGE = "wtest_rela")
  run_b <- function() .Call("rel_burn", 0.15, PACKAGE = "wtest_relb")
  p <- winch_profile({
    run_a()
    dyn.unload(libs$a$path)
    dyn.load(libs$b$path)
    run_b()
  }, interval = 0.002)
  expect_identical(where(libs$b), at)
  stacks <- stack_labels(p)
  in_a <- vapply(stacks, function(s) "run_a" %in% s, NA)
  in_b <- vapply(stacks, function(s) "run_b" %in% s, NA)
  has <- function(s, pattern) any(grepl(pattern, s, fixed = TRUE))
  # No sample of one library's code names the other library.
  expect_false(any(vapply(stacks[in_a], has, NA, "wtest_relb")))
  expect_false(any(vapply(stacks[in_b], has, NA, "wtest_rela")))
  # Most of each library's time is in its own module: relb.so's named,
  # rela.so's (unloaded when the profile is built) by offsets in it.
  seconds <- function(hit) sum(p$stacks$count[hit]) * p$interval
  expect_gt(seconds(in_a & vapply(stacks, has, NA, "/wtest_rela.so::")), 0.1)
  expect_gt(seconds_in(p, "/wtest_relb.so::relb::spin"), 0.1)
  # The profile lists both libraries.
  expect_true(all(c(libs$a$path, libs$b$path) %in% p$modules$path))
})

# A package of the fixture's source at `dir`, its library built into src/
# with `who` (rela or relb) naming its functions, as pkgload::load_all()
# finds it after a build (compile = FALSE: pkgbuild is not needed).
reload_package <- function(dir, who) {
  src <- file.path(dir, "src")
  if (!dir.exists(src)) {
    dir.create(src, recursive = TRUE)
    dir.create(file.path(dir, "R"))
    writeLines(c(
      "Package: wtreload", "Version: 0.1", "Title: Test", "Description: Test.",
      "License: MIT", "Encoding: UTF-8"
    ), file.path(dir, "DESCRIPTION"))
    writeLines("useDynLib(wtreload)", file.path(dir, "NAMESPACE"))
    writeLines(c(
      'wt_throw <- function() .Call("rel_throw", 1L, PACKAGE = "wtreload")',
      'wt_where <- function() .Call("rel_where", PACKAGE = "wtreload")'
    ), file.path(dir, "R", "f.R"))
    file.copy(clib_source("reload.cpp"), src)
  }
  unlink(Sys.glob(file.path(src, c("*.o", "*.so"))))
  makevars <- file.path(dir, "Makevars.user")
  writeLines(paste("CXXFLAGS = -g -O0 -fPIC -DWHO=", who, sep = ""), makevars)
  res <- r_cmd(c("SHLIB", "-o", "wtreload.so", "reload.cpp"), env = paste0("R_MAKEVARS_USER=", makevars), wd = src)
  if (res$status != 0L) stop("compiling wtreload failed:\n", res$output)
  invisible(file.path(normalizePath(src), "wtreload.so"))
}

test_that("a throw recorded before pkgload::load_all() rebuilt and reloaded the package keeps the old build's frames unnamed", {
  skip_if_not(winch:::throw_capture_status()$supported, "capturing throws needs x86_64 Linux")
  skip_if_not_installed("pkgload")
  dir <- tempfile("winch-wtreload-")
  reload_package(dir, "rela")
  on.exit(try(pkgload::unload("wtreload"), silent = TRUE))
  pkgload::load_all(dir, compile = FALSE, quiet = TRUE, export_all = TRUE)
  ns <- asNamespace("wtreload")
  at <- ns$wt_where()
  expect_identical(ns$wt_throw(), -1L)
  before <- winch_last_throw()
  expect_true("rela::level3(int)" %in% before$func)
  # Rebuilt with other names, unloaded and loaded again by pkgload (which
  # loads a copy of src/wtreload.so from a directory of its own).
  old <- getLoadedDLLs()[["wtreload"]][["path"]]
  reload_package(dir, "relb")
  pkgload::unload("wtreload")
  invisible(gc())
  pkgload::load_all(dir, compile = FALSE, quiet = TRUE, export_all = TRUE)
  ns <- asNamespace("wtreload")
  now <- ns$wt_where()
  if (now != at) {
    still <- any(grepl(old, readLines("/proc/self/maps"), fixed = TRUE))
    skip(sprintf(
      "pkgload %s loaded the rebuilt wtreload.so at another address (%.0f, not %.0f)%s: nothing to test",
      packageVersion("pkgload"), now, at, if (still) ", the old build still loaded" else ""
    ))
  }
  after <- winch_last_throw()
  expect_identical(after$ip, before$ip)
  expect_false(any(grepl("relb::", after$func)), info = paste(after$func, collapse = ", "))
  mine <- which(before$pathname == old)
  expect_true(length(mine) >= 4L)
  expect_identical(after$pathname[mine], before$pathname[mine])
  expect_true(all(is.na(after$func[mine])))
  # The new build's throws are named after it.
  expect_identical(ns$wt_throw(), -1L)
  expect_true("relb::level3(int)" %in% winch_last_throw()$func)
})
