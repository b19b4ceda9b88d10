skip_if_not(winch_available(), "native unwinding is not available on this platform")

# The columns of native frame tables are made when R first reads them
# (ALTREP, src/rust/src/lazy_columns.rs): a capture kept for later does not
# pay for its vectors. They must behave as plain vectors.

string_columns <- c("func", "ip", "pathname", "file", "offset", "start", "source")

test_that("columns wait until read, then keep what they made", {
  tb <- winch_trace_back()
  state <- winch:::lazy_columns(tb)$state
  expect_true(all(state == "lazy"))
  expect_setequal(names(state), names(tb))
  # The length is known without making anything.
  expect_length(tb$func, nrow(tb))
  expect_identical(winch:::lazy_columns(tb)$state[["func"]], "lazy")
  first <- tb$ip[[1L]]
  expect_match(first, "^[0-9a-f]{16}$")
  state <- winch:::lazy_columns(tb)$state
  expect_identical(state[["ip"]], "made")
  expect_identical(state[["offset"]], "lazy")
  expect_identical(tb$ip[[1L]], first)
  expect_true(all(grepl("^0x[0-9a-f]+$", tb$offset)))
  expect_true(all(startsWith(tb$pathname, "/")))
  # Numbers read one at a time are read from the rows; the vector is made
  # when R asks for its data, with the same values.
  one_by_one <- vapply(seq_len(nrow(tb)), function(i) tb$is_libr[[i]], NA)
  lines <- vapply(seq_len(nrow(tb)), function(i) tb$line[[i]], 1L)
  expect_identical(winch:::lazy_columns(tb)$state[["is_libr"]], "lazy")
  expect_identical(tb$is_libr + 0L, as.integer(one_by_one))
  expect_identical(winch:::lazy_columns(tb)$state[["is_libr"]], "made")
  expect_identical(tb$is_libr, one_by_one)
  expect_identical(tb$line, lines)
  expect_type(tb$column, "integer")
  expect_type(tb$inlined, "logical")
  expect_true(any(tb$is_libr))
  expect_identical(sum(!is.na(tb$line)), sum(!is.na(lines)))
})

test_that("lazy columns copy, subset, compare and serialize as plain vectors", {
  tb <- winch_trace_back()
  copy <- tb
  copy$func[1L] <- "changed"
  expect_identical(copy$func[1L], "changed")
  expect_false(identical(tb$func[1L], "changed"))
  expect_identical(tb$func[-1L], copy$func[-1L])
  # A column changed in place (not shared) keeps the change.
  col <- winch_trace_back()$file
  col[[1L]] <- "here.c"
  expect_identical(col[[1L]], "here.c")
  sub <- tb[2:3, c("func", "ip")]
  expect_identical(sub$ip, tb$ip[2:3])
  back <- unserialize(serialize(tb, NULL))
  expect_identical(back, tb)
  expect_true(all(winch:::lazy_columns(back)$state == "plain"))
  path <- withr::local_tempfile(fileext = ".rds")
  fresh <- winch_trace_back()
  saveRDS(fresh, path)
  expect_identical(readRDS(path), fresh)
  both <- rbind(tb, tb)
  expect_identical(both$pathname, c(tb$pathname, tb$pathname))
  expect_identical(sort(unique(tb$source), na.last = TRUE), sort(unique(as.character(tb$source)), na.last = TRUE))
  expect_identical(tb$ip[match(tb$ip, tb$ip)], tb$ip)
})

# What R's task callback runs after each top-level call (among other
# things, it gives the rows spared by their finalizer their finalizer
# again); then a collection.
settle_and_collect <- function() {
  winch:::rs_throws_tick()
  gc()
}

test_that("the rows lazy columns hold are freed with them", {
  for (i in 1:3) settle_and_collect()
  before <- winch:::lazy_columns()$live
  kept <- lapply(1:50, function(i) winch_trace_back())
  expect_gte(winch:::lazy_columns()$live, before + 50)
  # A column outlives its table.
  func <- kept[[1L]]$func
  rm(kept)
  # Spared by the first collection that finds them unreachable (a
  # finalizer it runs may read them: see the next test), freed at the
  # next one.
  gc()
  expect_gte(winch:::lazy_columns()$live, before + 50)
  settle_and_collect()
  expect_lte(winch:::lazy_columns()$live, before + 1)
  expect_type(func, "character")
  rm(func)
  for (i in 1:3) settle_and_collect()
  expect_lte(winch:::lazy_columns()$live, before)
})

