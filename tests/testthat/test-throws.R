# Stacks at throw time (issue 9): C++ exceptions and Rust panics recorded
# when thrown, shown under the frame that caught them in every joint view of
# the R error that frame raised.

skip_if_not(winch_available(), "native unwinding is not available on this platform")
skip_if_not(winch:::throw_capture_status()$supported, "capturing throws needs x86_64 Linux")

throw_lib <- function() compile_clib("wtest_throw", "throw.cpp")
tl <- throw_lib()

# The joint view of the R error `expr` raises, taken in a calling handler by
# `view` (winch_sys_calls by default).
view_of_error <- function(expr, view = function() winch_sys_calls()) {
  seen <- NULL
  tryCatch(
    withCallingHandlers(expr, error = function(e) seen <<- view()),
    error = function(e) NULL
  )
  seen
}

# Native entries of a winch_calls object as "func" (module dropped), with
# "!" before those taken at the throw.
native_entries <- function(x) {
  native <- attr(x, "native")
  status <- attr(x, "status")
  labels <- joint_labels(x)
  out <- sub("^/[^:]*::", "", labels[native])
  ifelse(status[native] == "throw", paste0("!", out), out)
}

test_that("a C++ throw three calls deep, caught at the entry point, shows under it", {
  f <- function() .Call("wt_throw_caught", 1L, PACKAGE = "wtest_throw")
  x <- view_of_error(f())
  expect_identical(
    native_entries(x),
    c("wt_throw_caught", "!wt_throw_caught", "!wthrow::level1(int)", "!wthrow::level2(int)", "!wthrow::level3(int)")
  )
  # The branch comes right after the catching frame, which is under f().
  labels <- joint_labels(x)
  at <- match("f", labels)
  expect_identical(labels[at + 1L], "/wtest_throw.so::wt_throw_caught")
  expect_identical(attr(x, "status")[at + 2:5], rep("throw", 4))
  expect_identical(attr(x, "throw")$type, "std::runtime_error")
  expect_identical(attr(x, "throw")$kind, "C++ exception")
  expect_match(attr(x, "throw")$location, sprintf("throw\\.cpp:%d$", marker_line("throw.cpp", "throw_site")))
  # The error's own path goes on after the branch.
  expect_true(any(grepl("handleSimpleError", labels[-seq_len(at + 5L)], fixed = TRUE) |
    labels[-seq_len(at + 5L)] == "h"))
  printed <- capture.output(print(x))
  expect_match(printed, "!.*wthrow::level3", all = FALSE)
  expect_match(printed, "taken at the throw of std::runtime_error", all = FALSE)
})

test_that("winch_add_trace_back() hangs the throw's frames as a branch under the catching frame", {
  f <- function() .Call("wt_throw_caught", 1L, PACKAGE = "wtest_throw")
  tr <- view_of_error(f(), function() winch_add_trace_back())
  labels <- trace_labels(tr)
  catcher <- match("/wtest_throw.so::wt_throw_caught", labels)
  branch <- catcher + 1:4
  expect_identical(
    labels[branch],
    paste0("/wtest_throw.so [at throw]::", c("wt_throw_caught", "wthrow::level1(int)", "wthrow::level2(int)", "wthrow::level3(int)"))
  )
  expect_identical(tr$at_throw[branch], rep(TRUE, 4))
  expect_false(any(tr$at_throw[-branch]))
  # A chain under the catcher; the next row (the handler's R frames) is the
  # catcher's child, not the innermost throw frame's.
  expect_identical(tr$parent[branch], c(catcher, branch[1:3]))
  expect_identical(tr$parent[[catcher + 5L]], catcher)
  # The source lines are the throw's: where each frame was when it threw.
  expect_match(
    capture.output(print(tr, simplify = "none")),
    sprintf("level3\\(int\\)`\\(\\) at .*throw\\.cpp:%d:", marker_line("throw.cpp", "throw_site")),
    all = FALSE
  )
  expect_identical(attr(tr, "winch")$throw$type, "std::runtime_error")
})

