#!/bin/sh
# Runs winch's test suite (tools/test.sh: cargo test, R CMD build, R CMD
# check) under the R of newer Debian suites. The host is Debian 12 with R
# 4.2, but users run R 4.5 (Debian 13, trixie) and R 4.6 (testing, forky),
# and winch reads R's internals, so each suite gets its own root, made by
# `debootstrap --variant=minbase`, with R and the R packages from that
# suite's own archive. Needs root (debootstrap, chroot, mounts) on Linux.
#
# Usage:
#   sh tools/test-r-versions.sh [--fresh] SUITE...    test in each SUITE
#   sh tools/test-r-versions.sh [--fresh] all         trixie, then forky
#   sh tools/test-r-versions.sh --shell SUITE [COMMAND [ARG...]]
#
# A test run starts from a pristine root: the tarball of a fresh debootstrap
# (made by the first run, remade when older than 7 days or with --fresh,
# which also empties the suite's cargo target dir; cargo's downloads stay),
# then installs R with apt and runs tools/test.sh in it. It prints one line
# per suite, e.g. "== trixie (R 4.5.0): failed (808 passed, 2 failed)", and
# exits non-zero if any suite failed.
#
# --shell runs COMMAND (default: an interactive bash) in the root left by the
# last test run, in /winch (refreshed from the working tree first), with the
# same mounts, e.g.
#   sh tools/test-r-versions.sh --shell trixie Rscript -e 'R.version.string'
#
# Files, all under .cache/roots/ (git-ignored):
#   SUITE/                   the root, kept after a run (with R) for --shell
#   SUITE-pristine.tar.gz    the root as debootstrap made it, before apt
#   SUITE-target/            cargo's target dir for builds inside the root
#   SUITE.info               versions found in the root (R, rlang, testthat, ...)
#   SUITE.log, SUITE-apt.log output of the last test run and of apt
#   SUITE.lock               held by test runs (exclusive) and --shell (shared)
# and R's sources for reference: .cache/rsrc/R_VERSION/src/{include/Defn.h,
# include/Rinternals.h,main/eval.c,main/context.c} (fetched once per version).
#
# Inside a root:
#   /winch                   a copy of the repository: the git-tracked and
#                            untracked, not ignored, files. A copy, not a bind
#                            mount, because test.sh writes $ROOT/.cache/check,
#                            which is the host's own check directory.
#   /winch/.cache/cargo      the host's $WINCH_CARGO_HOME (shared downloads)
#   /winch/.cache/target     .cache/roots/SUITE-target
#   $RUSTUP_HOME and the directory of cargo: the host's Rust toolchain,
#                            read-only, at the same paths
#   /proc /sys /dev /dev/pts from the host; /dev/shm a fresh tmpfs
# The mounts live in a private mount namespace (unshare): the host never
# sees them and they vanish with its last process even after a SIGKILL. They
# are still unmounted one by one, in reverse order, on exit and interrupt.
#
# Environment: WINCH_DEBIAN_MIRROR (default http://deb.debian.org/debian;
# snapshot.debian.org mirrors are accepted), WINCH_RSRC=0 to skip fetching
# R's sources.
set -eu

SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
# shellcheck source=tools/env.sh # sets ROOT, WINCH_CARGO_HOME, cargo's PATH
. "$(dirname "$SELF")/env.sh"

ROOTS="$ROOT/.cache/roots"
MIRROR="${WINCH_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
ALL_SUITES="trixie forky"
# Debian packages of winch's tests, read from tools/deps.sh (so the two lists
# never drift); this copy is used only if that file cannot be parsed.
FALLBACK_PACKAGES="r-base-dev r-cran-rlang r-cran-testthat r-cran-knitr r-cran-rmarkdown
r-cran-bench r-cran-withr libunwind-dev pkg-config pandoc binutils gfortran g++"
# Installed too, though tools/deps.sh does not list them: make (r-base-dev
# pulls it in anyway), git (test.sh builds the package from `git ls-files`)
# and iproute2 (test.sh brings up lo in the check's network namespace; the
# host has it).
EXTRA_PACKAGES="make git iproute2"
# Installed when the suite has them: later tests will need them.
OPTIONAL_PACKAGES="r-cran-rcpp r-cran-profvis golang-go debuginfod r-cran-pkgload r-cran-data.table"
# Where the repository is copied inside a root.
WORKDIR=/winch

