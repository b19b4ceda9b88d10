/* Native entry points that hand control back to R.
 *
 * They are C rather than Rust on purpose: an R error raised by the callback
 * leaves through longjmp, which is well defined across these C frames but not
 * across Rust frames. */
#include <R.h>
#include <Rinternals.h>

/* Calls fun() in env. The UNPROTECT after Rf_eval keeps the call from being
 * compiled as a tail call, so this frame is really on the stack while fun
 * runs (it is what the joint traces show as `/winch.so`::winch_call()). */
SEXP winch_call(SEXP fun, SEXP env) {
  SEXP call = PROTECT(Rf_lang1(fun));
  SEXP out = Rf_eval(call, env);
  UNPROTECT(1);
  return out;
}

/* Raises an R error with `message`, attributed to `call`. */
SEXP winch_stop(SEXP message, SEXP call) {
  if (TYPEOF(message) != STRSXP || XLENGTH(message) != 1 ||
      STRING_ELT(message, 0) == NA_STRING) {
    Rf_error("`message` must be a single string.");
  }
  Rf_errorcall(call, "%s", Rf_translateChar(STRING_ELT(message, 0)));
  return R_NilValue; /* not reached */
}
