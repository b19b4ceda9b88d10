skip_if_not(winch_available(), "native unwinding is not available on this platform")

# winch_profile() and friends. The fixture library clib/burn.c burns known
# amounts of CPU time of the calling thread (measured with
# CLOCK_THREAD_CPUTIME_ID) in known functions and calls back into R, so the
# truth of every profile below is known. Sampling with event = "cpu" counts
# CPU time of R's main thread, so a busy machine makes the runs longer but
# leaves the proportions alone. Intervals are short (2-5 ms) and workloads
# small (0.1-0.8 s of CPU), with a few points of slack.

bl <- compile_clib("wtest_burn", "burn.c")
BURN <- "/wtest_burn.so::"
A <- paste0(BURN, "burn_a")
B <- paste0(BURN, "burn_b")
CHILD <- paste0(BURN, "burn_child")
CALL <- paste0(BURN, "burn_call")
NEST <- paste0(BURN, "burn_nest")

# R functions around the burns: each native burn runs under the R function
# that .Call()s it.
r_a <- function(t) .Call("burn_a", t, PACKAGE = "wtest_burn")
r_b <- function(t) .Call("burn_b", t, PACKAGE = "wtest_burn")
r_child <- function(t) .Call("burn_child", t, PACKAGE = "wtest_burn")

# The labels of every stack of `p`, innermost first: every line of every
# location (a native frame lists its inlined calls first), computed here
# from the profile's tables rather than with the package's own helpers.
stack_labels <- function(p) {
  lines <- p$lines
  by_location <- split(lines$`function`, factor(lines$location, levels = seq_len(nrow(p$locations))))
  lapply(p$stacks$locations, function(locs) p$functions$label[unlist(by_location[locs], use.names = FALSE)])
}

# Seconds sampled in stacks that hold a frame labelled `label`.
seconds_in <- function(p, label) {
  hit <- vapply(stack_labels(p), function(s) label %in% s, NA)
  sum(p$stacks$count[hit]) * p$interval
}

# The distinct paths, from the innermost frame labelled `leaf` outwards, of
# the stacks that hold one, each as one string "leaf < caller < ...".
paths_from <- function(p, leaf) {
  paths <- lapply(stack_labels(p), function(s) {
    i <- match(leaf, s)
    if (is.na(i)) NULL else paste(s[i:length(s)], collapse = " < ")
  })
  sort(unique(unlist(paths)))
}

path <- function(...) paste(c(...), collapse = " < ")

# Runs `make(compile)` (which defines the functions of a scenario and
# returns its entry function) and then the entry with `...`, in `mode`:
# "ast" (JIT off, not compiled), "bytecode" (compiler::cmpfun()) or "jit"
# (JIT level 3, R's default, not compiled beforehand). Since R 4.4 a
# compiled closure called from byte code runs inline in its caller's
# interpreter loop; the assertions below hold either way.
in_mode <- function(mode, make, ...) {
  old <- compiler::enableJIT(if (mode == "jit") 3L else 0L)
  on.exit(compiler::enableJIT(old), add = TRUE)
  entry <- make(compile = mode == "bytecode")
  entry(...)
}
maybe_cmp <- function(f, compile) if (compile) compiler::cmpfun(f) else f

# A workload R -> C -> R -> C: `outer` burns 0.1 s itself, then calls back
# through burn_call into `cb`, which burns 0.2 s. burn_call evaluates the
# call `cb()`, so R labels that frame "cb".
cb <- function() r_b(0.2)
outer <- function() {
  r_a(0.1)
  .Call("burn_call", quote(cb), environment(), PACKAGE = "wtest_burn")
}

# Go's pprof. Recent Go releases build pprof on first use (about 20 s on
# 2 cores) into Go's build cache: the default cache under HOME when HOME is
# writable (as go would use it anyway), else one temporary cache for this
# session (R CMD check may run with HOME unset or read-only).
go_env <- local({
  env <- NULL
  function() {
    if (is.null(env)) {
      home <- Sys.getenv("HOME")
      env <<- "GOTOOLCHAIN=local"
      if (!nzchar(home) || file.access(home, 2L) != 0L) {
        home <- tempfile("winch-go-home-")
        dir.create(home)
        env <<- c(env, paste0("HOME=", home), paste0("GOCACHE=", file.path(home, "cache")),
          paste0("GOPATH=", file.path(home, "go")))
      }
    }
    env
  }
})
run_pprof <- function(args) {
  out <- suppressWarnings(system2("go", c("tool", "pprof", args), stdout = TRUE, stderr = TRUE, env = go_env()))
  structure(out, status = attr(out, "status") %||% 0L)
}

# Warm up: the first profile of the session learns R's loop functions, and
# the first calls of these R functions may be compiled by the JIT.
invisible(winch_profile(for (i in 1:2) r_a(0.001), interval = 0.002))
r_b(0.001)
r_child(0.001)

