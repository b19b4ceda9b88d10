# Sourced by the tools scripts: keep cargo's downloads and builds inside the
# repository (never in ~/.cargo) and shared between builds.
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export WINCH_CARGO_HOME="${WINCH_CARGO_HOME:-$ROOT/.cache/cargo}"
export WINCH_CARGO_TARGET_DIR="${WINCH_CARGO_TARGET_DIR:-$ROOT/.cache/target}"
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
