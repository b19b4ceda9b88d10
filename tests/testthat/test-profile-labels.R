skip_if_not(winch_available(), "native unwinding is not available on this platform")

# How frames are labelled: loops as frames, R frames as Rprof() labels them,
# source lines of R and native frames (lines = TRUE).

bl <- profile_fixture()

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
      path(A, "r_a", "in_for", "loops[for]", "loops"),
      path(A, "r_a", "in_while", "loops[while]", "loops"),
      path(A, "r_a", "in_repeat", "loops[repeat]", "loops"),
      path(A, "r_a", "in_nested", "loops[while]", "loops[for]", "loops")
    )))
    expect_gt(seconds_in(p, "in_nested"), 0.05)
    expect_gt(seconds_in(p, "in_repeat"), 0.025)
    # A loop is a function of its own for each R function running one.
    loop_rows <- p$functions[p$functions$kind == "loop", ]
    expect_setequal(loop_rows$name, c("loops[for]", "loops[while]", "loops[repeat]"))
    expect_setequal(loop_rows$label, c("loops[for]", "loops[while]", "loops[repeat]"))
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
      path(A, "r_a", "in_loop", "loops[for]", "loops"),
      path(A, "r_a", "in_loop", "loops[repeat]", "loops"),
      path(A, "r_a", "in_loop", "loops[while]", "loops[for]", "loops")
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
    expect_identical(p_for$functions$name[p_for$functions$kind == "loop"], "[for]")
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
  # winch labels every form as Rprof() does. Two samplings of one workload
  # may differ in the briefest closures (lapply's match.fun): any other
  # label winch shows must be the name of a base closure, as R writes it.
  expect_true(all(forms %in% winch_r), label = paste(winch_r, collapse = ", "))
  extra <- setdiff(winch_r, forms)
  is_closure <- function(label) is.function(f <- get0(label, envir = baseenv(), inherits = FALSE)) && !is.primitive(f)
  expect_true(all(vapply(extra, is_closure, NA)), label = paste(extra, collapse = ", "))
  # In the file, the quotes of x[["f"]] become underscores (profvis cannot
  # read quotes inside labels); every other R label is written as is.
  # (Native labels start with "/"; `[kernel]`, where a sample stood for the
  # kernel's time, is not an R label.)
  winch_file <- unique(unlist(lapply(readLines(winch_out)[-1L], tokens)))
  winch_file <- winch_file[!startsWith(winch_file, "/") & winch_file != "[kernel]"]
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

test_that("samples in PLT stubs keep every frame above them, and name the stub after its target", {
  lib <- compile_clib("wtest_plt", "plt.c", flags = "-g -O1 -fno-builtin -fplt")
  r_plt <- function(t) .Call("plt_burn", t, PACKAGE = "wtest_plt")
  r_plt(0.001) # compiled by the JIT now, not while profiled
  loop <- "/wtest_plt.so::plt_loop"
  # How often a timer lands on a stub's one instruction varies from run to
  # run (a few in a hundred samples, or none): profiles until some do.
  stubs <- character()
  for (try in 1:8) {
    p <- winch_profile(r_plt(0.25), interval = 0.001)
    stacks <- stack_labels(p)
    # Every sample in the library keeps its R caller, and every sample in a
    # stub the loop too: none stops in a stub. (A sample may land in R's
    # code around the .Call, or in the .Call's entry around the loop.)
    in_lib <- vapply(stacks, function(s) any(startsWith(s, "/wtest_plt.so::")), NA)
    expect_true(all(vapply(stacks[in_lib], function(s) "r_plt" %in% s, NA)))
    in_stub <- vapply(stacks, function(s) any(endsWith(s, "@plt")), NA)
    expect_true(all(vapply(stacks[in_stub], function(s) all(c(loop, "r_plt") %in% s), NA)))
    # No frame is labelled as the start of the PLT section.
    expect_false(any(grepl("^/wtest_plt\\.so::\\+0x", unlist(stacks))))
    stubs <- unique(unlist(lapply(stacks, function(s) grep("@plt$", s, value = TRUE))))
    if (length(stubs)) break
  }
  skip_if(!length(stubs), "no sample landed in a PLT stub in 8 profiles on this machine")
  expect_true(all(stubs %in% c("/wtest_plt.so::labs@plt", "/wtest_plt.so::llabs@plt")), info = paste(stubs, collapse = " "))
  # A stub is its caller's callee: right under plt_loop.
  for (s in stacks) {
    i <- match(stubs, s)
    i <- i[!is.na(i)]
    if (length(i)) expect_identical(s[[i[[1L]] + 1L]], loop)
  }
})

