skip_if_not(winch_available(), "native unwinding is not available on this platform")

# Debug files from a debuginfod server: a real server on 127.0.0.1 serves
# the unstripped copy of a stripped fixture. Off by default (no request at
# all), names, files and lines with the option on, one fetch per build-id,
# a dead server costs little, a file that is not the module's is rejected.

capture_stripped <- function(lib, fun) {
  .Call(routine(lib, "st_entry"), fun, environment())
}

helper_row <- function(lib) {
  tb <- capture_stripped(lib, function() winch_trace_back(libr = FALSE))
  module_rows(tb, lib$path)[1L, ]
}

test_that("off by default: no request, and a hint once per session", {
  skip_without_debuginfod()
  skip_without_tools(c("strip", "readelf"))
  lib <- stripped_lib("wtest_dbgd_off")
  served <- tempfile("served-")
  dir.create(served)
  file.copy(lib$unstripped, served)
  server <- start_debuginfod(served)
  on.exit(stop_debuginfod(server), add = TRUE)
  withr::local_envvar(DEBUGINFOD_URLS = server$url, DEBUGINFOD_CACHE_PATH = tempfile("cache-"))
  withr::local_options(winch.debuginfod = NULL)
  forget_said("debuginfod_hint")
  expect_message(row <- helper_row(lib), "winch.debuginfod = TRUE", class = "winch_message")
  expect_true(is.na(row$func))
  expect_no_message(helper_row(lib))
  # Native frames spliced into an rlang trace (the hook's path) say it too.
  forget_said("debuginfod_hint")
  expect_message(
    tr <- capture_stripped(lib, function() winch_add_trace_back()),
    "winch.debuginfod = TRUE",
    class = "winch_message"
  )
  expect_true(any(startsWith(tr$namespace, "/"), na.rm = TRUE))
  expect_null(attr(tr, "debug_files_would_help"))
  withr::local_options(winch.debuginfod = FALSE)
  forget_said("debuginfod_hint")
  expect_no_message(helper_row(lib))
  expect_no_message(capture_stripped(lib, function() winch_sys_calls()))
  expect_length(buildid_requests(server), 0L)
})

test_that("on: names, files and lines from the fetched file, fetched once, cached", {
  skip_without_debuginfod()
  skip_without_tools(c("strip", "readelf"))
  lib <- stripped_lib("wtest_dbgd_on")
  xdg_lib <- stripped_lib("wtest_dbgd_xdg")
  served <- tempfile("served-")
  dir.create(served)
  file.copy(lib$unstripped, file.path(served, "on.so"))
  file.copy(xdg_lib$unstripped, file.path(served, "xdg.so"))
  server <- start_debuginfod(served, files = 2L)
  on.exit(stop_debuginfod(server), add = TRUE)
  cache <- tempfile("cache-")
  withr::local_envvar(DEBUGINFOD_URLS = server$url, DEBUGINFOD_CACHE_PATH = cache)
  # A first capture without the option: the module is read without DWARF.
  withr::with_options(list(winch.debuginfod = FALSE), helper_row(lib))
  withr::local_options(winch.debuginfod = TRUE)
  tb <- capture_stripped(lib, function() winch_trace_back(libr = FALSE))
  rows <- module_rows(tb, lib$path)
  expect_identical(rows$func, c("st_helper", "st_entry"))
  expect_identical(rows$source, c("debuginfod", "debuginfod"))
  expect_identical(basename(rows$file), c("stripped.c", "stripped.c"))
  expect_identical(rows$line[[1L]], marker_line("stripped.c", "st_helper") + 1L) # the prelude's line
  id <- elf_build_id(lib$path)
  expect_true(file.exists(file.path(cache, id, "debuginfo")))
  # Joint views too; and no second request.
  calls <- capture_stripped(lib, function() winch_sys_calls())
  expect_true("/wtest_dbgd_on.so::st_helper" %in% joint_labels(calls))
  requests <- buildid_requests(server, id)
  expect_length(requests, 1L)
  expect_match(requests, paste0("GET /buildid/", id, "/debuginfo 200"))
  expect_true(each_asked_once(server))
  info <- winch:::debuginfod_info()
  expect_match(info$outcome[info$build_id == id], "^found: ")
  # Without DEBUGINFOD_CACHE_PATH, the client cache is the XDG one.
  xdg <- tempfile("xdg-")
  withr::local_envvar(DEBUGINFOD_CACHE_PATH = NA, XDG_CACHE_HOME = xdg)
  rows <- module_rows(capture_stripped(xdg_lib, function() winch_trace_back(libr = FALSE)), xdg_lib$path)
  expect_identical(rows$func, c("st_helper", "st_entry"))
  expect_true(file.exists(file.path(xdg, "debuginfod_client", elf_build_id(xdg_lib$path), "debuginfo")))
})

