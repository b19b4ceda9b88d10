skip_if_not(winch_available(), "native unwinding is not available on this platform")

# print(), summary() and plot() of a winch_profile.

profile_fixture()

burn_workload()

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
    "voluntary_switches", "involuntary_switches", "gc_count", "gc_time", "children_user", "children_system"
  ), ignore.order = TRUE)
  expect_gte(u$user + u$system, 0.27) # 0.3 s burned, CPU time measured by the burns
  expect_gt(u$max_rss, 0)

  k <- s$cost
  expect_named(k, c(
    "handler_total", "handler_median", "handler_p99", "share", "collector", "worker_stops",
    "worker_stop_median", "worker_stop_p99"
  ))
  # No workers read: none stopped, and print() says nothing of them.
  expect_identical(k$worker_stops, 0)
  expect_gt(k$handler_median, 0)
  expect_lte(k$handler_median, k$handler_p99)
  expect_lt(k$handler_median, p$interval)
  expect_gt(k$handler_total, 0)
  expect_gt(k$share, 0)
  expect_lt(k$share, 0.5)
  # The collector thread's CPU time, read from its own clock (it looks
  # every 2 ms), is left out of the process's.
  expect_gt(k$collector, 0)
  expect_lt(k$collector, u$user + u$system)
  expect_equal(s$by_process$cpu[s$by_process$process == "self"], u$user + u$system - k$collector)

  out <- capture.output(res <- withVisible(print(s)))
  expect_false(res$visible)
  expect_true(all(c("By function:", "By native module:", "Resource use over the run:") %in% out))
  expect_true(any(startsWith(out, "Profiler's own cost:")))
  expect_false(any(startsWith(out, "Processes read from outside")))

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

test_that("print() and summary() of a profile, as printed", {
  p <- synthetic_profile()
  # One unit per time column; a long label shortened in the middle, whole
  # in summary().
  expect_snapshot(print(p))
  expect_snapshot(print(p, n = 2, width = 30))
  s <- summary(p)
  expect_snapshot(print(s))
})

test_that("plot() keeps its legend inside the device at any size, module colours stable", {
  p <- winch_profile(outer(), interval = 0.002)
  for (size in list(c(700, 450), c(1600, 1000))) {
    file <- tempfile(fileext = ".png")
    grDevices::png(file, width = size[[1L]], height = size[[2L]])
    res <- withVisible(plot(p))
    usr <- graphics::par("usr")
    legend <- winch:::the$plot_legend
    grDevices::dev.off()
    expect_false(res$visible)
    expect_gt(file.size(file), 1000)
    expect_false(is.null(legend))
    expect_gte(legend$left, usr[[1L]])
    expect_lte(legend$left + legend$w, usr[[2L]])
    expect_lte(legend$top, usr[[4L]])
    expect_gte(legend$top - legend$h, usr[[3L]])
    unlink(file)
  }
  cols <- winch:::module_colours(c("stats.so", "vctrs.so", "libc.so.6"))
  expect_identical(winch:::module_colours(c("libc.so.6", "stats.so")), cols[c(3L, 1L)])
  expect_false(anyDuplicated(cols) > 0)
})

test_that("print() says how to name unnamed native frames when debuginfod servers are configured", {
  p <- synthetic_profile()
  p$functions$label[[4L]] <- "/libx.so::+0x1000"
  p$functions$name[[4L]] <- "/libx.so::+0x1000"
  withr::local_envvar(DEBUGINFOD_URLS = "https://debuginfod.example.org")
  withr::local_options(winch.debuginfod = NULL)
  expect_output(print(p), "73% of the native time is in unnamed functions: `options(winch.debuginfod = TRUE)`", fixed = TRUE)
  withr::local_options(winch.debuginfod = FALSE)
  expect_false(any(grepl("unnamed functions", capture.output(print(p)), fixed = TRUE)))
  withr::local_options(winch.debuginfod = NULL)
  withr::local_envvar(DEBUGINFOD_URLS = "")
  expect_false(any(grepl("unnamed functions", capture.output(print(p)), fixed = TRUE)))
})

test_that("plot(focus =) draws the samples under one frame from that frame up; narrow labels are shortened", {
  p <- synthetic_profile()
  lab <- p$functions$label
  file <- tempfile(fileext = ".png")
  grDevices::png(file, width = 700, height = 450)
  on.exit(unlink(file), add = TRUE)
  target <- lab[[p$stacks$locations[[1L]][[length(p$stacks$locations[[1L]]) - 1L]]]]
  res <- withVisible(plot(p, focus = target))
  drawn <- winch:::the$plot_labels
  expect_false(res$visible)
  # The focused frame is the bottom row, alone.
  expect_identical(drawn$label[drawn$depth == 0], target)
  grDevices::dev.off()
  expect_error(plot(p, focus = 1), class = "winch_error_bad_argument")
  expect_error(plot(p, focus = c("a", "b")), class = "winch_error_bad_argument")
  # A label that is no frame of the profile is refused (it drew an empty
  # plot), naming the labels close to it.
  expect_error(plot(p, focus = "no such frame"), "none is labelled \"no such frame\"", class = "winch_error_bad_argument")
  expect_error(plot(p, focus = "compute"), "Close: \"/libx.so::compute\"", class = "winch_error_bad_argument")

  # Labels: whole where they fit, shortened in the middle, else none.
  grDevices::png(file, width = 700, height = 450)
  graphics::plot.new()
  w <- graphics::strwidth("m")
  long <- "a_rather_long_function_name_here"
  out <- winch:::fit_labels(c("f", long, long), c(10 * w, 12 * w, 3 * w), 1)
  grDevices::dev.off()
  expect_identical(out[[1L]], "f")
  expect_match(out[[2L]], "^a_rat.*\\.\\.\\..*here$")
  expect_lt(nchar(out[[2L]]), nchar(long))
  expect_identical(out[[3L]], "")
})
