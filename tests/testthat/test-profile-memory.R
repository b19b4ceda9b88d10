skip_if_not(winch_available(), "native unwinding is not available on this platform")

# winch_profile(event = "alloc"): allocations sampled by bytes, with joint
# stacks, and the sampled blocks still allocated at the end. The fixture
# (clib/alloc.c) keeps blocks of known sizes, or allocates and frees them.

alloc_lib <- function() {
  key <- "wtest_alloc"
  if (is.null(clib_cache[[key]])) {
    lib <- build_clib("wtest_alloc", "alloc.c", flags = "-g -O1", ldflags = "-pthread")
    lib$dll <- dyn.load(lib$path)
    clib_cache[[key]] <- lib
  }
  clib_cache[[key]]
}
alloc_lib()
keep <- function(n, size) .Call("mem_keep", as.integer(n), as.double(size), PACKAGE = "wtest_alloc")
churn <- function(n, size) .Call("mem_churn", as.integer(n), as.double(size), PACKAGE = "wtest_alloc")
release <- function() .Call("mem_release", PACKAGE = "wtest_alloc")
malloc_is_libc <- function() .Call("mem_malloc_is_libc", PACKAGE = "wtest_alloc")
AL <- "/wtest_alloc.so::"

# The bytes of the stacks holding `label` (a frame label), as `column`.
bytes_under <- function(p, label, column = "alloc_bytes") {
  df <- as.data.frame(p)
  hit <- vapply(strsplit(df$stack, ";", fixed = TRUE), function(s) label %in% s, NA)
  sum(df[[column]][hit])
}

test_that("kept and freed blocks: bytes allocated and still held per stack, within sampling error", {
  release()
  work <- function() {
    keep(2000, 4096) # 8 MiB kept
    churn(2000, 4096) # 8 MiB allocated and freed
    invisible()
  }
  p <- winch_profile(work(), event = "alloc", sample_bytes = 32 * 1024)
  on.exit(release(), add = TRUE)
  expect_s3_class(p, "winch_profile")
  expect_identical(p$event, "alloc")
  expect_identical(p$sample_bytes, 32 * 1024)
  mib8 <- 2000 * 4096
  expect_equal(bytes_under(p, paste0(AL, "mem_keep")), mib8, tolerance = 0.25)
  expect_equal(bytes_under(p, paste0(AL, "mem_churn")), mib8, tolerance = 0.25)
  expect_equal(bytes_under(p, paste0(AL, "mem_keep"), "inuse_bytes"), mib8, tolerance = 0.25)
  expect_identical(bytes_under(p, paste0(AL, "mem_churn"), "inuse_bytes"), 0)
  expect_equal(bytes_under(p, paste0(AL, "mem_keep"), "alloc_count"), 2000, tolerance = 0.25)
  # Blocks of one size: as many allocations as their bytes make (counts
  # were once rounded sample by sample, 6 % too high here).
  expect_equal(
    bytes_under(p, paste0(AL, "mem_keep"), "alloc_count"),
    bytes_under(p, paste0(AL, "mem_keep")) / 4096,
    tolerance = 0.002
  )
  # Joint stacks: the native function under the R function that called it.
  df <- as.data.frame(p)
  keep_stacks <- unique(df$stack[grepl("mem_keep", df$stack, fixed = TRUE)])
  expect_true(all(grepl(paste0("work;keep;", AL, "mem_keep$"), keep_stacks)), info = paste(keep_stacks, collapse = "\n"))
  expect_named(df, c("stack", "alloc_bytes", "alloc_count", "inuse_bytes", "inuse_count", "samples", "thread", "process"))
  # The slots are the C library's again.
  expect_true(malloc_is_libc())
})

