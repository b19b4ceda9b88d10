# Every `.Call()` into winch's native library, one small function each,
# named after the entry point (`rs_joint()` calls `C_rs_joint`). The entry
# points are listed in src/init.c and implemented in src/rust/src; their
# arguments are passed on unchanged, in the same order. What they return is
# the entry point's raw result: its value, or `list(error = <message>,
# class = <class>)`, or NULL when R could not allocate the result; the
# callers turn that into a value or an error with check_result()
# (R/utils.R).
#
# A few calls are not here, on purpose: those whose result describes the
# stack of the R code that makes the call, so that a wrapper's frame would
# show in it (a frame in joint traces, more interpreter frames in a native
# trace, one more context in R's context chain):
# * `winch_call()` and `winch_stop()` (R/call.R): their own frame is the R
#   frame right above their native frame in joint traces;
# * `winch_trace_back()` (R/trace_back.R): with `libr = TRUE` it returns the
#   interpreter's frames that evaluate it;
# * `context_chain()` and `stage_times()` (R/native.R): the chain, and the
#   cost of a capture, at the caller's depth.
#
# The other entry points are not affected by a wrapper's frame: joint
# captures (rs_joint) show only the frames of the caller's `sys.frames()`
# and what lies between them; the profiler samples the profiled code only;
# its probes look for a context further out (the loop's for
# rs_profile_learn_loop, the probe method's for rs_rprof_running) or read
# every byte-code call's context alike (rs_profile_learn_bc).

# Setup -------------------------------------------------------------------

rs_init <- function(r_major) .Call(C_rs_init, r_major)
rs_available <- function() .Call(C_rs_available)
rs_backends <- function() .Call(C_rs_backends)
rs_entry_points <- function() .Call(C_rs_entry_points)

# Captures ----------------------------------------------------------------

rs_joint <- function(backend, frames, calls, libr, use_contexts) {
  .Call(C_rs_joint, backend, frames, calls, libr, use_contexts)
}

# rs_splice_native() is called in R/add_trace_back.R (splice_native()),
# directly: it runs inside every hooked rlang trace.
rs_match_rows <- function(trace_calls, calls) .Call(C_rs_match_rows, trace_calls, calls)

rs_splice_calls <- function(n, r_frame) .Call(C_rs_splice_calls, n, r_frame)

# Diagnostics and benchmarks ----------------------------------------------

rs_thread_capture <- function(backend) .Call(C_rs_thread_capture, backend)
rs_cache_info <- function() .Call(C_rs_cache_info)
rs_lazy_columns <- function(x) .Call(C_rs_lazy_columns, x)
rs_lazy_columns_settle <- function() .Call(C_rs_lazy_columns_settle)

# Names: debug files, registered routines, debuginfod -----------------------

rs_set_debug_dirs <- function(dirs) .Call(C_rs_set_debug_dirs, dirs)
rs_loader_state <- function(paths) .Call(C_rs_loader_state, paths)
rs_set_in_step <- function(debug_dirs, debuginfod, generation) .Call(C_rs_set_in_step, debug_dirs, debuginfod, generation)
rs_in_step <- function() .Call(C_rs_in_step)
rs_set_registered_dlls <- function(infos) .Call(C_rs_set_registered_dlls, infos)
rs_set_debuginfod <- function(enabled) .Call(C_rs_set_debuginfod, enabled)
rs_debuginfod_info <- function() .Call(C_rs_debuginfod_info)

# Profiler ----------------------------------------------------------------

rs_profile_start <- function(interval, event, loops, region, lines, symbols,
                             frames, calls, probes, expected, threads, options) {
  .Call(
    C_rs_profile_start, interval, event, loops, region, lines, symbols,
    frames, calls, probes, expected, threads, options
  )
}

rs_profile_stop <- function() .Call(C_rs_profile_stop)
rs_profile_discard <- function() .Call(C_rs_profile_discard)
rs_profile_active <- function() .Call(C_rs_profile_active)
rs_profile_write <- function(parts, path, format, lines) .Call(C_rs_profile_write, parts, path, format, lines)
rs_profile_check <- function(parts) .Call(C_rs_profile_check, parts)
rs_profile_form <- function() .Call(C_rs_profile_form)
rs_profile_loops_known <- function() .Call(C_rs_profile_loops_known)
rs_profile_learn_loop <- function(kind) .Call(C_rs_profile_learn_loop, kind)
rs_profile_learn_bc <- function(opcodes) .Call(C_rs_profile_learn_bc, opcodes)
rs_rprof_running <- function(method) .Call(C_rs_rprof_running, method)
rs_resource_usage <- function() .Call(C_rs_resource_usage)

# Throws ------------------------------------------------------------------

rs_throws_set <- function(enabled) .Call(C_rs_throws_set, enabled)
rs_throws_status <- function() .Call(C_rs_throws_status)
rs_throws_tick <- function() .Call(C_rs_throws_tick)
rs_last_throw <- function() .Call(C_rs_last_throw)

# Crash report ------------------------------------------------------------

rs_crash_set <- function(enabled) .Call(C_rs_crash_set, enabled)
rs_crash_status <- function() .Call(C_rs_crash_status)
rs_crash_rearm <- function() .Call(C_rs_crash_rearm)
rs_crash_handlers <- function() .Call(C_rs_crash_handlers)

# From outside -------------------------------------------------------------

rs_dump <- function(pid, libr) .Call(C_rs_dump, pid, libr)
rs_dump_core <- function(path, exe, libr) .Call(C_rs_dump_core, path, exe, libr)
rs_record_start <- function(pid, interval, threads, idle, loops, lines, children) .Call(C_rs_record_start, pid, interval, threads, idle, loops, lines, children)
rs_record_tick <- function() .Call(C_rs_record_tick)
rs_record_stop <- function() .Call(C_rs_record_stop)
rs_record_discard <- function() .Call(C_rs_record_discard)
rs_target_usage <- function(pid) .Call(C_rs_target_usage, pid)
rs_descendants <- function(pid) .Call(C_rs_descendants, pid)

# Files --------------------------------------------------------------------

rs_file_kind <- function(path) .Call(C_rs_file_kind, path)
