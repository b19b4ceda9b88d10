# Separate debug files (issue 4): .gnu_debuglink next to the library, in its
# .debug/ subdirectory and under a debug root; the build-id layout
# <root>/.build-id/xx/yyyy.debug; fully stripped libraries; debug files that
# belong to another build are not used.
#
# Each variant is a fresh build of roundtrip.c under its own name, prepared
# (split, stripped) before it is loaded: the symbol cache is keyed by module
# identity, and a loaded library must not be changed on disk.

skip_if_not(winch_available(), "native unwinding is not available on this platform")

test_that("a library split with objcopy finds its DWARF through .gnu_debuglink (same directory)", {
  skip_without_tools()
  withr::local_options(winch.debug_dirs = new_debug_root("empty"))
  lib <- build_fixture("wtest_dbg_link")
  debug <- split_debug(lib, strip = "debug", link = TRUE)
  sections <- elf_sections(lib$path)
  # The precondition: the library lost its DWARF, kept .symtab, got a link.
  expect_false(".debug_info" %in% sections)
  expect_true(".symtab" %in% sections)
  expect_true(".gnu_debuglink" %in% sections)
  expect_true(".debug_info" %in% elf_sections(debug))
  lib <- load_fixture(lib)

  tb <- capture_in_roundtrip(lib)
  expect_roundtrip_located(tb, lib)
  entry <- module_cache_entry(lib$path)
  expect_true(entry$dwarf)
  expect_identical(entry$debug_file, debug)
  expect_identical(entry$status, "ok")
})

test_that(".gnu_debuglink: the debug file in the .debug/ subdirectory", {
  skip_without_tools()
  withr::local_options(winch.debug_dirs = new_debug_root("empty"))
  lib <- build_fixture("wtest_dbg_linksub")
  debug <- split_debug(lib, strip = "debug", link = TRUE)
  debug <- move_file(debug, file.path(lib$dir, ".debug", basename(debug)))
  lib <- load_fixture(lib)

  expect_located_via(lib, debug)
})

test_that(".gnu_debuglink: the debug file under a debug root, at the library's directory", {
  skip_without_tools()
  root <- new_debug_root("link")
  withr::local_options(winch.debug_dirs = root)
  lib <- build_fixture("wtest_dbg_linkroot")
  debug <- split_debug(lib, strip = "debug", link = TRUE)
  debug <- move_file(debug, file.path(root, sub("^/", "", lib$dir), basename(debug)))
  lib <- load_fixture(lib)

  expect_located_via(lib, debug)
})

test_that("the build-id layout under a root from `winch.debug_dirs`", {
  skip_without_tools()
  root <- new_debug_root("bid")
  lib <- build_fixture("wtest_dbg_bid")
  id <- elf_build_id(lib$path)
  skip_if(is.na(id), "the linker made no build-id")
  # No debuglink: only the build-id can lead to the debug file.
  debug <- split_debug(lib, strip = "debug", link = FALSE)
  expect_false(".gnu_debuglink" %in% elf_sections(lib$path))
  debug <- move_file(debug, build_id_path(root, id))
  lib <- load_fixture(lib)

  # Without the root, the library has names (.symtab) but no lines.
  withr::with_options(list(winch.debug_dirs = new_debug_root("empty")), {
    tb <- capture_in_roundtrip(lib)
    expect_roundtrip_named_without_lines(tb, lib)
  })
  # With it, the lines come back (changing the option empties the cache).
  withr::local_options(winch.debug_dirs = c(new_debug_root("other"), root))
  expect_located_via(lib, debug)
})

test_that("a fully stripped library gets names and lines from its build-id debug file", {
  skip_without_tools()
  root <- new_debug_root("stripped")
  withr::local_options(winch.debug_dirs = root)
  lib <- build_fixture("wtest_dbg_stripped")
  id <- elf_build_id(lib$path)
  skip_if(is.na(id), "the linker made no build-id")
  debug <- split_debug(lib, strip = "all", link = FALSE)
  sections <- elf_sections(lib$path)
  expect_false(".symtab" %in% sections)
  expect_false(".debug_info" %in% sections)
  expect_true(".dynsym" %in% sections)
  debug <- move_file(debug, build_id_path(root, id))
  lib <- load_fixture(lib)

  # eval_fun is static: not in .dynsym, its name can only come from the
  # debug file.
  expect_located_via(lib, debug)
})

