/* Test library for PLT stubs: a loop calling the C library's labs() and
 * llabs() (a few instructions each) through this library's PLT (the
 * default for calls from a shared library to another; built with
 * -fno-builtin so the compiler does not inline them), for `seconds` of CPU
 * time. Many samples land in the PLT stubs; each must keep the frames
 * above it. */
#include <R.h>
#include <Rinternals.h>
#include <stdlib.h>
#include <time.h>

static double thread_cpu(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

volatile long plt_sink;

__attribute__((noinline)) double plt_loop(double want) {
  double t0 = thread_cpu(), t = t0;
  long x = 1;
  while (t - t0 < want) {
    for (int i = 0; i < 20000; i++) x = labs(x - 7) + (long) llabs(-x) % 3;
    plt_sink = x;
    t = thread_cpu();
  }
  return t - t0;
}

SEXP plt_burn(SEXP seconds) {
  return Rf_ScalarReal(plt_loop(Rf_asReal(seconds)));
}
