/* Test library that makes the calling R process the parent of a command
 * (R's system() leaves a shell in between, which exits): fork and exec of
 * `/bin/sh -c "exec CMD"`, and a wait for that child with a timeout that
 * says how it ended. For the tests that check a target killed while winch
 * reads it is reaped by its parent at once, with its real status. */
#include <R.h>
#include <Rinternals.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Starts `cmd` (one string) as a child of this process; its pid. */
SEXP parent_spawn(SEXP cmd) {
  const char *c = CHAR(STRING_ELT(cmd, 0));
  size_t len = strlen(c) + 6;
  char *line = malloc(len);
  if (line == NULL) Rf_error("out of memory");
  snprintf(line, len, "exec %s", c);
  char *argv[] = {"sh", "-c", line, NULL};
  sigset_t none;
  sigemptyset(&none);
  pid_t pid = fork();
  if (pid == 0) {
    /* Only async-signal-safe calls between fork and exec. */
    sigprocmask(SIG_SETMASK, &none, NULL);
    execv("/bin/sh", argv);
    _exit(127);
  }
  free(line);
  if (pid < 0) Rf_error("fork failed: %s", strerror(errno));
  return Rf_ScalarInteger(pid);
}

/* Waits up to `timeout` seconds for child `pid` to end. A list: `how`
   ("signaled", "exited", "running": not ended in time, "error": waitpid
   failed, its status taken by someone else), `value` (the signal, the exit
   code or errno) and `seconds` waited. */
SEXP parent_reap(SEXP pid_, SEXP timeout_) {
  pid_t pid = Rf_asInteger(pid_);
  double timeout = Rf_asReal(timeout_), waited = 0;
  struct timespec t0, now, nap = {0, 1000000};
  clock_gettime(CLOCK_MONOTONIC, &t0);
  const char *how = "running";
  int value = 0, status = 0;
  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    clock_gettime(CLOCK_MONOTONIC, &now);
    waited = (double) (now.tv_sec - t0.tv_sec) + (double) (now.tv_nsec - t0.tv_nsec) * 1e-9;
    if (r == pid) {
      if (WIFSIGNALED(status)) {
        how = "signaled";
        value = WTERMSIG(status);
      } else {
        how = "exited";
        value = WEXITSTATUS(status);
      }
      break;
    }
    if (r < 0 && errno != EINTR) {
      how = "error";
      value = errno;
      break;
    }
    if (waited > timeout) break;
    nanosleep(&nap, NULL);
  }
  SEXP out = PROTECT(Rf_allocVector(VECSXP, 3));
  SEXP names = PROTECT(Rf_allocVector(STRSXP, 3));
  SET_VECTOR_ELT(out, 0, Rf_mkString(how));
  SET_VECTOR_ELT(out, 1, Rf_ScalarInteger(value));
  SET_VECTOR_ELT(out, 2, Rf_ScalarReal(waited));
  SET_STRING_ELT(names, 0, Rf_mkChar("how"));
  SET_STRING_ELT(names, 1, Rf_mkChar("value"));
  SET_STRING_ELT(names, 2, Rf_mkChar("seconds"));
  Rf_setAttrib(out, R_NamesSymbol, names);
  UNPROTECT(2);
  return out;
}
