#!/usr/bin/env bash
# Builds the Rust SDK test services (or the crate in the directory given, as rust-v5/build.sh
# does). The target dir lives outside the clone and is shared by every Rust crate here, so the
# SDK's dependency tree compiles once; a warm rebuild is a no-op check.
set -euo pipefail
cd "${1:-$(dirname "$0")}"
need=1.90
for tool in cargo rustc; do
  have=$("$tool" --version 2>/dev/null | awk '{print $2}') || have=
  if [ -z "$have" ] || [ "$(printf '%s\n%s\n' "$need" "${have%%-*}" | sort -V | head -1)" != "$need" ]; then
    echo "keel: the Rust SDK tests need Rust >= $need (found ${tool} ${have:-none}; install: https://rustup.rs, then rustup update stable)" >&2
    exit 1
  fi
done
export CARGO_TARGET_DIR="${SDK_BUILD_CACHE:-$HOME/.cache/keel-sdks}/rust-target"
cargo build --release --locked --quiet
