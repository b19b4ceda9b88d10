/* An entry point whose work is done by two always-inlined helpers: middle
 * calls inner, inner calls back into R. One physical frame, three functions:
 * joint views list them in call order (acc_entry, middle, inner). Built with
 * -g -O2. */
#include <R.h>
#include <Rinternals.h>

static inline __attribute__((always_inline)) SEXP inner(SEXP fun, SEXP env) {
  SEXP call = PROTECT(Rf_lang1(fun));
  SEXP out = Rf_eval(call, env);
  UNPROTECT(1);
  return out;
}

static inline __attribute__((always_inline)) SEXP middle(SEXP fun, SEXP env) {
  SEXP out = PROTECT(inner(fun, env));
  UNPROTECT(1);
  return out;
}

SEXP acc_entry(SEXP fun, SEXP env) {
  SEXP out = PROTECT(middle(fun, env));
  UNPROTECT(1);
  return out;
}