test_that("a finalizer reads a trace collected with it", {
  # R runs the finalizers of everything one collection found unreachable
  # together, the newest first: an environment given its finalizer before
  # its trace was taken is finalized after the trace's rows. Reading its
  # columns then said "native frames were freed" (an R error).
  for (i in 1:3) settle_and_collect()
  before <- winch:::lazy_columns()$live
  read <- new.env()
  reader <- function(e) {
    read[[e$name]] <- list(func = e$tb$func, n = nrow(e$tb))
  }
  make <- function(name) {
    e <- new.env()
    reg.finalizer(e, reader)
    e$name <- name
    e$tb <- winch_trace_back()
    invisible()
  }
  for (i in 1:5) make(as.character(i))
  gc()
  expect_setequal(ls(read), as.character(1:5))
  for (name in ls(read)) {
    got <- read[[name]]
    expect_type(got$func, "character")
    expect_length(got$func, got$n)
    expect_true(any(!is.na(got$func) & nzchar(got$func)), info = name)
  }
  # The rows go once nothing holds them.
  rm(read, got)
  for (i in 1:3) settle_and_collect()
  expect_lte(winch:::lazy_columns()$live, before)
})

test_that("joint tables' string columns are lazy too, and the same once made", {
  f <- function() winch_call(function() winch:::joint_capture(sys.frames(), sys.calls()))
  jt <- f()
  state <- winch:::lazy_columns(jt)$state
  expect_true(all(state == "lazy"))
  expect_true(all(nzchar(jt$label)))
  named <- !is.na(jt$func)
  expect_identical(jt$label[named], jt$func[named])
})

# The columns are written once (src/rust/src/columns.rs): a joint table
# has a frame table's columns, then the placement's, each of its R type.
test_that("a joint table has every column of a frame table, then the placement's, each of its type", {
  f <- function() winch_call(function() winch:::joint_capture(sys.frames(), sys.calls()))
  jt <- f()
  tb <- winch_trace_back()
  expect_identical(names(jt), c(names(tb), "r_frame", "approximate", "at_throw", "label"))
  expect_identical(unname(vapply(jt, typeof, "")), c(
    "character", "character", "character", "logical", "character", "integer", "logical",
    "character", "integer", "character", "character", "integer", "logical", "logical", "character"
  ))
  expect_identical(lapply(tb, typeof), lapply(jt[names(tb)], typeof))
  # The attributes, in their order: the walk's, then the placement's.
  hint <- "debug_files_would_help"
  expect_identical(setdiff(names(attributes(tb)), hint), c("names", "class", "row.names", "backend", "truncated", "truncation"))
  expect_identical(setdiff(names(attributes(jt)), hint), c(
    "names", "class", "row.names", "backend", "truncated", "truncation",
    "placement", "fallback_reason", "beyond_end"
  ))
  expect_identical(attr(jt, "placement"), "exact")
  expect_identical(attr(jt, "fallback_reason"), NA_character_)
  expect_type(attr(jt, "beyond_end"), "integer")
  expect_identical(attr(jt, "truncation"), NA_character_)
})

test_that("unloading winch keeps its library while its columns live, and not after", {
  out <- run_rscript(r"(
    library(winch)
    x <- winch_trace_back()
    unloadNamespace("winch")
    cat("loaded while alive:", "winch" %in% names(getLoadedDLLs()), "\n")
    # Read for the first time after the unload: made by the library still loaded.
    cat("read after unload:", grepl("^[0-9a-f]{16}$", x$ip[[1L]]), "\n")
    library(winch)
    y <- winch_trace_back()
    cat("capture after reload:", nrow(y) > 0L && !anyNA(y$ip), "\n")
    rm(x, y)
    unloadNamespace("winch")
    cat("loaded when none alive:", "winch" %in% names(getLoadedDLLs()), "\n")
  )")
  expect_identical(attr(out, "status"), 0L)
  expect_line(out, "loaded while alive: TRUE")
  expect_line(out, "read after unload: TRUE")
  expect_line(out, "capture after reload: TRUE")
  expect_line(out, "loaded when none alive: FALSE")
})
