// Rcpp fixture for stacks at throw time, compiled with Rcpp::sourceCpp():
// exported functions whose helpers throw two calls below the export
// (std::range_error, Rcpp::stop()), and one whose R callback raises an R
// error (Rcpp carries it through C++ as an Rcpp::LongjumpException).
#include <Rcpp.h>
#include <stdexcept>

namespace wrcpp {

__attribute__((noinline)) int check_range(int x) {
  if (x > 10) {
    throw std::range_error("x is out of range"); // @line:range_site
  }
  return x;
}

__attribute__((noinline)) int scaled(int x) {
  return check_range(x) * 2; // @line:range_caller
}

__attribute__((noinline)) int validate(int x) {
  if (x < 0) {
    Rcpp::stop("x must not be negative, got %i", x); // @line:stop_site
  }
  return x;
}

__attribute__((noinline)) int checked(int x) {
  return validate(x) + 1;
}

} // namespace wrcpp

// (The exports add to the result so that their calls are not tail calls:
// a tail call leaves no frame of its caller.)

// [[Rcpp::export]]
int rcpp_range(int x) {
  return wrcpp::scaled(x) + 1; // @line:range_export
}

// [[Rcpp::export]]
int rcpp_stop(int x) {
  return wrcpp::checked(x) + 1;
}

// [[Rcpp::export]]
int rcpp_callback(Rcpp::Function f) {
  Rcpp::IntegerVector v = f();
  return v[0];
}