test_that("time in native functions comes out in the proportions they burned", {
  # Linux checks CPU-time timers at its scheduler tick (4 ms at HZ = 250):
  # a sample lands on the first tick after its interval expired, and stands
  # for every interval that expired since. Each burn's count is then right
  # to a tick or so at each of its ends. Burns of random lengths, so that
  # those errors do not add up (a fixed rhythm can lock onto the ticks).
  used <- NULL
  len <- cbind(a = stats::runif(3L, 0.12, 0.2), b = stats::runif(3L, 0.04, 0.07))
  p <- winch_profile(
    used <- vapply(1:3, function(i) c(a = r_a(len[i, "a"]), b = r_b(len[i, "b"])), c(a = 0, b = 0)),
    interval = 0.002
  )
  truth <- rowSums(used) # CPU seconds each burned, as it measured them
  a <- seconds_in(p, A)
  b <- seconds_in(p, B)
  expect_lt(abs(a / (a + b) - truth[["a"]] / sum(truth)), 0.03)
  # Each function's sampled time is its CPU time, within 10% and 10 ms.
  expect_lt(abs(a - truth[["a"]]), 0.1 * truth[["a"]] + 0.01)
  expect_lt(abs(b - truth[["b"]]), 0.1 * truth[["b"]] + 0.01)
  expect_identical(p$event, "cpu")
  expect_identical(p$interval, 0.002)
})

test_that("every native sample is under the R function that called it, through callbacks", {
  p <- winch_profile(outer(), interval = 0.002)
  # The whole stack, outermost frame `outer`: the profiler's own frames
  # and those of its caller are left out.
  expect_identical(paths_from(p, A), path(A, "r_a", "outer"))
  expect_identical(paths_from(p, B), path(B, "r_b", "cb", CALL, "outer"))
  expect_gt(seconds_in(p, A), 0.07)
  expect_gt(seconds_in(p, B), 0.15)
})

test_that("100 nested round trips R -> C -> R are all in every sample", {
  # step(k) calls back into burn_nest, which evaluates step(k - 1): 101
  # frames of step and 100 of burn_nest, then r_a burns at the bottom.
  step <- function(k) {
    if (k == 0L) r_a(0.3) else .Call("burn_nest", quote(step), k - 1L, environment(), PACKAGE = "wtest_burn")
  }
  p <- winch_profile(step(100L), interval = 0.002)
  expect_identical(paths_from(p, A), path(A, "r_a", "step", rep(c(NEST, "step"), 100L)))
  expect_gt(seconds_in(p, A), 0.2)
  expect_identical(p$stats$truncated, 0)
})

# Loops of a function are frames between the function and what the body
# calls, in the AST interpreter and in byte code.
for (mode in c("ast", "bytecode", "jit")) {
  test_that(paste0("loops are frames: for, while, repeat and nested (", mode, ")"), {
    make <- function(compile) {
      in_for <- function(t) r_a(t)
      in_while <- function(t) r_a(t)
      in_repeat <- function(t) r_a(t)
      in_nested <- function(t) r_a(t)
      maybe_cmp(function(t) {
        for (i in 1:2) in_for(t)
        i <- 0
        while (i < 2) {
          i <- i + 1
          in_while(t)
        }
        repeat {
          in_repeat(t)
          break
        }
        for (j in 1:2) {
          k <- 0
          while (k < 1) {
            k <- k + 1
            in_nested(t)
          }
        }
      }, compile)
    }
    p <- in_mode(mode, function(compile) {
      loops <- make(compile)
      function() winch_profile(loops(0.04), interval = 0.002)
    })
    expect_identical(paths_from(p, A), sort(c(
      path(A, "r_a", "in_for", "[for]", "loops"),
      path(A, "r_a", "in_while", "[while]", "loops"),
      path(A, "r_a", "in_repeat", "[repeat]", "loops"),
      path(A, "r_a", "in_nested", "[while]", "[for]", "loops")
    )))
    expect_gt(seconds_in(p, "in_nested"), 0.05)
    expect_gt(seconds_in(p, "in_repeat"), 0.025)
    # A loop is a function of its own for each R function running one.
    loop_rows <- p$functions[p$functions$kind == "loop", ]
    expect_setequal(loop_rows$name, c("loops [for]", "loops [while]", "loops [repeat]"))
    expect_setequal(loop_rows$label, c("[for]", "[while]", "[repeat]"))
  })

  test_that(paste0("the same call in different loops of one function is under each loop (", mode, ")"), {
    # The three calls `in_loop(t)` are identical expressions: the byte-code
    # compiler stores them once in the constant pool.
    p <- in_mode(mode, function(compile) {
      in_loop <- function(t) r_a(t)
      loops <- maybe_cmp(function(t) {
        for (i in 1:2) in_loop(t)
        repeat {
          in_loop(t)
          break
        }
        for (j in 1:2) {
          while (TRUE) {
            in_loop(t)
            break
          }
        }
      }, compile)
      function() winch_profile(loops(0.05), interval = 0.002)
    })
    expect_identical(paths_from(p, A), sort(c(
      path(A, "r_a", "in_loop", "[for]", "loops"),
      path(A, "r_a", "in_loop", "[repeat]", "loops"),
      path(A, "r_a", "in_loop", "[while]", "[for]", "loops")
    )))
  })
}

