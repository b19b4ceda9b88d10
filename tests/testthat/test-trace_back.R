test_that("winch_available() is a scalar logical, TRUE on Linux", {
  expect_type(winch_available(), "logical")
  expect_length(winch_available(), 1L)
  if (identical(Sys.info()[["sysname"]], "Linux")) {
    expect_true(winch_available())
  }
})

skip_if_not(winch_available(), "native unwinding is not available on this platform")

winch_so <- function() {
  normalizePath(getLoadedDLLs()[["winch"]][["path"]])
}

test_that("columns come in the documented order and types", {
  tb <- winch_trace_back()
  expect_s3_class(tb, "data.frame")
  expect_identical(
    names(tb),
    c("func", "ip", "pathname", "is_libr", "file", "line", "inlined", "offset", "column", "start", "source")
  )
  expect_type(tb$start, "character")
  expect_true(all(grepl("^0x[0-9a-f]+$", tb$start[!is.na(tb$start)])))
  expect_true(all(tb$source[!is.na(tb$func)] %in% c("dwarf", "debuginfod", "symtab", "dynsym", "minidebuginfo", "registration")))
  expect_true(all(is.na(tb$source[is.na(tb$func)])))
  expect_type(tb$func, "character")
  expect_type(tb$ip, "character")
  expect_type(tb$pathname, "character")
  expect_type(tb$is_libr, "logical")
  expect_type(tb$file, "character")
  expect_type(tb$line, "integer")
  expect_match(tb$ip, "^[0-9a-f]{16}$")
  expect_true(all(startsWith(tb$pathname, "/")))
  expect_match(tb$offset, "^0x[0-9a-f]+$")
  expect_false(attr(tb, "truncated"))
  expect_true(is.na(attr(tb, "truncation")))
})

test_that("deepest frame first, without the capture's own frames", {
  tb <- winch_trace_back()
  # Innermost: R's .Call dispatch in libR; winch's capture code is gone.
  expect_true(tb$is_libr[[1L]])
  expect_false(winch_so() %in% tb$pathname)
  # Outermost: the executable's entry point.
  expect_identical(tb$func[[nrow(tb)]], "_start")
  expect_identical(tb$pathname[[nrow(tb)]], normalizePath(file.path(R.home("bin"), "exec", "R")))
})

test_that("foreign frames: exported and static functions, module path, is_libr", {
  lib <- roundtrip_lib()
  tb <- ccall(lib, "rt_call", function() winch_trace_back(), environment())
  rows <- tb[tb$pathname == lib$path, ]
  # eval_fun is static: named from .symtab (R CMD SHLIB does not strip).
  expect_identical(rows$func, c("eval_fun", "rt_call"))
  expect_false(any(rows$is_libr))
  expect_identical(unique(rows$pathname), lib$path)
})

test_that("ip is the frame's own instruction pointer", {
  lib <- roundtrip_lib()
  env <- environment()
  f <- function(which, inner) ccall(lib, "rt_twice", inner, which, env)
  tb <- f(1L, function() f(2L, function() winch_trace_back()))
  rows <- tb[tb$func %in% "rt_twice", ]
  expect_identical(nrow(rows), 2L)
  # Two call sites in one function: two different return addresses.
  expect_false(identical(rows$ip[[1L]], rows$ip[[2L]]))

  # And not the function's start (what the old C winch reported): both lie
  # strictly inside rt_twice.
  nm <- Sys.which("nm")
  skip_if(!nzchar(nm), "nm (binutils) is not installed")
  syms <- system2(nm, c("--defined-only", lib$path), stdout = TRUE)
  start <- strtoi(sub(" .*", "", grep(" rt_twice$", syms, value = TRUE)), 16L)
  offsets <- strtoi(sub("^0x", "", rows$offset), 16L)
  expect_true(all(offsets > start))

  # winch_call has a single call site, so its frames share one ip, which
  # is a return address inside winch_call, not its start.
  tw <- winch_call(function() winch_call(function() winch_trace_back()))
  wc <- tw[tw$func %in% "winch_call", ]
  expect_identical(nrow(wc), 2L)
  expect_identical(wc$ip[[1L]], wc$ip[[2L]])
})

# Symbol table of a module from `nm -D -S`: start and size of each symbol.
dynamic_symbols <- function(path) {
  nm <- Sys.which("nm")
  if (!nzchar(nm)) {
    return(NULL)
  }
  out <- system2(nm, c("-D", "-S", "--defined-only", path), stdout = TRUE)
  parts <- strsplit(out, " +")
  parts <- parts[lengths(parts) == 4L]
  data.frame(
    start = vapply(parts, function(p) as.numeric(strtoi(p[[1L]], 16L)), 0),
    size = vapply(parts, function(p) as.numeric(strtoi(p[[2L]], 16L)), 0),
    name = vapply(parts, `[[`, "", 4L)
  )
}

