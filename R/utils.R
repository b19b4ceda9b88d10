# One home for winch's package state and the small helpers every part
# uses: argument checks, errors, and the options passed on to the native
# side.

# Package state ------------------------------------------------------------

# What winch remembers in a session: the rlang hook (R/rlang_hook.R), the
# option values last passed to the native side (below), the registered
# routines read (R/registration.R), throw capture and the crash report
# (R/throws.R, R/crash.R), the running profile session, whichever call
# started it (`the$profile_session`, R/profile.R), messages already given
# (say_once()).
the <- new.env(parent = emptyenv())

`%||%` <- function(x, y) if (is.null(x)) y else x

# Errors and argument checks ----------------------------------------------

# Every entry point of the Rust glue (src/rust/src, called in
# R/low-level.R) returns its result, or `list(error = <message>, class =
# <class>)`, or NULL when R could not allocate the result; errors are
# raised here, in R, with the user's call and a class (see ?winch for the
# classes).

abort_winch <- function(message, class = NULL, call = rlang::caller_env()) {
  rlang::abort(message, class = unique(c(class, "winch_error")), call = call)
}

# A bad argument from the user (checked in R before reaching native code).
abort_bad_argument <- function(message, call = rlang::caller_env()) {
  abort_winch(message, class = "winch_error_bad_argument", call = call)
}

check_result <- function(x, call = rlang::caller_env()) {
  if (is.null(x)) {
    abort_winch("winch could not allocate its result (out of memory?).",
      class = "winch_error_out_of_memory", call = call
    )
  }
  if (is.list(x) && !is.data.frame(x) && !is.null(x[["error"]])) {
    abort_winch(x[["error"]], class = x[["class"]], call = call)
  }
  x
}

check_backend <- function(backend, call = rlang::caller_env()) {
  ok <- c("auto", "cfi", "libunwind", "backtrace")
  if (!is.character(backend) || length(backend) != 1L || is.na(backend) || !backend %in% ok) {
    abort_bad_argument(
      sprintf("`backend` must be one of %s.", paste0('"', ok, '"', collapse = ", ")),
      call = call
    )
  }
  invisible(backend)
}

# Checks of single arguments ------------------------------------------------

# Each refuses a value with an error of class winch_error_bad_argument whose
# message says what is allowed, bounds included (issue 33: every argument of
# every exported function and method is checked, none fails in R's own code
# with an unclassed error, none is silently taken for something else).
# `arg` is the argument's name as the user wrote it; `call` the user's call.

# A bound as the messages show it (3600, 0.001, 1e+15).
format_bound <- function(x) format(x, scientific = abs(x) >= 1e7)

# An argument without a default that was not given (R's own error would be
# unclassed: "argument "pid" is missing, with no default").
check_required <- function(x, arg = rlang::caller_arg(x), what = "a value", call = rlang::caller_env()) {
  if (missing(x)) {
    abort_bad_argument(sprintf("`%s` is missing: give %s.", arg, what), call = call)
  }
  invisible()
}

# One number from `min` to `max` (more than `min` with `min_open`), in
# `unit`s; `Inf` only where `max` is. `why` ends the message.
check_number <- function(x, min, max, unit = "", min_open = FALSE, why = NULL,
                         arg = rlang::caller_arg(x), call = rlang::caller_env()) {
  ok <- is.numeric(x) && length(x) == 1L && !is.na(x) && x <= max && (if (min_open) x > min else x >= min)
  if (!ok) {
    u <- if (nzchar(unit)) paste0(" ", unit) else ""
    low <- sprintf("%s %s%s", if (min_open) "more than" else "at least", format_bound(min), u)
    high <- if (is.finite(max)) sprintf(" and at most %s%s", format_bound(max), u) else ""
    abort_bad_argument(sprintf("`%s` must be one number, %s%s%s.", arg, low, high, why %||% ""), call = call)
  }
  invisible(x)
}

# One whole number from `min` to `max` (`Inf` allowed where `max` is, and
# `why` then says what it means), or NULL with `null_ok`.
check_count <- function(x, min, max = Inf, why = NULL, null_ok = FALSE, arg = rlang::caller_arg(x),
                        call = rlang::caller_env()) {
  if (null_ok && is.null(x)) {
    return(invisible(x))
  }
  ok <- is.numeric(x) && length(x) == 1L && !is.na(x) && x == trunc(x) && x >= min && x <= max
  if (!ok) {
    high <- if (is.finite(max)) sprintf(" and at most %s", format_bound(max)) else ""
    abort_bad_argument(sprintf(
      "`%s` must be %sone whole number, at least %s%s%s.",
      arg, if (null_ok) "`NULL` or " else "", format_bound(min), high, why %||% ""
    ), call = call)
  }
  invisible(x)
}

