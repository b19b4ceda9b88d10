/* Test library for memory profiles: blocks of known sizes kept (until
 * mem_release), and blocks allocated and freed at once, through this
 * library's own calls of malloc()/free() (its GOT slots). */
#define _GNU_SOURCE
#include <R.h>
#include <Rinternals.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MAX_KEPT 100000
static void *kept[MAX_KEPT];
static int nkept = 0;

SEXP mem_keep(SEXP n_, SEXP size_) {
  int n = asInteger(n_);
  size_t size = (size_t) asReal(size_);
  for (int i = 0; i < n && nkept < MAX_KEPT; i++) {
    char *p = malloc(size);
    if (p == NULL) break;
    memset(p, 1, size < 64 ? size : 64);
    kept[nkept++] = p;
  }
  return ScalarInteger(nkept);
}

SEXP mem_churn(SEXP n_, SEXP size_) {
  int n = asInteger(n_);
  size_t size = (size_t) asReal(size_);
  volatile char sink = 0;
  for (int i = 0; i < n; i++) {
    char *p = malloc(size);
    if (p == NULL) break;
    p[0] = (char) i;
    sink += p[0];
    free(p);
  }
  return ScalarInteger(n);
}

SEXP mem_release(void) {
  for (int i = 0; i < nkept; i++) free(kept[i]);
  int n = nkept;
  nkept = 0;
  return ScalarInteger(n);
}

/* Whether this library's GOT slot of malloc holds the C library's malloc
 * (not a hook): taking malloc's address reads that slot. */
SEXP mem_malloc_is_libc(void) {
  void *(*mine)(size_t) = &malloc;
  return ScalarLogical((void *) mine == dlsym(RTLD_DEFAULT, "malloc"));
}

/* The same as mem_keep, on a thread of its own, joined before returning. */
struct job { int n; size_t size; };

static void *thread_keep(void *arg) {
  struct job *j = arg;
  for (int i = 0; i < j->n && nkept < MAX_KEPT; i++) {
    char *p = malloc(j->size);
    if (p == NULL) break;
    p[0] = 1;
    kept[nkept++] = p;
  }
  return NULL;
}

SEXP mem_thread_keep(SEXP n_, SEXP size_) {
  struct job j = { asInteger(n_), (size_t) asReal(size_) };
  pthread_t t;
  if (pthread_create(&t, NULL, thread_keep, &j) != 0) return ScalarInteger(-1);
  pthread_join(t, NULL);
  return ScalarInteger(nkept);
}
