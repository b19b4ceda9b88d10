skip_if_not(winch_available(), "native unwinding is not available on this platform")
skip_if_not(Sys.info()[["sysname"]] == "Linux" && R.version$arch == "x86_64", "the profiler samples x86_64 Linux")

# Processes that work for the profiled one but are not sampled yet (the R
# sessions of a PSOCK cluster, programs it runs): summary() lists them
# with the CPU time they used during the profile, counts it as unseen, and
# a classed warning says so (R/profile-processes.R).

seen <- function(pid, cpu, relation = "worker", parent = 1000L) {
  list(
    pid = as.integer(pid), parent = rep(as.integer(parent), length.out = length(pid)),
    relation = rep(relation, length.out = length(pid)), command = paste("cmd", pid), cpu = as.double(cpu)
  )
}

test_that("processes that used CPU time and were not sampled are the unsampled ones", {
  # (What each used while the profile ran is the collector's: see the
  # cargo tests of relatives::watch.) 12 used none; 16 was sampled; this
  # process is never one.
  me <- Sys.getpid()
  un <- unsampled_processes(seen(c(11, 12, 14, 16, me), c(0.5, 0, 0.25, 4, 1)), sampled = 16)
  expect_identical(un$pid, c(11L, 14L))
  expect_equal(un$cpu, c(0.5, 0.25))
  expect_identical(un$command, c("cmd 11", "cmd 14"))
  expect_identical(un$host, rep(Sys.info()[["nodename"]], 2))
  expect_identical(un$why, c(NA_character_, NA_character_))
  refused <- seen(c(11, 14), c(0.5, 0.25))
  refused$why <- c("the kernel said no", NA)
  un <- unsampled_processes(refused, integer())
  expect_identical(un$why, c("the kernel said no", NA))
  expect_identical(refused_processes(un), data.frame(pid = 11L, why = "the kernel said no"))
  expect_identical(nrow(unsampled_processes(seen(integer(), numeric()), integer())), 0L)
})

test_that("an unsampled process's time is unseen in an elapsed profile too", {
  skip_if(parallel::detectCores() < 2, "a cluster of two workers needs 2 cores")
  cl <- parallel::makeCluster(2)
  withr::defer(parallel::stopCluster(cl))
  burn <- function(i) {
    t0 <- proc.time()[["user.self"]]
    while (proc.time()[["user.self"]] - t0 < 0.3) NULL
  }
  expect_warning(
    p <- winch_profile(parallel::parLapply(cl, 1:2, burn), event = "elapsed", interval = 0.005),
    class = "winch_warning_processes_unsampled"
  )
  # The workers' 0.6 s against the parent's few milliseconds.
  expect_gt(summary(p)$unseen, 0.8)
})

test_that("a sampled process is named by its command when last seen, unless its pid was reused", {
  pr <- data.frame(number = 0:2, pid = c(10, 11, 12), command = c("R", "R", "R"))
  now <- latest_commands(pr, seen(c(11, 12, 12, 13), 1, relation = "child"))
  # 11 became a program; 12 was two processes; 10 was not seen.
  expect_identical(now$command, c("R", "cmd 11", "R"))
  expect_identical(latest_commands(pr, NULL), pr)
})

test_that("only processes not its own children add to the profile's children's time", {
  me <- Sys.getpid()
  un <- unsampled_processes(
    seen(1:4, 1:4, relation = c("child", "worker", "child", "worker"), parent = c(me, me, 2L, me)),
    integer()
  )
  expect_identical(counted_as_child(un), c(TRUE, FALSE, FALSE, FALSE))
})

test_that("a descendant waited for by every ancestor below this process's child is in its children's account", {
  me <- 1000L
  # 1: own child (running); 2 under 1, ended (waited for by 1: in 1's
  # account, which is read while 1 runs); 3 under 2, ended; 4 under 2,
  # running (in nobody's account yet); 5 a worker; 6 under 5, ended; 7
  # under 8, ended, but 8 (a child of 1) still runs: not in 1's account.
  s <- seen(1:8, 1,
    relation = c("child", "child", "child", "child", "worker", "child", "child", "child"),
    parent = c(me, 1L, 2L, 2L, me, 5L, 8L, 1L)
  )
  s$ended <- c(FALSE, TRUE, TRUE, FALSE, FALSE, TRUE, TRUE, FALSE)
  expect_identical(children_accounted(s, me), c(TRUE, TRUE, TRUE, FALSE, FALSE, FALSE, FALSE, FALSE))
  # Without `ended` (an earlier version's table): own children only.
  s$ended <- NULL
  expect_identical(children_accounted(s, me), c(TRUE, rep(FALSE, 7)))
  # A parent pid seen twice (reused) is not followed.
  s <- seen(c(1L, 2L, 1L), 1, relation = "child", parent = c(me, 1L, 9L))
  s$ended <- c(TRUE, TRUE, TRUE)
  expect_identical(children_accounted(s, me), c(TRUE, FALSE, FALSE))
})

