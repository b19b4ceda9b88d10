# R's table of registered native routines (`R_registerRoutines()`), a source
# of names for stripped entry points: the core names a frame after a
# routine only when the frame's function starts exactly at the routine's
# address. Read here, in R, with public functions: getDLLRegisteredRoutines()
# for the names and getNativeSymbolInfo() for each address (a `NativeSymbol`
# external pointer holding it), and passed to the core when DLLs were loaded
# or unloaded since the last capture.
#
# When that happened is the dynamic loader's to say: its load and unload
# counters (one cheap call) gate everything else, so a capture pays nothing
# while no library comes or goes. After a change, a DLL's routines are read
# again unless the same load of it is still there: same name, path and
# identity of the load (bias and build-id, or the file's stamp), so a DLL
# unloaded and loaded again at another address, or rebuilt in place, never
# keeps the addresses of its previous load.

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
    cache <- the$registrations %||% list()
    fresh <- list()
    for (i in seq_along(dlls)) {
      k <- key[[i]]
      fresh[[k]] <- cache[[k]] %||% registered_routines(dlls[[i]])
    }
    names <- unlist(lapply(fresh, `[[`, "names"), use.names = FALSE)
    addresses <- unlist(lapply(fresh, `[[`, "addresses"), recursive = FALSE, use.names = FALSE)
    res <- rs_set_registered(as.character(names), as.list(addresses))
    # Busy (re-entered) or failed: try again at the next capture.
    if (!is.numeric(res)) {
      return(invisible(FALSE))
    }
    the$registrations <- fresh
    the$registration_key <- key
  }
  the$registration_generation <- state$generation
  invisible(TRUE)
}

# The registered routines of one DLL: names and `NativeSymbol` pointers.
# Anything unexpected leaves the DLL out (its frames stay unnamed).
registered_routines <- function(dll) {
  none <- list(names = character(), addresses = list())
  tryCatch(
    {
      routines <- getDLLRegisteredRoutines(dll)
      names <- unique(unlist(lapply(routines, names), use.names = FALSE))
      if (!length(names)) {
        return(none)
      }
      # The DLLInfo itself as PACKAGE: looks in this DLL only, also when it
      # forces symbols (where a lookup by package name finds nothing).
      infos <- lapply(names, function(n) {
        tryCatch(
          getNativeSymbolInfo(n, PACKAGE = dll, withRegistrationInfo = FALSE),
          error = function(e) NULL
        )
      })
      ok <- vapply(infos, function(x) inherits(x$address, "NativeSymbol") && typeof(x$address) == "externalptr", NA)
      list(names = names[ok], addresses = lapply(infos[ok], `[[`, "address"))
    },
    error = function(e) none
  )
}
