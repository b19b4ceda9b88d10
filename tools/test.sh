#!/bin/sh
# README command 2: run the whole test suite: cargo test for the Rust core,
# then R CMD build and R CMD check (with NOT_CRAN=true, so snapshot tests
# run). Fails on any check ERROR or WARNING.
set -e
. "$(dirname "$0")/env.sh"
cd "$ROOT"
sh tools/deps.sh

echo "== cargo test"
( cd src/rust && CARGO_HOME="$WINCH_CARGO_HOME" cargo test --locked -p winch-core \
    --target-dir "$WINCH_CARGO_TARGET_DIR" )

# Code paths for other systems must at least compile (when the toolchain
# has their standard libraries; nothing can run them here).
for target in x86_64-apple-darwin x86_64-pc-windows-gnu; do
  if rustup target list --installed 2>/dev/null | grep -qx "$target"; then
    echo "== cargo check --target $target"
    ( cd src/rust && CARGO_HOME="$WINCH_CARGO_HOME" cargo check --locked --target "$target" \
        -p winch-core -p winch --target-dir "$WINCH_CARGO_TARGET_DIR" )
  fi
done

echo "== R CMD build"
OUT="$ROOT/.cache/check"
rm -rf "$OUT" && mkdir -p "$OUT"
cd "$OUT"
R CMD build "$ROOT"
TARBALL=$(ls winch_*.tar.gz)

echo "== R CMD check"
status=0
NOT_CRAN=true _R_CHECK_FORCE_SUGGESTS_=true R CMD check --no-manual "$TARBALL" || status=$?
LOG="$OUT/winch.Rcheck/00check.log"
if [ -f "$OUT/winch.Rcheck/tests/testthat.Rout.fail" ]; then
  tail -n 80 "$OUT/winch.Rcheck/tests/testthat.Rout.fail"
fi
if [ "$status" -ne 0 ] || grep -q -E "^\* .*\.\.\. (ERROR|WARNING)" "$LOG"; then
  echo "R CMD check found errors or warnings (see $LOG)" >&2
  exit 1
fi
grep -E "^Status:" "$LOG" || true
echo "all tests passed"
