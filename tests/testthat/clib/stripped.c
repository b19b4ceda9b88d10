/* Test library as distributions and CRAN binaries build packages: hidden
 * visibility, routines registered with R, stripped by the test. The entry
 * point is named only through R's registration table; the static helper it
 * calls has no name at all and is identified by its start. */
#include <R.h>
#include <Rinternals.h>
#include <R_ext/Rdynload.h>

#ifndef INIT_NAME
#define INIT_NAME R_init_wtest_stripped
#endif

static SEXP st_helper(SEXP fun, SEXP env) __attribute__((noinline));

static SEXP st_helper(SEXP fun, SEXP env) {
  SEXP call = PROTECT(Rf_lang1(fun));
  SEXP out = Rf_eval(call, env); /* @line:st_helper */
  UNPROTECT(1);
  return out;
}

SEXP st_entry(SEXP fun, SEXP env) {
  SEXP out = PROTECT(st_helper(fun, env));
  UNPROTECT(1);
  return out;
}

static const R_CallMethodDef call_methods[] = {
  {"st_entry", (DL_FUNC) &st_entry, 2},
  {NULL, NULL, 0}
};

__attribute__((visibility("default"))) void INIT_NAME(DllInfo *dll) {
  R_registerRoutines(dll, NULL, call_methods, NULL, NULL);
  R_useDynamicSymbols(dll, FALSE);
  /* Like many packages: only symbol objects reach the routines, so a lookup
   * by package name finds nothing. */
  R_forceSymbols(dll, TRUE);
}