test_that("R vectors are allocated under the R call that made them", {
  make <- function() numeric(5e6) # 40 MB, one malloc by R
  small <- function() lapply(1:20000, function(i) numeric(100))
  both <- function() {
    x <- make()
    y <- small()
    length(x) + length(y)
  }
  p <- winch_profile(both(), event = "alloc", sample_bytes = 64 * 1024)
  # A large vector is always sampled: its size exactly (with R's header).
  big <- bytes_under(p, "make")
  expect_gte(big, 5e6 * 8)
  expect_lt(big, 5e6 * 8 + 4096)
  # Small ones: about 20000 * (800 bytes and a header) in all.
  expect_equal(bytes_under(p, "small"), 20000 * 848, tolerance = 0.25)
  expect_output(print(p), "samples of allocations")
  expect_output(print(p), "Functions by bytes allocated")
  expect_output(print(summary(p)), "Allocations seen")
})

test_that("a memory profile's parts are the description's, its stacks' columns included", {
  make <- function() numeric(1e6)
  p <- winch_profile(make(), event = "alloc")
  form <- profile_form_description()
  types <- part_types(winch:::profile_parts(p))
  expect_identical(names(types), form$path[form$read_back])
  expect_identical(unname(types), form$type[match(names(types), form$path)])
  made <- part_types(unclass(p))
  columns <- form$path[startsWith(form$path, "stacks$")]
  expect_identical(unname(made[columns]), form$type[match(columns, form$path)])
})

test_that("R's heap is reported before, after and at its most during the run", {
  kept <- NULL
  keep <- function() kept <<- numeric(5e6) # 40 MB still held after
  p <- winch_profile(keep(), event = "alloc")
  h <- summary(p)$r_heap
  expect_named(h, c("before", "after", "peak"))
  expect_equal(h$after - h$before, 4e7, tolerance = 0.05)
  expect_gte(h$peak, h$after)
  # A vector made and dropped: gone after, seen at the collection made
  # while it was held.
  passing <- function() {
    x <- numeric(1e7) # 80 MB
    invisible(gc())
    length(x)
  }
  p <- winch_profile(passing(), event = "alloc")
  h <- summary(p)$r_heap
  expect_lt(abs(h$after - h$before), 4e6)
  expect_gte(h$peak - h$before, 7.6e7)
  expect_output(print(p), "R's heap \\(gc\\(\\)\\): [0-9.]+ MiB before")
  expect_output(print(summary(p)), "at most [0-9.]+ MiB at a collection during the run")
  # CPU profiles collect nothing and report no heap.
  expect_null(summary(winch_profile(NULL))$r_heap)
})

test_that("print() and summary() of a memory profile, as printed", {
  p <- synthetic_memory_profile()
  expect_snapshot(print(p))
  expect_snapshot(print(summary(p)))
})

test_that("while profiling, this library's malloc is the hook; an error in expr restores every slot", {
  seen <- NULL
  p <- winch_profile({
    seen <- malloc_is_libc()
    keep(10, 100)
  }, event = "alloc")
  release()
  expect_false(seen)
  expect_true(malloc_is_libc())
  expect_error(winch_profile({
    keep(10, 100)
    stop("boom")
  }, event = "alloc"), "boom")
  release()
  expect_true(malloc_is_libc())
  expect_false(winch:::profile_active())
})

test_that("an interrupt in expr restores every slot, and the next memory profile works", {
  skip_if_sigint_ignored()
  res <- profile_interrupted(function() keep(10, 100), event = "alloc")
  release()
  expect_identical(res, "interrupted")
  expect_false(winch:::profile_active())
  expect_true(malloc_is_libc())
  p <- winch_profile(churn(100, 1e6), event = "alloc")
  expect_gt(bytes_under(p, paste0(AL, "mem_churn")), 50e6)
})

