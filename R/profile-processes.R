# Processes that worked for a profiled process without being sampled ----
#
# winch_profile() samples the forked children of the profiled process
# (mclapply(), mcparallel(), future's multicore) from inside them, and in
# a CPU profile the R sessions of its PSOCK clusters (parallel's
# makeCluster(), future's multisession; not even its descendants, see
# winch_core::relatives) and its children that run another program
# (system2(), callr and processx children, through winch's tracer
# process) from outside (winch_core's capture::traced). Not sampled:
# those in an elapsed profile, those the kernel does not let it trace. The profile's
# collector looks at them while it runs (every 0.1 s; workers are looked
# for every second) and keeps the CPU time each used, so that summary()
# lists them and counts their time as unseen, and a warning says so: a
# profile never shows less than what happened without saying it.

# The processes of `seen` (those that worked for the profiled process
# while it ran, each with the CPU time it used meanwhile: see
# rs_profile_stop() and `winch_core::relatives::watch`) that used CPU time
# and are not among `sampled` (pids): pid, parent, relation ("child" or
# "worker"), command, cpu, whether it is the profiled process's own child
# (`own_child`), whether its time is in the profiled process's account of
# its children (`counted`, see children_accounted()), this machine's
# name (`host`) and why it was not read when reading it was tried and
# failed (`why`: the kernel refused, ...; NA otherwise).
unsampled_processes <- function(seen, sampled) {
  keep <- seen$cpu > 0 & !(seen$pid %in% sampled) & seen$pid != Sys.getpid()
  why <- seen$why %||% rep(NA_character_, length(seen$pid))
  data.frame(
    pid = seen$pid[keep], parent = seen$parent[keep], relation = seen$relation[keep],
    command = seen$command[keep], cpu = seen$cpu[keep],
    own_child = seen$relation[keep] == "child" & seen$parent[keep] == Sys.getpid(),
    counted = children_accounted(seen)[keep],
    host = rep(Sys.info()[["nodename"]], sum(keep)), why = as.character(why[keep]), stringsAsFactors = FALSE
  )
}

# Of processes not sampled (`un`, as unsampled_processes() gives them),
# those winch tried to read and could not: pid and why.
refused_processes <- function(un) {
  if (!is.data.frame(un) || is.null(un$why)) {
    return(data.frame(pid = integer(), why = character(), stringsAsFactors = FALSE))
  }
  r <- !is.na(un$why)
  data.frame(pid = as.integer(un$pid[r]), why = un$why[r], stringsAsFactors = FALSE)
}

# How summary() and the warning tell a refused process.
refused_line <- function(pid, why) sprintf("Not read: pid %d: %s", pid, why)

# Which processes of `seen` the profiled process's account of its children
# (see `winch_core::procfs::children_time`) holds the time of: its own
# children, ended or not, and a descendant through children only whose
# every ancestor below its own child had ended by the last look, as had
# itself (each waited for by its parent, so in its parent's account, and
# so on up). A descendant still running, or one under a process still
# running below its own child, is in no account yet; a worker and what
# works for it never are. (`seen$ended` missing: own children only. A
# parent pid seen twice, reused: not followed.)
children_accounted <- function(seen, me = Sys.getpid()) {
  n <- length(seen$pid)
  ended <- seen$ended %||% rep(FALSE, n)
  vapply(seq_len(n), function(i) {
    j <- i
    for (step in seq_len(n)) {
      if (!identical(seen$relation[j], "child")) {
        return(FALSE)
      }
      if (seen$parent[j] == me) {
        return(TRUE)
      }
      parent <- which(seen$pid == seen$parent[j])
      if (!isTRUE(ended[j]) || length(parent) != 1L) {
        return(FALSE)
      }
      j <- parent
    }
    FALSE
  }, logical(1))
}

# The sampled processes' table `pr` with each command as the watch last
# saw it (`seen`, as above): a forked child that ran another program
# (pipe()'s shell under R 4.5 and 4.6) is named by that program,
# not by R's command line, which it had when first sampled. Only a pid
# seen once is taken: one reused during the profile is two processes.
latest_commands <- function(pr, seen) {
  if (is.null(seen) || !length(pr$pid) || is.null(pr$command)) {
    return(pr)
  }
  reused <- seen$pid %in% seen$pid[duplicated(seen$pid)]
  now <- seen$command[!reused][match(pr$pid, seen$pid[!reused])]
  take <- !is.na(now) & nzchar(now)
  pr$command[take] <- now[take]
  pr
}