test_that("a fully stripped library without a debug file: exported names only, no lines", {
  skip_without_tools()
  withr::local_options(winch.debug_dirs = new_debug_root("empty"))
  lib <- build_fixture("wtest_dbg_bare")
  run_tool("strip", c("--strip-all", shQuote(lib$path)))
  lib <- load_fixture(lib)

  tb <- capture_in_roundtrip(lib)
  rows <- module_rows(tb, lib$path)
  # The static eval_fun is hidden: NA, never the neighbouring export.
  expect_identical(rows$func, c(NA, "rt_call"))
  expect_identical(rows$file, c(NA_character_, NA_character_))
  expect_identical(rows$line, c(NA_integer_, NA_integer_))
  expect_match(rows$offset, "^0x[0-9a-f]+$")
  expect_false(module_cache_entry(lib$path)$dwarf)
})

test_that("a debug file of another build at the build-id path is not used", {
  skip_without_tools()
  root <- new_debug_root("wrongid")
  withr::local_options(winch.debug_dirs = root)
  lib <- build_fixture("wtest_dbg_wrongid")
  other <- build_fixture("wtest_dbg_wrongid", flags = "-g -O1")
  id <- elf_build_id(lib$path)
  skip_if(is.na(id), "the linker made no build-id")
  expect_false(identical(elf_build_id(other$path), id))
  split_debug(lib, strip = "debug", link = FALSE)
  # The other build's debug file, under this library's build-id.
  move_file(split_debug(other, strip = "debug", link = FALSE), build_id_path(root, id))
  lib <- load_fixture(lib)

  tb <- capture_in_roundtrip(lib)
  expect_roundtrip_named_without_lines(tb, lib)
  expect_true(is.na(module_cache_entry(lib$path)$debug_file))
})

test_that("a debuglink to a debug file of another build is not used", {
  skip_without_tools()
  withr::local_options(winch.debug_dirs = new_debug_root("empty"))
  lib <- build_fixture("wtest_dbg_wronglink")
  other <- build_fixture("wtest_dbg_wronglink", flags = "-g -O1")
  skip_if(is.na(elf_build_id(lib$path)), "the linker made no build-id")
  debug <- split_debug(lib, strip = "debug", link = TRUE)
  # Same name, other build: the build-ids differ.
  other_debug <- split_debug(other, strip = "debug", link = FALSE)
  stopifnot(file.rename(other_debug, debug))
  lib <- load_fixture(lib)

  tb <- capture_in_roundtrip(lib)
  expect_roundtrip_named_without_lines(tb, lib)
})

test_that("without a build-id, the debuglink CRC identifies the debug file", {
  skip_without_tools()
  withr::local_options(winch.debug_dirs = new_debug_root("empty"))
  lib <- build_fixture("wtest_dbg_crc", ldflags = "-Wl,--build-id=none")
  skip_if(!is.na(elf_build_id(lib$path)), "the linker ignored --build-id=none")
  split_debug(lib, strip = "debug", link = TRUE)
  lib <- load_fixture(lib)

  tb <- capture_in_roundtrip(lib)
  expect_roundtrip_located(tb, lib)
})

test_that("without a build-id, a debug file whose CRC does not match is not used", {
  skip_without_tools()
  withr::local_options(winch.debug_dirs = new_debug_root("empty"))
  lib <- build_fixture("wtest_dbg_badcrc", ldflags = "-Wl,--build-id=none")
  skip_if(!is.na(elf_build_id(lib$path)), "the linker ignored --build-id=none")
  debug <- split_debug(lib, strip = "debug", link = TRUE)
  # Still a valid ELF file with the right DWARF, but not the linked one.
  con <- file(debug, "ab")
  writeBin(as.raw(0x2a), con)
  close(con)
  lib <- load_fixture(lib)

  tb <- capture_in_roundtrip(lib)
  expect_roundtrip_named_without_lines(tb, lib)
})