say() { echo "-- ${SUITE:-test-r-versions}: $*"; }
die() { echo "test-r-versions: $*" >&2; exit 1; }
now() { date +%s; }

# Paths are split on whitespace below (mount lists, awk): refuse odd ones.
case "$ROOT" in *[[:space:]]*) die "the repository path must not contain spaces: $ROOT" ;; esac

# The host's Rust toolchain, as installed by rustup: the proxies (cargo,
# rustc, rustup) in one directory and the toolchains in $RUSTUP_HOME.
CARGO_BIN=$(command -v cargo || true)
CARGO_BIN_DIR=$(dirname "${CARGO_BIN:-/nonexistent/cargo}")
RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}"

# ---------------------------------------------------------------------------
# Entering a root.

# Every mount point under $1, seen by any process in any mount namespace
# (another run's or a --shell's): a root is removed only when this is empty.
mounts_under() {
  cat /proc/[0-9]*/mountinfo 2>/dev/null |
    awk -v d="$1/" 'index($5, d) == 1 { print $5 }' | sort -u
}

# rm -rf a root, but never while anything is mounted inside it (a bind mount
# of the host's cargo cache or toolchain would be emptied through it).
remove_root() {
  [ -e "$1" ] || [ -L "$1" ] || return 0
  busy=$(mounts_under "$1")
  [ -z "$busy" ] || die "not removing $1: still mounted inside it: $busy"
  rm -rf "$1"
}

# `enter SUITE DIR CMD...`: runs CMD in the root of SUITE, in DIR, with the
# mounts, from a new private mount namespace; returns CMD's status.
enter() {
  unshare --mount --propagation private sh "$SELF" --in-namespace "$@"
}

# The part of `enter` that runs inside the new mount namespace.
in_namespace() {
  SUITE=$1 dir=$2
  shift 2
  r="$ROOTS/$SUITE"
  [ -x "$r/bin/sh" ] || die "no root for $SUITE in $r"
  MOUNTED=""
  # Interrupts are recorded, not fatal: the command in the root gets them
  # too and decides; then the mounts are undone and its status returned.
  trap 'unmount_all' EXIT
  trap 'GOT_SIGNAL=1' INT TERM HUP

  mount -t proc proc "$r/proc" 2>/dev/null || mount --bind /proc "$r/proc"
  MOUNTED="$r/proc $MOUNTED"
  bind_mount /sys "$r/sys" ro
  bind_mount /dev "$r/dev"
  bind_mount /dev/pts "$r/dev/pts"
  # A fresh /dev/shm: the bind of /dev shows the host's mount point, not its tmpfs.
  mkdir -p "$r/dev/shm"
  mount -t tmpfs -o mode=1777,nosuid,nodev shm "$r/dev/shm"
  MOUNTED="$r/dev/shm $MOUNTED"
  # The host's Rust toolchain, read-only so that nothing in the root can
  # write into it (the cargo home inside is elsewhere, see below).
  bind_mount "$RUSTUP_HOME" "$r$RUSTUP_HOME" ro
  bind_mount "$CARGO_BIN_DIR" "$r$CARGO_BIN_DIR" ro
  # Cargo's downloads are shared with the host; build products are not (the
  # C parts are compiled against the root's headers).
  if [ -d "$r$WORKDIR" ]; then
    mkdir -p "$WINCH_CARGO_HOME" "$ROOTS/$SUITE-target"
    bind_mount "$WINCH_CARGO_HOME" "$r$WORKDIR/.cache/cargo"
    bind_mount "$ROOTS/$SUITE-target" "$r$WORKDIR/.cache/target"
  fi
  # DNS for apt and cargo; rm first so that a symlink in the root is not
  # followed out of it.
  rm -f "$r/etc/resolv.conf"
  cp -L /etc/resolv.conf "$r/etc/resolv.conf"

  [ -d "$r$dir" ] || dir=/
  [ -z "${GOT_SIGNAL:-}" ] || exit 130
  status=0
  # shellcheck disable=SC2016 # $1 and $@ of the root's sh
  env -i HOME=/root USER=root LOGNAME=root SHELL=/bin/bash TERM="${TERM:-dumb}" \
    LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive \
    PATH="$CARGO_BIN_DIR:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    RUSTUP_HOME="$RUSTUP_HOME" CARGO_HOME="$WORKDIR/.cache/cargo" \
    WINCH_CARGO_HOME="$WORKDIR/.cache/cargo" WINCH_CARGO_TARGET_DIR="$WORKDIR/.cache/target" \
    chroot "$r" /bin/sh -c 'cd "$1" && shift && exec "$@"' sh "$dir" "$@" || status=$?
  unmount_all
  trap - EXIT
  exit "$status"
}

