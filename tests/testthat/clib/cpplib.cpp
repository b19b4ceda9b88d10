// C++ test library: namespaces, classes and templates (demangled names) and a
// function the compiler inlines (inlined frames). Built with -g -O2.
#include <R.h>
#include <Rinternals.h>

namespace wtest {

template <typename T>
struct Caller {
  static SEXP call(SEXP fun, SEXP env) __attribute__((noinline));
};

// Always inlined into Caller<int>::call.
static inline __attribute__((always_inline)) SEXP evaluate(SEXP fun, SEXP env) {
  SEXP call = PROTECT(Rf_lang1(fun));
  SEXP out = Rf_eval(call, env); // @line:cpp_inlined
  UNPROTECT(1);
  return out;
}

template <typename T>
SEXP Caller<T>::call(SEXP fun, SEXP env) {
  SEXP out = PROTECT(evaluate(fun, env)); // @line:cpp_call
  UNPROTECT(1);
  return out;
}

}  // namespace wtest

extern "C" SEXP cpp_call(SEXP fun, SEXP env) {
  SEXP out = PROTECT(wtest::Caller<int>::call(fun, env)); // @line:cpp_entry
  UNPROTECT(1);
  return out;
}
