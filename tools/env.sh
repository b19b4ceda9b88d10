# Sourced by the tools scripts: keep cargo's downloads and builds inside the
# repository (never in ~/.cargo) and shared between builds.
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export WINCH_CARGO_HOME="${WINCH_CARGO_HOME:-$ROOT/.cache/cargo}"
export WINCH_CARGO_TARGET_DIR="${WINCH_CARGO_TARGET_DIR:-$ROOT/.cache/target}"
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
# R CMD check reads the package's UTF-8 sources in a UTF-8 locale; on a
# minimal system without LANG (or with a locale that is not installed), R
# tries to switch to en_US.UTF-8, which may not exist. C.UTF-8 always does.
case "$(locale charmap 2>/dev/null)" in
  UTF-8) ;;
  *) export LANG=C.UTF-8 LC_ALL=C.UTF-8 ;;
esac