test_that("loops of the profiled expression itself are frames", {
  # The expression is evaluated in the test's environment (not the global
  # one), where R runs top-level loops in the AST interpreter at any JIT
  # level; the owner of such a loop is "<top level>".
  for (jit in c(0L, 3L)) {
    old <- compiler::enableJIT(jit)
    p_for <- winch_profile(for (i in 1:3) r_a(0.03), interval = 0.002)
    p_while <- winch_profile(
      {
        i <- 0
        while (i < 3) {
          i <- i + 1
          r_a(0.03)
        }
      },
      interval = 0.002
    )
    p_repeat <- winch_profile(
      repeat {
        r_a(0.06)
        break
      },
      interval = 0.002
    )
    compiler::enableJIT(old)
    expect_identical(paths_from(p_for, A), path(A, "r_a", "[for]"), label = paste("for, JIT", jit))
    expect_identical(paths_from(p_while, A), path(A, "r_a", "[while]"), label = paste("while, JIT", jit))
    expect_identical(paths_from(p_repeat, A), path(A, "r_a", "[repeat]"), label = paste("repeat, JIT", jit))
    expect_identical(p_for$functions$name[p_for$functions$kind == "loop"], "<top level> [for]")
  }
})

test_that("a loop of the profiled expression is a frame at top level of the global environment", {
  # There, with the JIT at level 3 (R's default), R compiles a top-level
  # loop before running it (R_compileAndExecute): no function runs it.
  assign(".winch_test_r_a", r_a, envir = globalenv())
  on.exit(rm(list = intersect(c(".winch_test_r_a", ".winch_test_i"), ls(globalenv(), all.names = TRUE)),
    envir = globalenv()), add = TRUE)
  for (jit in c(0L, 3L)) {
    old <- compiler::enableJIT(jit)
    p <- eval(quote(winch::winch_profile(for (.winch_test_i in 1:3) .winch_test_r_a(0.03), interval = 0.002)),
      globalenv())
    compiler::enableJIT(old)
    expect_identical(paths_from(p, A), path(A, ".winch_test_r_a", "[for]"), label = paste("JIT level", jit))
  }
})

test_that("summaryRprof() and profvis read the Rprof file", {
  out <- tempfile(fileext = ".out")
  p <- winch_profile(outer(), file = out, interval = 0.002)
  lines <- readLines(out)
  expect_identical(lines[[1L]], "sample.interval=2000")
  # One line per sample with frames (R writes no line for an empty sample).
  with_frames <- sum(p$stacks$count[lengths(p$stacks$locations) > 0L])
  expect_length(lines, 1L + with_frames)

  s <- summaryRprof(out)
  expect_equal(s$sampling.time, with_frames * p$interval)
  total <- stats::setNames(s$by.total$total.time, gsub('"', "", rownames(s$by.total), fixed = TRUE))
  expect_true(all(c(A, B, CALL, "r_a", "r_b", "cb", "outer") %in% names(total)))
  # Nearly every sample is under `outer` (a sample may land in the profiler
  # starting or stopping: see "the profiler's own frames" below).
  expect_gte(total[["outer"]], 0.95 * s$sampling.time)
  expect_equal(total[[A]], seconds_in(p, A))
  expect_equal(total[[B]], seconds_in(p, B))
  expect_equal(total[["cb"]], seconds_in(p, "cb"))

  skip_if_not_installed("profvis")
  parse_rprof <- getFromNamespace("parse_rprof", "profvis")
  pv <- parse_rprof(out)
  expect_equal(pv$interval, 2)
  expect_identical(max(pv$prof$time), length(lines) - 1L)
  expect_true(all(c(A, B, CALL, "r_a", "r_b", "cb", "outer") %in% pv$prof$label))
  # profvis's depth counts from the outermost frame: `outer` is depth 1 in
  # (nearly) every sample.
  expect_gte(mean(pv$prof$label[pv$prof$depth == 1L] == "outer"), 0.95)
})

