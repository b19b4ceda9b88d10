#!/bin/sh
# README command 2: run the whole test suite: cargo test for the Rust core,
# then R CMD build and R CMD check (with NOT_CRAN=true, so snapshot tests
# run) of the source package, installed without network access where the
# system lets us cut it. Fails on any test failure and on any check ERROR or
# WARNING; ends with one line "N passed, N failed" (cargo and testthat).
set -e
. "$(dirname "$0")/env.sh"
cd "$ROOT"
sh tools/deps.sh

OUT="$ROOT/.cache/check"
rm -rf "$OUT" && mkdir -p "$OUT"
CARGO_LOG="$OUT/cargo-test.log"

echo "== cargo test"
status=0
( cd src/rust && CARGO_HOME="$WINCH_CARGO_HOME" cargo test --locked -p winch-core \
    --target-dir "$WINCH_CARGO_TARGET_DIR" ) > "$CARGO_LOG" 2>&1 || status=$?
grep -E "^test result:|^test .* FAILED$|^failures:$|panicked at" "$CARGO_LOG" || true
cargo_passed=$(sed -n 's/^test result: .* \([0-9][0-9]*\) passed; \([0-9][0-9]*\) failed.*/\1/p' "$CARGO_LOG" |
  awk '{ s += $1 } END { print s + 0 }')
cargo_failed=$(sed -n 's/^test result: .* \([0-9][0-9]*\) passed; \([0-9][0-9]*\) failed.*/\2/p' "$CARGO_LOG" |
  awk '{ s += $1 } END { print s + 0 }')
if [ "$status" -ne 0 ] && [ "$cargo_failed" -eq 0 ]; then
  tail -n 40 "$CARGO_LOG"
  echo "cargo test did not run (see $CARGO_LOG)" >&2
  cargo_failed=1
fi

echo "== cargo clippy"
# Lints, and every unsafe block must say why it is sound.
clippy_failed=0
if CARGO_HOME="$WINCH_CARGO_HOME" cargo clippy --version >/dev/null 2>&1; then
  ( cd src/rust && CARGO_HOME="$WINCH_CARGO_HOME" cargo clippy --locked --workspace --all-targets \
      --target-dir "$WINCH_CARGO_TARGET_DIR" -- -D warnings -W clippy::undocumented_unsafe_blocks ) \
      > "$OUT/clippy.log" 2>&1 || clippy_failed=1
  if [ "$clippy_failed" -ne 0 ]; then
    grep -E "^(error|warning)" -A 8 "$OUT/clippy.log" | head -n 80
    echo "cargo clippy found problems (see $OUT/clippy.log)" >&2
  else
    echo "clean"
  fi
else
  echo "skipped: clippy is not installed with this Rust toolchain (rustup component add clippy)"
fi

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
sh tools/vendor.sh
# Build from a copy of the files git knows (committed or not, never ignored
# ones), plus the vendored crates: what a clean clone would build.
SRC="$OUT/src/winch"
mkdir -p "$SRC"
package_files() {
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -co --exclude-standard
  else
    # Not a git checkout (an unpacked archive): everything but build output.
    find . -path ./.cache -prune -o -path ./.git -prune -o -type f -print | sed 's|^\./||'
  fi
  echo src/rust/vendor.tar.xz
}
package_files | while read -r f; do [ -e "$f" ] && printf '%s\n' "$f"; done |
  tar -cf - -T - | tar -xf - -C "$SRC"
cd "$OUT"
R CMD build "$SRC" > build.log 2>&1 || { cat build.log; exit 1; }
TARBALL=$(ls winch_*.tar.gz)
echo "built $TARBALL ($(du -k "$TARBALL" | cut -f1) KB)"

echo "== R CMD check"
# The check installs the tarball; with the network cut, that proves the
# package builds offline from its vendored crates. Cutting it needs a new
# network namespace (root, or unprivileged user namespaces); where that is
# refused, cargo is told to stay offline instead.
CHECK="R CMD check --no-manual $TARBALL"
if unshare -n true 2>/dev/null; then
  echo "(no network: run in a new network namespace)"
  CHECK="unshare -n sh -c 'ip link set lo up 2>/dev/null; $CHECK'"
else
  echo "(network namespaces refused here: CARGO_NET_OFFLINE=true instead)"
  CHECK="CARGO_NET_OFFLINE=true $CHECK"
fi
check_status=0
NOT_CRAN=true _R_CHECK_FORCE_SUGGESTS_=true sh -c "$CHECK" > check.log 2>&1 || check_status=$?
LOG="$OUT/winch.Rcheck/00check.log"
# (Debian's R looks up CRAN while checking dependencies; without network
# it says so in a line that is not a check result.)
grep -E "^\* (checking|DONE|using)" check.log | grep -v "\.\.\. OK$" |
  sed 's/Warning: unable to access index for repository.*//' || true

# testthat's own summary, and its counts.
ROUT="$OUT/winch.Rcheck/tests/testthat.Rout"
[ -f "$ROUT" ] || ROUT="$ROUT.fail"
summary=""
if [ -f "$ROUT" ]; then
  summary=$(grep -E "^\[ FAIL [0-9]+ \| WARN [0-9]+ \| SKIP [0-9]+ \| PASS [0-9]+ \]" "$ROUT" | tail -n 1)
fi
tt_passed=0
tt_failed=0
if [ -n "$summary" ]; then
  echo "testthat: $summary"
  tt_failed=$(echo "$summary" | sed 's/.*FAIL \([0-9]*\).*/\1/')
  tt_passed=$(echo "$summary" | sed 's/.*PASS \([0-9]*\).*/\1/')
  # Skips are listed with their reasons.
  sed -n '/^══ Skipped tests/,/^$/p' "$ROUT"
else
  echo "testthat did not report a summary" >&2
  tt_failed=$((tt_failed + 1))
fi
if [ -f "$OUT/winch.Rcheck/tests/testthat.Rout.fail" ]; then
  sed -n '/^══ Failed tests/,$p' "$OUT/winch.Rcheck/tests/testthat.Rout.fail" | head -n 150
fi

# Every check that ended in a WARNING or ERROR, with the lines it printed.
bad=0
if [ -f "$LOG" ]; then
  awk '/^\* / { show = ($0 ~ /\.\.\. (WARNING|ERROR)$/) } show' "$LOG" > problems.log
  if [ -s problems.log ]; then
    bad=1
    cat problems.log
  fi
  grep -E "^Status:" "$LOG" || true
fi
if [ "$check_status" -ne 0 ] || [ ! -f "$LOG" ]; then
  bad=1
  [ -f "$LOG" ] || tail -n 40 check.log
fi

passed=$((cargo_passed + tt_passed))
failed=$((cargo_failed + tt_failed))
if [ "$bad" -ne 0 ] && [ "$failed" -eq 0 ]; then
  echo "R CMD check found errors or warnings (see $LOG)" >&2
fi
echo "$passed passed, $failed failed"
if [ "$failed" -ne 0 ] || [ "$bad" -ne 0 ] || [ "$clippy_failed" -ne 0 ]; then
  exit 1
fi
