/* Test library for profiles of every thread: native threads that burn known
 * amounts of their own CPU time (CLOCK_THREAD_CPUTIME_ID) in known
 * functions, started as OpenMP regions, as threads joined before the call
 * returns, as a detached thread that goes on after the call, and many at
 * once. Each burn function spins in its own loop, so its samples are its
 * own self time. Built with -fopenmp. */
#include <R.h>
#include <Rinternals.h>
#include <omp.h>
#include <pthread.h>
#include <time.h>

static double thread_cpu(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

volatile double thr_sink;

/* The work of OpenMP's main thread and of its worker: functions of their
   own, so that each one's samples are told apart. */
__attribute__((noinline)) double spin_omp_main(double want) {
  double t0 = thread_cpu(), t = t0, x = 1.0;
  while (t - t0 < want) {
    for (int i = 0; i < 4000; i++) x = x * 1.0000001 + 1e-9;
    thr_sink = x;
    t = thread_cpu();
  }
  return t - t0;
}

__attribute__((noinline)) double spin_omp_worker(double want) {
  double t0 = thread_cpu(), t = t0, x = 1.0;
  while (t - t0 < want) {
    for (int i = 0; i < 4000; i++) x = x * 1.0000002 + 2e-9;
    thr_sink = x;
    t = thread_cpu();
  }
  return t - t0;
}

/* An OpenMP region of 2 threads: thread 0 (R's main thread) burns `a`
   seconds, thread 1 `b`. Returns the CPU time each used in its burn. */
SEXP thr_omp(SEXP a, SEXP b) {
  double want[2] = {Rf_asReal(a), Rf_asReal(b)}, used[2] = {0, 0};
#pragma omp parallel num_threads(2)
  {
    int me = omp_get_thread_num();
    if (me == 0) used[0] = spin_omp_main(want[0]);
    else if (me == 1) used[1] = spin_omp_worker(want[1]);
  }
  SEXP out = PROTECT(Rf_allocVector(REALSXP, 2));
  REAL(out)[0] = used[0];
  REAL(out)[1] = used[1];
  UNPROTECT(1);
  return out;
}

/* The number of threads an OpenMP region gets here. */
SEXP thr_omp_threads(void) {
  int n = 0;
#pragma omp parallel num_threads(2)
  {
#pragma omp single
    n = omp_get_num_threads();
  }
  return Rf_ScalarInteger(n);
}

__attribute__((noinline)) double spin_joined(double want) {
  double t0 = thread_cpu(), t = t0, x = 1.0;
  while (t - t0 < want) {
    for (int i = 0; i < 4000; i++) x = x * 1.0000003 + 3e-9;
    thr_sink = x;
    t = thread_cpu();
  }
  return t - t0;
}

/* A thread's job: `fn(in)`, its result in `out`. */
struct job {
  double (*fn)(double);
  double in;
  double out;
};

static void *job_main(void *arg) {
  struct job *j = arg;
  j->out = j->fn(j->in);
  return NULL;
}

/* Starts `n` threads that each compute `fn(in)` and joins them before it
   returns (R's main thread waits, using no CPU); the sum of their results.
   An error is raised only once no thread runs. */
static double run_joined(SEXP n_, double in, double (*fn)(double)) {
  int n = Rf_asInteger(n_);
  if (n < 1 || n > 256) Rf_error("n must be in 1..256");
  pthread_t t[256];
  struct job jobs[256];
  int started = 0;
  for (int i = 0; i < n; i++) {
    jobs[i] = (struct job) {fn, in, 0};
    if (pthread_create(&t[i], NULL, job_main, &jobs[i]) != 0) break;
    started++;
  }
  double sum = 0;
  for (int i = 0; i < started; i++) {
    pthread_join(t[i], NULL);
    sum += jobs[i].out;
  }
  if (started < n) Rf_error("could only start %d threads", started);
  return sum;
}

/* `n` threads that each burn `seconds`: the CPU time they used. */
SEXP thr_join(SEXP n_, SEXP seconds) {
  return Rf_ScalarReal(run_joined(n_, Rf_asReal(seconds), spin_joined));
}

__attribute__((noinline)) double spin_detached(double want) {
  double t0 = thread_cpu(), t = t0, x = 1.0;
  while (t - t0 < want) {
    for (int i = 0; i < 4000; i++) x = x * 1.0000004 + 4e-9;
    thr_sink = x;
    t = thread_cpu();
  }
  return t - t0;
}

static volatile int detached_done = 1;

static void *detached_main(void *arg) {
  spin_detached(*(double *) arg);
  detached_done = 1;
  return NULL;
}

static double detached_want;

/* Starts a thread that burns `seconds` after this call has returned. */
SEXP thr_detach(SEXP seconds) {
  pthread_t t;
  detached_want = Rf_asReal(seconds);
  detached_done = 0;
  if (pthread_create(&t, NULL, detached_main, &detached_want) != 0) Rf_error("pthread_create failed");
  pthread_detach(t);
  return R_NilValue;
}

/* Whether the detached thread has finished. */
SEXP thr_detach_done(void) {
  return Rf_ScalarLogical(detached_done);
}

/* A fixed amount of work (not of CPU time), for benchmarks: `n` threads
   that each run `m` million steps of a loop, joined before it returns. */
__attribute__((noinline)) double work_steps(double m) {
  double x = 1.0;
  long steps = (long) (m * 1e6);
  for (long i = 0; i < steps; i++) x = x * 1.0000001 + 1e-9;
  return x;
}

SEXP thr_work(SEXP n_, SEXP m_) {
  return Rf_ScalarReal(run_joined(n_, Rf_asReal(m_), work_steps));
}
