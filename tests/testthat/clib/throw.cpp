// C++ test library for stacks at throw time: exceptions thrown three calls
// below the .Call entry point and caught there (then an R error raised from
// the entry point), swallowed, rethrown, carried by std::rethrow_exception,
// and thrown and caught in a loop (the benchmark).
#include <R.h>
#include <Rinternals.h>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <thread>

namespace wthrow {

__attribute__((noinline)) int level3(int x) {
  if (x > 0) {
    throw std::runtime_error("thrown three calls deep"); // @line:throw_site
  }
  return x;
}

__attribute__((noinline)) int level2(int x) {
  return level3(x) + 1; // @line:level2
}

__attribute__((noinline)) int level1(int x) {
  return level2(x) + 1; // @line:level1
}

// Catches, rethrows with `throw;` (the original site must be kept).
__attribute__((noinline)) int rethrower(int x) {
  try {
    return level1(x); // @line:rethrower_call
  } catch (...) {
    throw;
  }
}

// Recursion to a given depth, then a throw.
__attribute__((noinline)) int deep(int depth) {
  if (depth <= 0) {
    throw std::out_of_range("deep");
  }
  return deep(depth - 1) + 1;
}

} // namespace wthrow

// Stand-ins with the names of the exceptions Rcpp and cpp11 use to carry an
// R error through C++ code (only their type names matter here).
namespace Rcpp {
struct LongjumpException {
  int token;
};
} // namespace Rcpp
namespace cpp11 {
struct unwind_exception {
  int token;
};
} // namespace cpp11

namespace wthrow {

__attribute__((noinline)) int carry(int which) {
  if (which == 1) {
    throw Rcpp::LongjumpException{1};
  }
  throw cpp11::unwind_exception{2};
}

__attribute__((noinline)) int carry_caller(int which) {
  return carry(which) + 1;
}

} // namespace wthrow

// Throws an R error carrier (1: Rcpp's, 2: cpp11's) two calls deep, catches
// it here and raises an R error.
extern "C" SEXP wt_carrier(SEXP which) {
  bool caught = false;
  try {
    wthrow::carry_caller(Rf_asInteger(which));
  } catch (Rcpp::LongjumpException &) {
    caught = true;
  } catch (cpp11::unwind_exception &) {
    caught = true;
  }
  if (caught) {
    Rf_error("an R error carried through C++");
  }
  return R_NilValue;
}

// Raises an R error with `msg` from this frame's caller. The message is
// copied before the exception is released: no C++ object is alive when R
// jumps out.
static void raise(const char *msg) {
  Rf_error("%s", msg);
}

// Throws three calls deep when x > 0; the entry point catches it, and then
// raises an R error itself.
extern "C" SEXP wt_throw_caught(SEXP x) {
  char msg[256] = "";
  int value = Rf_asInteger(x);
  try {
    value = wthrow::level1(value); // @line:entry_call
  } catch (std::exception &e) {
    std::strncpy(msg, e.what(), sizeof msg - 1);
  }
  if (msg[0] != '\0') {
    Rf_error("caught: %s", msg); // @line:entry_error
  }
  return Rf_ScalarInteger(value);
}

// The same throw, swallowed: returns normally.
extern "C" SEXP wt_throw_swallowed(SEXP x) {
  try {
    return Rf_ScalarInteger(wthrow::level1(Rf_asInteger(x)));
  } catch (std::exception &) {
    return Rf_ScalarLogical(TRUE);
  }
}

// Raises an R error without any throw.
extern "C" SEXP wt_plain_error(SEXP x) {
  Rf_error("plain error %d", Rf_asInteger(x));
  return R_NilValue;
}

// Throws (x > 0) or not; either way raises an R error: with x = 0 the
// error comes from the same function, without a throw.
extern "C" SEXP wt_maybe_throw(SEXP x) {
  char msg[256] = "no throw";
  try {
    wthrow::level1(Rf_asInteger(x));
  } catch (std::exception &e) {
    std::strncpy(msg, e.what(), sizeof msg - 1);
  }
  Rf_error("%s", msg);
  return R_NilValue;
}

// Rethrown by wthrow::rethrower, caught here.
extern "C" SEXP wt_rethrow(SEXP x) {
  char msg[256] = "";
  try {
    wthrow::rethrower(Rf_asInteger(x));
  } catch (std::exception &e) {
    std::strncpy(msg, e.what(), sizeof msg - 1);
  }
  Rf_error("rethrown: %s", msg);
  return R_NilValue;
}

// Caught into an exception_ptr, then thrown again with
// std::rethrow_exception and caught.
extern "C" SEXP wt_rethrow_exception_ptr(SEXP x) {
  char msg[256] = "";
  std::exception_ptr p;
  try {
    wthrow::level1(Rf_asInteger(x));
  } catch (...) {
    p = std::current_exception();
  }
  try {
    if (p) std::rethrow_exception(p);
  } catch (std::exception &e) {
    std::strncpy(msg, e.what(), sizeof msg - 1);
  }
  p = nullptr;
  Rf_error("via exception_ptr: %s", msg);
  return R_NilValue;
}

// Catches, then has R evaluate `call` in `env` (which raises an R error:
// rlang::abort(), stop(), ...).
extern "C" SEXP wt_throw_then_eval(SEXP x, SEXP call, SEXP env) {
  bool thrown = false;
  try {
    wthrow::level1(Rf_asInteger(x));
  } catch (std::exception &) {
    thrown = true;
  }
  if (thrown) {
    Rf_eval(call, env); // @line:then_eval
  }
  return R_NilValue;
}

// Catches, then calls a helper that raises the R error (the catching frame
// is further out than the one raising the error).
extern "C" SEXP wt_throw_helper_raises(SEXP x) {
  char msg[256] = "";
  try {
    wthrow::level1(Rf_asInteger(x));
  } catch (std::exception &e) {
    std::strncpy(msg, e.what(), sizeof msg - 1);
  }
  raise(msg);
  return R_NilValue;
}

// `n` throws at recursion depth `depth`, each caught here; returns how many
// were caught.
extern "C" SEXP wt_throw_loop(SEXP n, SEXP depth) {
  int caught = 0, times = Rf_asInteger(n), d = Rf_asInteger(depth);
  for (int i = 0; i < times; i++) {
    try {
      wthrow::deep(d);
    } catch (std::exception &) {
      caught++;
    }
  }
  return Rf_ScalarInteger(caught);
}

// A throw and catch in another thread; returns 1 when it was caught there.
extern "C" SEXP wt_throw_in_thread(void) {
  int caught = 0;
  std::thread t([&caught]() {
    try {
      wthrow::level1(1);
    } catch (std::exception &) {
      caught = 1;
    }
  });
  t.join();
  return Rf_ScalarInteger(caught);
}