test_that("libR frames are named only inside their symbol; hidden functions are NA", {
  tb <- winch_call(function() winch_trace_back())
  libr <- tb[tb$is_libr & grepl("libR\\.so$", tb$pathname), ]
  expect_gt(nrow(libr), 5L)
  # Debian's libR.so is stripped: most of the interpreter is hidden functions.
  expect_true(anyNA(libr$func))

  syms <- dynamic_symbols(libr$pathname[[1L]])
  skip_if(is.null(syms), "nm (binutils) is not installed")
  named <- libr[!is.na(libr$func), ]
  expect_gt(nrow(named), 0L)
  for (i in seq_len(nrow(named))) {
    probe <- strtoi(sub("^0x", "", named$offset[[i]]), 16L) - 1
    sym <- syms[syms$name == named$func[[i]], ]
    inside <- any(sym$start <= probe & probe < sym$start + sym$size)
    expect_true(inside, label = paste(named$func[[i]], named$offset[[i]]))
  }
  # And every NA frame of libR really lies outside all exported symbols.
  hidden <- libr[is.na(libr$func), ]
  for (i in seq_len(nrow(hidden))) {
    probe <- strtoi(sub("^0x", "", hidden$offset[[i]]), 16L) - 1
    expect_false(any(syms$start <= probe & probe < syms$start + syms$size))
  }
})

test_that("is_libr is TRUE exactly for R's library and executable", {
  tb <- winch_trace_back()
  r_modules <- c(
    normalizePath(file.path(R.home("lib"), "libR.so")),
    normalizePath(file.path(R.home("bin"), "exec", "R"))
  )
  expect_identical(tb$is_libr, tb$pathname %in% r_modules)

  # A package library called lidR.so is not R.
  lidr <- compile_clib("lidR", "other.c")
  tl <- ccall(lidr, "other_call", function() winch_trace_back(), environment())
  expect_true(any(basename(tl$pathname) == "lidR.so"))
  expect_false(any(tl$is_libr[basename(tl$pathname) == "lidR.so"]))
})

test_that("a capture 1000 R calls deep returns every frame", {
  # In the AST interpreter every R call runs in C frames of R's own library
  # (which of them are exported differs between R versions, so they are
  # counted, not named).
  old <- compiler::enableJIT(0L)
  on.exit(compiler::enableJIT(old), add = TRUE)
  deep <- function(n) if (n == 0L) winch_trace_back() else deep(n - 1L)
  tb <- deep(1000L)
  expect_false(attr(tb, "truncated"))
  expect_identical(tb$func[[nrow(tb)]], "_start")
  expect_gte(sum(tb$is_libr), 1000L)
})

test_that("a capture 200 round trips R -> C -> R deep returns every frame", {
  lib <- roundtrip_lib()
  env <- environment()
  nest <- function(k) {
    if (k == 0L) winch_trace_back() else ccall(lib, "rt_nest", nest, k - 1L, env)
  }
  tb <- nest(200L)
  expect_false(attr(tb, "truncated"))
  expect_identical(sum(tb$func %in% "rt_nest"), 200L)
})

test_that("the unwinding backends agree frame by frame", {
  backends <- winch:::winch_backends()
  skip_if(length(backends) < 2L, "only one unwinding backend is built")
  lib <- roundtrip_lib()
  env <- environment()
  capture <- function(backend) winch_trace_back(backend = backend)
  # The same call site for every backend, through a foreign library.
  all <- ccall(lib, "rt_call", function() lapply(backends, capture), env)
  names(all) <- backends
  reference <- all[[length(all)]]
  for (b in backends) {
    # No silent fallback: the backend asked for walked the whole stack.
    expect_identical(attr(all[[b]], "backend"), b)
    expect_identical(paste(all[[b]]$pathname, all[[b]]$func), paste(reference$pathname, reference$func), label = b)
    expect_identical(all[[b]]$ip, reference$ip, label = b)
  }
})

test_that("capture away from R's main thread works without R", {
  for (backend in winch:::winch_backends()) {
    tb <- winch:::capture_on_thread(backend)
    expect_false(attr(tb, "main_thread"))
    expect_false(attr(tb, "truncated"), label = backend)
    # The thread's stack ends in the C library's thread start code.
    expect_match(basename(tb$pathname[[nrow(tb)]]), "^libc\\.so")
  }
})

test_that("libr = FALSE leaves R's own frames out", {
  tb <- winch_call(function() winch_trace_back(libr = FALSE))
  expect_false(any(tb$is_libr))
  expect_true("winch_call" %in% tb$func)
})

test_that("bad arguments to winch_trace_back() are clear errors", {
  expect_snapshot(error = TRUE, {
    winch_trace_back(backend = "gdb")
    winch_trace_back(backend = NA)
    winch_trace_back(libr = NA)
  })
})

test_that("a backend left out is the option's, read by the core; NULL given is refused", {
  expect_error(winch_trace_back(backend = NULL), class = "winch_error_bad_argument")
  withr::with_options(list(winch.backend = "backtrace"), {
    expect_identical(attr(winch_trace_back(), "backend"), "backtrace")
  })
  withr::with_options(list(winch.backend = "gdb"), {
    expect_error(winch_trace_back(), "must be one of", class = "winch_error_bad_argument")
  })
  withr::with_options(list(winch.backend = NULL), {
    expect_true(attr(winch_trace_back(), "backend") %in% c("cfi", "libunwind", "backtrace"))
  })
})

test_that("winch_trace_back() returns its frames visibly: at the console it prints them", {
  res <- withVisible(winch_trace_back())
  expect_true(res$visible)
  expect_s3_class(res$value, "data.frame")
  # Also when a hint about debug files is due (DEBUGINFOD_URLS set, the
  # option unset): the hint is a message, the frames still print.
  withr::local_envvar(DEBUGINFOD_URLS = "http://127.0.0.1:1")
  withr::local_options(winch.debuginfod = NULL)
  res <- withVisible(suppressMessages(winch_trace_back()))
  expect_true(res$visible)
})
