/* Test library for reading busy processes from outside (winch_dump(),
 * winch_record()): threads that spin for ever, a thread blocked in the
 * kernel for a while (waiting for a vfork child), and the process killing
 * itself at a given moment (so that it dies while another process reads
 * it). Loaded by child R processes only. */
#define _GNU_SOURCE
#include <R.h>
#include <Rinternals.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long spin_sink;

__attribute__((noinline)) static void *spin_forever(void *arg) {
  for (;;) spin_sink++;
  return arg;
}

static void sleep_seconds(double s) {
  struct timespec ts = {(time_t) s, (long) ((s - (double) (time_t) s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* Starts `n` detached threads (small stacks) that spin for ever; the
   number started. */
SEXP spin_start(SEXP n) {
  int want = Rf_asInteger(n), started = 0;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 64 << 10);
  for (int i = 0; i < want; i++) {
    pthread_t t;
    if (pthread_create(&t, &attr, spin_forever, NULL) == 0) started++;
  }
  pthread_attr_destroy(&attr);
  return Rf_ScalarInteger(started);
}

static double die_delay;

static void *die_later(void *arg) {
  sleep_seconds(die_delay);
  kill(getpid(), SIGKILL);
  return arg;
}

/* Kills this process with SIGKILL `secs` seconds from now. */
SEXP spin_die_after(SEXP secs) {
  die_delay = Rf_asReal(secs);
  pthread_t t;
  pthread_create(&t, NULL, die_later, NULL);
  pthread_detach(t);
  return R_NilValue;
}

static double block_for;
static volatile int blocked_tid;

static void *block_then_spin(void *arg) {
  blocked_tid = (int) syscall(SYS_gettid);
  /* The parent waits for the child (uninterruptibly, state D) until it
     exits: it only sleeps. */
  pid_t child = vfork();
  if (child == 0) {
    struct timespec ts = {(time_t) block_for, 0};
    nanosleep(&ts, NULL);
    _exit(0);
  }
  if (child > 0) waitpid(child, NULL, 0);
  return spin_forever(arg);
}

/* Starts a thread that is blocked in the kernel for `secs` (whole)
   seconds, then spins; its thread id. */
SEXP spin_block(SEXP secs) {
  block_for = Rf_asReal(secs);
  pthread_t t;
  pthread_create(&t, NULL, block_then_spin, NULL);
  pthread_detach(t);
  while (blocked_tid == 0) sleep_seconds(0.001);
  sleep_seconds(0.1); /* into vfork's wait */
  return Rf_ScalarInteger(blocked_tid);
}