test_that("R frames are labelled as Rprof() labels them", {
  # An R-only workload: each labelled function spins in R code for about
  # 0.1 s of CPU, and calls no other closure but spin().
  spin <- function(n) {
    x <- 0
    for (i in seq_len(n)) x <- x + i
    x
  }
  spin(1e4) # compiled by the JIT, if it is on, before timing
  took <- system.time(spin(2e5))[["user.self"]]
  n <- max(2e4, round(2e5 * 0.1 / max(took, 0.005)))
  f_plain <- function() spin(n)
  obj <- list(f = function() spin(n))
  x <- list(f = function() spin(n))
  workload <- function() {
    f_plain()
    base::lapply(1L, function(i) spin(n))
    obj$f()
    x[["f"]]()
    (function() spin(n))()
  }
  workload() # compiled by the JIT, if it is on, before either profiler runs

  rprof_out <- tempfile()
  Rprof(rprof_out, interval = 0.01) # 10 ms: the minimum on Linux since R 4.3
  workload()
  Rprof(NULL)
  winch_out <- tempfile()
  p <- winch_profile(workload(), file = winch_out, interval = 0.002, loops = FALSE)

  # Labels of Rprof's samples, innermost first, up to `workload` (Rprof's
  # samples also hold its caller's frames). R writes x[["f"]] with its
  # quotes, so tokens end at a quote followed by a space.
  tokens <- function(line) {
    t <- regmatches(line, gregexpr('"(.*?)" ', line))[[1L]]
    substr(t, 2L, nchar(t) - 2L)
  }
  rprof_samples <- lapply(readLines(rprof_out)[-1L], tokens)
  rprof_samples <- lapply(Filter(function(s) "workload" %in% s, rprof_samples), function(s) {
    s[seq_len(match("workload", s))]
  })
  rprof_labels <- unique(unlist(rprof_samples))
  # While it profiles, R gives builtins (primitives such as seq_len, and
  # builtin .Internal()s) a context of their own, so Rprof() shows them;
  # winch samples R's ordinary contexts, of closures (and of dispatch), so
  # it shows R frames only where R has them without profiling.
  is_builtin <- function(label) {
    f <- get0(label, envir = baseenv(), mode = "function", inherits = FALSE)
    (is.primitive(f) && typeof(f) == "builtin") ||
      (make.names(label) == label && .Internal(is.builtin.internal(as.name(label))))
  }
  rprof_closures <- rprof_labels[!vapply(rprof_labels, is_builtin, NA)]

  winch_r <- unique(unlist(lapply(stack_labels(p), function(s) {
    s[s %in% p$functions$label[p$functions$kind == "r"]]
  })))
  forms <- c("f_plain", "base::lapply", "FUN", "obj$f", 'x[["f"]]', "<Anonymous>", "spin", "workload")
  expect_setequal(rprof_closures, forms)
  expect_setequal(winch_r, rprof_closures)
  # In the file, the quotes of x[["f"]] become underscores (profvis cannot
  # read quotes inside labels); every other R label is written as is.
  # (Native labels start with "/".)
  winch_file <- unique(unlist(lapply(readLines(winch_out)[-1L], tokens)))
  winch_file <- winch_file[!startsWith(winch_file, "/")]
  expect_setequal(winch_file, gsub('"', "_", winch_r, fixed = TRUE))
  expect_true('x[[_f_]]' %in% winch_file)
})

# lines = TRUE: an R file sourced with keep.source = TRUE that calls the
# fixture (compiled with -g) from known lines.
for (mode in c("ast", "bytecode")) {
  test_that(paste0("lines = TRUE gives the C line of a native hot spot and the R lines (", mode, ")"), {
    src <- tempfile(fileext = ".R")
    writeLines(c(
      "hot <- function(t) {",
      "  x <- 1",
      "  .Call(\"burn_a\", t, PACKAGE = \"wtest_burn\") # line 3",
      "}",
      "caller <- function(t) {",
      "  hot(t) # line 6",
      "}"
    ), src)
    old <- compiler::enableJIT(0L)
    on.exit(compiler::enableJIT(old), add = TRUE)
    e <- new.env()
    sys.source(src, envir = e, keep.source = TRUE)
    if (mode == "bytecode") {
      e$hot <- compiler::cmpfun(e$hot)
      e$caller <- compiler::cmpfun(e$caller)
    }
    caller <- e$caller
    out <- tempfile(fileext = ".out")
    p <- winch_profile(caller(0.2), file = out, interval = 0.002, lines = TRUE)
    hot_line <- marker_line("burn.c", "hot_a")

    # The profile object: burn_a's hot spot at its line of burn.c.
    c_file <- match(normalizePath(bl$source), normalizePath(p$files, mustWork = FALSE))
    expect_false(is.na(c_file))
    fa <- match(A, p$functions$label)
    at <- p$lines[p$lines$`function` == fa & p$lines$location %in% which(p$locations$address != "0x0"), ]
    expect_true(hot_line %in% at$line[at$file == c_file])

    # The file: header, #File lines for the C and the R file, and samples
    # `C#L "burn_a" R#3 "hot" R#6 "caller"`: the line running in burn_a,
    # then for each frame the line of its caller it was called from.
    lines <- readLines(out)
    expect_identical(lines[[1L]], "line profiling: sample.interval=2000")
    files <- lines[startsWith(lines, "#File ")]
    nums <- sub("^#File ([0-9]+): .*$", "\\1", files)
    paths <- normalizePath(sub("^#File [0-9]+: ", "", files), mustWork = FALSE)
    cn <- nums[paths == normalizePath(bl$source)]
    rn <- nums[paths == normalizePath(src)]
    expect_length(cn, 1L)
    expect_length(rn, 1L)
    samples <- lines[-1L][!startsWith(lines[-1L], "#")]
    # Nearly all of burn_a's self time is on its hot line.
    self_a <- samples[grepl(paste0('^([0-9]+#[0-9]+ )?"', A, '"'), samples)]
    in_a <- samples[startsWith(samples, paste0(cn, "#", hot_line, " \"", A, "\""))]
    expect_gt(length(self_a), 50)
    expect_gt(length(in_a), 0.8 * length(self_a))
    expect_identical(
      unique(in_a),
      sprintf('%s#%d "%s" %s#3 "hot" %s#6 "caller" ', cn, hot_line, A, rn, rn)
    )
  })
}