test_that("libr = TRUE keeps R's own compiled code, but not its interpreter", {
  set.seed(1)
  X <- matrix(stats::rnorm(4e5), ncol = 40)
  y <- stats::rnorm(nrow(X))
  fit <- function() for (i in 1:40) stats::lm.fit(X, y)
  p <- winch_profile(fit(), interval = 0.002, libr = TRUE)
  labels <- unique(unlist(stack_labels(p)))
  libr <- grep("^/libR\\.so::", labels, value = TRUE)
  # R's QR decomposition (Fortran in R's library) under lm.fit's C code.
  expect_true(any(grepl("^/libR\\.so::dqrdc2_$|^/libR\\.so::dqrls_$", libr)), info = paste(libr, collapse = " "))
  # Never the interpreter's machinery, never an unnamed frame of libR.
  expect_false(any(grepl("::(Rf_eval|Rf_applyClosure|bcEval|R_execClosure)$", labels)))
  expect_false(any(grepl("^/libR\\.so::\\+0x", labels)))
  p0 <- winch_profile(fit(), interval = 0.002)
  expect_false(any(grepl("^/libR\\.so::", unique(unlist(stack_labels(p0))))))
  expect_error(winch_profile(1, libr = NA), class = "winch_error_bad_argument")
})

test_that("garbage collection is a <GC> frame under the code that allocated, with R's own share of it", {
  work <- function() for (i in 1:150) x <- lapply(1:2000, function(i) numeric(50))
  work()
  gc0 <- gc.time()
  p <- winch_profile(work(), interval = 0.002)
  gc1 <- gc.time() - gc0
  stacks <- stack_labels(p)
  in_gc <- vapply(stacks, function(s) "<GC>" %in% s, NA)
  share <- sum(p$stacks$count[in_gc]) / sum(p$stacks$count)
  # Innermost, under the R code that allocated.
  # (Innermost but for the collector's kernel time under it.)
  expect_true(all(vapply(stacks[in_gc], function(s) own_labels(s)[[1L]] == "<GC>" && "work" %in% s, NA)))
  # The share of the run's CPU time R itself timed in its collector
  # (gc.time()'s user and system time over the same run; its elapsed time,
  # the profile's stats$gc_time, is larger on a busy machine, where the
  # collector waits for a core; Rprof(gc.profiling = TRUE) agrees on a run
  # of its own, but heap growth makes two runs collect differently).
  expect_gte(p$stats$gc_time, 0)
  truth <- (gc1[[1L]] + gc1[[2L]]) / (sum(p$stacks$count) * p$interval)
  expect_gt(truth, 0.05)
  expect_lt(abs(share - truth), 0.1)
  # In the Rprof file, with Rprof's own label.
  out <- tempfile()
  on.exit(unlink(out), add = TRUE)
  winch_write_rprof(p, out)
  expect_true(any(grepl("\"<GC>\"", readLines(out), fixed = TRUE)))
  expect_true("\"<GC>\"" %in% rownames(summaryRprof(out)$by.self))
  # gc = FALSE folds it into the code that allocated.
  p0 <- winch_profile(work(), interval = 0.002, gc = FALSE)
  expect_false("<GC>" %in% unlist(stack_labels(p0)))
  expect_error(winch_profile(1, gc = "yes"), class = "winch_error_bad_argument")
})