test_that("rlang's hook, entrace() and abort() traces show the throw", {
  withr::local_options(rlang_trace_use_winch = TRUE)
  f <- function() .Call("wt_throw_caught", 1L, PACKAGE = "wtest_throw")
  tr <- view_of_error(f(), function() rlang::trace_back())
  expect_true(sum(tr$at_throw) == 4L)

  err <- tryCatch(withCallingHandlers(f(), error = rlang::entrace), error = function(e) e)
  expect_s3_class(err, "rlang_error")
  labels <- trace_labels(err$trace)
  expect_true("/wtest_throw.so [at throw]::wthrow::level3(int)" %in% labels)
  expect_match(capture.output(print(err$trace, simplify = "none")), "[at throw]", fixed = TRUE, all = FALSE)

  # The entry point catches, then has R call rlang::abort().
  g <- function() {
    .Call("wt_throw_then_eval", 1L, quote(rlang::abort("after the catch", class = "winch_test")),
      environment(), PACKAGE = "wtest_throw")
  }
  err <- tryCatch(g(), winch_test = function(e) e)
  labels <- trace_labels(err$trace)
  catcher <- match("/wtest_throw.so::wt_throw_then_eval", labels)
  expect_identical(labels[catcher + 1L], "/wtest_throw.so [at throw]::wt_throw_then_eval")
  expect_identical(labels[catcher + 4L], "/wtest_throw.so [at throw]::wthrow::level3(int)")
  expect_identical(err$trace$parent[[match("rlang::abort", labels)]], catcher)
})

test_that("winch_last_throw(): the frames, the C++ type and where it was thrown", {
  f <- function() .Call("wt_throw_caught", 1L, PACKAGE = "wtest_throw")
  try(f(), silent = TRUE)
  lt <- winch_last_throw()
  expect_identical(names(lt)[1:6], c("func", "ip", "pathname", "is_libr", "file", "line"))
  expect_identical(
    lt$func[1:4],
    c("wthrow::level3(int)", "wthrow::level2(int)", "wthrow::level1(int)", "wt_throw_caught")
  )
  expect_identical(lt$line[[1]], marker_line("throw.cpp", "throw_site"))
  expect_identical(lt$line[[4]], marker_line("throw.cpp", "entry_call"))
  # It ends at the first frame of R's interpreter.
  expect_true(lt$is_libr[[nrow(lt)]])
  expect_false(any(lt$is_libr[-nrow(lt)]))
  expect_false("__cxa_throw" %in% lt$func)
  expect_identical(attr(lt, "type"), "std::runtime_error")
  expect_identical(attr(lt, "kind"), "C++ exception")
  expect_identical(attr(lt, "rethrown"), 0L)
})

test_that("a throw caught and handled earlier never appears in a later trace", {
  swallow <- function() .Call("wt_throw_swallowed", 1L, PACKAGE = "wtest_throw")
  plain <- function() .Call("wt_plain_error", 1L, PACKAGE = "wtest_throw")
  expect_true(swallow())
  x <- view_of_error(plain())
  expect_false(any(attr(x, "status") == "throw"))
  expect_null(attr(x, "throw"))
  # An R error raised by R code after the .Call returned.
  swallow()
  x <- view_of_error(stop("from R"))
  expect_false(any(attr(x, "status") == "throw"))

  # The same entry point at the same place, called twice: the first call
  # throws (and raises an error), the second raises one without a throw.
  g <- function(x) .Call("wt_maybe_throw", x, PACKAGE = "wtest_throw")
  seen <- list()
  for (x in c(1L, 0L)) {
    seen[[length(seen) + 1L]] <- view_of_error(g(x))
  }
  expect_true(any(attr(seen[[1]], "status") == "throw"))
  expect_false(any(attr(seen[[2]], "status") == "throw"))
})

test_that("a rethrow keeps the original throw site", {
  x <- view_of_error(.Call("wt_rethrow", 1L, PACKAGE = "wtest_throw"))
  expect_identical(
    native_entries(x),
    c("wt_rethrow", "!wt_rethrow", "!wthrow::rethrower(int)", "!wthrow::level1(int)",
      "!wthrow::level2(int)", "!wthrow::level3(int)")
  )
  lt <- winch_last_throw()
  expect_identical(lt$func[[1]], "wthrow::level3(int)")
  expect_identical(attr(lt, "rethrown"), 1L)
  # std::rethrow_exception of a caught exception: the original site too.
  x <- view_of_error(.Call("wt_rethrow_exception_ptr", 1L, PACKAGE = "wtest_throw"))
  expect_identical(native_entries(x)[c(2, 5)], c("!wt_rethrow_exception_ptr", "!wthrow::level3(int)"))
  expect_identical(attr(winch_last_throw(), "rethrown"), 1L)
})