# `bind_mount SRC DST [ro]`; DST is created when missing.
bind_mount() {
  mkdir -p "$2"
  mount --bind "$1" "$2"
  MOUNTED="$2 $MOUNTED"
  if [ "${3:-}" = ro ]; then
    mount -o remount,bind,ro "$2"
  fi
}

# Unmounts in reverse order ($MOUNTED lists the newest first).
unmount_all() {
  for m in $MOUNTED; do
    umount "$m" 2>/dev/null || umount -l "$m" || echo "warning: could not unmount $m" >&2
  done
  MOUNTED=""
}

# ---------------------------------------------------------------------------
# Preparing a root.

# The package list of tools/deps.sh: the words between PACKAGES=" and the
# next quote. Falls back to the copy above if that does not look right.
deps_packages() {
  list=$(awk '
    !on && /^PACKAGES="/ { on = 1; sub(/^PACKAGES="/, "") }
    on { if (index($0, "\"")) { sub(/".*/, ""); print; exit } print }
  ' "$ROOT/tools/deps.sh" 2>/dev/null | tr -s ' \t\n' '   ')
  ok=1
  for p in $list; do
    case "$p" in *[!a-z0-9.+-]*) ok=0 ;; esac
  done
  # shellcheck disable=SC2086 # unquoted: one line, single spaces
  if [ "$ok" = 1 ] && [ -n "$list" ]; then
    echo $list
  else
    echo "warning: cannot read the package list of tools/deps.sh; using this script's copy" >&2
    echo $FALLBACK_PACKAGES
  fi
}

# Host tools: debootstrap (the rest is in any Debian: util-linux, tar, gzip).
ensure_host_tools() {
  [ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot and mounts)"
  if ! command -v debootstrap >/dev/null 2>&1 && [ ! -x /usr/sbin/debootstrap ]; then
    echo "installing debootstrap on the host"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap
  fi
  if [ -z "$CARGO_BIN" ] || [ ! -x "$CARGO_BIN_DIR/rustup" ] || [ ! -d "$RUSTUP_HOME/toolchains" ]; then
    die "needs a Rust toolchain installed by rustup (cargo and rustup in one directory, toolchains in \$RUSTUP_HOME)"
  fi
}

# Takes the suite's lock on fd 9, exclusive: a test run rebuilds the root.
# (--shell sessions hold it shared, and can run side by side.)
lock_suite() {
  mkdir -p "$ROOTS"
  exec 9>"$ROOTS/$SUITE.lock"
  flock -n -x 9 || die "the $SUITE root is in use (a --shell session or another run)"
}

# Step timings of the current suite, printed at its end.
step_start() { STEP=$1; STEP_T0=$(now); say "$STEP"; }
step_end() {
  dt=$(( $(now) - STEP_T0 ))
  TIMES="$TIMES $STEP=${dt}s"
  say "$STEP: ${dt}s"
}

# The pristine root: unpacked from the cached tarball, or bootstrapped (and
# the tarball made) on a first run, with --fresh, or when it is a week old.
make_pristine_root() {
  r="$ROOTS/$SUITE"
  tarball="$ROOTS/$SUITE-pristine.tar.gz"
  remove_root "$r"
  if [ "$FRESH" = 1 ] || [ ! -f "$tarball" ] || [ -n "$(find "$tarball" -mtime +7)" ]; then
    step_start bootstrap
    # The bookworm debootstrap has no script for suites newer than trixie;
    # they bootstrap like sid.
    script=""
    [ -e "/usr/share/debootstrap/scripts/$SUITE" ] || script=/usr/share/debootstrap/scripts/sid
    # In its own mount namespace, so that the mounts of its second stage
    # cannot outlive it.
    # shellcheck disable=SC2086 # $script: no argument when empty
    if ! unshare --mount --propagation private debootstrap --variant=minbase \
        --include=ca-certificates "$SUITE" "$r" "$MIRROR" $script >"$ROOTS/$SUITE-debootstrap.log" 2>&1; then
      tail -n 30 "$ROOTS/$SUITE-debootstrap.log"
      [ -f "$r/debootstrap/debootstrap.log" ] && tail -n 30 "$r/debootstrap/debootstrap.log"
      die "debootstrap of $SUITE failed (log: $ROOTS/$SUITE-debootstrap.log)"
    fi
    step_end
    step_start "pack pristine tarball"
    rm -f "$tarball"
    tar -C "$r" --numeric-owner -cf - . | gzip -1 >"$tarball.tmp"
    mv "$tarball.tmp" "$tarball"
    step_end
  else
    step_start "unpack pristine tarball"
    mkdir -p "$r"
    tar -C "$r" --numeric-owner -xpzf "$tarball"
    step_end
  fi
}

# Configuration written from the host before apt runs in the root.
configure_root() {
  r="$ROOTS/$SUITE"
  # The host's local CAs (its egress proxy intercepts HTTPS: crates.io, and
  # apt if the mirror is HTTPS); update-ca-certificates runs inside later.
  mkdir -p "$r/usr/local/share/ca-certificates"
  for crt in /usr/local/share/ca-certificates/*.crt; do
    if [ -f "$crt" ]; then cp "$crt" "$r/usr/local/share/ca-certificates/"; fi
  done
  # Only the suite's own archive.
  echo "deb $MIRROR $SUITE main" >"$r/etc/apt/sources.list"
  {
    echo 'APT::Install-Recommends "false";'
    echo 'APT::Install-Suggests "false";'
    echo 'Acquire::Retries "3";'
    echo 'Acquire::Languages "none";'
    echo 'Dpkg::Use-Pty "false";'
    # Snapshots keep their old Release files, whose Valid-Until has passed
    # (testing's expires after a week). The host's apt may reach a frozen
    # mirror too (it does here: forky's InRelease was 16 days past it): then
    # the host has turned the date checks off, and so does the root.
    case "$MIRROR" in *snapshot*) echo 'Acquire::Check-Valid-Until "false";' ;; esac
    apt-config dump 2>/dev/null | grep -E '^Acquire::Check-(Valid-Until|Date) "(false|0|no)";' || true
  } >"$r/etc/apt/apt.conf.d/90winch"
  # No man pages or docs (faster dpkg, smaller root); R's own docs are
  # elsewhere (/usr/share/R, the packages' directories).
  mkdir -p "$r/etc/dpkg/dpkg.cfg.d"
  printf '%s\n' 'path-exclude=/usr/share/man/*' 'path-exclude=/usr/share/doc/*' \
    'path-include=/usr/share/doc/*/copyright' >"$r/etc/dpkg/dpkg.cfg.d/90winch-nodoc"
  # bash's prompt in --shell shows the root's name (Debian's /etc/bash.bashrc).
  echo "winch-$SUITE" >"$r/etc/debian_chroot"
  # No services started by package scripts (debuginfod has one).
  printf '#!/bin/sh\nexit 101\n' >"$r/usr/sbin/policy-rc.d"
  chmod 755 "$r/usr/sbin/policy-rc.d"
}

# R, winch's build and test dependencies, and the optional packages the suite
# has, from the suite's archive. Output goes to SUITE-apt.log.
install_packages() {
  apt_log="$ROOTS/$SUITE-apt.log"
  : >"$apt_log"
  enter "$SUITE" / sh -ec '
    update-ca-certificates
    apt-get update -q
    apt-get -y -q full-upgrade' >>"$apt_log" 2>&1 || { tail -n 30 "$apt_log"; die "apt-get update failed in $SUITE (log: $apt_log)"; }
  # shellcheck disable=SC2016,SC2086 # the script is for the root's sh
  AVAILABLE=$(enter "$SUITE" / sh -c '
    for p; do
      apt-cache policy "$p" 2>/dev/null | grep -q "Candidate: [^(]" && echo "$p"
    done; true' sh $OPTIONAL_PACKAGES | tr '\n' ' ')
  pkgs="$(deps_packages) $EXTRA_PACKAGES $AVAILABLE"
  say "installing: $pkgs"
  # shellcheck disable=SC2086 # a list of names
  enter "$SUITE" / apt-get install -y -q $pkgs >>"$apt_log" 2>&1 ||
    { tail -n 30 "$apt_log"; die "apt-get install failed in $SUITE (log: $apt_log)"; }
  # Downloaded .debs are not needed again.
  enter "$SUITE" / apt-get clean
}

# Records the versions that matter in SUITE.info and prints them.
record_info() {
  info="$ROOTS/$SUITE.info"
  {
    # shellcheck disable=SC2016
    enter "$SUITE" / Rscript -e 'cat(sprintf("r_version=%s\nrlang=%s\ntestthat=%s\n",
      getRversion(), packageVersion("rlang"), packageVersion("testthat")))'
    # shellcheck disable=SC2016
    enter "$SUITE" / dpkg-query -W -f '${Package}=${Version}\n' r-base-core r-cran-rlang \
      r-cran-testthat 2>/dev/null || true
    for p in $OPTIONAL_PACKAGES; do
      # shellcheck disable=SC2016 # dpkg's format
      case " $AVAILABLE " in
        *" $p "*) echo "$p=$(enter "$SUITE" / dpkg-query -W -f '${Version}' "$p")" ;;
        *) echo "$p=absent" ;;
      esac
    done
  } >"$info"
  sed "s/^/-- $SUITE: /" "$info"
  R_VERSION=$(sed -n 's/^r_version=//p' "$info")
}