test_that("go tool pprof reads the pprof file, with R and native frames in one call graph", {
  skip_if(!nzchar(Sys.which("go")), "go is not on the PATH (Debian: golang-go)")
  p <- winch_profile(outer(), interval = 0.002)
  pb <- tempfile(fileext = ".pb.gz")
  res <- withVisible(winch_write_pprof(p, pb))
  expect_identical(res$value, pb)
  expect_false(res$visible)

  top <- run_pprof(c("-top", pb))
  expect_identical(attr(top, "status"), 0L, info = paste(top, collapse = "\n"))
  fn <- function(x) sub("^.* ", "", trimws(x))
  rows <- fn(top[grepl("%", top, fixed = TRUE) & !grepl("total", top, fixed = TRUE)])
  expect_true(all(c("burn_a", "burn_b", "burn_call", "r_a", "r_b", "cb", "outer") %in% rows))
  expect_true(any(grepl("Type: cpu", top, fixed = TRUE)))

  traces <- run_pprof(c("-traces", pb))
  expect_identical(attr(traces, "status"), 0L, info = paste(traces, collapse = "\n"))
  # Traces are blocks separated by lines of dashes; the first line of a
  # block has the time and the leaf, the next ones the callers.
  sep <- grepl("^-+\\+-+$", traces)
  block <- cumsum(sep)
  stacks <- lapply(split(traces[!sep], block[!sep])[-1L], fn)
  stacks <- unique(vapply(stacks, paste, "", collapse = " < "))
  expect_true(path("burn_b", "r_b", "cb", "burn_call", "outer") %in% stacks)
  expect_true(path("burn_a", "r_a", "outer") %in% stacks)
})

# The writers read the profile from a named list (profile_parts(), read by
# from_r() in src/rust/src/profile.rs): every field by its name.
test_that("the writers read the profile's fields by name: order is free, a missing field is a clear error", {
  p <- winch_profile(outer(), interval = 0.002)
  write <- function(parts, format = "rprof") {
    out <- tempfile()
    winch:::check_result(winch:::rs_profile_write(parts, out, format, FALSE))
    readBin(out, "raw", file.size(out))
  }
  parts <- winch:::profile_parts(p)
  expect_named(parts, c(
    "event", "interval", "start", "duration", "functions", "locations", "lines",
    "stacks", "files", "modules"
  ))
  # The same bytes whatever the order of the fields (and of the columns).
  shuffled <- rev(parts)
  shuffled$functions <- rev(shuffled$functions)
  shuffled$modules <- rev(shuffled$modules)
  for (format in c("rprof", "pprof")) {
    expect_identical(write(shuffled, format), write(parts, format))
  }
  # A field that is missing, misnamed or not where it belongs: an error of
  # class winch_error_bad_argument that names it, and nothing is written.
  expect_missing <- function(parts, field) {
    out <- tempfile()
    err <- tryCatch(
      winch:::check_result(winch:::rs_profile_write(parts, out, "rprof", FALSE)),
      error = function(e) e
    )
    expect_s3_class(err, "winch_error_bad_argument")
    expect_identical(conditionMessage(err), sprintf("`profile` has no field `%s`", field))
    expect_false(file.exists(out))
  }
  no_event <- parts
  no_event$event <- NULL
  expect_missing(no_event, "event")
  misnamed <- parts
  names(misnamed)[names(misnamed) == "stacks"] <- "stack"
  expect_missing(misnamed, "stacks")
  no_column <- parts
  no_column$lines$`function` <- NULL
  expect_missing(no_column, "lines$function")
  unnamed <- unname(parts)
  expect_missing(unnamed, "event")
  # A field of the wrong type names its path too.
  wrong <- parts
  wrong$functions$label <- 1
  expect_error(write(wrong), "`functions$label` must be a character vector", fixed = TRUE,
    class = "winch_error_bad_argument"
  )
  flat <- parts
  flat$modules <- "x"
  expect_error(write(flat), "`modules` must be a list", fixed = TRUE, class = "winch_error_bad_argument")
  expect_error(write(list()), "`profile` has no field `event`", fixed = TRUE, class = "winch_error_bad_argument")
  expect_error(write(1), "`profile` must be a list", fixed = TRUE, class = "winch_error_bad_argument")
})

