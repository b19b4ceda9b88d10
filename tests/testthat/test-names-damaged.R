# Damaged module and debug files (issue 4): a library deleted or replaced on
# disk after loading, truncated or corrupt separate debug files, unreadable
# entries in a debug root. Names and lines of that module degrade to NA, the
# capture never fails as a whole, the process does not crash, and later
# captures still work.
#
# The symbol cache is keyed by module identity: every case uses a fresh
# library under its own name, captured for the first time after the damage.

skip_if_not(winch_available(), "native unwinding is not available on this platform")

# A library with .symtab but no DWARF, whose debug file is wherever the test
# puts it: returns the library (not loaded yet) and its debug file.
split_for_build_id <- function(name) {
  lib <- build_fixture(name)
  id <- elf_build_id(lib$path)
  debug <- split_debug(lib, strip = "debug", link = FALSE)
  list(lib = lib, id = id, debug = debug)
}

# Offsets of eval_fun and rt_call in the library file `path` (from nm).
symbol_ranges <- function(path, names = c("eval_fun", "rt_call")) {
  out <- run_tool("nm", c("-S", "--defined-only", shQuote(path)))
  parts <- strsplit(out, " +")
  parts <- parts[lengths(parts) == 4L]
  found <- vapply(parts, `[[`, "", 4L)
  lapply(stats::setNames(names, names), function(n) {
    p <- parts[[match(n, found)]]
    start <- as.numeric(strtoi(p[[1L]], 16L))
    c(start, start + as.numeric(strtoi(p[[2L]], 16L)))
  })
}

offset_value <- function(offset) as.numeric(strtoi(sub("^0x", "", offset), 16L))

# A capture that goes R -> healthy library -> R -> `lib` -> R: the frames of
# the healthy library must be unaffected by the damaged one.
capture_through_both <- function(lib) {
  healthy <- healthy_lib()
  env <- environment()
  .Call("rt_call", function() capture_in_roundtrip(lib), env, PACKAGE = healthy$name)
}

expect_other_frames_named <- function(tb) {
  healthy <- healthy_lib()
  expect_roundtrip_located(tb, healthy)
  expect_true("Rf_eval" %in% tb$func)
  expect_identical(tb$func[[nrow(tb)]], "_start")
}

# After a fault in `lib`'s debug information: no error, `lib`'s frames named
# from its own .symtab but without lines, the other frames unaffected.
expect_degrades_to_symtab <- function(lib) {
  tb <- expect_no_error(capture_through_both(lib))
  expect_roundtrip_named_without_lines(tb, lib)
  expect_other_frames_named(tb)
  invisible(tb)
}

# A library split for the build-id layout, with its debug directory root
# (searched by winch for the rest of the calling test) but no debug file in
# it yet: the test puts a damaged one at `s$dest`.
fault_setup <- function(name, root_name, env = parent.frame()) {
  root <- new_debug_root(root_name)
  withr::local_options(winch.debug_dirs = root, .local_envir = env)
  s <- split_for_build_id(name)
  skip_if(is.na(s$id), "the linker made no build-id")
  s$root <- root
  s$dest <- build_id_path(root, s$id)
  dir.create(dirname(s$dest), recursive = TRUE)
  s
}

test_that("a library deleted after dyn.load: its frames keep module and offset, lose names", {
  skip_without_tools(c("nm"))
  lib <- load_fixture(build_fixture("wtest_fault_deleted"))
  # A copy to check offsets against, kept under another name.
  copy <- file.path(tempfile("winch-deleted-copy-"))
  stopifnot(file.copy(lib$path, copy))
  ranges <- symbol_ranges(copy)
  stopifnot(file.remove(lib$path))
  expect_false(file.exists(lib$path))

  tb <- expect_no_error(capture_through_both(lib))
  rows <- module_rows(tb, lib$path)
  expect_identical(nrow(rows), 2L)
  expect_identical(rows$func, c(NA_character_, NA_character_))
  expect_identical(rows$file, c(NA_character_, NA_character_))
  expect_identical(rows$line, c(NA_integer_, NA_integer_))
  expect_false(any(rows$is_libr))
  # The offsets are still the right ones: return addresses inside eval_fun
  # and rt_call of the file that was loaded.
  probe <- offset_value(rows$offset) - 1
  expect_true(probe[[1L]] >= ranges$eval_fun[[1L]] && probe[[1L]] < ranges$eval_fun[[2L]])
  expect_true(probe[[2L]] >= ranges$rt_call[[1L]] && probe[[2L]] < ranges$rt_call[[2L]])
  expect_other_frames_named(tb)
  expect_match(module_cache_entry(lib$path)$status, "^unreadable")

  # The failure is remembered: the next capture does not try the file again.
  before <- winch:::cache_info()$files_read
  again <- capture_through_both(lib)
  expect_identical(winch:::cache_info()$files_read, before)
  expect_identical(module_rows(again, lib$path), rows)

  expect_session_works()
})