test_that("a server that takes connections and never answers: the fetch gives up in time", {
  skip_without_debuginfod()
  skip_without_tools(c("strip", "readelf"))
  # A listening socket nobody accepts on: the kernel completes the
  # connection, and the request waits for an answer that never comes.
  srv <- NULL
  for (attempt in 1:10) {
    port <- sample(20000:60000, 1L)
    srv <- tryCatch(serverSocket(port), error = function(e) NULL)
    if (!is.null(srv)) break
  }
  skip_if(is.null(srv), "no free port for a listening socket")
  on.exit(close(srv), add = TRUE)
  withr::local_envvar(
    DEBUGINFOD_URLS = sprintf("http://127.0.0.1:%d", port),
    DEBUGINFOD_CACHE_PATH = tempfile("cache-"),
    DEBUGINFOD_TIMEOUT = "1"
  )
  withr::local_options(winch.debuginfod = TRUE)
  lib <- stripped_lib("wtest_dbgd_slow")
  # DEBUGINFOD_TIMEOUT = 1: a capture's fetches get 2 s in all.
  time <- system.time(row <- helper_row(lib))[["elapsed"]]
  expect_lt(time, 3.5)
  expect_true(is.na(row$func))
  info <- winch:::debuginfod_info()
  expect_match(info$outcome[info$build_id == elf_build_id(lib$path)], "^missed: ")
  # The default: a few seconds, a capture well under 5 s.
  withr::local_envvar(DEBUGINFOD_TIMEOUT = NA)
  lib2 <- stripped_lib("wtest_dbgd_slow2")
  time <- system.time(row <- helper_row(lib2))[["elapsed"]]
  expect_lt(time, 5)
  expect_true(is.na(row$func))
})

test_that("a server stopped mid-session and an empty cache: the capture completes quickly, misses are remembered", {
  skip_without_debuginfod()
  skip_without_tools(c("strip", "readelf"))
  served <- tempfile("served-")
  dir.create(served)
  server <- start_debuginfod(served, files = 0L)
  on.exit(stop_debuginfod(server), add = TRUE)
  withr::local_envvar(DEBUGINFOD_URLS = server$url, DEBUGINFOD_CACHE_PATH = tempfile("cache-"))
  withr::local_options(winch.debuginfod = TRUE)
  # The server is asked, and does not have the file.
  first <- stripped_lib("wtest_dbgd_404")
  expect_true(is.na(helper_row(first)$func))
  expect_length(buildid_requests(server, elf_build_id(first$path)), 1L)
  expect_true(each_asked_once(server))
  stop_debuginfod(server)
  lib <- stripped_lib("wtest_dbgd_dead")
  before <- winch:::debuginfod_info()$fetches
  time <- system.time(row <- helper_row(lib))[["elapsed"]]
  expect_lt(time, 5)
  expect_true(is.na(row$func))
  expect_identical(row$source, NA_character_)
  info <- winch:::debuginfod_info()
  for (id in c(elf_build_id(first$path), elf_build_id(lib$path))) {
    expect_match(info$outcome[info$build_id == id], "^missed: ")
  }
  # Remembered: neither is asked for again this session.
  helper_row(lib)
  helper_row(first)
  expect_identical(winch:::debuginfod_info()$fetches, before + 1)
})

test_that("a file that is not the module's debug file is rejected and removed from the cache", {
  skip_without_debuginfod()
  skip_without_tools(c("strip", "readelf"))
  other <- stripped_lib("wtest_dbgd_other")
  for (content in c("corrupt", "mismatched")) {
    lib <- stripped_lib(paste0("wtest_dbgd_", content))
    id <- elf_build_id(lib$path)
    cache <- tempfile("cache-")
    dir.create(file.path(cache, id), recursive = TRUE)
    cached <- file.path(cache, id, "debuginfo")
    if (content == "corrupt") {
      writeBin(c(as.raw(c(0x7f, 0x45, 0x4c, 0x46)), as.raw(1:200)), cached)
    } else {
      file.copy(other$unstripped, cached) # an ELF file with another build-id
    }
    # The cache is consulted first; the server is not reachable.
    withr::local_envvar(DEBUGINFOD_URLS = "http://127.0.0.1:9", DEBUGINFOD_CACHE_PATH = cache)
    withr::local_options(winch.debuginfod = TRUE)
    row <- helper_row(lib)
    expect_true(is.na(row$func), label = content)
    expect_false(file.exists(cached), label = content)
    info <- winch:::debuginfod_info()
    expect_match(info$outcome[info$build_id == id], "^rejected: ", label = content)
  }
})

test_that("the option must be TRUE or FALSE", {
  withr::local_options(winch.debuginfod = "yes")
  expect_error(winch_trace_back(), class = "winch_error_bad_argument")
})

test_that("a profile names its frames from debuginfod as the option says when it starts", {
  skip_without_debuginfod()
  skip_without_tools(c("strip", "readelf"))
  profile_fixture()
  lib <- stripped_lib("wtest_dbgd_profile")
  served <- tempfile("served-")
  dir.create(served)
  file.copy(lib$unstripped, served)
  server <- start_debuginfod(served)
  on.exit(stop_debuginfod(server), add = TRUE)
  withr::local_envvar(DEBUGINFOD_URLS = server$url, DEBUGINFOD_CACHE_PATH = tempfile("cache-"))
  # The last capture passed the option off; the profile is the first thing
  # to run with it on (it did not pass it, and named nothing).
  withr::with_options(list(winch.debuginfod = FALSE), helper_row(lib))
  withr::local_options(winch.debuginfod = TRUE)
  p <- winch_profile(capture_stripped(lib, function() r_a(0.1)), interval = 0.002)
  mine <- p$functions[!is.na(p$functions$module) & p$modules$path[p$functions$module] == lib$path, ]
  expect_true(all(c("st_entry", "st_helper") %in% mine$name), info = paste(mine$name, collapse = " "))
  expect_gt(length(buildid_requests(server)), 0L)
})
