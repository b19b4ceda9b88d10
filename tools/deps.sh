#!/bin/sh
# Installs the Debian packages winch needs to build, test and document itself,
# skipping those already present. Runs apt-get as root (or through sudo).
set -e

PACKAGES="r-base-dev r-cran-rlang r-cran-testthat r-cran-knitr r-cran-rmarkdown
r-cran-bench r-cran-withr libunwind-dev pkg-config pandoc binutils gfortran g++
make git iproute2 r-cran-profvis r-cran-vctrs r-cran-rcpp golang-go xz-utils debuginfod
libdebuginfod1 r-cran-pkgload r-cran-data.table strace dwz libc6-dbg r-cran-future.apply
r-cran-callr"

installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

missing=""
for p in $PACKAGES; do
  # Debian 13 (trixie) renamed libraries for 64-bit time_t
  # (libdebuginfod1 is libdebuginfod1t64 there, which provides the old
  # name: apt-get installs it when asked for libdebuginfod1).
  if ! installed "$p" && ! installed "${p}t64"; then
    missing="$missing $p"
  fi
done

if [ -n "$missing" ]; then
  echo "installing:$missing"
  SUDO=""
  if [ "$(id -u)" != "0" ]; then
    SUDO="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086
  $SUDO apt-get install -y -qq --no-install-recommends $missing
else
  echo "all Debian packages present"
fi

if ! command -v cargo >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
  echo "cargo not found: install Rust from https://rustup.rs" >&2
  exit 1
fi