test_that("an invalid `winch.debug_dirs` option is an error of winch_trace_back(); fixing it restores captures", {
  for (bad in list(1, NA_character_, c("/usr/lib/debug", NA), list("/usr/lib/debug"))) {
    withr::local_options(winch.debug_dirs = bad)
    cnd <- expect_error(winch_trace_back(), class = "winch_error")
    expect_match(conditionMessage(cnd), "winch.debug_dirs", fixed = TRUE)
    # Reported with the user's call, like winch_trace_back()'s other errors.
    expect_identical(conditionCall(cnd), quote(winch_trace_back()))
  }
  withr::local_options(winch.debug_dirs = character())
  lib <- roundtrip_lib()
  tb <- ccall(lib, "rt_call", function() winch_trace_back(), environment())
  expect_identical(
    module_rows(tb, lib$path)$line,
    c(marker_line("roundtrip.c", "static_eval"), marker_line("roundtrip.c", "rt_call"))
  )
})

test_that("a library loaded through a symlink finds its debuglink file next to the real file", {
  skip_without_tools()
  lib <- build_fixture("wtest_dbg_symlink")
  split_debug(lib)
  link_dir <- tempfile("winch-symlink-")
  dir.create(link_dir)
  linked <- lib
  linked$path <- file.path(normalizePath(link_dir), basename(lib$path))
  skip_if(!file.symlink(lib$path, linked$path), "cannot create symlinks here")
  dyn.load(linked$path)
  tb <- capture_in_roundtrip(linked)
  # The module is reported by the path it was loaded through.
  expect_true(linked$path %in% tb$pathname)
  expect_roundtrip_located(tb, linked)
})

test_that("cache_info() counts at least what each module holds", {
  invisible(winch_trace_back())
  ci <- winch:::cache_info()
  pm <- ci$per_module
  expect_true(all(pm$bytes >= 0))
  # The whole counts every module, and the address cache and unwind tables
  # besides.
  expect_gte(ci$bytes, sum(pm$bytes))
  # A module read with DWARF holds its sections and the parsed units: more
  # than its symbols alone.
  if (any(pm$dwarf)) expect_true(all(pm$bytes[pm$dwarf] > 1024))
  # The modules' names are bounded together: what they hold stays within
  # the budget (past it, the least recently used are forgotten).
  expect_identical(ci$budget, 64 * 2^20)
  expect_lte(sum(pm$bytes), ci$budget + max(pm$bytes, 0))
  expect_gte(ci$evicted, 0)
})

test_that("a capture reads only the units of a large compressed debug file that its frames need", {
  skip_without_tools()
  # 40 units besides roundtrip.c's, their debug sections compressed, split
  # into a build-id debug file: the capture's frames are in one unit.
  filler <- vapply(1:40, function(i) {
    paste(sprintf("int filler%d_%d(int x) { return x * %d + %d; }", i, 1:30, 1:30, i), collapse = "\n")
  }, "")
  names(filler) <- sprintf("filler%02d.c", 1:40)
  root <- new_debug_root("units")
  withr::local_options(winch.debug_dirs = root)
  lib <- build_clib("wtest_units", "roundtrip.c", flags = "-g -O0 -gz=zlib", generated = filler)
  id <- elf_build_id(lib$path)
  skip_if(is.na(id), "the linker made no build-id")
  debug <- move_file(split_debug(lib, strip = "debug", link = FALSE), build_id_path(root, id))
  lib <- load_fixture(lib)
  expect_located_via(lib, debug)
  entry <- module_cache_entry(lib$path)
  expect_true(entry$dwarf)
  expect_identical(entry$debug_file, debug)
  # GCC lists every unit in .debug_aranges; the capture parsed roundtrip.c's.
  expect_identical(entry$units_listed, 41L)
  expect_identical(entry$units_parsed, 1L)
  # Modules without DWARF have no counts.
  pm <- winch:::cache_info()$per_module
  expect_true(all(is.na(pm$units_parsed[!pm$dwarf])))
})
