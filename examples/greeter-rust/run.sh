#!/usr/bin/env bash
# Builds (once; later runs only check) and runs the Rust Greeter on $PORT (default 9080).
set -euo pipefail
cd "$(dirname "$0")"
need=1.90
for tool in cargo rustc; do
  have=$("$tool" --version 2>/dev/null | awk '{print $2}') || have=
  if [ -z "$have" ] || [ "$(printf '%s\n%s\n' "$need" "${have%%-*}" | sort -V | head -1)" != "$need" ]; then
    echo "keel: the Rust Greeter needs Rust >= $need (found ${tool} ${have:-none}; install: https://rustup.rs, then rustup update stable)" >&2
    exit 1
  fi
done
# The target dir is the one the Rust SDK tests share, outside the clone: dependencies compile once.
export CARGO_TARGET_DIR="${SDK_BUILD_CACHE:-$HOME/.cache/keel-sdks}/rust-target"
cargo build --release --locked --quiet
exec "$CARGO_TARGET_DIR/release/keel-greeter-rust"