# R's sources of this version, for reference: the four files winch's context
# reader depends on, from the suite's r-base source package (deb-src lines
# are added to this root only, for the download).
fetch_r_sources() {
  dest="$ROOT/.cache/rsrc/$R_VERSION"
  files="src/include/Defn.h src/include/Rinternals.h src/main/eval.c src/main/context.c"
  missing=0
  for f in $files; do [ -f "$dest/$f" ] || missing=1; done
  [ "$missing" = 1 ] || { say "R sources already in $dest"; return 0; }
  r="$ROOTS/$SUITE"
  echo "deb-src $MIRROR $SUITE main" >"$r/etc/apt/sources.list.d/winch-src.list"
  rm -rf "$r/tmp/rsrc" && mkdir -p "$r/tmp/rsrc"
  # Writable by apt's download user (_apt), so that it need not fall back to root.
  chmod 777 "$r/tmp/rsrc"
  # Only the orig tarball is needed: the mirror here lacks some .dsc and
  # .debian.tar files (404), so apt-get's status is not what decides.
  # shellcheck disable=SC2016
  enter "$SUITE" /tmp/rsrc sh -c '
      apt-get update -q
      apt-get source -q --download-only "r-base=$(dpkg-query -W -f "\${source:Version}" r-base-core)"' \
    >>"$ROOTS/$SUITE-apt.log" 2>&1 || true
  orig=$(find "$r/tmp/rsrc" -maxdepth 1 -name 'r-base_*.orig.tar.*' | head -n 1)
  if [ -n "$orig" ]; then
    mkdir -p "$dest"
    # R's own tarball, with one top directory (R-x.y.z/).
    tar -C "$dest" --strip-components=1 --no-same-owner --wildcards -xf "$orig" "*/src/include/Defn.h" \
      "*/src/include/Rinternals.h" "*/src/main/eval.c" "*/src/main/context.c"
    say "R sources: $dest/{$(echo "$files" | tr ' ' ',')}"
  else
    echo "warning: could not download the r-base sources of $SUITE (see $ROOTS/$SUITE-apt.log)" >&2
  fi
  rm -f "$r/etc/apt/sources.list.d/winch-src.list"
  rm -rf "$r/tmp/rsrc"
  # Drop the source index again, so that the root's apt stays as installed.
  enter "$SUITE" / apt-get update -qq >/dev/null 2>&1 || true
}

