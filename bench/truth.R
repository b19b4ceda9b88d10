# Do winch's shares agree with Linux perf's (issue 34, item 5)? Each
# workload runs once under winch_profile(libr = TRUE) (every thread, 2 ms,
# libR's own native frames shown, as perf shows them) while
# `perf record -e cpu-clock` samples the same process (every thread, 1000
# Hz): both measure the same run (two runs differ: under load, how long
# OpenMP's threads spin depends on the scheduler). perf's samples inside
# winch's signal handler (its code and the libc and kernel functions it
# calls) and of its collector thread are left out of perf's shares (its
# sampling's cost; see perf_shares()). Each sample's self time is put in the module
# its innermost native frame belongs to (an R frame innermost is R's
# interpreter, libR.so; `[wait]` marks the runtime frame above it); the
# table gives each module's share of all samples in both, and the
# difference in points. perf's kernel samples are `[kernel.kallsyms]`,
# winch's `[kernel]` (see ?winch_profile, "Threads"): the same row here.
#
# Workloads: vctrs (one thread), data.table grouping on 2 threads, BLAS
# crossprod() (as many threads as the BLAS R uses has), ranger on 2
# threads; each quiet and with two busy processes (`yes`) competing for
# the cores. Target: every module's share within 5 points of perf's.
#
#   Rscript bench/truth.R            (needs perf; as root, or with
#                                      kernel.perf_event_paranoid <= 1)
# WINCH_BENCH_ONLY=data.table,ranger runs only those workloads.
# Packages missing are skipped with a note. Results: the table printed,
# and bench/truth-results.csv unless WINCH_BENCH_OUT says where.
library(winch)
stopifnot(winch_available())
perf <- Sys.which("perf")
if (!nzchar(perf)) stop("perf is not installed (Debian: linux-perf)")
seconds <- as.numeric(Sys.getenv("WINCH_BENCH_SECONDS", "3"))
out_file <- Sys.getenv("WINCH_BENCH_OUT", file.path("bench", "truth-results.csv"))

# Each workload: a function running for about `seconds`, or NULL with why.
has <- function(pkg) requireNamespace(pkg, quietly = TRUE)
repeat_for <- function(f) {
  function() {
    t0 <- proc.time()[["elapsed"]]
    while (proc.time()[["elapsed"]] - t0 < seconds) f()
  }
}
workloads <- list(
  vctrs = if (has("vctrs")) {
    df <- data.frame(x = 1:2000, y = runif(2000), z = letters[(1:2000) %% 26 + 1])
    parts <- split(df, df$z)
    repeat_for(function() for (i in 1:20) vctrs::vec_rbind(!!!parts))
  },
  data.table = if (has("data.table")) {
    data.table::setDTthreads(2)
    n <- 2e6
    dt <- data.table::data.table(g = sample.int(1e4, n, TRUE), x = runif(n), y = runif(n))
    repeat_for(function() dt[, list(mean(x), sum(y), max(x)), by = g])
  },
  crossprod = {
    m <- matrix(runif(600 * 600), 600)
    repeat_for(function() crossprod(m))
  },
  ranger = if (has("ranger")) {
    d <- data.frame(y = factor(sample(1:3, 3000, TRUE)), matrix(runif(3000 * 20), 3000))
    repeat_for(function() ranger::ranger(y ~ ., d, num.trees = 100, num.threads = 2))
  }
)

