// Test library for threads started through libstdc++ (std::thread) inside
// a .Call and not joined by a pthread_join the main thread waits in: the
// shape of ranger's rangerCpp; and for threads another library
// (clib/cxxpool.cpp) starts for a .Call of this one. Each worker burns a known amount of its own
// CPU time (CLOCK_THREAD_CPUTIME_ID) in spin_cxx_worker; meanwhile R's main
// thread waits on a std::condition_variable with wait_for in a loop (as
// ranger's showProgress does), sleeps in a loop, or burns CPU itself in
// spin_cxx_main. Only then are the threads joined (they have finished).
#include <time.h>

#include <cstring>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

// R's headers after the C++ library's, without their short names
// (Rinternals.h's `length` macro breaks <chrono> of GCC 16).
#define R_NO_REMAP
#include <R.h>
#include <Rinternals.h>
#include <R_ext/Rdynload.h>

namespace {

double thread_cpu() {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

volatile double cxx_sink;

std::mutex mutex;
std::condition_variable done_cv;
int running = 0;

}  // namespace

extern "C" __attribute__((noinline)) double spin_cxx_worker(double want) {
  double t0 = thread_cpu(), t = t0, x = 1.0;
  while (t - t0 < want) {
    for (int i = 0; i < 4000; i++) x = x * 1.0000005 + 5e-9;
    cxx_sink = x;
    t = thread_cpu();
  }
  return t - t0;
}

extern "C" __attribute__((noinline)) double spin_cxx_main(double want) {
  double t0 = thread_cpu(), t = t0, x = 1.0;
  while (t - t0 < want) {
    for (int i = 0; i < 4000; i++) x = x * 1.0000006 + 6e-9;
    cxx_sink = x;
    t = thread_cpu();
  }
  return t - t0;
}

// `n` std::threads that each burn `seconds` of their own CPU time, while
// R's main thread waits as `how` says: "cv" (a condition variable, with
// wait_for in a loop), "sleep" (nanosleep in a loop) or "compute" (it
// burns CPU itself until they are done). Returns the workers' CPU time.
extern "C" SEXP cxx_threads(SEXP n_, SEXP seconds, SEXP how_) {
  int n = Rf_asInteger(n_);
  double want = Rf_asReal(seconds);
  const char *how = CHAR(STRING_ELT(how_, 0));
  if (n < 1 || n > 64) Rf_error("n must be in 1..64");
  std::vector<double> used(n, 0.0);
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mutex);
    running = n;
  }
  for (int i = 0; i < n; i++) {
    threads.emplace_back([i, want, &used] {
      used[i] = spin_cxx_worker(want);
      std::lock_guard<std::mutex> lock(mutex);
      running--;
      done_cv.notify_all();
    });
  }
  auto left = [] {
    std::lock_guard<std::mutex> lock(mutex);
    return running;
  };
  if (strcmp(how, "cv") == 0) {
    std::unique_lock<std::mutex> lock(mutex);
    while (running > 0) done_cv.wait_for(lock, std::chrono::milliseconds(50));
  } else if (strcmp(how, "sleep") == 0) {
    while (left() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  } else {
    while (left() > 0) spin_cxx_main(0.005);
  }
  for (auto &t : threads) t.join();
  double sum = 0;
  for (double u : used) sum += u;
  return Rf_ScalarReal(sum);
}

// Starts clib/cxxpool.cpp's pool of `n` workers burning `seconds` each
// (through R's C callables) and waits as cxx_threads does until its work
// is done, nothing of that library on this stack meanwhile. Returns the
// workers' CPU time.
extern "C" SEXP cxx_via_pool(SEXP n, SEXP seconds, SEXP how_) {
  typedef void (*start_fn)(int, double);
  typedef int (*finished_fn)(double *);
  start_fn start = (start_fn) R_GetCCallable("wtest_cxxpool", "pool_start");
  finished_fn finished = (finished_fn) R_GetCCallable("wtest_cxxpool", "pool_finished");
  const char *how = CHAR(STRING_ELT(how_, 0));
  if (strcmp(how, "started") != 0) start(Rf_asInteger(n), Rf_asReal(seconds));
  double used = 0;
  while (!finished(&used)) {
    if (strcmp(how, "compute") == 0) spin_cxx_main(0.005);
    else std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return Rf_ScalarReal(used);
}