# Copies the repository into the root: git-tracked and untracked (not
# ignored) files, so uncommitted changes are tested, and .git (test.sh lists
# the files to build with `git ls-files`); the copy's .cache (check dir,
# mount points) is kept.
copy_repo() {
  dest="$ROOTS/$SUITE$WORKDIR"
  if [ -d "$dest" ]; then
    find "$dest" -mindepth 1 -maxdepth 1 ! -name .cache -exec rm -rf {} +
  fi
  mkdir -p "$dest/.cache"
  if [ -d "$ROOT/.git" ]; then
    # --ignore-failed-read: files deleted but not yet `git rm`ed. Owned by
    # root in the copy, or the root's git would call the repository dubious.
    (cd "$ROOT" && { git -c safe.directory="$ROOT" ls-files -co --exclude-standard -z; printf '.git\0'; } |
      tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -C "$dest" --no-same-owner -xf -
  else
    # Not a git checkout (or a worktree, whose .git is elsewhere): everything
    # but the caches, and a fresh repository holding those files.
    tar -C "$ROOT" --exclude=./.cache --exclude=./.git -cf - . | tar -C "$dest" --no-same-owner -xf -
    git -C "$dest" init -q && git -C "$dest" add -A
  fi
  [ -f "$dest/DESCRIPTION" ] || die "copying the repository into $dest failed"
}

# Prints the test output, and writes the time of each section of test.sh
# ("== cargo test", "== R CMD build", "== R CMD check") to $1.
stamp_sections() {
  sec="" sec_t0=$(now)
  while IFS= read -r line || [ -n "$line" ]; do
    case "$line" in
      "== cargo "* | "== R CMD "*)
        t=$(now)
        [ -z "$sec" ] || echo "$sec=$((t - sec_t0))s" >>"$1"
        sec=${line#== } sec_t0=$t
        ;;
    esac
    printf '%s\n' "$line"
  done
  [ -z "$sec" ] || echo "$sec=$(($(now) - sec_t0))s" >>"$1"
}

# Runs tools/test.sh in the root; sets TEST_STATUS.
run_tests() {
  sections="$ROOTS/$SUITE.sections" status_file="$ROOTS/$SUITE.status"
  : >"$sections"
  echo 1 >"$status_file"
  step_start "tools/test.sh"
  # (The status goes through a file: a pipeline's is that of its last command.)
  { st=0; enter "$SUITE" "$WORKDIR" sh tools/test.sh 2>&1 || st=$?; echo "$st" >"$status_file"; } |
    stamp_sections "$sections" | tee "$ROOTS/$SUITE.log"
  TEST_STATUS=$(cat "$status_file")
  step_end
  # Cargo's own timings: the test build, and the release builds of R CMD
  # build (vignettes) and check.
  out="$ROOTS/$SUITE$WORKDIR/.cache/check"
  # shellcheck disable=SC2016 # backquotes in cargo's output
  cargo_times=$(cat "$ROOTS/$SUITE.log" "$out/cargo-test.log" "$out/build.log" \
    "$out/winch.Rcheck/00install.out" 2>/dev/null | grep -o 'Finished `[a-z]*` profile.* in .*' |
    sed 's/^Finished `\([a-z]*\)`.* in /cargo \1: /' | tr '\n' ',' || true)
  TIMES="$TIMES $(tr '\n' ' ' <"$sections")(${cargo_times%,})"
  rm -f "$status_file" "$sections"
  # test.sh's own last line: "N passed, N failed".
  COUNTS=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$ROOTS/$SUITE.log" | tail -n 1 || true)
  say "check directory: $out"
}

# One whole test run of one suite; prints its result line, returns 0 if passed.
test_suite() {
  SUITE=$1 TIMES="" R_VERSION="?" TEST_STATUS=1 COUNTS=""
  lock_suite
  rm -f "$ROOTS/$SUITE.info" "$ROOTS/$SUITE.result"
  t_suite=$(now)
  make_pristine_root
  configure_root
  step_start "apt (R and dependencies)"
  install_packages
  step_end
  record_info
  if [ "${WINCH_RSRC:-1}" != 0 ]; then
    step_start "R sources"
    fetch_r_sources
    step_end
  fi
  if [ "$FRESH" = 1 ]; then
    remove_root "$ROOTS/$SUITE-target"
  fi
  copy_repo
  run_tests
  result=failed
  [ "$TEST_STATUS" = 0 ] && result=passed
  say "times:$TIMES total=$(($(now) - t_suite))s"
  echo "== $SUITE (R $R_VERSION): $result${COUNTS:+ ($COUNTS)}" | tee "$ROOTS/$SUITE.result"
  exec 9>&-
  [ "$result" = passed ]
}

# ---------------------------------------------------------------------------

usage() {
  sed -n '2,/^set -eu/p' "$SELF" | sed -e '/^set -eu/d' -e 's/^# \{0,1\}//'
  exit "${1:-0}"
}

FRESH=0
case "${1:-}" in
  --in-namespace)
    shift
    in_namespace "$@"
    ;;
  --shell)
    [ $# -ge 2 ] || usage 2
    SUITE=$2
    shift 2
    ensure_host_tools
    [ -x "$ROOTS/$SUITE/usr/bin/Rscript" ] ||
      die "no prepared root for $SUITE: run 'sh tools/test-r-versions.sh $SUITE' first"
    # Refresh /winch only when no other session is in the root (it would
    # pull the files from under it); then hold the lock shared, like others.
    mkdir -p "$ROOTS"
    exec 9>"$ROOTS/$SUITE.lock"
    if flock -n -x 9; then
      copy_repo
      flock -s 9
    else
      flock -n -s 9 || die "the $SUITE root is being prepared by a test run"
      say "another session is using this root: $WORKDIR not refreshed" >&2
    fi
    [ $# -gt 0 ] || set -- /bin/bash
    enter "$SUITE" "$WORKDIR" "$@"
    ;;
  "" | -h | --help)
    usage 0
    ;;
  *)
    suites=""
    for a; do
      case "$a" in
        --fresh) FRESH=1 ;;
        all) suites="$suites $ALL_SUITES" ;;
        -*) usage 2 ;;
        *) suites="$suites $a" ;;
      esac
    done
    [ -n "$suites" ] || usage 2
    ensure_host_tools
    # Ctrl-C reaches the commands in the roots too; their namespaces undo
    # the mounts. Here, just say so.
    trap 'echo "test-r-versions: interrupted" >&2; exit 130' INT TERM HUP
    failed=0
    for s in $suites; do
      # In a subshell: a suite that cannot even be prepared (its `die`)
      # counts as failed, and the next one still runs. Not as `(...) || x`,
      # which would turn `set -e` off inside.
      rm -f "$ROOTS/$s.result"
      set +e
      (set -e; test_suite "$s")
      st=$?
      set -e
      [ "$st" -eq 0 ] || failed=1
    done
    echo "== summary"
    for s in $suites; do
      cat "$ROOTS/$s.result" 2>/dev/null || echo "== $s: failed (not tested: see the errors above)"
    done
    exit "$failed"
    ;;
esac