test_that("a PSOCK cluster's workers are sampled under parLapply, and listed as not sampled in an elapsed profile", {
  skip_if(parallel::detectCores() < 2, "a cluster of two workers needs 2 cores")
  cl <- parallel::makeCluster(2)
  withr::defer(parallel::stopCluster(cl))
  pids <- unlist(parallel::clusterEvalQ(cl, Sys.getpid()))
  # Each worker burns 0.3 s of its CPU time twice.
  burn <- function(i) {
    t0 <- proc.time()[["user.self"]] + proc.time()[["sys.self"]]
    x <- 0
    while (proc.time()[["user.self"]] + proc.time()[["sys.self"]] - t0 < 0.3) x <- x + sum(seq_len(100))
    x
  }
  work <- function() parallel::parLapply(cl, 1:4, burn)
  # A CPU profile reads the workers from outside (ptrace).
  expect_no_warning(p <- winch_profile(work(), interval = 0.005))
  s <- summary(p)
  workers <- s$by_process[s$by_process$pid %in% pids, , drop = FALSE]
  expect_setequal(workers$pid, pids)
  expect_true(all(startsWith(workers$process, "[process ")), info = paste(workers$process, collapse = ", "))
  # Each sampled in proportion to the CPU time it used (stat's clock
  # ticks: 10 ms).
  expect_true(all(workers$cpu >= 0.55), info = paste(workers$cpu, collapse = ", "))
  expect_true(all(abs(workers$sampled - workers$cpu) <= 0.15 * workers$cpu + 0.02),
    info = paste(workers$sampled, workers$cpu, collapse = "; ")
  )
  expect_lt(s$unseen, 0.2)
  # What reading them cost them: each sample stops a worker for a moment,
  # as summary() says.
  k <- s$cost
  expect_gt(k$worker_stops, 0)
  expect_true(k$worker_stop_median > 0 && k$worker_stop_p99 >= k$worker_stop_median, info = paste(k, collapse = ", "))
  expect_match(capture.output(print(s)), "Processes read from outside: [0-9,]+ samples, each stopping its process", all = FALSE)
  # Under [process N] under parLapply under work; the parent's part ends
  # at parLapply (its clusterApply, recvResult, ... left out). The
  # worker's own part starts at the task (PSOCK's workLoop, workCommand,
  # do.call, tryCatch() and the lapply of the chunk left out), or where
  # the worker was reading the task or sending its result (recvData():
  # unserializing `burn` loads the namespaces its environment refers to,
  # testthat's; sendData()'s method). Between those, the worker runs its
  # loop's own code (workCommand() times each task with proc.time();
  # tryCatch() calls environment() and parent.frame()): every frame of its
  # part is then plumbing, and all of it is kept.
  theirs <- which(p$processes$number[p$stacks$process] > 0L)
  expect_gt(sum(p$stacks$count[theirs]), 0.9 * sum(p$stacks$count))
  task <- 0
  for (k in theirs) {
    # (Innermost first.)
    labels <- stack_labels(p)[[k]]
    at <- grep("^\\[process_[0-9]+\\]$", labels)
    expect_length(at, 1L)
    expect_identical(labels[at + 1:2], c("parallel::parLapply", "work"), info = paste(labels, collapse = " < "))
    own <- labels[seq_len(at - 1L)]
    expect_true(own[[at - 1L]] %in% c("FUN", "recvData", "sendData.SOCKnode") ||
      (own[[at - 1L]] == "<Anonymous>" && "workCommand" %in% own && !"FUN" %in% own),
    info = paste(labels, collapse = " < ")
    )
    if (labels[[at - 1L]] == "FUN") task <- task + p$stacks$count[[k]]
  }
  expect_gt(task, 0.5 * sum(p$stacks$count[theirs]))
  # An elapsed profile does not read them: listed as not sampled,
  # counted as unseen, and warned of.
  expect_warning(e <- winch_profile(work(), interval = 0.005, event = "elapsed"), class = "winch_warning_processes_unsampled")
  w <- tryCatch(winch_profile(work(), interval = 0.005, event = "elapsed"), winch_warning_processes_unsampled = function(w) w)
  expect_match(conditionMessage(w), "2 worker processes")
  expect_match(conditionMessage(w), "winch_record", fixed = TRUE)
  se <- summary(e)
  unsampled <- se$by_process[se$by_process$process == "[worker, not sampled]", , drop = FALSE]
  expect_setequal(unsampled$pid, pids)
  expect_true(all(unsampled$sampled == 0))
  expect_true(all(grepl("R", unsampled$command)))
  out <- capture.output(print(se))
  expect_true(any(grepl("[worker, not sampled]", out, fixed = TRUE)))
  expect_true(any(grepl("processes not sampled: see ?winch_profile", out, fixed = TRUE)))
  # processes = "self": the profiled process alone, nothing listed or
  # sampled, no warning.
  expect_no_warning(q <- winch_profile(work(), interval = 0.005, event = "elapsed", processes = "self"))
  expect_null(q$stats$unsampled)
  expect_identical(nrow(summary(q)$by_process), 1L)
  # c() of profiles keeps every source's unsampled processes.
  both <- c(e, q)
  expect_setequal(both$stats$unsampled$pid, pids)
  expect_identical(sum(summary(both)$by_process$process == "[worker, not sampled]"), 2L)
})

