// Test library for names after an unload and a load at the same address:
// compiled twice, with -DWHO=rela and -DWHO=relb, into libraries of the
// same size whose functions have other names (rela::level3, relb::level3).
// After dyn.unload() of one, the other usually lands at the same address.
#include <R.h>
#include <Rinternals.h>
#include <stdint.h>
#include <stdexcept>
#include <time.h>

namespace WHO {

volatile double sink;

__attribute__((noinline)) int level3(int x) {
  if (x > 0) {
    throw std::runtime_error("thrown in a library unloaded later");
  }
  return x;
}

__attribute__((noinline)) int level2(int x) {
  return level3(x) + 1;
}

__attribute__((noinline)) int level1(int x) {
  return level2(x) + 1;
}

static double thread_cpu() {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

// Burns `want` seconds of CPU time of the calling thread.
__attribute__((noinline)) double spin(double want) {
  double t0 = thread_cpu(), t = t0, x = 1.0;
  while (t - t0 < want) {
    for (int i = 0; i < 4000; i++) x = x * 1.0000001 + 1e-9;
    sink = x;
    t = thread_cpu();
  }
  return t - t0;
}

} // namespace WHO

extern "C" {

// Throws three calls deep and catches the exception here: returns 1.
SEXP rel_throw(SEXP x) {
  try {
    return Rf_ScalarInteger(WHO::level1(Rf_asInteger(x)));
  } catch (std::exception &) {
    return Rf_ScalarInteger(-1);
  }
}

SEXP rel_burn(SEXP seconds) {
  return Rf_ScalarReal(WHO::spin(Rf_asReal(seconds)));
}

// Where the library's code is (the address of this function).
SEXP rel_where(void) {
  return Rf_ScalarReal((double) (uintptr_t) &rel_where);
}
}
