/* The package's single registration table: the C entry points of
 * callbacks.c and the Rust ones (src/rust/src/lib.rs, `entry_points!`).
 *
 * Adding a Rust entry point: one line X(name, number of arguments) below.
 * The tests check that this list and the Rust table agree
 * (tests/testthat/test-registration.R). */
#include <R.h>
#include <Rinternals.h>
#include <R_ext/Rdynload.h>

#define WINCH_RUST_ENTRY_POINTS \
  X(rs_init, 1)                 \
  X(rs_entry_points, 0)         \
  X(rs_error_of_kind, 1)        \
  X(rs_available, 0)            \
  X(rs_backends, 0)             \
  X(rs_trace_back, 3)           \
  X(rs_joint, 5)                \
  X(rs_splice_native, 9)        \
  X(rs_splice_calls, 2)         \
  X(rs_match_rows, 2)           \
  X(rs_context_chain, 1)        \
  X(rs_thread_capture, 1)       \
  X(rs_stage_times, 2)          \
  X(rs_cache_info, 0)           \
  X(rs_lazy_columns, 1)         \
  X(rs_lazy_columns_settle, 0)  \
  X(rs_set_debug_dirs, 1)       \
  X(rs_set_registered_dlls, 1)  \
  X(rs_loader_state, 1)         \
  X(rs_set_in_step, 3)          \
  X(rs_in_step, 0)              \
  X(rs_set_debuginfod, 1)       \
  X(rs_debuginfod_info, 0)      \
  X(rs_profile_start, 12)       \
  X(rs_profile_learn_bc, 1)     \
  X(rs_rprof_running, 1)        \
  X(rs_profile_stop, 0)         \
  X(rs_profile_discard, 0)      \
  X(rs_profile_active, 0)       \
  X(rs_profile_write, 4)        \
  X(rs_profile_check, 1)        \
  X(rs_profile_form, 0)         \
  X(rs_profile_learn_loop, 1)   \
  X(rs_profile_loops_known, 0)  \
  X(rs_resource_usage, 0)       \
  X(rs_profile_sample_cost, 2)  \
  X(rs_throws_set, 1)           \
  X(rs_throws_status, 0)        \
  X(rs_throws_tick, 0)          \
  X(rs_last_throw, 0)           \
  X(rs_crash_set, 1)            \
  X(rs_crash_status, 0)         \
  X(rs_crash_rearm, 0)          \
  X(rs_crash_handlers, 0)       \
  X(rs_dump, 2)                 \
  X(rs_dump_core, 3)            \
  X(rs_record_start, 7)         \
  X(rs_record_tick, 0)          \
  X(rs_record_stop, 0)          \
  X(rs_record_discard, 0)       \
  X(rs_target_usage, 1)         \
  X(rs_descendants, 1)          \
  X(rs_file_kind, 1)

/* Prototypes by number of arguments. */
#define WINCH_ARGS_0 void
#define WINCH_ARGS_1 SEXP
#define WINCH_ARGS_2 SEXP, SEXP
#define WINCH_ARGS_3 SEXP, SEXP, SEXP
#define WINCH_ARGS_4 SEXP, SEXP, SEXP, SEXP
#define WINCH_ARGS_5 SEXP, SEXP, SEXP, SEXP, SEXP
#define WINCH_ARGS_6 SEXP, SEXP, SEXP, SEXP, SEXP, SEXP
#define WINCH_ARGS_7 SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP
#define WINCH_ARGS_8 SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP
#define WINCH_ARGS_9 SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP
#define WINCH_ARGS_10 SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP
#define WINCH_ARGS_11 SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP
#define WINCH_ARGS_12 SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP

#define X(name, n) SEXP winch_##name(WINCH_ARGS_##n);
WINCH_RUST_ENTRY_POINTS
#undef X

SEXP winch_call(SEXP fun, SEXP env);
SEXP winch_stop(SEXP message, SEXP call);
void winch_rust_init(DllInfo *dll);

static const R_CallMethodDef call_methods[] = {
  {"winch_call", (DL_FUNC) &winch_call, 2},
  {"winch_stop", (DL_FUNC) &winch_stop, 2},
#define X(name, n) {#name, (DL_FUNC) &winch_##name, n},
  WINCH_RUST_ENTRY_POINTS
#undef X
  {NULL, NULL, 0}
};

void R_init_winch(DllInfo *dll) {
  R_registerRoutines(dll, NULL, call_methods, NULL, NULL);
  R_useDynamicSymbols(dll, FALSE);
  R_forceSymbols(dll, TRUE);
  winch_rust_init(dll);
}
