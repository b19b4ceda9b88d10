/* The package's single registration table: C entry points (callbacks.c) and
 * the extendr wrappers of the Rust glue (rust/src/lib.rs). */
#include <R.h>
#include <Rinternals.h>
#include <R_ext/Rdynload.h>

SEXP winch_call(SEXP fun, SEXP env);
SEXP winch_stop(SEXP message, SEXP call);

SEXP wrap__winch_rs_init(SEXP version);
SEXP wrap__winch_rs_available(void);
SEXP wrap__winch_rs_backends(void);
SEXP wrap__winch_rs_trace_back(SEXP backend, SEXP libr);
SEXP wrap__winch_rs_joint(SEXP backend, SEXP frames, SEXP calls, SEXP libr, SEXP use_contexts, SEXP view);
SEXP wrap__winch_rs_splice_trace(SEXP row_frames, SEXP parents, SEXP r_frame, SEXP first);
SEXP wrap__winch_rs_splice_calls(SEXP n, SEXP r_frame);
SEXP wrap__winch_rs_context_chain(SEXP backend);
SEXP wrap__winch_rs_thread_capture(SEXP backend);
SEXP wrap__winch_rs_cache_info(void);
SEXP wrap__winch_rs_set_debug_dirs(SEXP dirs);
SEXP wrap__winch_rs_stage_times(SEXP backend, SEXP n);

void winch_rust_init(void);

static const R_CallMethodDef call_methods[] = {
  {"winch_call",       (DL_FUNC) &winch_call, 2},
  {"winch_stop",       (DL_FUNC) &winch_stop, 2},
  {"rs_init",          (DL_FUNC) &wrap__winch_rs_init, 1},
  {"rs_available",     (DL_FUNC) &wrap__winch_rs_available, 0},
  {"rs_backends",      (DL_FUNC) &wrap__winch_rs_backends, 0},
  {"rs_trace_back",    (DL_FUNC) &wrap__winch_rs_trace_back, 2},
  {"rs_joint",         (DL_FUNC) &wrap__winch_rs_joint, 6},
  {"rs_splice_trace",  (DL_FUNC) &wrap__winch_rs_splice_trace, 4},
  {"rs_splice_calls",  (DL_FUNC) &wrap__winch_rs_splice_calls, 2},
  {"rs_context_chain", (DL_FUNC) &wrap__winch_rs_context_chain, 1},
  {"rs_thread_capture",(DL_FUNC) &wrap__winch_rs_thread_capture, 1},
  {"rs_cache_info",    (DL_FUNC) &wrap__winch_rs_cache_info, 0},
  {"rs_set_debug_dirs",(DL_FUNC) &wrap__winch_rs_set_debug_dirs, 1},
  {"rs_stage_times",   (DL_FUNC) &wrap__winch_rs_stage_times, 2},
  {NULL, NULL, 0}
};

void R_init_winch(DllInfo *dll) {
  R_registerRoutines(dll, NULL, call_methods, NULL, NULL);
  R_useDynamicSymbols(dll, FALSE);
  R_forceSymbols(dll, TRUE);
  winch_rust_init();
}
