/* Test library for the kernel's share of CPU profiles: the calling thread
 * alternates its own work with sched_yield() (a system call that returns
 * at once when no other thread waits for the CPU), and says how much of
 * its CPU time the kernel counted as user and as system time. */
#define _GNU_SOURCE
#include <R.h>
#include <Rinternals.h>
#include <sched.h>
#include <sys/resource.h>
#include <time.h>

static volatile double sink;

static double thread_cpu(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static void thread_times(double *user, double *system) {
  struct rusage r;
  getrusage(RUSAGE_THREAD, &r);
  *user = (double) r.ru_utime.tv_sec + (double) r.ru_utime.tv_usec / 1e6;
  *system = (double) r.ru_stime.tv_sec + (double) r.ru_stime.tv_usec / 1e6;
}

/* The user and system seconds the kernel counted for the calling thread
   since it read `u0` and `s0`. */
static SEXP times_since(double u0, double s0) {
  double u1, s1;
  thread_times(&u1, &s1);
  SEXP out = PROTECT(Rf_allocVector(REALSXP, 2));
  REAL(out)[0] = u1 - u0;
  REAL(out)[1] = s1 - s0;
  UNPROTECT(1);
  return out;
}

__attribute__((noinline)) static void user_work(int steps) {
  double x = sink;
  for (int i = 0; i < steps; i++) x = x * 1.0000001 + 1e-9;
  sink = x;
}

/* Until the thread has used `secs` of CPU time: `work` steps of its own
   arithmetic, then 20 sched_yield() calls, again and again. The user and
   system seconds the kernel counted meanwhile. */
SEXP sys_mix(SEXP secs, SEXP work) {
  double goal = Rf_asReal(secs), u0, s0;
  int steps = Rf_asInteger(work);
  thread_times(&u0, &s0);
  double t0 = thread_cpu();
  while (thread_cpu() - t0 < goal) {
    user_work(steps);
    for (int i = 0; i < 20; i++) sched_yield();
  }
  return times_since(u0, s0);
}

/* Until the thread has used `secs` of CPU time: `work` steps of its own
   arithmetic, then a read of its CPU clock (a system call: the vDSO
   cannot read a thread's CPU clock), again and again. The user and system
   seconds the kernel counted meanwhile. */
SEXP clock_mix(SEXP secs, SEXP work) {
  double goal = Rf_asReal(secs), u0, s0;
  int steps = Rf_asInteger(work);
  thread_times(&u0, &s0);
  double t0 = thread_cpu();
  while (thread_cpu() - t0 < goal) user_work(steps);
  return times_since(u0, s0);
}