test_that("a worker the kernel does not let winch read is listed as not sampled, with the kernel's reason", {
  skip_if(parallel::detectCores() < 2, "a cluster of two workers needs 2 cores")
  skip_if(!nzchar(Sys.which("strace")), "strace is not installed")
  cl <- parallel::makeCluster(2)
  withr::defer(parallel::stopCluster(cl))
  pids <- unlist(parallel::clusterEvalQ(cl, Sys.getpid()))
  # strace traces the first worker (a process may have one tracer): winch
  # cannot, and says why. (Killed before the cluster is stopped.)
  tracer <- local_child_command(sprintf("strace -p %d -o /dev/null", pids[[1]]))
  traced <- function() {
    st <- readLines(sprintf("/proc/%d/status", pids[[1]]))
    as.integer(sub("TracerPid:\\s*", "", grep("^TracerPid:", st, value = TRUE))) != 0L
  }
  deadline <- Sys.time() + 10
  while (!traced() && Sys.time() < deadline) Sys.sleep(0.05)
  skip_if(!traced(), "strace did not attach")
  # (A task without system calls: strace stops the worker at each.)
  count <- function(i) {
    s <- 0
    for (k in seq_len(2e7)) s <- s + k
    s
  }
  w <- NULL
  p <- withCallingHandlers(
    winch_profile(parallel::parLapply(cl, 1:2, count), interval = 0.005),
    winch_warning_processes_unsampled = function(cnd) {
      w <<- cnd
      invokeRestart("muffleWarning")
    }
  )
  expect_s3_class(w, "winch_warning_processes_unsampled")
  expect_match(conditionMessage(w), sprintf("Not read: pid %d: process %d is already being traced by process", pids[[1]], pids[[1]]), fixed = TRUE)
  s <- summary(p)
  expect_identical(s$refused$pid, pids[[1]])
  expect_match(s$refused$why, "already being traced")
  rows <- s$by_process[s$by_process$pid %in% pids, , drop = FALSE]
  expect_identical(rows$process[rows$pid == pids[[1]]], "[worker, not sampled]")
  expect_true(startsWith(rows$process[rows$pid == pids[[2]]], "[process "))
  expect_match(capture.output(print(s)), sprintf("^Not read: pid %d: .*already being traced", pids[[1]]), all = FALSE)
  # The reason survives c() of profiles (one made before it was kept
  # has none).
  old <- p
  old$stats$unsampled$why <- NULL
  expect_identical(summary(c(p, old))$refused$why, s$refused$why)
})

