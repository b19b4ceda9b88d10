/* C side of fsub_named.f90: wfl_call() calls the Fortran subroutine
 * wtest_fsub(), which calls wfl_callback(), which calls back into R. */
#include <R.h>
#include <Rinternals.h>

void wtest_fsub(int n);

static SEXP wfl_fun, wfl_env, wfl_result;

void wfl_callback(int n) {
  (void) n;
  SEXP call = PROTECT(Rf_lang1(wfl_fun));
  wfl_result = Rf_eval(call, wfl_env); /* @line:wfl_callback */
  R_PreserveObject(wfl_result);
  UNPROTECT(1);
}

SEXP wfl_call(SEXP fun, SEXP env) {
  wfl_fun = fun;
  wfl_env = env;
  wfl_result = R_NilValue;
  wtest_fsub(1); /* @line:wfl_call */
  SEXP out = wfl_result;
  R_ReleaseObject(out);
  return out;
}
