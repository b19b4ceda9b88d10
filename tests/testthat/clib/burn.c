/* Test library for the profiler: functions that burn a known amount of CPU
 * time of the calling thread, and round trips back into R. CPU time is
 * measured with CLOCK_THREAD_CPUTIME_ID, so a busy machine changes how long
 * a burn takes but not how much CPU time it uses, which is what the
 * profiler samples. Each burn function spins in its own loop (no shared
 * helper), so its samples are its own self time; the clock is read only
 * every few thousand iterations, so nearly all samples land on the line
 * tagged "@line:NAME" of its loop. Lines tagged "@line:NAME" are looked up
 * by the tests. Built with -g -O0. */
#include <R.h>
#include <Rinternals.h>
#include <time.h>

static double thread_cpu(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

/* Written by the loops so that they are not optimized away. */
volatile double burn_sink;

/* Burns `seconds` of CPU time; returns the CPU time it used. */
SEXP burn_a(SEXP seconds) {
  double want = Rf_asReal(seconds), t0 = thread_cpu(), t = t0;
  double x = 1.0;
  while (t - t0 < want) {
    /* One line, so that the loop's own instructions (counter, branch) are
       on the hot line too: which instruction a sample interrupts varies
       with the processor and its load. */
    for (int i = 0; i < 4000; i++) x = x * 1.0000001 + 1e-9; /* @line:hot_a */
    burn_sink = x;
    t = thread_cpu();
  }
  return Rf_ScalarReal(t - t0);
}

/* The same, in a function of its own. */
SEXP burn_b(SEXP seconds) {
  double want = Rf_asReal(seconds), t0 = thread_cpu(), t = t0;
  double x = 1.0;
  while (t - t0 < want) {
    for (int i = 0; i < 4000; i++) {
      x = x * 1.0000002 + 2e-9; /* @line:hot_b */
    }
    burn_sink = x;
    t = thread_cpu();
  }
  return Rf_ScalarReal(t - t0);
}

/* The same again, for what must never be sampled (fork children). */
SEXP burn_child(SEXP seconds) {
  double want = Rf_asReal(seconds), t0 = thread_cpu(), t = t0;
  double x = 1.0;
  while (t - t0 < want) {
    for (int i = 0; i < 4000; i++) {
      x = x * 1.0000003 + 3e-9; /* @line:hot_child */
    }
    burn_sink = x;
    t = thread_cpu();
  }
  return Rf_ScalarReal(t - t0);
}

/* Calls fun() in env: a round trip R -> C -> R. */
SEXP burn_call(SEXP fun, SEXP env) {
  SEXP call = PROTECT(Rf_lang1(fun));
  SEXP out = Rf_eval(call, env); /* @line:burn_call */
  UNPROTECT(1);
  return out;
}

/* Calls fun(k) in env; fun calls back into burn_nest with k - 1, so that
 * the stack holds k nested round trips R -> C -> R. */
SEXP burn_nest(SEXP fun, SEXP k, SEXP env) {
  SEXP call = PROTECT(Rf_lang2(fun, k));
  SEXP out = Rf_eval(call, env); /* @line:burn_nest */
  UNPROTECT(1);
  return out;
}

/* The thread's CPU time in seconds, as the burn functions measure it. */
SEXP burn_clock(void) {
  return Rf_ScalarReal(thread_cpu());
}