test_that("a library replaced on disk by another build: its frames get no names", {
  lib <- load_fixture(build_fixture("wtest_fault_replaced"))
  # Another build of the same source (lines shifted, so different DWARF and
  # build-id), renamed over the loaded file: same path, new inode.
  other <- build_fixture("wtest_fault_replaced", prelude = c("/* shifted */", "", ""))
  stopifnot(file.rename(other$path, lib$path))

  tb <- expect_no_error(capture_through_both(lib))
  rows <- module_rows(tb, lib$path)
  expect_identical(nrow(rows), 2L)
  # Not the names and lines of the file now on disk (same functions, lines
  # shifted by 3): nothing.
  expect_identical(rows$func, c(NA_character_, NA_character_))
  expect_identical(rows$file, c(NA_character_, NA_character_))
  expect_identical(rows$line, c(NA_integer_, NA_integer_))
  expect_match(rows$offset, "^0x[0-9a-f]+$")
  expect_other_frames_named(tb)
  expect_match(module_cache_entry(lib$path)$status, "^mismatch")

  expect_session_works()
})

test_that("a library replaced on disk by a file that is not ELF: no names, no error", {
  lib <- load_fixture(build_fixture("wtest_fault_replaced_junk"))
  junk <- tempfile("winch-junk-", tmpdir = lib$dir)
  writeLines(rep("not an ELF file", 100), junk)
  stopifnot(file.rename(junk, lib$path))

  tb <- expect_no_error(capture_through_both(lib))
  rows <- module_rows(tb, lib$path)
  expect_identical(rows$func, c(NA_character_, NA_character_))
  expect_identical(rows$line, c(NA_integer_, NA_integer_))
  expect_other_frames_named(tb)

  expect_session_works()
})

test_that("a library unloaded, rebuilt and loaded again at the same path gets fresh names and lines", {
  first <- load_fixture(build_fixture("wtest_fault_reload"))
  tb <- capture_in_roundtrip(first)
  expect_roundtrip_located(tb, first)
  dyn.unload(first$path)

  # The rebuild: same path, source shifted by 3 lines.
  second <- build_fixture("wtest_fault_reload", prelude = c("/* shifted */", "", ""))
  stopifnot(file.rename(second$path, first$path))
  lib <- load_fixture(first)

  tb <- capture_in_roundtrip(lib)
  rows <- module_rows(tb, lib$path)
  expect_identical(rows$func, c("eval_fun", "rt_call"))
  expect_identical(rows$line, roundtrip_expected(lib)$line + 3L)
  expect_identical(normalizePath(rows$file), rep(normalizePath(second$source), 2L))
  expect_identical(module_cache_entry(lib$path)$status, "ok")

  expect_session_works()
})

test_that("a truncated debug file (build-id layout): names from .symtab, lines NA", {
  skip_without_tools()
  s <- fault_setup("wtest_fault_trunc", "trunc")
  size <- file.size(s$debug)
  bytes <- readBin(s$debug, "raw", size)
  writeBin(bytes[seq_len(size %/% 2)], s$dest)
  lib <- load_fixture(s$lib)

  expect_degrades_to_symtab(lib)

  expect_session_works()
})

test_that("an empty debug file and one of random bytes: names from .symtab, lines NA", {
  skip_without_tools()
  for (kind in c("empty", "random")) {
    s <- fault_setup(paste0("wtest_fault_", kind), kind)
    dest <- s$dest
    bytes <- if (kind == "empty") raw() else {
      withr::with_seed(4L, as.raw(sample.int(256L, file.size(s$debug), replace = TRUE) - 1L))
    }
    writeBin(bytes, dest)
    lib <- load_fixture(s$lib)

    expect_degrades_to_symtab(lib)
  }

  expect_session_works()
})

test_that("a debug file whose DWARF sections are garbage: names from .symtab, lines NA", {
  skip_without_tools()
  s <- fault_setup("wtest_fault_junkdwarf", "junkdwarf")
  # A valid ELF file with the right build-id, but every DWARF section
  # overwritten with 0xff bytes.
  sections <- elf_section_ranges(s$debug, "^\\.debug_")
  sections <- sections[sections$type == "PROGBITS" & sections$size > 0, ]
  expect_true(".debug_info" %in% sections$name)
  for (i in seq_len(nrow(sections))) {
    overwrite_bytes(s$debug, sections$offset[[i]], sections$size[[i]])
  }
  expect_identical(elf_build_id(s$debug), s$id)
  move_file(s$debug, s$dest)
  lib <- load_fixture(s$lib)

  expect_degrades_to_symtab(lib)

  expect_session_works()
})

