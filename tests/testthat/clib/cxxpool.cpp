// Test library: a pool of std::threads that another library starts through
// R's C callables (R_GetCCallable): a manager thread, started by the
// caller's thread, starts `n` workers that each burn a known amount of
// their own CPU time (CLOCK_THREAD_CPUTIME_ID) in spin_pool_worker, joins
// them and says it is done. Nothing of this library is on the caller's
// stack while they run: the shape of a runtime a package calls into
// (arrow, torch) that starts its threads and returns.
#include <time.h>

#include <atomic>
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

volatile double pool_sink;
std::atomic<int> pool_done{1};
std::atomic<double> pool_used{0};

}  // namespace

extern "C" __attribute__((noinline)) double spin_pool_worker(double want) {
  double t0 = thread_cpu(), t = t0, x = 1.0;
  while (t - t0 < want) {
    for (int i = 0; i < 4000; i++) x = x * 1.0000007 + 7e-9;
    pool_sink = x;
    t = thread_cpu();
  }
  return t - t0;
}

// Starts the manager and returns at once.
static void pool_start(int n, double seconds) {
  pool_done = 0;
  pool_used = 0;
  std::thread([n, seconds] {
    std::vector<std::thread> workers;
    for (int i = 0; i < n; i++) {
      workers.emplace_back([seconds] {
        double u = spin_pool_worker(seconds), old = pool_used.load();
        while (!pool_used.compare_exchange_weak(old, old + u)) {
        }
      });
    }
    for (auto &w : workers) w.join();
    pool_done = 1;
  }).detach();
}

// Whether the pool's work is done, and the CPU time its workers used.
static int pool_finished(double *used) {
  *used = pool_used.load();
  return pool_done.load();
}

extern "C" SEXP pool_start_call(SEXP n, SEXP seconds) {
  pool_start(Rf_asInteger(n), Rf_asReal(seconds));
  return R_NilValue;
}

extern "C" void R_init_wtest_cxxpool(DllInfo *dll) {
  R_RegisterCCallable("wtest_cxxpool", "pool_start", (DL_FUNC) pool_start);
  R_RegisterCCallable("wtest_cxxpool", "pool_finished", (DL_FUNC) pool_finished);
  R_useDynamicSymbols(dll, TRUE);
}