# Which processes of `un` (see unsampled_processes()) the profile's usage
# counts as its children's time already (`counted`, see
# children_accounted(); a table without it, of an earlier version: its own
# children only); not its workers, nor the processes working for those.
counted_as_child <- function(un) {
  if (!is.null(un$counted)) {
    return(un$counted %in% TRUE)
  }
  un$own_child %in% TRUE
}

# A classed warning when processes working for the profiled one used a
# share of the whole tree's CPU time worth telling (5 %; summary() lists
# any) that no sample stands for: processes not sampled at all, and, in a
# CPU profile, sampled children or workers most of whose time is unseen:
# sampled only until they ran another program (pipe()'s shell under R 4.5
# and 4.6; the sampling timer does not survive exec), working in threads
# of their own (only a process's main thread is sampled), profiling
# themselves, or workers found late.
warn_unsampled_processes <- function(p, call = rlang::caller_env()) {
  un <- p$stats$unsampled
  if (!is.data.frame(un) || p$event == "alloc") {
    return(invisible())
  }
  all <- by_process_table(p)
  pr <- all[all$process != "self", , drop = FALSE]
  not_sampled <- endsWith(pr$process, "not sampled]")
  # An elapsed profile's samples are not CPU time: there, only processes
  # not sampled at all count, with all their time. (A forked child counts
  # when most of its time is unseen; one sampled throughout misses a
  # little, as any sampled process does.)
  pr$unseen <- if (p$event == "cpu") pr$unseen else ifelse(not_sampled, pr$cpu, 0)
  mostly <- is.finite(pr$unseen) & pr$unseen > 0.5 * pr$cpu
  pr <- pr[pr$unseen > 0 & (not_sampled | mostly), , drop = FALSE]
  if (!nrow(pr)) {
    return(invisible())
  }
  tree <- tree_cpu(p, all)$total
  unseen <- sum(pr$unseen)
  if (!isTRUE(tree > 0) || unseen < 0.05 * tree) {
    return(invisible())
  }
  kind <- ifelse(pr$process == "[worker, not sampled]", "worker",
    ifelse(pr$process == "[child, not sampled]", "child", "fork")
  )
  what <- if (all(kind == "worker")) {
    "worker processes (R sessions of a PSOCK cluster or of future's multisession)"
  } else if (all(kind == "child")) {
    "child processes not sampled (programs or callr sessions not read, forks made before the profile or beyond the 32 sampled at once)"
  } else if (all(kind == "fork")) {
    "sampled children or workers most of whose CPU time no sample stands for (a program a child ran that could not be read; threads of their own; a profile of their own; a worker found late)"
  } else {
    "processes (workers of a PSOCK cluster, programs, callr sessions)"
  }
  pids <- pr$pid[order(-pr$unseen)]
  refused <- refused_processes(un)
  refused <- refused[refused$pid %in% pr$pid, , drop = FALSE]
  why <- if (nrow(refused)) {
    c(i = paste0(
      refused_line(refused$pid[[1]], refused$why[[1]]),
      if (nrow(refused) > 1L) sprintf(" (and %d more, see summary())", nrow(refused) - 1L)
    ))
  }
  rlang::warn(
    c(
      sprintf(
        "%d %s worked for the profiled process: %s of their CPU time (%.0f%% of the tree's) is not in the profile.",
        nrow(pr), what, format_seconds(unseen), 100 * unseen / tree
      ),
      i = sprintf("pid%s %s; see summary() of the profile.", if (length(pids) > 1) "s" else "", paste(utils::head(pids, 5), collapse = ", ")),
      why,
      i = paste(
        "winch_profile() samples forked children (mclapply(), future's multicore), and in a CPU profile the workers of PSOCK clusters and future's multisession and the children running programs (callr, system2()) it may trace (see ?winch_profile);",
        "record other processes with winch_record(pid, children = TRUE) from another R session, or profile inside the workers and combine the profiles with c()."
      )
    ),
    class = c("winch_warning_processes_unsampled", "winch_warning"),
    call = call
  )
}