test_that("a .build-id entry that is a directory: names from .symtab, lines NA", {
  skip_without_tools()
  s <- fault_setup("wtest_fault_direntry", "direntry")
  dir.create(s$dest)
  lib <- load_fixture(s$lib)

  expect_degrades_to_symtab(lib)

  expect_session_works()
})

test_that("dangling and looping symlinks as .build-id entries: names from .symtab, lines NA", {
  skip_without_tools()
  for (kind in c("dangling", "loop")) {
    s <- fault_setup(paste0("wtest_fault_link_", kind), kind)
    dest <- s$dest
    if (kind == "dangling") {
      stopifnot(file.symlink(file.path(s$root, "nowhere.debug"), dest))
    } else {
      stopifnot(file.symlink(dest, dest))
    }
    lib <- load_fixture(s$lib)

    tb <- expect_no_error(capture_through_both(lib))
    expect_roundtrip_named_without_lines(tb, lib)
  }

  expect_session_works()
})

test_that("a debug file or .build-id directory without read permission: names from .symtab, lines NA", {
  skip_without_tools()
  probe <- tempfile("winch-perm-")
  writeLines("x", probe)
  Sys.chmod(probe, "000")
  readable <- file.access(probe, 4L) == 0L
  Sys.chmod(probe, "600")
  skip_if(readable, "running with root privileges: chmod 000 does not stop reads (see the directory variant and the unprivileged-subprocess test)")

  for (kind in c("file", "dir")) {
    s <- fault_setup(paste0("wtest_fault_perm_", kind), paste0("perm", kind))
    dest <- move_file(s$debug, s$dest)
    locked <- if (kind == "file") dest else dirname(dest)
    Sys.chmod(locked, "000")
    withr::defer(Sys.chmod(locked, if (kind == "file") "600" else "700"))
    lib <- load_fixture(s$lib)

    tb <- expect_no_error(capture_through_both(lib))
    expect_roundtrip_named_without_lines(tb, lib)
  }

  expect_session_works()
})

test_that("as root: an unreadable debug file and .build-id directory, seen by an unprivileged user", {
  skip_without_tools()
  is_root <- identical(unname(Sys.info()[["effective_user"]]), "root")
  skip_if(!is_root, "not running as root: the in-process permission test covers this")
  runuser <- Sys.which("runuser")
  skip_if(!nzchar(runuser), "runuser is not installed: cannot drop privileges")
  ok <- suppressWarnings(system2(runuser, c("-u", "nobody", "--", "true"), stdout = FALSE, stderr = FALSE))
  skip_if(ok != 0L, "cannot run commands as user nobody")

  # Outside R's private tempdir, so that nobody can reach the files.
  base <- tempfile("winch-perm-", tmpdir = "/tmp")
  dir.create(base, mode = "0755")
  withr::defer(unlink(base, recursive = TRUE, force = TRUE))
  Sys.chmod(base, "0777", use_umask = FALSE)

  cases <- list()
  for (kind in c("file", "dir")) {
    name <- paste0("wtest_fault_nobody_", kind)
    s <- split_for_build_id(name)
    skip_if(is.na(s$id), "the linker made no build-id")
    dir <- file.path(base, kind)
    dir.create(dir)
    path <- file.path(dir, basename(s$lib$path))
    stopifnot(file.copy(s$lib$path, path))
    root <- file.path(dir, "root")
    dest <- move_file(s$debug, build_id_path(root, s$id))
    Sys.chmod(c(dir, root, dirname(dirname(dest)), dirname(dest)), "0755")
    Sys.chmod(dest, "0644")
    Sys.chmod(path, "0755")
    Sys.chmod(if (kind == "file") dest else dirname(dest), "000")
    cases[[kind]] <- list(name = name, path = path, root = root)
  }

  # The package under test, where nobody can read it (the check library may
  # be in a private directory); the child must load this copy.
  installed <- getNamespaceInfo("winch", "path")
  skip_if(
    !file.exists(file.path(installed, "Meta", "package.rds")),
    "winch is loaded from its sources (pkgload), not installed: nothing to hand to another user"
  )
  lib_dir <- file.path(base, "lib")
  dir.create(lib_dir)
  stopifnot(file.copy(installed, lib_dir, recursive = TRUE))
  system2("chmod", c("-R", "a+rX", shQuote(lib_dir)))

  script <- file.path(base, "check.R")
  out <- file.path(base, "out.rds")
  writeLines(c(
    "library(winch)",
    sprintf("stopifnot(startsWith(find.package('winch'), %s))", deparse(lib_dir)),
    sprintf("cases <- readRDS(%s)", deparse(file.path(base, "cases.rds"))),
    "res <- lapply(cases, function(case) {",
    "  options(winch.debug_dirs = case$root)",
    "  dyn.load(case$path)",
    "  tb <- .Call('rt_call', function() winch_trace_back(), environment(), PACKAGE = case$name)",
    "  tb[tb$pathname == case$path, c('func', 'file', 'line')]",
    "})",
    "after <- winch_trace_back()",
    sprintf("saveRDS(list(res = res, after = after), %s)", deparse(out))
  ), script)
  saveRDS(cases, file.path(base, "cases.rds"))
  Sys.chmod(c(script, file.path(base, "cases.rds")), "0644")

  log <- suppressWarnings(system2(runuser, c(
    "-u", "nobody", "--", "env",
    paste0("R_LIBS=", paste(c(lib_dir, .libPaths()), collapse = .Platform$path.sep)),
    file.path(R.home("bin"), "Rscript"), "--vanilla", script
  ), stdout = TRUE, stderr = TRUE))
  expect_identical(attr(log, "status") %||% 0L, 0L, label = paste(log, collapse = "\n"))
  if (!file.exists(out)) {
    return()
  }
  got <- readRDS(out)
  for (kind in names(cases)) {
    rows <- got$res[[kind]]
    expect_identical(rows$func, c("eval_fun", "rt_call"), label = kind)
    expect_identical(rows$file, c(NA_character_, NA_character_), label = kind)
    expect_identical(rows$line, c(NA_integer_, NA_integer_), label = kind)
  }
  expect_true("Rf_eval" %in% got$after$func)
})