# One of `choices` (a string). The whole vector `choices`, a function's
# default as with match.arg(), stands for its first element. Returns the
# choice.
check_choice <- function(x, choices, arg = rlang::caller_arg(x), call = rlang::caller_env()) {
  if (identical(x, choices)) {
    return(choices[[1L]])
  }
  if (!is.character(x) || length(x) != 1L || is.na(x) || !x %in% choices) {
    quoted <- paste0('"', choices, '"')
    allowed <- if (length(quoted) == 1L) {
      quoted
    } else {
      paste(paste(quoted[-length(quoted)], collapse = ", "), "or", quoted[[length(quoted)]])
    }
    abort_bad_argument(sprintf("`%s` must be %s.", arg, allowed), call = call)
  }
  x
}

# No arguments in `...` (rlang::check_dots_empty()'s errors are not
# winch_error).
check_no_dots <- function(..., call = rlang::caller_env()) {
  if (...length()) {
    named <- names(rlang::enquos(...))
    what <- if (any(nzchar(named))) {
      paste0("`", named[nzchar(named)], "`", collapse = ", ")
    } else {
      "an argument without a name"
    }
    abort_bad_argument(sprintf("`...` must be empty; %s was given (misspelled?).", what), call = call)
  }
  invisible()
}

# Only arguments named in `ignored` in `...`: those a generic's default
# method takes, which R passes on to methods (print() of a list passes
# `digits` and the like to its elements' print methods), and which a
# method ignores. `takes` names the method's own, for the message.
check_dots_among <- function(..., ignored, takes, call = rlang::caller_env()) {
  if (!...length()) {
    return(invisible())
  }
  named <- names(rlang::enquos(...))
  bad <- !nzchar(named) | !named %in% ignored
  if (any(bad)) {
    what <- if (nzchar(named[bad][[1L]])) sprintf("`%s`", named[bad][[1L]]) else "an argument without a name"
    abort_bad_argument(sprintf("Unknown argument %s: this method takes %s.", what, takes), call = call)
  }
  invisible()
}

# The arguments of a generic's default method, which its methods get passed
# on from R's own code and ignore.
default_method_args <- function(fun) setdiff(names(formals(fun)), c("x", "object", "..."))

check_flag <- function(x, arg = rlang::caller_arg(x), call = rlang::caller_env()) {
  if (!is.logical(x) || length(x) != 1L || is.na(x)) {
    abort_bad_argument(sprintf("`%s` must be `TRUE` or `FALSE`.", arg), call = call)
  }
  invisible(x)
}

# Checks that `path` can be written now, as Rprof() does by opening its file
# at the start, so that work is never done for a file that cannot take its
# result: a directory, a read-only file system or file, no room. A file this
# check creates is removed again. Errors are of class winch_error_io.
check_writable <- function(path, arg = rlang::caller_arg(path), call = rlang::caller_env()) {
  if (is.null(path)) {
    return(invisible(path))
  }
  # (After check_output_file(): `path` is a regular file or a new one.)
  existed <- file.exists(path)
  why <- NULL
  refused <- function(cnd) {
    why <<- conditionMessage(cnd)
    NULL
  }
  con <- tryCatch(file(path, open = "ab", raw = TRUE), error = refused, warning = refused)
  if (is.null(con)) {
    abort_io(sprintf("Cannot write `%s` (%s): %s", arg, path, why), call = call)
  }
  close(con)
  if (!existed) {
    unlink(path)
  }
  invisible(path)
}

abort_io <- function(message, call = rlang::caller_env()) {
  abort_winch(message, class = "winch_error_io", call = call)
}

# Writes the profile `p` to `file` after the profiled code ran: a failure
# now (the disk filled up, the directory went away) must not lose the
# profile, so it is a warning of class winch_warning_io and `p` is returned.
write_profile_file <- function(p, file, lines) {
  failed <- function(e) {
    rlang::warn(
      c(conditionMessage(e), i = "The profile is returned; write it with `winch_write_rprof()`."),
      class = c("winch_warning_io", "winch_warning")
    )
  }
  tryCatch(
    winch_write_rprof(p, file, lines = lines),
    winch_error_io = failed,
    winch_error_bad_argument = failed
  )
  p
}

