.onLoad <- function(libname, pkgname) {
  rlang_hook_install()
  # rlang may be unloaded and loaded again (e.g. by devtools): install again.
  setHook(packageEvent("rlang", "onLoad"), rlang_hook_on_rlang_load)
}

.onAttach <- function(libname, pkgname) {
  rlang_hook_install()
}

.onDetach <- function(libpath) {
  rlang_hook_restore()
}

.onUnload <- function(libpath) {
  rlang_hook_restore()
  hooks <- getHook(packageEvent("rlang", "onLoad"))
  keep <- !vapply(hooks, identical, logical(1), rlang_hook_on_rlang_load)
  setHook(packageEvent("rlang", "onLoad"), hooks[keep], action = "replace")
  library.dynam.unload("winch", libpath)
}

rlang_hook_on_rlang_load <- function(...) {
  the$hook <- NULL # a fresh rlang namespace has its own original
  rlang_hook_install()
}