test_that("summary() lists the largest stacks still allocated at the end", {
  release()
  on.exit(release(), add = TRUE)
  hold <- function() keep(50, 1e6)
  pass <- function() churn(50, 1e6)
  # (At 64 KiB a 1 MB block is sampled with probability 1 - exp(-16): the
  # totals are then exact but for rounding. At the default 512 KiB, 50
  # blocks give estimates with a 5.6 % standard error: a 10 % bound failed
  # about one run in fourteen.)
  p <- winch_profile({
    hold()
    pass()
  }, event = "alloc", sample_bytes = 64 * 1024)
  s <- summary(p)
  expect_identical(s$largest_inuse$stack[[1L]], paste0("hold;keep;", AL, "mem_keep"))
  expect_equal(s$largest_inuse$inuse_bytes[[1L]], 50e6, tolerance = 0.1)
  expect_false(any(grepl("mem_churn", s$largest_inuse$stack, fixed = TRUE)))
  expect_output(print(s), "Largest still allocated at the end")
  mod <- s$by_module[basename(s$by_module$module) == "wtest_alloc.so", ]
  expect_equal(mod$self, 100e6, tolerance = 0.1)
  expect_output(print(s), "By native module")
})

test_that("a memory profile is written as pprof's heap profile and as collapsed stacks", {
  p <- winch_profile(keep(500, 8192), event = "alloc", sample_bytes = 16 * 1024)
  release()
  out <- tempfile(fileext = ".pb.gz")
  winch_write_pprof(p, out)
  expect_true(file.exists(out))
  folded <- tempfile(fileext = ".folded")
  winch_write_collapsed(p, folded)
  lines <- readLines(folded)
  w <- as.numeric(sub("^.* ", "", lines))
  expect_equal(sum(w), sum(p$stacks$alloc_bytes))
  expect_error(winch_write_rprof(p, tempfile()), class = "winch_error_bad_argument")
  go <- Sys.which("go")
  skip_if(!nzchar(go), "go is not installed: `go tool pprof` not run")
  top <- suppressWarnings(system2(go, c("tool", "pprof", "-sample_index=inuse_space", "-top", shQuote(out)),
    stdout = TRUE, stderr = TRUE
  ))
  expect_true(any(grepl("Type: inuse_space", top, fixed = TRUE)), info = paste(top, collapse = "\n"))
  expect_true(any(grepl("mem_keep", top, fixed = TRUE)), info = paste(top, collapse = "\n"))
})

test_that("a library loaded while profiling is hooked too", {
  lib <- build_clib("wtest_alloc_late", "alloc.c", flags = "-g -O1")
  late <- function() {
    dll <- dyn.load(lib$path)
    Sys.sleep(0.05) # (the collector hooks new libraries within 2 ms)
    .Call(getNativeSymbolInfo("mem_churn", dll), 1000L, 8192)
  }
  # (Unloaded after the profile is built: its frames are named then.)
  on.exit(dyn.unload(lib$path), add = TRUE)
  p <- winch_profile(late(), event = "alloc", sample_bytes = 16 * 1024)
  expect_equal(bytes_under(p, "/wtest_alloc_late.so::mem_churn"), 1000 * 8192, tolerance = 0.25)
})

test_that("other threads' allocations are under [thread N], under the R call that started them; threads = \"main\" leaves them out", {
  release()
  on.exit(release(), add = TRUE)
  on_a_thread <- function() .Call("mem_thread_keep", 1000L, 8192, PACKAGE = "wtest_alloc")
  p <- winch_profile(on_a_thread(), event = "alloc", sample_bytes = 16 * 1024)
  df <- as.data.frame(p)
  mine <- df[df$thread == "thread 1", ]
  expect_true(nrow(mine) > 0)
  expect_true(all(grepl(paste0("\\[thread_1\\];", AL, "thread_keep$"), mine$stack)), info = paste(mine$stack, collapse = "\n"))
  # R's main thread waits in pthread_join(): it is asked for a sample of
  # its stack, and the thread's allocations go under the R call that
  # started it (or, where that sample did not come in time, at the root).
  under <- startsWith(mine$stack, "on_a_thread;")
  at_root <- startsWith(mine$stack, "[thread_1];")
  expect_true(all(under | at_root), info = paste(mine$stack, collapse = "\n"))
  expect_gte(sum(mine$alloc_bytes[under]), 0.5 * sum(mine$alloc_bytes))
  expect_equal(sum(mine$alloc_bytes), 1000 * 8192, tolerance = 0.25)
  expect_equal(sum(mine$inuse_bytes), 1000 * 8192, tolerance = 0.25)
  release()
  p_main <- winch_profile(on_a_thread(), event = "alloc", sample_bytes = 16 * 1024, threads = "main")
  expect_false(any(grepl("[thread_", as.data.frame(p_main)$stack, fixed = TRUE)))
})

