/* C side of the Fortran test library: fl_call() calls the Fortran
 * subroutine fsub(), which calls fl_callback(), which calls back into R. */
#include <R.h>
#include <Rinternals.h>

void fsub(int n);

static SEXP fl_fun, fl_env, fl_result;

void fl_callback(int n) {
  (void) n;
  SEXP call = PROTECT(Rf_lang1(fl_fun));
  fl_result = Rf_eval(call, fl_env);
  R_PreserveObject(fl_result);
  UNPROTECT(1);
}

SEXP fl_call(SEXP fun, SEXP env) {
  fl_fun = fun;
  fl_env = env;
  fl_result = R_NilValue;
  fsub(1);
  SEXP out = fl_result;
  R_ReleaseObject(out);
  return out;
}