# File arguments -----------------------------------------------------------

# Every file argument of an exported function (and of the command line,
# R/cli.R) is checked by check_input_file() or check_output_file() before
# anything opens, reads or writes it: only regular files are read or
# written. Opening a FIFO waits for its other end (R would hang, deaf to
# interrupts), a device can be read without end (/dev/zero) or swallow
# what is written, a directory is no file. The core checks again on the
# descriptor it opens (winch_core::files, with O_NONBLOCK), so a file
# swapped in between cannot block it either.

# The largest ELF file (an executable, a library) winch reads: the core's
# bound (winch_core::files::MAX_ELF), which it checks again.
elf_max_bytes <- 4 * 1024^3

# How messages name what a path is (the kinds of rs_file_kind()).
file_kinds <- c(
  directory = "a directory", fifo = "a FIFO (named pipe)", `character device` = "a character device",
  `block device` = "a block device", socket = "a socket", other = "not a regular file"
)

# A file to read: one string naming an existing, non-empty regular file
# (symbolic links followed) of at most `max_bytes` bytes; NULL too with
# `null_ok`. `what` says what it should hold ("a core file"). Errors are of
# class winch_error_bad_argument.
check_input_file <- function(path, arg = rlang::caller_arg(path), max_bytes = Inf, what = "a file",
                             null_ok = FALSE, call = rlang::caller_env()) {
  if (null_ok && is.null(path)) {
    return(invisible(path))
  }
  if (!is.character(path) || length(path) != 1L || is.na(path) || !nzchar(path)) {
    abort_bad_argument(sprintf(
      "`%s` must be %sthe path of %s (one string).", arg, if (null_ok) "`NULL` or " else "", what
    ), call = call)
  }
  k <- rs_file_kind(path)
  allowed <- sprintf("`%s` must be %s: an existing, non-empty regular file", arg, what)
  if (identical(k$kind, "missing")) {
    abort_bad_argument(sprintf("`%s` does not exist: %s", arg, path), call = call)
  }
  if (identical(k$kind, "unknown")) {
    abort_bad_argument(sprintf("`%s` cannot be looked at (%s): %s", arg, k$why, path), call = call)
  }
  if (!identical(k$kind, "file")) {
    abort_bad_argument(sprintf("%s; %s is %s.", allowed, path, file_kinds[[k$kind]]), call = call)
  }
  if (k$size == 0) {
    abort_bad_argument(sprintf("%s; %s is empty.", allowed, path), call = call)
  }
  if (k$size > max_bytes) {
    abort_bad_argument(sprintf(
      "%s of at most %s; %s has %s bytes.", allowed, format_bytes(max_bytes), path,
      format(k$size, big.mark = ",", scientific = FALSE)
    ), call = call)
  }
  invisible(path)
}

# A file to write: one string naming a regular file (symbolic links
# followed), or a new file in a directory that exists; NULL too with
# `null_ok`. A directory, FIFO, device or socket is an error of class
# winch_error_io (the class of every file winch cannot write), the rest
# winch_error_bad_argument.
check_output_file <- function(path, arg = rlang::caller_arg(path), null_ok = FALSE, call = rlang::caller_env()) {
  if (null_ok && is.null(path)) {
    return(invisible(path))
  }
  if (!is.character(path) || length(path) != 1L || is.na(path) || !nzchar(path)) {
    what <- if (null_ok) "`NULL` or a single file name" else "a single file name"
    abort_bad_argument(sprintf("`%s` must be %s.", arg, what), call = call)
  }
  k <- rs_file_kind(path)
  if (identical(k$kind, "missing")) {
    if (!dir.exists(dirname(path))) {
      abort_bad_argument(sprintf("The directory of `%s` does not exist: %s", arg, dirname(path)), call = call)
    }
    return(invisible(path))
  }
  if (identical(k$kind, "unknown")) {
    abort_io(sprintf("Cannot write `%s` (%s): %s", arg, path, k$why), call = call)
  }
  if (!identical(k$kind, "file")) {
    abort_io(sprintf(
      "Cannot write `%s`: %s is %s; it must be a regular file or a new file in an existing directory.",
      arg, path, file_kinds[[k$kind]]
    ), call = call)
  }
  invisible(path)
}

# Options ------------------------------------------------------------------

