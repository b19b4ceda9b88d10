# Source locations (file, line, column) from DWARF, inlined frames, modules
# without debug information, and the symbol cache (issue 4).

skip_if_not(winch_available(), "native unwinding is not available on this platform")

# The frames of `lib` in a capture made inside a .Call of `symbol`.
capture_via <- function(lib, symbol, ...) {
  .Call(symbol, function() winch_trace_back(...), environment(), PACKAGE = lib$name)
}

# Column range (1-based) of `text` on line `line` of fixture `file`.
marker_columns <- function(file, line, text) {
  src <- readLines(clib_source(file))[[line]]
  start <- regexpr(text, src, fixed = TRUE)
  stopifnot(start > 0L)
  c(as.integer(start), as.integer(start) + nchar(text) - 1L)
}

cpp_lib <- function() compile_clib("wtest_srcloc_cpp", "cpplib.cpp", flags = "-g -O2")
fortran_lib <- function() {
  compile_clib("wtest_srcloc_fortran", c("fsub_named.f90", "fsub_named_c.c"))
}

test_that("C frames: file and line of exported and static functions match the markers", {
  lib <- roundtrip_lib()
  tb <- ccall(lib, "rt_call", function() winch_trace_back(), environment())
  rows <- module_rows(tb, lib$path)
  expect_identical(rows$func, c("eval_fun", "rt_call"))
  # eval_fun is static: its location comes from DWARF like any other.
  expect_identical(
    rows$line,
    c(marker_line("roundtrip.c", "static_eval"), marker_line("roundtrip.c", "rt_call"))
  )
  expect_identical(basename(rows$file), c("roundtrip.c", "roundtrip.c"))
  expect_false(any(rows$inlined))
})

test_that("file paths are absolute: the compilation directory is known", {
  lib <- roundtrip_lib()
  tb <- ccall(lib, "rt_call", function() winch_trace_back(), environment())
  rows <- module_rows(tb, lib$path)
  expect_true(all(startsWith(rows$file, "/")))
  # The source was compiled in the library's directory.
  expect_identical(
    normalizePath(rows$file),
    rep(normalizePath(file.path(dirname(lib$path), "roundtrip.c")), 2L)
  )
})

test_that("two call sites in one function get their own lines", {
  lib <- roundtrip_lib()
  env <- environment()
  f <- function(which, inner) ccall(lib, "rt_twice", inner, which, env)
  tb <- f(1L, function() f(2L, function() winch_trace_back()))
  rows <- tb[tb$func %in% "rt_twice", ]
  # Innermost first: the inner call went through the second call site.
  expect_identical(
    rows$line,
    c(marker_line("roundtrip.c", "twice_2"), marker_line("roundtrip.c", "twice_1"))
  )
})

test_that("static callbacks behind R_ToplevelExec and .External have their lines", {
  lib <- roundtrip_lib()
  env <- environment()
  tb <- ccall(lib, "rt_toplevel", function() winch_trace_back(), env)
  rows <- module_rows(tb, lib$path)
  expect_identical(rows$func, c("eval_fun", "toplevel_fn", "rt_toplevel"))
  expect_identical(rows$line, c(
    marker_line("roundtrip.c", "static_eval"),
    marker_line("roundtrip.c", "toplevel_fn"),
    marker_line("roundtrip.c", "toplevel")
  ))

  te <- .External("rt_external", function() winch_trace_back(), env, PACKAGE = lib$name)
  rows <- module_rows(te, lib$path)
  expect_identical(rows$func, c("eval_fun", "rt_external"))
  expect_identical(rows$line, c(
    marker_line("roundtrip.c", "static_eval"),
    marker_line("roundtrip.c", "external")
  ))
})

test_that("every unwinding backend gets the same locations", {
  lib <- roundtrip_lib()
  backends <- winch:::winch_backends()
  expect_true(length(backends) >= 1L)
  for (backend in backends) {
    tb <- ccall(lib, "rt_call", function() winch_trace_back(backend = backend), environment())
    rows <- module_rows(tb, lib$path)
    expect_identical(rows$func, c("eval_fun", "rt_call"), label = backend)
    expect_identical(
      rows$line,
      c(marker_line("roundtrip.c", "static_eval"), marker_line("roundtrip.c", "rt_call")),
      label = backend
    )
  }
})

