# The rlang hook follows winch's namespace and attachment (see rlang_hook.R).
# rlang is imported, so it is loaded before winch and cannot be unloaded
# while winch is loaded.

.onLoad <- function(libname, pkgname) {
  # Which R this is decides the layout of R's context records.
  rs_init(as.integer(unclass(getRversion())[[1L]]))
  rlang_hook_install()
  # Throw capture follows the option `winch.capture_throws` (default TRUE);
  # the crash report is turned on at load by `winch.crash_report = TRUE`.
  sync_capture_throws()
  crash_report_at_load()
  add_task_callback()
}

.onAttach <- function(libname, pkgname) {
  rlang_hook_install()
}

.onDetach <- function(libpath) {
  rlang_hook_restore()
}

.onUnload <- function(libpath) {
  rlang_hook_restore()
  # Nothing may point into winch's library once it is unloaded: a profile
  # still running is stopped (its timer, signal handler and collector
  # thread), GOT slots and signal handlers are given back first.
  tryCatch(profile_stop_discard(why = "winch was unloaded while it ran"), error = function(e) NULL)
  remove_task_callback()
  uninstall_capture_throws()
  crash_report_off_at_unload()
  # Frame tables' columns call into winch's library whenever R reads
  # them (they are ALTREP vectors, src/rust/src/lazy_columns.rs): while any
  # is alive the library stays loaded, and library(winch) finds it so.
  if (!lazy_columns_alive()) {
    library.dynam.unload("winch", libpath)
  }
}

# Whether columns made by winch's library are alive (after collections, so
# that only reachable ones count: the first spares the rows of dead traces,
# which get their finalizer back at the end of each top-level call, as
# rs_lazy_columns_settle() does, and go at the next;
# src/rust/src/lazy_columns.rs);
# TRUE when that cannot be told.
lazy_columns_alive <- function() {
  tryCatch(
    {
      if (rs_lazy_columns(NULL)$live > 0) {
        gc(verbose = FALSE)
        rs_lazy_columns_settle()
        gc(verbose = FALSE)
      }
      rs_lazy_columns(NULL)$live > 0
    },
    error = function(e) TRUE
  )
}