test_that("event = \"elapsed\" samples sleeping, event = \"cpu\" does not", {
  work <- function() {
    Sys.sleep(0.25)
    r_a(0.1)
  }
  pe <- winch_profile(work(), interval = 0.005, event = "elapsed")
  pc <- winch_profile(work(), interval = 0.005, event = "cpu")
  expect_identical(pe$event, "elapsed")
  expect_identical(pc$event, "cpu")
  # Elapsed: the sleep is sampled (at least 80% of it; a busy machine can
  # only make it longer), and so is the burn (wall time >= CPU time).
  expect_gte(seconds_in(pe, "Sys.sleep"), 0.2)
  expect_lt(seconds_in(pe, "Sys.sleep"), 1)
  expect_gte(seconds_in(pe, A), 0.08)
  # CPU: sleeping costs no CPU time; the burn is sampled as it burned.
  expect_lte(seconds_in(pc, "Sys.sleep"), 0.015)
  expect_lt(abs(seconds_in(pc, A) - 0.1), 0.025)
  expect_output(print(pe), "samples of elapsed time")
  expect_output(print(pc), "samples of CPU time of R's main thread")
})

test_that("bad arguments are errors before `expr` runs, and the session goes on", {
  ran <- FALSE
  bad <- list(
    list(interval = 0), list(interval = -0.01), list(interval = NA), list(interval = NA_real_),
    list(interval = "0.01"), list(interval = TRUE), list(interval = c(0.01, 0.02)),
    list(interval = numeric()), list(interval = Inf), list(interval = 0.0005), list(interval = 0.00099),
    list(event = "wall"), list(event = NA_character_), list(event = character()), list(event = 1),
    list(file = file.path(tempfile("no-such-dir-"), "prof.out")), list(file = NA_character_),
    list(file = c("a", "b")), list(loops = NA), list(lines = "yes")
  )
  for (args in bad) {
    what <- paste(deparse(args), collapse = "")
    expect_error(do.call(winch_profile, c(list(quote(ran <- TRUE)), args)),
      class = "winch_error_bad_argument", label = what
    )
    expect_false(ran, label = what)
  }
  expect_error(winch_profile(ran <- TRUE, unknown = 1))
  expect_false(ran)

  p <- winch_profile(r_a(0.01), interval = 0.002)
  for (f in list(winch_write_rprof, winch_write_pprof)) {
    expect_error(f(list(), tempfile()), class = "winch_error_bad_argument")
    expect_error(f(unclass(p), tempfile()), class = "winch_error_bad_argument")
    expect_error(f(p, file.path(tempfile("no-such-dir-"), "out")), class = "winch_error_bad_argument")
  }
  expect_error(winch_rprof(NULL), class = "winch_error_bad_argument")

  # The minimum interval works.
  p <- winch_profile(r_a(0.05), interval = 0.001)
  expect_gt(seconds_in(p, A), 0.03)
})

test_that("a profile cannot start while another one or Rprof() runs", {
  ran <- FALSE
  inner <- NULL
  p <- winch_profile(
    {
      r_a(0.05)
      inner <- tryCatch(winch_profile(ran <- TRUE), error = identity)
      r_a(0.05)
    },
    interval = 0.002
  )
  expect_s3_class(inner, "winch_error_busy")
  expect_false(ran)
  # The outer profile went on after the refusal.
  expect_gt(seconds_in(p, A), 0.07)

  out <- tempfile()
  winch_rprof(out, interval = 0.002)
  err <- tryCatch(winch_profile(ran <- TRUE), error = identity)
  err2 <- tryCatch(winch_rprof(tempfile()), error = identity)
  q <- winch_rprof(NULL)
  expect_s3_class(err, "winch_error_busy")
  expect_s3_class(err2, "winch_error_busy")
  expect_false(ran)
  expect_s3_class(q, "winch_profile")

  events <- if (getRversion() >= "4.4.0") c("cpu", "elapsed") else "default"
  for (event in events) {
    rp <- tempfile()
    if (event == "default") Rprof(rp, interval = 0.01) else Rprof(rp, interval = 0.01, event = event)
    err <- tryCatch(winch_profile(ran <- TRUE), error = identity)
    err2 <- tryCatch(winch_rprof(tempfile()), error = identity)
    Rprof(NULL)
    if (!inherits(err2, "error")) winch_rprof(NULL)
    what <- sprintf("Rprof(event = \"%s\") running:", event)
    expect_true(inherits(err, "winch_error_busy"), label = paste(what, "winch_profile() is a winch_error_busy"))
    expect_true(inherits(err2, "winch_error_busy"), label = paste(what, "winch_rprof() is a winch_error_busy"))
    expect_false(ran, label = paste(what, "`expr` ran"))
  }
  # And afterwards profiles work again.
  p <- winch_profile(r_a(0.05), interval = 0.002)
  expect_gt(seconds_in(p, A), 0.03)
})