test_that("after all the faults, every backend still captures and names frames", {
  lib <- healthy_lib()
  for (backend in winch:::winch_backends()) {
    tb <- .Call("rt_call", function() winch_trace_back(backend = backend), environment(),
      PACKAGE = lib$name
    )
    expect_roundtrip_located(tb, lib)
  }
  info <- winch:::cache_info()
  expect_true(is.list(info$per_module))
})

test_that("an idle library truncated on disk after loading does not crash a capture", {
  # Reading that library's headers in place would raise SIGBUS, so run it in
  # a separate R process and look at how far it gets. (When that process
  # exits, the dynamic loader runs the truncated library's destructors and R
  # dies of SIGBUS anyway, with or without winch: only what happens before
  # the end of the script is winch's business.)
  idle <- build_fixture("wtest_truncated_idle")
  out <- run_rscript(sprintf(r"---(
    library(winch)
    dyn.load(%s)
    invisible(file.create(%s)) # truncates the loaded library to 0 bytes
    dyn.load(%s)                 # changes the module list: winch rereads it
    tb <- winch_trace_back()
    f <- function() winch_call(function() winch_sys_calls())
    x <- f()
    cat("frames:", nrow(tb), "placement:", attr(x, "placement"), "\n")
    cat("end of script\n")
  )---", deparse(idle$path), deparse(idle$path), deparse(healthy_lib()$path)))
  text <- paste(out, collapse = "\n")
  expect_match(text, "frames: [0-9]+ placement: exact *\nend of script")
  crash <- regexpr("bus error", text, fixed = TRUE)
  if (crash > 0L) {
    expect_gt(crash, regexpr("end of script", text, fixed = TRUE))
  }
})

test_that("where the kernel refuses process_vm_readv, captures and joint traces still work", {
  # WINCH_NO_PROCESS_VM_READV=1 makes winch behave as under a seccomp profile
  # that refuses the call: loaded images are read in place, R's context chain
  # only on the stack and in R's own data.
  out <- run_rscript(c(
    "Sys.setenv(WINCH_NO_PROCESS_VM_READV = '1')",
    "library(winch)",
    "tb <- winch_call(function() winch_trace_back())",
    "f <- function() winch_call(function() winch_sys_calls())",
    "x <- f()",
    "cat('named:', 'winch_call' %in% tb$func, 'truncated:', attr(tb, 'truncated'), '\\n')",
    "cat('placement:', attr(x, 'placement'), 'native:', sum(attr(x, 'native')), '\\n')"
  ))
  expect_identical(attr(out, "status"), 0L, info = paste(out, collapse = "\n"))
  expect_true("named: TRUE truncated: FALSE " %in% out)
  expect_true("placement: exact native: 1 " %in% out)
})