test_that("future's multisession workers are sampled under future_lapply, future's plumbing left out", {
  skip_if_not_installed("future.apply")
  skip_if(parallel::detectCores() < 2, "two workers need 2 cores")
  future::plan(future::multisession, workers = 2)
  withr::defer(future::plan(future::sequential))
  pids <- unlist(future.apply::future_lapply(1:2, function(i) Sys.getpid()))
  burn <- function(i) {
    t0 <- proc.time()[["user.self"]] + proc.time()[["sys.self"]]
    x <- 0
    while (proc.time()[["user.self"]] + proc.time()[["sys.self"]] - t0 < 0.3) x <- x + sum(seq_len(100))
    x
  }
  p <- winch_profile(future.apply::future_lapply(1:4, burn), interval = 0.005)
  s <- summary(p)
  rows <- s$by_process[s$by_process$pid %in% pids, , drop = FALSE]
  expect_true(all(startsWith(rows$process, "[process ")), info = paste(rows$process, collapse = ", "))
  expect_true(all(abs(rows$sampled - rows$cpu) <= 0.15 * rows$cpu + 0.02),
    info = paste(rows$sampled, rows$cpu, collapse = "; ")
  )
  task <- 0
  for (k in which(p$processes$number[p$stacks$process] > 0L)) {
    labels <- stack_labels(p)[[k]]
    at <- grep("^\\[process_[0-9]+\\]$", labels)
    expect_identical(labels[[at + 1L]], "future.apply::future_lapply", info = paste(labels, collapse = " < "))
    fun <- match("...future.FUN", labels)
    if (is.na(fun)) next
    task <- task + p$stacks$count[[k]]
    between <- labels[seq_len(at - 1L)][-seq_len(fun)]
    expect_false(any(between %in% c("workLoop", "workCommand", "do.call", "tryCatch", "base::tryCatch", "eval", "base::local")),
      info = paste(labels, collapse = " < ")
    )
  }
  expect_gt(task, 0.5 * sum(p$stacks$count[p$processes$number[p$stacks$process] > 0L]))
})

test_that("a worker busy while the parent runs other R code is not charged to that code", {
  skip_if(parallel::detectCores() < 2, "a cluster of a worker needs 2 cores")
  cl <- parallel::makeCluster(1)
  withr::defer(parallel::stopCluster(cl))
  pid <- parallel::clusterEvalQ(cl, Sys.getpid())[[1]]
  burn <- function(s) {
    t0 <- proc.time()[["user.self"]] + proc.time()[["sys.self"]]
    x <- 0
    while (proc.time()[["user.self"]] + proc.time()[["sys.self"]] - t0 < s) x <- x + sum(seq_len(100))
    x
  }
  other_work <- function() {
    # The worker burns 0.4 s while this process burns 0.3 s of its own,
    # then waits for it in recvResult() (no dispatching call of a
    # framework around it).
    parallel:::sendCall(cl[[1]], burn, list(0.4))
    burn(0.3)
    parallel:::recvResult(cl[[1]])
  }
  p <- winch_profile(other_work(), interval = 0.005)
  theirs <- which(p$processes$number[p$stacks$process] > 0L)
  expect_gt(length(theirs), 0L)
  for (labels in stack_labels(p)[theirs]) {
    # At the root: no frame of the parent's under [process N].
    expect_match(labels[[length(labels)]], "^\\[process_[0-9]+\\]$", info = paste(labels, collapse = " < "))
    expect_false("other_work" %in% labels, info = paste(labels, collapse = " < "))
  }
  mine <- stack_labels(p)[p$processes$number[p$stacks$process] == 0L]
  expect_true(any(vapply(mine, function(s) "other_work" %in% s, NA)))
})

test_that("forked children sampled by the profile are not listed as unsampled", {
  skip_if(parallel::detectCores() < 2, "mclapply() needs 2 cores")
  burn <- function(i) {
    t0 <- proc.time()[["user.self"]]
    while (proc.time()[["user.self"]] - t0 < 0.2) NULL
  }
  expect_no_warning(p <- winch_profile(parallel::mclapply(1:2, burn, mc.cores = 2), interval = 0.005))
  expect_false(any(grepl("not sampled", summary(p)$by_process$process)))
})

test_that("a program the profiled process runs through pipe() is sampled as one process, named by the program it became", {
  # A shell started by pipe() (a child of this process that runs another
  # program: under R 4.2 at once, under R 4.5 and 4.6 after a fork of R
  # that samples itself until then) counts to a million (about a second
  # of its own CPU time), says it is done, and waits for its input to
  # close, after the profile.
  done <- withr::local_tempfile()
  script <- sprintf(
    "i=0; while [ $i -lt 1000000 ]; do i=$((i+1)); done; echo > %s; exec cat > /dev/null",
    shQuote(done)
  )
  con <- NULL
  withr::defer(if (!is.null(con)) close(con))
  work <- function() {
    con <<- pipe(script, open = "w")
    deadline <- Sys.time() + 60
    while (!file.exists(done) && Sys.time() < deadline) Sys.sleep(0.01)
  }
  p <- suppressWarnings(winch_profile(work(), interval = 0.005))
  expect_true(file.exists(done))
  pr <- summary(p)$by_process
  child <- pr[pr$process != "self", , drop = FALSE]
  # One process, however it was sampled, named by the program it became.
  expect_identical(nrow(child), 1L)
  expect_match(child$process, "^\\[process [0-9]+\\]$")
  expect_identical(child$command, "cat")
  expect_false(any(grepl("not sampled", pr$process)))
  # Sampled for most of its time (its first tenth of a second or so,
  # before the profile's watch sees it, is unseen).
  expect_gt(child$cpu, 0.3)
  expect_gt(child$sampled, 0.5 * child$cpu)
})