test_that("an error in `expr` propagates with its class and stops the profiler", {
  err <- tryCatch(
    winch_profile({
      r_a(0.05)
      stop(errorCondition("boom", class = "winch_test_error"))
    }, interval = 0.002),
    error = identity
  )
  expect_s3_class(err, "winch_test_error")
  expect_identical(conditionMessage(err), "boom")
  expect_false(winch:::profile_active())

  # An error raised in a callback unwinds through native frames (burn_call).
  thrower <- function() {
    r_b(0.05)
    stop(errorCondition("deep", class = "winch_test_error"))
  }
  err <- tryCatch(
    winch_profile(.Call("burn_call", quote(thrower), environment(), PACKAGE = "wtest_burn"), interval = 0.002),
    error = identity
  )
  expect_s3_class(err, "winch_test_error")
  expect_false(winch:::profile_active())

  # A new profile starts, and holds nothing of the abandoned ones.
  p <- winch_profile(r_a(0.1), interval = 0.002)
  expect_identical(paths_from(p, A), path(A, "r_a"))
  expect_false(any(c(B, "thrower", CALL) %in% p$functions$label))
  expect_gt(seconds_in(p, A), 0.07)
})

test_that("an interrupt in `expr` stops the profiler, and the next profile works", {
  res <- tryCatch(
    winch_profile(
      {
        r_a(0.02)
        tools::pskill(Sys.getpid(), tools::SIGINT)
        Sys.sleep(2)
        "not interrupted"
      },
      interval = 0.002
    ),
    interrupt = function(e) "interrupted"
  )
  expect_identical(res, "interrupted")
  expect_false(winch:::profile_active())
  p <- winch_profile(r_a(0.05), interval = 0.002)
  expect_identical(paths_from(p, A), path(A, "r_a"))
})

test_that("fork children (mclapply) are not sampled, do not crash, and the parent's profile goes on", {
  skip_if_not_installed("parallel")
  loadNamespace("parallel")
  before <- function() r_a(0.15)
  after <- function() r_a(0.15)
  res <- NULL
  p <- winch_profile(
    {
      before()
      res <- parallel::mclapply(1:2, function(i) r_child(0.2), mc.cores = 2)
      after()
    },
    interval = 0.002
  )
  # The children ran to the end and burned what they were asked to.
  expect_length(res, 2L)
  expect_true(all(vapply(res, is.numeric, NA)))
  expect_true(all(unlist(res) >= 0.2))
  # burn_child runs only in the children: no sample of the parent's
  # profile can be in it, nor in the R function around it.
  expect_false(CHILD %in% p$functions$label)
  expect_false("r_child" %in% p$functions$label)
  # The parent was sampled before and after the fork.
  expect_gt(seconds_in(p, "before"), 0.1)
  expect_gt(seconds_in(p, "after"), 0.1)
  expect_identical(paths_from(p, A), sort(c(path(A, "r_a", "before"), path(A, "r_a", "after"))))
  # Only the parent's own CPU time is in the profile.
  expect_lt(sum(p$stacks$count) * p$interval, 0.3 + 0.15)
})

test_that("the profiler's own frames are not in the profile, even when stopping is slow", {
  # A sample can land after `expr` has returned, while winch_profile()
  # stops the timer (in about 1 of 100 profiles of a few ms). To make that
  # certain, check_result(), which the stop runs through, burns 20 ms of
  # CPU (in burn_b) each time it is called; it runs before sampling starts
  # and after it stops too, where nothing is sampled.
  suppressMessages(capture.output(trace("check_result", where = asNamespace("winch"), print = FALSE,
    tracer = quote(.Call("burn_b", 0.02, PACKAGE = "wtest_burn"))
  )))
  on.exit(suppressMessages(capture.output(untrace("check_result", where = asNamespace("winch")))), add = TRUE)
  p <- winch_profile(r_a(0.05), interval = 0.002)
  own <- ls(asNamespace("winch"), all.names = TRUE)
  labels <- p$functions$label
  expect_identical(intersect(labels, c(own, ".doTrace")), character())
  expect_identical(labels[startsWith(labels, "/winch.so::")], character())
  expect_false(B %in% labels)
  expect_identical(paths_from(p, A), path(A, "r_a"))
  # The samples taken while it stopped were counted, not kept.
  expect_gt(summary(p)$outside, 0)
})

