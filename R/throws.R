#' The stack of the last C++ exception or Rust panic
#'
#' While winch is loaded and the option `winch.capture_throws` is `TRUE`
#' (the default), winch records the native stack at the moment of every C++
#' `throw` and Rust panic in R's main thread, in every loaded library and
#' in libraries loaded later. `winch_last_throw()` returns the newest record.
#' The joint views ([winch_sys_calls()], [winch_add_trace_back()] and rlang
#' backtraces with the hook, see `vignette("winch")`) show a recorded throw
#' by themselves when it caused the R error they describe.
#'
#' @section How throws are recorded:
#' C++ throws (`__cxa_throw`, `std::rethrow_exception`), rethrows (`throw;`)
#' and Rust panics all enter libgcc's unwinder (`_Unwind_RaiseException`,
#' `_Unwind_Resume_or_Rethrow`) through the calling library's global offset
#' table (GOT). winch points those GOT entries of every loaded library to a
#' small hook (read-only "full RELRO" pages and lazily bound entries
#' included; the entries' symbol versions are respected), and does the same
#' for libraries R loads later (it watches R's `dlopen()`). The hook records
#' the instruction and stack pointers of the throwing thread up to the first
#' frame of R's interpreter, without allocating, into a ring of the last 16
#' throws, then lets the exception go on exactly as before. Names, files and
#' lines are looked up only when a record is shown. A rethrow of a recorded
#' exception keeps the original throw site.
#'
#' No `LD_PRELOAD` and no recompilation is needed. Covered: Linux on x86_64,
#' libraries that call libgcc's unwinder through their GOT (C++ compiled
#' with GCC or Clang against libstdc++ and linked to the shared libstdc++;
#' Rust built for `*-linux-gnu`, whose standard library links libgcc_s).
#' A library linked with `-static-libstdc++` alone is covered (its runtime
#' calls the shared unwinder); one that also links libgcc statically is
#' covered only while its runtime's symbols are exported and interposed by
#' the shared libstdc++ (loaded in R on Debian). Not covered (nothing is
#' recorded, nothing breaks): a library with its own hidden copy of the
#' runtime and unwinder (`-static-libstdc++ -static-libgcc
#' -Wl,--exclude-libs,ALL`), code that uses another unwinder (LLVM's
#' libunwind, libc++abi), throws in threads other than R's main thread, and
#' other platforms (macOS, Windows, other architectures: nothing is
#' patched, and this function returns an empty table).
#'
#' Frames in a library unloaded since the throw keep its path and offset and
#' are left unnamed; they are never named after a library loaded at the same
#' address later (`pkgload::load_all()` unloads and loads a package's
#' library).
#'
#' @section Cost:
#' Nothing while nothing is thrown. Each throw in R's main thread costs a
#' walk of the frames between the throw and R's interpreter, with their
#' unwind rules cached: about 1 microsecond at 40 frames
#' (`bench/throws.R` measures 1.1 microseconds added to a throw and catch
#' that cost 10.7 microseconds at that depth). Memory: about 300 KB (the
#' ring and a cache of unwind rules). Set `options(winch.capture_throws =
#' FALSE)` to turn it off (the GOT entries are given back); a value other
#' than `TRUE` or `FALSE` is warned about (once per value) and changes
#' nothing.
#'
#' @return A data frame like [winch_trace_back()]'s, innermost frame first:
#'   the frames at the throw, from the function that threw (the throw
#'   machinery itself, `__cxa_throw` and Rust's panic runtime, left out) to
#'   the first frame of R's interpreter. Attributes: `kind` (`"C++
#'   exception"`, `"Rust panic"` or `"foreign exception"`), `type` (the C++
#'   type of the thrown object, e.g. `"std::runtime_error"`, where the C++
#'   runtime records it; `"Rust panic"` for panics), `location` (file and
#'   line of the innermost frame that has them: where a panic happened, with
#'   debug information) and `rethrown` (how often it was rethrown). When
#'   nothing was recorded: a data frame with the same columns and no rows,
#'   `kind` and `type` `NA`.
#' @seealso [winch_crash_report()] for crashes.
#' @export
#' @examples
#' winch_last_throw()
winch_last_throw <- function() {
  sync_capture_throws()
  check_result(rs_last_throw())
}

# What throw capture covers now: supported, installed, slots, modules.
throw_capture_status <- function() {
  check_result(rs_throws_status())
}

# Removes throw capture (at unload).
uninstall_capture_throws <- function() {
  if (isTRUE(the$throws_on)) {
    rs_throws_set(FALSE)
  }
  the$throws_on <- NULL
  invisible()
}

# Runs after every top-level expression that completed: a new epoch for
# throw records (a throw is never matched to a later, unrelated error), the
# option applied, modules loaded meanwhile hooked, and the crash report's
# handlers re-armed if R took SIGSEGV back (after a C stack overflow).
# Never fails, and stays registered.
winch_task_callback <- function(...) {
  tryCatch(
    {
      rs_throws_tick()
      sync_capture_throws()
      crash_report_rearm()
    },
    error = function(e) NULL
  )
  TRUE
}

add_task_callback <- function() {
  if (!"winch" %in% getTaskCallbackNames()) {
    addTaskCallback(winch_task_callback, name = "winch")
  }
  invisible()
}

remove_task_callback <- function() {
  if ("winch" %in% getTaskCallbackNames()) {
    removeTaskCallback("winch")
  }
  invisible()
}