test_that("the catching frame may call what raises the error", {
  x <- view_of_error(.Call("wt_throw_helper_raises", 1L, PACKAGE = "wtest_throw"))
  entries <- native_entries(x)
  expect_identical(entries[1:2], c("wt_throw_helper_raises", "!wt_throw_helper_raises"))
  expect_identical(entries[[5]], "!wthrow::level3(int)")
  # The helper that raised the error is on the error's own path, after the
  # branch.
  expect_match(entries[[6]], "^raise(\\(char const\\*\\))?$")
})

test_that("the option winch.capture_throws turns capture off and on; bad values are warned about", {
  f <- function() .Call("wt_throw_caught", 1L, PACKAGE = "wtest_throw")
  withr::local_options(winch.capture_throws = FALSE)
  before <- winch_last_throw()
  expect_false(winch:::throw_capture_status()$installed)
  x <- view_of_error(f())
  expect_false(any(attr(x, "status") == "throw"))
  expect_identical(winch_last_throw()$ip, before$ip)

  options(winch.capture_throws = "x")
  expect_warning(winch_last_throw(), class = "winch_warning_bad_option")
  # Warned once per value; the state is unchanged.
  expect_no_warning(winch_last_throw())
  expect_false(winch:::throw_capture_status()$installed)
  options(winch.capture_throws = c(TRUE, FALSE))
  expect_warning(winch_last_throw(), class = "winch_warning_bad_option")

  options(winch.capture_throws = TRUE)
  winch_last_throw()
  expect_true(winch:::throw_capture_status()$installed)
  x <- view_of_error(f())
  expect_true(any(attr(x, "status") == "throw"))
})

test_that("a throw in another thread is not recorded", {
  try(.Call("wt_throw_caught", 1L, PACKAGE = "wtest_throw"), silent = TRUE)
  before <- winch_last_throw()
  expect_identical(.Call("wt_throw_in_thread", PACKAGE = "wtest_throw"), 1L)
  expect_identical(winch_last_throw()$ip, before$ip)
})

test_that("a Rust panic caught at the entry point shows under it", {
  lib <- compile_rustlib("rustpanic.rs", "wtest_rustpanic")
  if (!length(lib)) {
    skip(paste("no Rust fixture:", attr(lib, "reason")))
  }
  f <- function() .Call("rust_panic_caught", 1L, PACKAGE = "wtest_rustpanic")
  x <- view_of_error(f())
  entries <- native_entries(x)
  thrown <- entries[startsWith(entries, "!")]
  expect_identical(thrown[[1]], "!rust_panic_caught")
  expect_identical(
    tail(thrown, 3),
    c("!rustpanic::deep::level1", "!rustpanic::deep::level2", "!rustpanic::deep::level3")
  )
  # Rust's panic runtime is left out.
  expect_false(any(grepl("panicking::begin_panic|rust_panic_with_hook|__rust_start_panic", entries)))
  expect_identical(attr(x, "throw")$kind, "Rust panic")
  lt <- winch_last_throw()
  expect_identical(lt$func[[1]], "rustpanic::deep::level3")
  expect_identical(attr(lt, "type"), "Rust panic")
  expect_match(attr(lt, "location"), sprintf("rustpanic\\.rs:%d$", marker_line("rustpanic.rs", "panic_site")))
})