test_that("column is an integer column pointing into the call on the line", {
  lib <- roundtrip_lib()
  tb <- ccall(lib, "rt_call", function() winch_trace_back(), environment())
  expect_type(tb$column, "integer")
  expect_type(tb$line, "integer")
  rows <- module_rows(tb, lib$path)
  # eval_fun's frame is at the Rf_eval(...) call on the marker line.
  range <- marker_columns("roundtrip.c", marker_line("roundtrip.c", "static_eval"), "Rf_eval(")
  expect_true(rows$column[[1L]] >= range[[1L]] && rows$column[[1L]] <= range[[2L]])
  expect_true(all(rows$column > 0L))
  # No column without a line.
  expect_true(all(is.na(tb$column[is.na(tb$line)])))
})

test_that("C++: demangled names and the inlined frame, innermost first", {
  lib <- cpp_lib()
  tb <- capture_via(lib, "cpp_call")
  rows <- module_rows(tb, lib$path)
  expect_identical(
    rows$func,
    c("wtest::evaluate", "wtest::Caller<int>::call(SEXPREC*, SEXPREC*)", "cpp_call")
  )
  expect_identical(rows$inlined, c(TRUE, FALSE, FALSE))
  # The inlined call and its physical frame share one ip; the caller has its own.
  expect_identical(rows$ip[[1L]], rows$ip[[2L]])
  expect_identical(rows$offset[[1L]], rows$offset[[2L]])
  expect_false(identical(rows$ip[[2L]], rows$ip[[3L]]))
  expect_identical(rows$line, c(
    marker_line("cpplib.cpp", "cpp_inlined"),
    marker_line("cpplib.cpp", "cpp_call"),
    marker_line("cpplib.cpp", "cpp_entry")
  ))
  expect_identical(
    normalizePath(rows$file),
    rep(normalizePath(file.path(dirname(lib$path), "cpplib.cpp")), 3L)
  )
  expect_type(rows$column, "integer")
  expect_false(anyNA(rows$column))
})

test_that("C++: inlined rows survive libr = FALSE and sit right above their frame", {
  lib <- cpp_lib()
  tb <- capture_via(lib, "cpp_call", libr = FALSE)
  expect_false(any(tb$is_libr))
  i <- which(tb$inlined)
  expect_identical(tb$func[i], "wtest::evaluate")
  # Every inlined row is followed by a row with the same ip; the last row of
  # each ip group is the physical (not inlined) frame.
  for (k in i) {
    expect_identical(tb$ip[[k + 1L]], tb$ip[[k]])
  }
  last_of_ip <- !duplicated(tb$ip, fromLast = TRUE)
  expect_false(any(tb$inlined[last_of_ip]))
})

test_that("C: two levels of inlining give two inlined rows, innermost first", {
  lib <- compile_clib("wtest_srcloc_chain", "inline_chain.c", flags = "-g -O2")
  tb <- capture_via(lib, "chain_call")
  rows <- module_rows(tb, lib$path)
  expect_identical(rows$func, c("inner_eval", "middle_eval", "chain_call"))
  expect_identical(rows$inlined, c(TRUE, TRUE, FALSE))
  # One physical frame: one ip for all three rows.
  expect_identical(length(unique(rows$ip)), 1L)
  expect_identical(rows$line, c(
    marker_line("inline_chain.c", "inner_eval"),
    marker_line("inline_chain.c", "middle_eval"),
    marker_line("inline_chain.c", "chain_call")
  ))
  expect_identical(basename(rows$file), rep("inline_chain.c", 3L))
})

test_that("a frame that ends in a call to a noreturn function (Rf_error) gets its own line", {
  lib <- roundtrip_lib()
  tb <- NULL
  expect_error(
    withCallingHandlers(
      ccall(lib, "rt_error", "boom"),
      error = function(e) tb <<- winch_trace_back()
    ),
    "boom"
  )
  rows <- module_rows(tb, lib$path)
  expect_identical(rows$func, "rt_error")
  expect_identical(rows$line, marker_line("roundtrip.c", "error"))
})

test_that("Fortran frame: name, file and line", {
  lib <- fortran_lib()
  tb <- capture_via(lib, "wfl_call")
  rows <- module_rows(tb, lib$path)
  expect_identical(rows$func, c("wfl_callback", "wtest_fsub", "wfl_call"))
  expect_identical(basename(rows$file), c("fsub_named_c.c", "fsub_named.f90", "fsub_named_c.c"))
  expect_identical(rows$line, c(
    marker_line("fsub_named_c.c", "wfl_callback"),
    marker_line("fsub_named.f90", "fortran_call"),
    marker_line("fsub_named_c.c", "wfl_call")
  ))
  expect_true(all(startsWith(rows$file, "/")))
})

