/* C side of the Fortran test library. */
#include <R.h>
#include <Rinternals.h>

void fsub(int n);

static SEXP fl_fun, fl_env;

void fl_callback(int n) {
  (void) n;
  SEXP call = PROTECT(Rf_lang1(fl_fun));
  Rf_eval(call, fl_env);
  UNPROTECT(1);
}

SEXP fl_call(SEXP fun, SEXP env) {
  fl_fun = fun;
  fl_env = env;
  fsub(1);
  return R_NilValue;
}
