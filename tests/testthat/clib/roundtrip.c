/* Test library: round trips R -> C -> R. Lines tagged "@line:NAME" are
 * looked up by the tests to check file:line. Built with -g -O0. */
#include <R.h>
#include <Rinternals.h>
#include <R_ext/Rdynload.h>

static SEXP eval_fun(SEXP fun, SEXP env) {
  SEXP call = PROTECT(Rf_lang1(fun));
  SEXP out = Rf_eval(call, env); /* @line:static_eval */
  UNPROTECT(1);
  return out;
}

/* An exported function that reaches R through a static one. */
SEXP rt_call(SEXP fun, SEXP env) {
  SEXP out = PROTECT(eval_fun(fun, env)); /* @line:rt_call */
  UNPROTECT(1);
  return out;
}

/* Two call sites in one function: their frames have different ips. */
SEXP rt_twice(SEXP fun, SEXP which, SEXP env) {
  SEXP call = PROTECT(Rf_lang1(fun));
  SEXP out;
  if (Rf_asInteger(which) == 1) {
    out = Rf_eval(call, env); /* @line:twice_1 */
  } else {
    out = Rf_eval(call, env); /* @line:twice_2 */
  }
  UNPROTECT(1);
  return out;
}

/* A .Call that just returns. */
SEXP rt_identity(SEXP x) {
  return x;
}

/* .External: args is the whole call's argument list. */
SEXP rt_external(SEXP args) {
  SEXP fun = CADR(args);
  SEXP env = CADDR(args);
  SEXP out = PROTECT(eval_fun(fun, env)); /* @line:external */
  UNPROTECT(1);
  return out;
}

SEXP rt_tryeval(SEXP fun, SEXP env) {
  int err = 0;
  SEXP call = PROTECT(Rf_lang1(fun));
  SEXP out = R_tryEval(call, env, &err); /* @line:tryeval */
  UNPROTECT(1);
  return err ? R_NilValue : out;
}

struct toplevel_data {
  SEXP fun, env, out;
};

static void toplevel_fn(void *data) {
  struct toplevel_data *d = data;
  d->out = eval_fun(d->fun, d->env); /* @line:toplevel_fn */
}

SEXP rt_toplevel(SEXP fun, SEXP env) {
  struct toplevel_data d = {fun, env, R_NilValue};
  R_ToplevelExec(toplevel_fn, &d); /* @line:toplevel */
  return d.out;
}

static SEXP unwind_fn(void *data) {
  SEXP *args = data;
  return eval_fun(args[0], args[1]); /* @line:unwind_fn */
}

static void unwind_cleanup(void *data, Rboolean jump) {
  (void) data;
  (void) jump;
}

SEXP rt_unwind_protect(SEXP fun, SEXP env) {
  SEXP args[2] = {fun, env};
  SEXP token = PROTECT(R_MakeUnwindCont());
  SEXP out = R_UnwindProtect(unwind_fn, args, unwind_cleanup, NULL, token); /* @line:unwind_protect */
  UNPROTECT(1);
  return out;
}

/* Raises an R error from C. */
SEXP rt_error(SEXP msg) {
  Rf_error("%s", CHAR(STRING_ELT(msg, 0))); /* @line:error */
  return R_NilValue;
}

/* Calls back n times, nested: fun(k) calls back into rt_nest with k - 1. */
SEXP rt_nest(SEXP fun, SEXP k, SEXP env) {
  SEXP call = PROTECT(Rf_lang2(fun, k));
  SEXP out = Rf_eval(call, env); /* @line:nest */
  UNPROTECT(1);
  return out;
}

/* Forces the promise bound to `x` in env (an argument of the R caller):
 * R evaluates its code, byte code if the caller was compiled, in a new
 * interpreter loop with no function context of its own. */
SEXP rt_force(SEXP env) {
  SEXP out = Rf_eval(Rf_install("x"), env); /* @line:force */
  return out;
}

/* Calls fun(x) with R_forceAndCall(), which forces the promise for `x`
 * before calling fun, as lapply() and friends do. */
SEXP rt_force_and_call(SEXP fun, SEXP env) {
  SEXP call = PROTECT(Rf_lang2(fun, Rf_install("x")));
  SEXP out = R_forceAndCall(call, 1, env); /* @line:force_and_call */
  UNPROTECT(1);
  return out;
}