test_that("a loop belongs to the function whose body holds it: none under a dispatching primitive", {
  d <- data.frame(a = 1:10)
  f <- compiler::cmpfun(function() for (i in 1:2e4) d[1, 1])
  f()
  p <- winch_profile(f(), interval = 0.002)
  stacks <- stack_labels(p)
  loops <- unique(unlist(lapply(stacks, function(s) grep("\\[(for|while|repeat|loop)\\]$", s, value = TRUE))))
  # `[.data.frame`'s own loops may show (its body has some); `[`, a
  # primitive, has no body and so no loop.
  expect_false(any(startsWith(loops, "[[")), info = paste(loops, collapse = " "))
  # f's loop once per stack, right under f.
  for (s in stacks[vapply(stacks, function(s) "[.data.frame" %in% s, NA)]) {
    expect_identical(sum(s == "f[for]"), 1L)
    expect_identical(s[[match("f", s) - 1L]], "f[for]")
  }
})

test_that("a loop in a promise's code is named after the function that made the promise", {
  d <- data.frame(a = 1:10)
  h <- compiler::cmpfun(function(expr) expr)
  g <- compiler::cmpfun(function() h({
    for (i in 1:2e4) d[1, 1]
  }))
  g()
  p <- winch_profile(g(), interval = 0.002)
  stacks <- stack_labels(p)
  loops <- unique(unlist(lapply(stacks, function(s) grep("\\[for\\]$", s, value = TRUE))))
  expect_identical(loops, "g[for]")
  # Forced inside h: under h, which runs it.
  with_loop <- stacks[vapply(stacks, function(s) "g[for]" %in% s, NA)]
  expect_gt(length(with_loop), 0L)
  expect_true(all(vapply(with_loop, function(s) s[[match("g[for]", s) + 1L]] == "h", NA)))
})

test_that("a loop in a promise is shown where it runs and named after the code it is in", {
  # `h(<loop>)` at top level: the loop is no function's (R's JIT compiles
  # it at level 3, with no record of its own; the AST runs it at level 0),
  # and it runs inside h: `[for]` under h. Nothing is called in the loop:
  # no record of a callee tells where it is.
  on.exit(rm(list = intersect(".winch_test_h", ls(globalenv(), all.names = TRUE)), envir = globalenv()),
    add = TRUE)
  assign(".winch_test_h", function(expr) expr, envir = globalenv())
  for (jit in c(0L, 3L)) {
    old <- compiler::enableJIT(jit)
    # (Byte code runs the loop about ten times as fast as the AST.)
    n <- if (jit > 0L) 3e7 else 3e6
    p <- eval(bquote(winch::winch_profile(.winch_test_h({
      x <- 0
      for (i in 1:.(n)) x <- x + i
    }), interval = 0.002)), globalenv())
    compiler::enableJIT(old)
    stacks <- stack_labels(p)
    in_loop <- vapply(stacks, function(s) "[for]" %in% s, NA)
    expect_gt(sum(p$stacks$count[in_loop]), sum(p$stacks$count) / 2, label = paste("samples in the loop, JIT", jit))
    expect_true(all(vapply(stacks[in_loop], function(s) s[[match("[for]", s) + 1L]] == ".winch_test_h", NA)),
      label = paste("[for] under h, JIT", jit))
    # (The JIT compiler's own loops may show while it compiles the loop.)
    loops <- unique(unlist(lapply(stacks, function(s) grep("\\[for\\]$", s, value = TRUE))))
    expect_false(any(grepl("winch_test_h", loops, fixed = TRUE)), label = paste("loops, JIT", jit))
  }
  # The AST interpreter (JIT off) runs a promise made in k in k's
  # environment: k's loop, under g.
  old <- compiler::enableJIT(0L)
  on.exit(compiler::enableJIT(old), add = TRUE)
  g <- function(expr) expr
  k <- function() g({
    x <- 0
    for (i in 1:3e6) x <- x + i
  })
  p <- winch_profile(k(), interval = 0.002)
  stacks <- stack_labels(p)
  loops <- unique(unlist(lapply(stacks, function(s) grep("\\[for\\]$", s, value = TRUE))))
  expect_identical(loops, "k[for]")
  with_loop <- stacks[vapply(stacks, function(s) "k[for]" %in% s, NA)]
  expect_gt(length(with_loop), length(stacks) / 2)
  expect_true(all(vapply(with_loop, function(s) s[[match("k[for]", s) + 1L]] == "g", NA)))
})