# perf's share of samples by module while `f` runs. perf records each
# sample's call chain (DWARF, the top 16 KiB of the stack: enough to
# reach the signal handler's frames from a system call it makes), so that
# samples taken inside winch's signal handler are left out whatever they
# are in: winch's own code, but also the libc functions and the kernel's
# system calls the handler calls (reading clocks and memory), which
# perf's shares by module would otherwise count as the workload's kernel
# and libc time (7 % of perf's samples of a loaded data.table run were in
# the handler, half of them in the kernel). winch's collector thread is
# left out too. Both are the profiler's cost, not the workload's.
perf_shares <- function(f) {
  data <- tempfile(fileext = ".data")
  log <- tempfile()
  pid <- as.integer(system2("sh", c("-c", shQuote(sprintf(
    "%s record -e cpu-clock -F 1000 --call-graph dwarf,16384 -p %d -o %s > %s 2>&1 & echo $!",
    perf, Sys.getpid(), data, log
  ))), stdout = TRUE))
  # (perf says nothing when it is attached: give it a moment.)
  Sys.sleep(0.5)
  f()
  tools::pskill(pid, tools::SIGINT)
  for (i in 1:200) if (!dir.exists(sprintf("/proc/%d", pid))) break else Sys.sleep(0.05)
  lines <- system2(perf, c("script", "--no-inline", "-i", data, "-F", "comm,tid,ip,dso"), stdout = TRUE, stderr = FALSE)
  unlink(data)
  # A sample: a line with the thread's name and id, then its frames (one
  # indented line each, innermost first), then an empty line.
  head <- !startsWith(lines, "\t") & nzchar(trimws(lines))
  sample <- cumsum(head)
  frame <- startsWith(lines, "\t") & sample > 0
  dso <- sub("^.*\\((.*)\\)\\s*$", "\\1", lines[frame])
  of <- sample[frame]
  thread <- sub("\\s+[0-9]+\\s*$", "", trimws(lines[head]))
  # In the handler: its innermost frame that is not the kernel's, libc's
  # or the vDSO's (the functions the handler calls) is winch's. (Not any
  # frame of winch: a thread started through winch's hook of
  # pthread_create has winch's frame at its outer end.)
  # (glibc before 2.34 has its threads and loader's functions in
  # libpthread and ld-linux, and names its files libc-2.31.so.)
  own <- startsWith(dso, "[kernel") | dso == "[vdso]" | grepl("/(libc|libpthread|ld-linux[^/]*)[-.][^/]*$", dso)
  inner <- which(!own)
  inner <- inner[!duplicated(of[inner])]
  in_handler <- rep(FALSE, length(thread))
  in_handler[of[inner]] <- grepl("winch.so", dso[inner], fixed = TRUE)
  first <- !duplicated(of)
  leaf <- rep(NA_character_, length(thread))
  leaf[of[first]] <- dso[first]
  keep <- !is.na(leaf) & !in_handler & thread != "winch-profile"
  module <- module_name(ifelse(startsWith(leaf[keep], "[kernel"), "[kernel.kallsyms]", leaf[keep]))
  share <- c(table(module))
  share / sum(share)
}

# winch's share of samples by module while `f` runs.
winch_shares <- function(f) {
  p <- winch_profile(f(), interval = 0.002, libr = TRUE)
  d <- as.data.frame(p)
  leaf <- vapply(strsplit(d$stack, ";", fixed = TRUE), function(s) {
    if (s[[length(s)]] == "[kernel]") {
      return("[kernel]")
    }
    s <- s[s != "[wait]"]
    s[[length(s)]]
  }, "")
  module <- ifelse(startsWith(leaf, "/"), sub("::.*$", "", sub("^/", "", leaf)),
    ifelse(leaf == "[kernel]", "[kernel.kallsyms]", ifelse(startsWith(leaf, "["), leaf, "libR.so"))
  )
  s <- tapply(d$samples, module_name(module), sum)
  s / sum(s)
}

# One name per module for both: the file's name without its directory or
# version (perf names the file a link leads to: libblas.so.3.11.0).
module_name <- function(x) sub("\\.so(\\.[0-9]+)+$", ".so", sub("^.*/", "", x))

busy <- function(n) {
  if (n == 0) {
    return(integer())
  }
  as.integer(system2("sh", c("-c", shQuote(paste(rep("yes > /dev/null & echo $!;", n), collapse = " "))), stdout = TRUE))
}

only <- strsplit(Sys.getenv("WINCH_BENCH_ONLY"), ",", fixed = TRUE)[[1]]
if (length(only)) workloads <- workloads[intersect(names(workloads), only)]
rows <- list()
for (name in names(workloads)) {
  f <- workloads[[name]]
  if (is.null(f)) {
    message(name, ": skipped (package not installed)")
    next
  }
  f() # warm up: first-time loading and compiling left out
  for (load in c("quiet", "loaded")) {
    competing <- busy(if (load == "loaded") 2 else 0)
    ws <- NULL
    ps <- perf_shares(function() ws <<- winch_shares(f))
    if (length(competing)) tools::pskill(competing, tools::SIGKILL)
    mods <- union(names(ps), names(ws))
    get <- function(s) ifelse(mods %in% names(s), s[mods], 0)
    r <- data.frame(workload = name, load = load, module = mods, perf = 100 * get(ps), winch = 100 * get(ws))
    r$diff <- r$winch - r$perf
    rows[[length(rows) + 1L]] <- r[r$perf >= 1 | r$winch >= 1, ]
  }
}
res <- do.call(rbind, rows)
res <- res[order(res$workload, res$load, -res$perf), ]
res[c("perf", "winch", "diff")] <- lapply(res[c("perf", "winch", "diff")], round, 1)
rownames(res) <- NULL
print(res)
cat(sprintf("\nlargest difference: %.1f points (%s, %s, %s)\n",
  max(abs(res$diff)), res$workload[which.max(abs(res$diff))], res$load[which.max(abs(res$diff))],
  res$module[which.max(abs(res$diff))]))
utils::write.csv(res, out_file, row.names = FALSE)
