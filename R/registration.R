# R's table of registered native routines (`R_registerRoutines()`), a source
# of names for stripped entry points: the core names a frame after a
# routine only when the frame's function starts exactly at the routine's
# address. The core reads the routines from the DLLs' own `DllInfo` records
# (the `info` pointers of getLoadedDLLs(), one call for all DLLs; the
# record's layout has one home, src/rust/core/src/outside/registration.rs),
# when DLLs were loaded or unloaded since the last capture. (Reading them in
# R, with getNativeSymbolInfo() per routine, took 30 ms at the first
# capture.)
#
# When that happened is the dynamic loader's to say: its load and unload
# counters (one cheap call) gate everything else, so a capture pays nothing
# while no library comes or goes. After a change, the table is read again
# unless the same loads of the same DLLs are still there: same name, path
# and identity of the load (bias and build-id, or the file's stamp), so a
# DLL unloaded and loaded again at another address, or rebuilt in place,
# never keeps the addresses of its previous load.

sync_registrations <- function() {
  generation <- rs_loader_state(character())$generation
  if (identical(generation, the$registration_generation)) {
    return(invisible(FALSE))
  }
  dlls <- getLoadedDLLs()
  paths <- vapply(dlls, function(d) as.character(d[["path"]])[1L], "")
  state <- rs_loader_state(paths)
  if (!is.list(state) || length(state$identity) != length(dlls)) {
    return(invisible(FALSE))
  }
  # Where the loader knows no module by the DLL's path (R's own "base"),
  # nothing shows a reload: such a DLL is read again after every change.
  identity <- state$identity
  identity[is.na(identity)] <- paste(c("unknown", state$generation), collapse = ":")
  key <- paste(names(dlls), paths, identity, sep = "\r")
  if (!identical(key, the$registration_key)) {
    counts <- rs_set_registered_dlls(lapply(dlls, function(d) d[["info"]]))
    # Busy (re-entered) or failed: try again at the next capture.
    if (!is.integer(counts) || length(counts) != length(dlls)) {
      return(invisible(FALSE))
    }
    # Routines read per DLL load (NA: its record did not check out).
    counts <- as.list(counts)
    names(counts) <- key
    the$registrations <- counts
    the$registration_key <- key
  }
  the$registration_generation <- state$generation
  invisible(TRUE)
}

