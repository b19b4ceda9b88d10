/* Crash fixtures for the crash report (run in child R processes): a
 * segfault and an abort() two calls below the .Call entry point, a
 * segfault in another thread, a C stack overflow, a signal sent with
 * raise(), and an integer division by zero. */
#include <R.h>
#include <Rinternals.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>

__attribute__((noinline)) int crash_deref(int *p) {
  return *(volatile int *)p + 1; /* @line:segv_site */
}

__attribute__((noinline)) int crash_caller(int *p) {
  return crash_deref(p) * 2;
}

SEXP wt_segv(void) {
  return Rf_ScalarInteger(crash_caller(NULL) + 1);
}

__attribute__((noinline)) void abort_here(int x) {
  if (x > 0) abort();
}

__attribute__((noinline)) int abort_caller(int x) {
  abort_here(x);
  return x + 1;
}

SEXP wt_abort(void) {
  return Rf_ScalarInteger(abort_caller(1) + 1);
}

__attribute__((noinline)) int divide(int a, int b) {
  return a / b;
}

SEXP wt_fpe(SEXP b) {
  return Rf_ScalarInteger(divide(7, Rf_asInteger(b)) + 1);
}

SEXP wt_raise_segv(void) {
  raise(SIGSEGV);
  return R_NilValue;
}

static void *thread_body(void *arg) {
  (void)arg;
  crash_caller(NULL);
  return NULL;
}

SEXP wt_segv_in_thread(void) {
  pthread_t t;
  pthread_create(&t, NULL, thread_body, NULL);
  pthread_join(t, NULL);
  return R_NilValue;
}

/* Recurses with large frames until the C stack overflows (no
 * R_CheckStack: the overflow is a real SIGSEGV). */
__attribute__((noinline)) int overflow(int depth) {
  volatile char big[4096];
  big[0] = (char)depth;
  return overflow(depth + 1) + big[0];
}

SEXP wt_overflow(void) {
  return Rf_ScalarInteger(overflow(0));
}

/* A SIGSEGV handler that is not R's (as a JVM would install): the crash
 * report must leave it alone. Returns its address as a double. */
static void foreign_handler(int sig, siginfo_t *info, void *uc) {
  (void)info;
  (void)uc;
  signal(sig, SIG_DFL);
}

SEXP wt_install_foreign_handler(void) {
  struct sigaction sa;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_SIGINFO;
  sa.sa_sigaction = foreign_handler;
  sigaction(SIGSEGV, &sa, NULL);
  return R_NilValue;
}