test_that("the workers of a cluster made and stopped inside a CPU profile are sampled once found, and keep their names", {
  skip_if(parallel::detectCores() < 2, "a cluster of two workers needs 2 cores")
  burn <- function(i) {
    t0 <- proc.time()[["user.self"]] + proc.time()[["sys.self"]]
    x <- 0
    while (proc.time()[["user.self"]] + proc.time()[["sys.self"]] - t0 < 0.3) x <- x + sum(seq_len(100))
    Sys.getpid()
  }
  pids <- NULL
  work <- function() {
    cl <- parallel::makeCluster(2)
    on.exit(parallel::stopCluster(cl))
    # Eight tasks of 0.3 s: the workers work past the first look for
    # workers (once a second) and are read from then on.
    pids <<- unique(unlist(parallel::parLapply(cl, 1:8, burn)))
  }
  # (Their time before they were found is unseen, and may be warned of.)
  p <- suppressWarnings(winch_profile(work(), interval = 0.005))
  s <- summary(p)
  rows <- s$by_process[s$by_process$pid %in% pids, , drop = FALSE]
  expect_setequal(rows$pid, pids)
  expect_true(all(startsWith(rows$process, "[process ")), info = paste(rows$process, collapse = ", "))
  expect_true(all(rows$sampled > 0.1), info = paste(rows$sampled, collapse = ", "))
  # They ended before the profile did: the CPU time of their last read
  # is kept, and their native frames are named with their own modules
  # (the C library's getrusage(), under proc.time()).
  expect_true(all(rows$cpu >= rows$sampled - 0.02), info = paste(rows$cpu, rows$sampled, collapse = "; "))
  # Their CPU time counts from when the profile's watch first saw them:
  # all of it, as they started inside the profile (each burnt four tasks
  # of 0.3 s), not from when they were first read; what they used before
  # that is unseen.
  expect_true(all(rows$cpu >= 1.2), info = paste(rows$cpu, collapse = ", "))
  theirs <- unlist(stack_labels(p)[p$processes$number[p$stacks$process] > 0L])
  expect_true(any(grepl("^/libc[^:]*::.*getrusage", theirs)), info = paste(unique(theirs), collapse = ", "))
  expect_false(any(startsWith(theirs, "/?::")), info = paste(unique(theirs), collapse = ", "))
})

test_that("the workers of a cluster made and stopped inside the profiled code are listed", {
  skip_if(parallel::detectCores() < 2, "a cluster of two workers needs 2 cores")
  burn <- function(i) {
    t0 <- proc.time()[["user.self"]] + proc.time()[["sys.self"]]
    x <- 0
    while (proc.time()[["user.self"]] + proc.time()[["sys.self"]] - t0 < 0.3) x <- x + sum(seq_len(100))
    Sys.getpid()
  }
  pids <- NULL
  work <- function() {
    cl <- parallel::makeCluster(2)
    on.exit(parallel::stopCluster(cl))
    # Four tasks of 0.3 s each: the workers work for more than a second,
    # past one of the looks for workers (once a second) whatever the
    # time they take to start.
    pids <<- unique(unlist(parallel::parLapply(cl, 1:8, burn)))
  }
  # (An elapsed profile: a CPU profile reads the workers it finds.)
  expect_warning(
    p <- winch_profile(work(), interval = 0.005, event = "elapsed"),
    class = "winch_warning_processes_unsampled"
  )
  # Both ended before the profile did; each keeps what it had used when
  # last looked at (every 0.1 s): at least its first task's 0.3 s.
  workers <- summary(p)$by_process
  workers <- workers[workers$process == "[worker, not sampled]", , drop = FALSE]
  expect_true(all(pids %in% workers$pid), info = paste(workers$pid, collapse = ", "))
  expect_true(all(workers$cpu[workers$pid %in% pids] >= 0.3), info = paste(workers$cpu, collapse = ", "))
})

test_that("watching the processes adds no thread of winch's to the profile", {
  # (An earlier version looked for workers on a thread of its own, which
  # was sampled as one of the profiled process's.)
  for (event in c("cpu", "elapsed")) {
    p <- winch_profile(for (i in 1:20) Sys.sleep(0.01), event = event, interval = 0.005)
    expect_false(any(startsWith(p$threads$name, "winch")), info = paste(event, p$threads$name))
  }
})
