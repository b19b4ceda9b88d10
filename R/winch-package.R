#' @keywords internal
#' @section Options:
#' * `winch.backend`: the unwinder used by default, `"auto"` (the default),
#'   `"cfi"`, `"libunwind"` or `"backtrace"`; see [winch_trace_back()].
#' * `winch.debug_dirs`: directories searched for separate debug files, as
#'   `<dir>/.build-id/xx/yyyy.debug` and for `.gnu_debuglink` targets
#'   (default `"/usr/lib/debug"`); the first 64 distinct ones are searched.
#' * `winch.debuginfod`: set to `TRUE` to fetch the separate debug files of
#'   native modules from the debuginfod servers in `DEBUGINFOD_URLS` (by
#'   build-id; cached in `DEBUGINFOD_CACHE_PATH`, else the standard client
#'   cache; each fetch limited to `DEBUGINFOD_TIMEOUT` seconds, default 3).
#'   Needs elfutils' `libdebuginfod.so.1` (Debian: `libdebuginfod1`). Unset
#'   (the default) or `FALSE`: no network request is ever made; unset, winch
#'   says once per session when debuginfod servers are configured and could
#'   name frames. See "How frames are named" in `vignette("winch")`.
#' * `winch.use_contexts`: set to `FALSE` to place native frames without
#'   reading R's context chain (the fallback described in
#'   `vignette("winch")`), e.g. to compare.
#' * `rlang_trace_use_winch`: set to `TRUE` to have rlang's backtraces include
#'   native frames; see [winch_add_trace_back()].
#' * `winch.capture_throws`: record the native stack of every C++ throw and
#'   Rust panic (default `TRUE`); see [winch_last_throw()].
#' * `winch.crash_report`: `TRUE` turns the crash report on when winch is
#'   loaded (read at load only; default `FALSE`); see [winch_crash_report()].
#'
#' @section Environment variables:
#' * `WINCH_NO_PROCESS_VM_READV=1`, set before winch's first capture: winch
#'   acts as if the kernel refused `process_vm_readv()` (as a seccomp
#'   profile may): it then reads only memory it knows to be mapped (the
#'   stack, R's own data and node stack), and labels or places less where
#'   it would need more. For testing those fallbacks; never needed otherwise.
#'
#' @section Warnings:
#' `winch_warning_bad_option` (class `winch_warning` too): an option above
#' has a value winch cannot use; it is ignored. `winch_warning_crash_report`:
#' the crash report could not be turned on at load.
#'
#' @section Errors:
#' Errors raised by winch are rlang conditions of class `winch_error` and one
#' more specific class, so they can be caught by kind:
#' * `winch_error_bad_argument`: an argument is not acceptable (wrong type,
#'   length, `NA`, a path that does not exist, an unknown backend name); a
#'   file to read that is not a non-empty regular file (a directory, a
#'   FIFO, a device), is larger than its kind of file can be, or is not
#'   of that kind.
#' * `winch_error_unavailable`: this platform or build cannot do it (no
#'   unwinder works here, the backend asked for is not built in).
#' * `winch_error_wrong_thread`: the call came from a thread other than R's
#'   main thread.
#' * `winch_error_busy`: winch's caches are in use by this same thread (a
#'   capture re-entered, e.g. from a signal handler).
#' * `winch_error_unreadable`, `winch_error_inconsistent`: R's memory could
#'   not be read, or what was read does not hold together. Captures never
#'   raise these (they fall back, see `vignette("winch")`); diagnostics may.
#' * `winch_error_io`: a file could not be written (the system's reason in
#'   the message: no space left, a read-only file system), or its path
#'   names something other than a regular file (a directory, a FIFO, a
#'   device). Files are only ever read and written if they are regular
#'   files, so that no call waits for the other end of a FIFO or reads a
#'   device without end.
#' * `winch_error_out_of_memory`: R could not allocate the result.
#' * `winch_error_profile_lost`: a profile was stopped from outside the
#'   call that started it (winch was unloaded while [winch_profile()]'s
#'   `expr` ran); its samples are lost.
#' * `winch_error_internal`: a bug in winch (please report it).
"_PACKAGE"

## usethis namespace: start
#' @useDynLib winch, .registration = TRUE, .fixes = "C_"
#' @importFrom rlang abort
## usethis namespace: end
NULL
