# The rlang hook.
#
# rlang's trace_back() calls its internal `add_winch_trace(trace)`, which calls
# winch when `options(rlang_trace_use_winch = TRUE)`. rlang 1.0.5 and later
# disabled that function with an early `return(trace)`. While winch is loaded
# (and attached, if it was attached), winch puts its own `add_winch_trace()`
# into rlang's namespace, and only when rlang's own is the disabled one: a
# rlang whose hook works calls winch_add_trace_back() itself and is left
# alone, so native frames are never added twice. The original is put back
# when winch is detached or unloaded.
#
# The replacement does nothing unless the option is TRUE (it calls rlang's
# original, which returns the trace unchanged), never raises an error (a
# failure leaves the trace as it was), and does not recurse (an rlang error
# inside it would make a backtrace of its own).

rlang_hook_is_disabled <- function(fn) {
  body <- body(fn)
  is.function(fn) && is.call(body) && identical(body[[1L]], quote(`{`)) &&
    length(body) >= 2L && identical(body[[2L]], quote(return(trace)))
}

rlang_hook_install <- function(ns = rlang_ns()) {
  if (!is.null(the$hook) || is.null(ns)) {
    return(invisible(FALSE))
  }
  original <- get0("add_winch_trace", envir = ns, inherits = FALSE)
  if (!is.function(original) || !rlang_hook_is_disabled(original)) {
    return(invisible(FALSE))
  }
  hook <- function(trace) winch_rlang_hook(trace, original)
  replace_binding(ns, "add_winch_trace", hook)
  # rlang's rule for the first row it keeps, looked up once.
  trim_idx <- get0("trace_trim_env_idx", envir = ns, inherits = FALSE)
  the$hook <- list(ns = ns, original = original, hook = hook, trim_idx = trim_idx)
  invisible(TRUE)
}

rlang_hook_restore <- function() {
  installed <- the$hook
  if (is.null(installed)) {
    return(invisible(FALSE))
  }
  the$hook <- NULL
  current <- get0("add_winch_trace", envir = installed$ns, inherits = FALSE)
  if (identical(current, installed$hook)) {
    replace_binding(installed$ns, "add_winch_trace", installed$original)
  }
  invisible(TRUE)
}

rlang_ns <- function() {
  if (isNamespaceLoaded("rlang")) asNamespace("rlang") else NULL
}

rlang_hook_installed <- function() {
  !is.null(the$hook)
}

replace_binding <- function(env, name, value) {
  if (bindingIsLocked(name, env)) {
    unlockBinding(name, env)
    on.exit(lockBinding(name, env))
  }
  assign(name, value, envir = env)
}

use_winch_option <- function(opt = getOption("rlang_trace_use_winch")) {
  !is.null(opt) && isTRUE(as.logical(opt)[1L])
}

# The replacement of rlang's add_winch_trace(). Called by rlang::trace_back()
# with the trace of frames 1..bottom, before rlang trims it at
# `rlang_trace_top_env`.
winch_rlang_hook <- function(trace, original) {
  opt <- getOption("rlang_trace_use_winch")
  if (!isTRUE(opt) && !use_winch_option(opt)) {
    return(original(trace))
  }
  if (isTRUE(the$in_hook)) {
    return(trace)
  }
  the$in_hook <- TRUE
  on.exit(the$in_hook <- FALSE)
  tryCatch(
    add_native_in_trace_back(trace, parent.frame(2L)),
    error = function(e) trace
  )
}

# Adds native frames to the trace being built by rlang::trace_back(), whose
# evaluation frame is `tb`. Rows are frames 1..nrow(trace) (rlang takes
# `frames <- sys.frames()[seq_len(bottom)]`), and rlang will next keep rows
# `start:nrow` of what we return, where `start` comes from its top-env rule;
# native rows are only inserted after `start`, so that rule still holds.
add_native_in_trace_back <- function(trace, tb) {
  m <- .row_names_info(trace, 2L)
  if (!m || has_native_rows(trace) || !winch_available()) {
    return(trace)
  }
  # rlang's frames are the first m of sys.frames() (it took them in its
  # trace_back(), which is still running, so they cannot have changed):
  # they are given to the core as they are, which checks them environment
  # by environment against R's context chain (a fresh sys.frames() cost
  # 40 us at 100 frames).
  tb_frames <- get0("frames", envir = tb, inherits = FALSE)
  if (!is.list(tb_frames) || length(tb_frames) != m) {
    return(trace)
  }
  # rlang keeps every row when no top environment is given, set or implied
  # by knitr (the first tests of its trace_trim_env_idx()): the usual case,
  # answered here without a call.
  top <- get0("top", envir = tb, inherits = FALSE)
  start <- if (is.null(top) && is.null(getOption("rlang_trace_top_env")) && !isTRUE(getOption("knitr.in.progress"))) {
    1L
  } else {
    trace_keep_start(m, tb_frames, top)
  }
  if (is.na(start)) {
    return(trace)
  }
  # sys.calls() copies every call; the core needs it only until it has
  # checked the context records' calls once in this session.
  my_calls <- if (isTRUE(the$calls_checked)) NULL else as.list(sys.calls())[seq_len(m)]
  out <- splice_native(trace, NULL, tb_frames, my_calls, first = start)
  # Only a capture whose placement used the context chain checked the calls
  # (a trace with nothing added has no `winch` attribute).
  placement <- attr(out, "winch", exact = TRUE)$placement
  if (!is.null(my_calls) && (identical(placement, "exact") || identical(placement, "approximate"))) {
    the$calls_checked <- TRUE
  }
  out
}

# The first row rlang::trace_back() will keep (NA if it cannot be known).
trace_keep_start <- function(m, frames, top) {
  idx_fn <- the$hook$trim_idx %||% get0("trace_trim_env_idx", envir = asNamespace("rlang"), inherits = FALSE)
  if (!is.function(idx_fn)) {
    return(NA_integer_)
  }
  idx <- idx_fn(m, frames, top)
  if (isTRUE(idx)) {
    return(1L)
  }
  if (!length(idx)) {
    return(m + 1L)
  }
  as.integer(idx[[1L]])
}

rlang_trace_back_fn <- function() {
  ns <- rlang_ns()
  if (is.null(ns)) NULL else get0("trace_back", envir = ns, inherits = FALSE)
}