test_that("forked children allocate freely while the parent profiles", {
  skip_on_os("windows")
  p <- winch_profile(
    parallel::mclapply(1:2, function(i) length(numeric(1e5)), mc.cores = 2),
    event = "alloc"
  )
  expect_s3_class(p, "winch_profile")
  expect_true(malloc_is_libc())
  # Their allocations are not in it, and the profile says so.
  expect_identical(p$stats$forked, 2)
  expect_output(print(p), "the allocations of the 2 child processes forked while it ran")
  expect_identical(summary(p)$forked, 2)
  expect_output(print(summary(p)), "2 child processes forked")
  # A profile that forked nothing says nothing of it.
  q <- winch_profile(numeric(1e5), event = "alloc")
  expect_identical(q$stats$forked, 0)
  expect_false(any(grepl("forked", capture.output(print(q)), fixed = TRUE)))
})

test_that("a forked child profiles its own memory while its parent profiles", {
  skip_on_os("windows")
  # The child inherits the parent's hooked slots: it takes them over, and
  # its own profile sees its own allocations (numeric(100) is 848 bytes).
  child <- function(i) {
    tryCatch(
      {
        # (A sample every 16 KiB: about 1000 samples, so that the bounds
        # below are many standard deviations of the estimate away; at the
        # default 512 KiB, about 33, and 2/3 was two.)
        q <- winch_profile(x <- lapply(1:2e4, function(i) numeric(100)), event = "alloc", sample_bytes = 16384)
        c(ok = 1, bytes = sum(as.data.frame(q)$alloc_bytes), pid = Sys.getpid())
      },
      error = function(e) c(ok = 0, bytes = NA, pid = Sys.getpid())
    )
  }
  res <- NULL
  p <- winch_profile(
    {
      res <- parallel::mclapply(1:2, child, mc.cores = 2)
      y <- lapply(1:2e4, function(i) numeric(100))
    },
    event = "alloc", sample_bytes = 16384
  )
  expect_length(res, 2L)
  for (r in res) {
    expect_identical(unname(r[["ok"]]), 1, info = "the child's profile started")
    expect_false(r[["pid"]] == Sys.getpid())
    # 2e4 vectors of 848 bytes, and the calls' own environments, as
    # sampled; not the parent's allocations as well (twice as much).
    expect_gt(r[["bytes"]], 2e4 * 848 * 2 / 3)
    expect_lt(r[["bytes"]], 2e4 * 848 * 1.8)
  }
  expect_gt(sum(as.data.frame(p)$alloc_bytes), 2e4 * 848 * 2 / 3)
  expect_true(malloc_is_libc())
})

test_that("bad arguments to a memory profile are refused before expr runs", {
  ran <- FALSE
  for (b in list(0, -1, NA, "1", c(1, 2), Inf)) {
    expect_error(winch_profile(ran <- TRUE, event = "alloc", sample_bytes = b), class = "winch_error_bad_argument")
  }
  expect_error(winch_profile(ran <- TRUE, event = "alloc", file = tempfile()), class = "winch_error_bad_argument")
  expect_error(winch_profile(ran <- TRUE, event = "memory"), class = "winch_error_bad_argument")
  expect_error(winch_rprof(tempfile(), event = "alloc"), class = "winch_error_bad_argument")
  expect_false(ran)
  # One profile at a time.
  expect_error(
    winch_profile(winch_profile(ran <- TRUE, event = "alloc"), event = "alloc"),
    class = "winch_error_busy"
  )
  expect_false(ran)
})
