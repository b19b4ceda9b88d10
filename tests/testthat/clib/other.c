/* A second test library, to check round trips through two libraries. */
#include <R.h>
#include <Rinternals.h>

SEXP other_call(SEXP fun, SEXP env) {
  SEXP call = PROTECT(Rf_lang1(fun));
  SEXP out = Rf_eval(call, env); /* @line:other_call */
  UNPROTECT(1);
  return out;
}
