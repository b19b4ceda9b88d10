#!/bin/sh
# Puts the crates winch builds with (all of Cargo.lock) into
# src/rust/vendor.tar.xz, so that the source package built from this
# repository installs without network access, as CRAN and many clusters
# require. `configure` unpacks the archive and builds with `cargo --offline`
# when it is there; without it (a git checkout) cargo downloads the crates.
#
# The archive is not kept in git; tools/test.sh and tools/demo.sh run this
# before `R CMD build`. It is rebuilt only when Cargo.lock changes.
set -e
. "$(dirname "$0")/env.sh"
cd "$ROOT"

ARCHIVE=src/rust/vendor.tar.xz
WORK="$ROOT/.cache/vendor"
STAMP="$WORK/Cargo.lock.cksum"
want=$(cksum < src/rust/Cargo.lock)

if [ -f "$ARCHIVE" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  echo "vendored crates up to date ($ARCHIVE)"
  exit 0
fi

rm -rf "$WORK" && mkdir -p "$WORK"
echo "vendoring the crates of Cargo.lock into $ARCHIVE"
( cd src/rust && CARGO_HOME="$WINCH_CARGO_HOME" cargo vendor --locked --versioned-dirs \
    "$WORK/vendor" > "$WORK/cargo-vendor.log" 2>&1 ) || { cat "$WORK/cargo-vendor.log"; exit 1; }
# R's own tar writes the archive (xz-utils need not be installed); configure
# unpacks it the same way.
( cd "$WORK" && Rscript --vanilla -e \
    'utils::tar("vendor.tar.xz", "vendor", compression = "xz", tar = "internal")' )
mv "$WORK/vendor.tar.xz" "$ARCHIVE"
rm -rf "$WORK/vendor"
echo "$want" > "$STAMP"
echo "vendored $(grep -c '^name = ' src/rust/Cargo.lock) crates into $ARCHIVE ($(du -k "$ARCHIVE" | cut -f1) KB)"
