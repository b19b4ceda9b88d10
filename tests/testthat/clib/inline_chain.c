/* Test library for inlined frames in C: two levels of always-inlined static
 * functions inside one exported function. Built with -g -O2. */
#include <R.h>
#include <Rinternals.h>

static inline __attribute__((always_inline)) SEXP inner_eval(SEXP fun, SEXP env) {
  SEXP call = PROTECT(Rf_lang1(fun));
  SEXP out = Rf_eval(call, env); /* @line:inner_eval */
  UNPROTECT(1);
  return out;
}

static inline __attribute__((always_inline)) SEXP middle_eval(SEXP fun, SEXP env) {
  SEXP out = PROTECT(inner_eval(fun, env)); /* @line:middle_eval */
  UNPROTECT(1);
  return out;
}

SEXP chain_call(SEXP fun, SEXP env) {
  SEXP out = PROTECT(middle_eval(fun, env)); /* @line:chain_call */
  UNPROTECT(1);
  return out;
}