test_that("a library built with R CMD SHLIB and loaded later is hooked", {
  out <- run_rscript(sprintf(r"(
    library(winch)
    dyn.load(%s)
    f <- function() .Call("wt_throw_caught", 1L, PACKAGE = "wtest_throw")
    tryCatch(withCallingHandlers(f(), error = function(e) print(winch_sys_calls())), error = function(e) NULL)
    lt <- winch_last_throw()
    cat("first:", lt$func[[1]], "\n")
  )", deparse(tl$path)))
  expect_match(out, "wthrow::level3(int)", fixed = TRUE, all = FALSE)
  expect_match(out, "first: wthrow::level3(int)", fixed = TRUE, all = FALSE)
})

test_that("winch_last_throw() is an empty table when nothing was thrown", {
  out <- run_rscript(r"(
    library(winch)
    x <- winch_last_throw()
    cat("rows:", nrow(x), "\n")
    cat("columns:", paste(names(x), collapse = " "), "\n")
    cat("type:", attr(x, "type"), "kind:", attr(x, "kind"), "\n")
  )")
  expect_match(out, "rows: 0", fixed = TRUE, all = FALSE)
  expect_match(out, "columns: func ip pathname is_libr file line", fixed = TRUE, all = FALSE)
  expect_match(out, "type: NA kind: NA", fixed = TRUE, all = FALSE)
})

test_that("unloading winch gives the GOT slots back", {
  out <- run_rscript(sprintf(r"(
    library(winch)
    dyn.load(%s)
    cat("slots:", winch:::throw_capture_status()$slots, "\n")
    unloadNamespace("winch")
    # Throws still work with winch's library gone.
    r <- tryCatch(.Call("wt_throw_caught", 1L, PACKAGE = "wtest_throw"), error = conditionMessage)
    cat("after unload:", r, "\n")
    r <- .Call("wt_throw_swallowed", 1L, PACKAGE = "wtest_throw")
    cat("swallowed:", r, "\n")
  )", deparse(tl$path)))
  expect_identical(attr(out, "status"), 0L)
  expect_match(out, "after unload: caught: thrown three calls deep", fixed = TRUE, all = FALSE)
  expect_match(out, "swallowed: TRUE", fixed = TRUE, all = FALSE)
})

test_that("exceptions carrying an R error through C++ (Rcpp, cpp11) are not shown as throws", {
  for (which in 1:2) {
    x <- view_of_error(.Call("wt_carrier", which, PACKAGE = "wtest_throw"))
    expect_identical(native_entries(x), "wt_carrier")
    expect_null(attr(x, "throw"))
    # It was recorded, with its type name.
    expect_identical(
      attr(winch_last_throw(), "type"),
      c("Rcpp::LongjumpException", "cpp11::unwind_exception")[[which]]
    )
  }
})

# A real Rcpp function compiled with Rcpp::sourceCpp(): its generated
# wrapper catches the exception and calls R's stop().
rcpp_env <- function() {
  if (!is.null(clib_cache$rcpp)) {
    return(clib_cache$rcpp)
  }
  if (!requireNamespace("Rcpp", quietly = TRUE)) {
    return(structure(list(), reason = "Rcpp is not installed (Debian: r-cran-rcpp)"))
  }
  env <- new.env()
  res <- tryCatch(
    {
      Rcpp::sourceCpp(clib_source("rcpp_throw.cpp"), env = env, cacheDir = tempfile("winch-rcpp-"))
      env
    },
    error = function(e) structure(list(), reason = paste("sourceCpp failed:", conditionMessage(e)))
  )
  clib_cache$rcpp <- res
  res
}

test_that("a real Rcpp function: throw std::range_error two calls below the export", {
  env <- rcpp_env()
  if (!is.environment(env)) {
    skip(attr(env, "reason"))
  }
  f <- function(x) env$rcpp_range(x)
  expect_identical(f(3L), 7L)
  x <- view_of_error(f(11L))
  entries <- native_entries(x)
  expect_identical(
    entries[startsWith(entries, "!")],
    c("!sourceCpp_1_rcpp_range", "!rcpp_range(int)", "!wrcpp::scaled(int)", "!wrcpp::check_range(int)")
  )
  # The catching frame, then the branch; Rcpp's call to stop() follows.
  labels <- joint_labels(x)
  catcher <- match(TRUE, grepl("::sourceCpp_1_rcpp_range$", labels))
  expect_identical(attr(x, "status")[catcher], "exact")
  expect_identical(attr(x, "status")[catcher + 1:4], rep("throw", 4))
  expect_identical(labels[[catcher + 5L]], "stop")
  expect_identical(attr(x, "throw")$type, "std::range_error")

  lt <- winch_last_throw()
  expect_identical(lt$func[[1]], "wrcpp::check_range(int)")
  expect_identical(lt$line[[1]], marker_line("rcpp_throw.cpp", "range_site"))
  expect_identical(lt$line[[2]], marker_line("rcpp_throw.cpp", "range_caller"))
  expect_identical(attr(lt, "type"), "std::range_error")
  expect_match(attr(lt, "location"), sprintf("rcpp_throw\\.cpp:%d$", marker_line("rcpp_throw.cpp", "range_site")))

  # rlang's entrace() trace: a branch under the wrapper.
  withr::local_options(rlang_trace_use_winch = TRUE)
  err <- tryCatch(withCallingHandlers(f(11L), error = rlang::entrace), error = function(e) e)
  labels <- trace_labels(err$trace)
  catcher <- match(TRUE, grepl("::sourceCpp_1_rcpp_range$", labels) & !err$trace$at_throw)
  branch <- which(err$trace$at_throw)
  expect_identical(length(branch), 4L)
  expect_identical(err$trace$parent[branch], c(catcher, branch[1:3]))
  expect_identical(err$trace$parent[[match("stop", labels)]], catcher)
})

test_that("a real Rcpp function: Rcpp::stop() two calls below the export", {
  env <- rcpp_env()
  if (!is.environment(env)) {
    skip(attr(env, "reason"))
  }
  x <- view_of_error(env$rcpp_stop(-1L))
  entries <- native_entries(x)
  thrown <- entries[startsWith(entries, "!")]
  expect_identical(thrown[1:4], c("!sourceCpp_1_rcpp_stop", "!rcpp_stop(int)", "!wrcpp::checked(int)", "!wrcpp::validate(int)"))
  # Rcpp::stop() itself is where the throw happened (a function of Rcpp's
  # headers, not the throw machinery).
  expect_match(thrown[[length(thrown)]], "^!void Rcpp::stop<")
  expect_identical(attr(x, "throw")$type, "Rcpp::exception")
  lt <- winch_last_throw()
  expect_identical(lt$line[[match("wrcpp::validate(int)", lt$func)]], marker_line("rcpp_throw.cpp", "stop_site"))
})

test_that("a real Rcpp function: an R error in a callback shows R's own path only", {
  env <- rcpp_env()
  if (!is.environment(env)) {
    skip(attr(env, "reason"))
  }
  h <- function() env$rcpp_callback(function() stop("from the callback"))
  x <- view_of_error(h())
  expect_false(any(attr(x, "status") == "throw"))
  labels <- joint_labels(x)
  expect_true(match("stop", labels) > match(TRUE, grepl("sourceCpp_1_rcpp_callback$", labels)))
  # Rcpp carried the error through its C++ frames as an exception, which
  # was recorded; a later error in the same expression does not show it.
  expect_identical(attr(winch_last_throw(), "type"), "Rcpp::LongjumpException")
  x <- view_of_error(.Call("wt_plain_error", 1L, PACKAGE = "wtest_throw"))
  expect_false(any(attr(x, "status") == "throw"))
})

test_that("a library with its own hidden copy of the C++ runtime: nothing recorded, nothing breaks", {
  # -static-libstdc++ -static-libgcc with the copies' symbols hidden: its
  # throws call its own unwinder directly, through no GOT entry.
  lib <- tryCatch(
    build_clib("wtest_hidden", "throw.cpp", ldflags = "-static-libstdc++ -static-libgcc -Wl,--exclude-libs,ALL"),
    error = function(e) NULL
  )
  if (is.null(lib)) {
    skip("the toolchain cannot link libstdc++ and libgcc statically")
  }
  dll <- dyn.load(lib$path)
  on.exit(dyn.unload(lib$path))
  try(.Call("wt_throw_caught", 1L, PACKAGE = "wtest_throw"), silent = TRUE)
  before <- winch_last_throw()
  x <- view_of_error(.Call("wt_throw_caught", 1L, PACKAGE = "wtest_hidden"))
  expect_false(any(attr(x, "status") == "throw"))
  expect_identical(native_entries(x)[[1]], "wt_throw_caught")
  expect_identical(winch_last_throw()$ip, before$ip)
  expect_identical(.Call("wt_throw_swallowed", 1L, PACKAGE = "wtest_hidden"), TRUE)
})
