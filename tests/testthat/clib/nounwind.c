/* Built with -fno-asynchronous-unwind-tables -fno-unwind-tables (and no frame
 * pointers): unwinders cannot step through these frames. */
#include <R.h>
#include <Rinternals.h>

SEXP nu_call(SEXP fun, SEXP env) {
  SEXP call = PROTECT(Rf_lang1(fun));
  SEXP out = Rf_eval(call, env);
  UNPROTECT(1);
  return out;
}