test_that("Rust frame: demangled path, file and line", {
  lib <- compile_rustlib()
  skip_if(is.null(lib$path), attr(lib, "reason") %||% "the Rust fixture is not available")
  tb <- capture_via(lib, "rust_call")
  rows <- module_rows(tb, lib$path)
  expect_identical(rows$func, c("rustlib::nested::call_back", "rust_call"))
  expect_identical(rows$line[[1L]], marker_line("rustlib.rs", "rust_call"))
  expect_identical(normalizePath(rows$file[[1L]]), normalizePath(lib$src))
  expect_false(any(rows$inlined))
})

test_that("modules without debug info: file and line NA, names by containment", {
  lib <- roundtrip_lib()
  tb <- ccall(lib, "rt_call", function() winch_trace_back(), environment())
  libr_path <- normalizePath(file.path(R.home("lib"), "libR.so"))
  libr <- module_rows(tb, libr_path)
  expect_gt(nrow(libr), 0L)
  entry <- module_cache_entry(libr_path)
  skip_if(
    isTRUE(entry$dwarf),
    paste("libR.so has debug information here:", entry$debug_file %||% "in the file")
  )
  expect_true(all(is.na(libr$file)))
  expect_true(all(is.na(libr$line)))
  expect_true(all(is.na(libr$column)))
  expect_false(any(libr$inlined))
  # Names still come from the dynamic symbol table (R's evaluator is the
  # exported Rf_eval); hidden functions stay NA.
  expect_true("Rf_eval" %in% libr$func)
  expect_true(anyNA(libr$func))

  nm <- Sys.which("nm")
  skip_if(!nzchar(nm), "nm (binutils) is not installed")
  out <- system2(nm, c("-D", "-S", "--defined-only", shQuote(libr_path)), stdout = TRUE)
  parts <- strsplit(out, " +")
  parts <- parts[lengths(parts) == 4L]
  start <- vapply(parts, function(p) as.numeric(strtoi(p[[1L]], 16L)), 0)
  size <- vapply(parts, function(p) as.numeric(strtoi(p[[2L]], 16L)), 0)
  name <- vapply(parts, `[[`, "", 4L)
  probe <- vapply(libr$offset, function(o) strtoi(sub("^0x", "", o), 16L) - 1, 0)
  for (i in seq_len(nrow(libr))) {
    inside <- start <= probe[[i]] & probe[[i]] < start + size
    if (is.na(libr$func[[i]])) {
      expect_false(any(inside), label = libr$offset[[i]])
    } else {
      expect_true(libr$func[[i]] %in% name[inside], label = libr$func[[i]])
    }
  }
})

test_that("a second capture reads no file and returns identical results", {
  lib <- roundtrip_lib()
  cpp <- cpp_lib()
  env <- environment()
  # The same stack twice: compiled so that the JIT cannot change R's frames
  # between the two captures.
  f <- compiler::cmpfun(function() {
    ccall(lib, "rt_call", function() {
      .Call("cpp_call", function() winch_trace_back(), env, PACKAGE = cpp$name)
    }, env)
  })
  first <- f()
  before <- winch:::cache_info()
  second <- f()
  after <- winch:::cache_info()
  expect_identical(after$files_read, before$files_read)
  expect_identical(after$modules, before$modules)
  expect_identical(second, first)
  # And the repeated capture still has the locations.
  expect_identical(
    module_rows(second, lib$path)$line,
    c(marker_line("roundtrip.c", "static_eval"), marker_line("roundtrip.c", "rt_call"))
  )
  expect_identical(module_rows(second, cpp$path)$inlined, c(TRUE, FALSE, FALSE))
})

test_that("a capture at new addresses of known modules reads no file either", {
  lib <- roundtrip_lib()
  env <- environment()
  ccall(lib, "rt_call", function() winch_trace_back(), env)
  before <- winch:::cache_info()$files_read
  # Different call sites in the same modules: new addresses, no new module.
  tb <- ccall(lib, "rt_tryeval", function() winch_trace_back(), env)
  expect_identical(winch:::cache_info()$files_read, before)
  expect_identical(module_rows(tb, lib$path)$line, marker_line("roundtrip.c", "tryeval"))
})