# Passes winch's options on to the native side, each only when it changed
# since it was last passed: `winch.debug_dirs`, `winch.debuginfod` and
# `winch.capture_throws` (skipped with `capture_throws = FALSE`), and with
# them R's table of registered routines when DLLs were loaded or unloaded
# (R/registration.R). Before every capture; code that needs one part only
# calls that part.
sync_options <- function(call = rlang::caller_env(), capture_throws = TRUE) {
  if (in_step(capture_throws)) {
    return(invisible())
  }
  generation <- rs_loader_state(character())$generation
  sync_debug_dirs(call = call)
  sync_registrations()
  sync_debuginfod(call = call)
  if (capture_throws) {
    sync_capture_throws()
  }
  # In step only once every part is (a busy cache is tried again).
  if (identical(the$registration_generation, generation) &&
      identical(the$debug_dirs, getOption("winch.debug_dirs", "/usr/lib/debug"))) {
    rs_set_in_step(getOption("winch.debug_dirs"), getOption("winch.debuginfod"), generation)
  }
  invisible()
}

# Whether nothing sync_options() passes on changed since its last complete
# sync: the common case, one .Call that allocates nothing but its answer (it
# runs on every capture and every hooked rlang trace). The core compares
# the options' values and the loader's generation with those of that sync.
in_step <- function(capture_throws = TRUE) {
  rs_in_step() && (!capture_throws || throws_in_step())
}

# Whether throw capture is on or off as `winch.capture_throws` says.
throws_in_step <- function() {
  identical(getOption("winch.capture_throws", TRUE), the$throws_on)
}

# Passes the `winch.debug_dirs` option to the Rust side when it changed.
sync_debug_dirs <- function(call = rlang::caller_env()) {
  dirs <- getOption("winch.debug_dirs", "/usr/lib/debug")
  if (!identical(dirs, the$debug_dirs)) {
    if (!is.character(dirs) || anyNA(dirs)) {
      abort_bad_argument("The `winch.debug_dirs` option must be a character vector of directories.", call = call)
    }
    check_result(rs_set_debug_dirs(dirs), call = call)
    the$debug_dirs <- dirs
  }
  invisible(dirs)
}

# Passes the `winch.debuginfod` option to the core when it changed.
sync_debuginfod <- function(call = rlang::caller_env()) {
  opt <- getOption("winch.debuginfod")
  if (!is.null(opt) && !(is.logical(opt) && length(opt) == 1L && !is.na(opt))) {
    abort_bad_argument("The `winch.debuginfod` option must be `TRUE` or `FALSE`.", call = call)
  }
  on <- isTRUE(opt)
  if (!identical(on, the$debuginfod)) {
    res <- check_result(rs_set_debuginfod(on), call = call)
    the$debuginfod <- on
    if (on && !isTRUE(res$available)) {
      say_once("debuginfod_unavailable", paste0(
        "winch cannot fetch debug files from debuginfod servers: ", res$why, "."
      ))
    }
  }
  invisible(on)
}

# The state of the `winch.capture_throws` option: TRUE (also when unset),
# FALSE, or NA for a value that is neither.
capture_throws_option <- function() {
  opt <- getOption("winch.capture_throws", TRUE)
  if (isTRUE(opt) || isFALSE(opt)) opt else NA
}

# Turns throw capture on or off as the option says (at load, after each
# top-level expression, and when winch's functions are used). A bad value
# is warned about (once per value) and changes nothing.
sync_capture_throws <- function() {
  want <- capture_throws_option()
  if (is.na(want)) {
    opt <- getOption("winch.capture_throws")
    key <- paste(deparse(opt, nlines = 1L), collapse = "")
    if (!identical(key, the$bad_throws_option)) {
      the$bad_throws_option <- key
      rlang::warn(
        c(
          "The option `winch.capture_throws` must be `TRUE` or `FALSE`.",
          i = sprintf("It is %s; throw capture stays %s.", key, if (isTRUE(the$throws_on)) "on" else "off")
        ),
        class = c("winch_warning_bad_option", "winch_warning")
      )
    }
    return(invisible(isTRUE(the$throws_on)))
  }
  the$bad_throws_option <- NULL
  if (!identical(want, the$throws_on)) {
    res <- rs_throws_set(want)
    if (is.list(res) && !is.null(res[["error"]])) {
      # Not available here (another platform): remembered, not retried.
      the$throws_on <- want
      the$throws_unavailable <- res[["error"]]
      return(invisible(FALSE))
    }
    the$throws_on <- want
  }
  invisible(want)
}
