# The rlang hook follows winch's namespace and attachment (see rlang_hook.R).
# rlang is imported, so it is loaded before winch and cannot be unloaded
# while winch is loaded.

.onLoad <- function(libname, pkgname) {
  # Which R this is decides the layout of R's context records.
  .Call(C_rs_init, as.integer(unclass(getRversion())[[1L]]))
  rlang_hook_install()
}

.onAttach <- function(libname, pkgname) {
  rlang_hook_install()
}

.onDetach <- function(libpath) {
  rlang_hook_restore()
}

.onUnload <- function(libpath) {
  rlang_hook_restore()
  library.dynam.unload("winch", libpath)
}