test_that("print(), summary() and plot() describe the profile", {
  p <- winch_profile(outer(), interval = 0.002)
  total <- sum(p$stacks$count)

  out <- capture.output(res <- withVisible(print(p)))
  expect_false(res$visible)
  expect_identical(res$value, p)
  expect_match(out[[1L]], sprintf(
    "^<winch_profile> %d samples of CPU time of R's main thread, every 2.0 ms: [0-9.]+ m?s sampled over [0-9.]+ m?s$",
    total
  ))
  expect_true(any(grepl(B, out, fixed = TRUE)))

  s <- summary(p)
  expect_s3_class(s, "summary.winch_profile")
  expect_identical(s$samples, total)
  expect_lte(s$handler_runs, total) # a run stands for the intervals that expired
  expect_identical(s$truncated, 0)
  expect_identical(s$dropped, 0)
  expect_equal(s$distinct_stacks, length(p$stacks$count))

  f <- s$by_function
  expect_named(f, c("label", "kind", "module", "self", "total"))
  expect_setequal(f$label, p$functions$label)
  # Every sample has one innermost frame: self times add up to the total.
  expect_equal(sum(f$self), total * p$interval)
  expect_equal(f$total[f$label == B], seconds_in(p, B))
  expect_gte(f$total[f$label == "outer"], 0.9 * total * p$interval)
  expect_identical(f$kind[f$label == "outer"], "r")
  expect_identical(f$kind[f$label == A], "native")
  expect_identical(f$module[f$label == A], "wtest_burn.so")
  expect_false(is.unsorted(-f$self))

  m <- s$by_module
  expect_named(m, c("module", "self", "total"))
  burn <- basename(m$module) == "wtest_burn.so"
  # Nearly every sample is under burn_call or burn_a.
  expect_gte(m$total[burn], 0.9 * total * p$interval)
  expect_gt(m$self[burn], 0.2)

  u <- s$usage
  expect_named(u, c(
    "user", "system", "max_rss", "minor_faults", "major_faults", "block_input", "block_output",
    "voluntary_switches", "involuntary_switches", "gc_count", "gc_time"
  ), ignore.order = TRUE)
  expect_gte(u$user + u$system, 0.27) # 0.3 s burned, CPU time measured by the burns
  expect_gt(u$max_rss, 0)

  k <- s$cost
  expect_named(k, c("handler_total", "handler_median", "handler_p99", "share"))
  expect_gt(k$handler_median, 0)
  expect_lte(k$handler_median, k$handler_p99)
  expect_lt(k$handler_median, p$interval)
  expect_gt(k$handler_total, 0)
  expect_gt(k$share, 0)
  expect_lt(k$share, 0.5)

  out <- capture.output(res <- withVisible(print(s)))
  expect_false(res$visible)
  expect_true(all(c("By function:", "By native module:", "Resource use over the run:") %in% out))
  expect_true(any(startsWith(out, "Profiler's own cost:")))

  png(tempfile(fileext = ".png"))
  on.exit(grDevices::dev.off(), add = TRUE)
  res <- withVisible(plot(p))
  expect_false(res$visible)
  expect_identical(res$value, p)
  empty <- winch_profile(NULL)
  expect_identical(sum(empty$stacks$count), 0)
  expect_invisible(plot(empty))
  expect_output(print(empty), "<winch_profile> 0 samples")
})

test_that("winch_rprof() starts and stops by hand and writes the file", {
  out <- tempfile(fileext = ".out")
  expect_null(winch_rprof(out, interval = 0.002))
  r_a(0.2)
  p <- winch_rprof(NULL)
  expect_s3_class(p, "winch_profile")
  expect_false(winch:::profile_active())
  # Started by hand, the profile holds the caller's frames too.
  expect_true(all(startsWith(paths_from(p, A), path(A, "r_a"))))
  expect_lt(abs(seconds_in(p, A) - 0.2), 0.03)
  s <- summaryRprof(out)
  expect_equal(s$sampling.time, sum(p$stacks$count[lengths(p$stacks$locations) > 0]) * p$interval)
  expect_true(paste0('"', A, '"') %in% rownames(s$by.self))

  # Writing again gives the same file; the writers return the path invisibly.
  again <- tempfile(fileext = ".out")
  res <- withVisible(winch_write_rprof(p, again))
  expect_identical(res$value, again)
  expect_false(res$visible)
  expect_identical(readLines(again), readLines(out))
  res <- withVisible(winch_write_pprof(p, tempfile(fileext = ".pb.gz")))
  expect_false(res$visible)
  expect_true(file.exists(res$value))
  # The pprof file is gzipped.
  con <- file(res$value, "rb")
  magic <- readBin(con, "raw", 2L)
  close(con)
  expect_identical(magic, as.raw(c(0x1f, 0x8b)))
})

# An interrupt (Ctrl-C) inside `expr` should stop the profiler as an error
# does (profile_abandon() runs on exit), but an interrupt cannot be raised
# reliably from a test, so it is not tested here.
