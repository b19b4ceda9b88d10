# The tests start processx children (callr sessions) in the same session as
# parallel's forks. processx's SIGCHLD handler, unless told to call the one
# it replaced, keeps parallel's from seeing its children end, and parallel
# then waits 10 s at R's exit ("unable to terminate some child processes":
# processx issue #236). Told, both see their own children.
withr::local_envvar(PROCESSX_NOTIFY_OLD_SIGCHLD = "true", .local_envir = teardown_env())
