#!/usr/bin/env bash
# exec, so the process the caller spawned is the service itself (a SIGKILL reaches it).
bin="${SDK_BUILD_CACHE:-$HOME/.cache/keel-sdks}/rust-target/release/keel-sdk-test-rust-v5"
[ -x "$bin" ] || { echo "keel: $bin is missing; run $(dirname "$0")/build.sh first" >&2; exit 1; }
exec "$bin" "$@"
