#!/usr/bin/env bash
# Builds the Greeter with the Rust SDK tests' build script (the Rust check, their shared target
# directory outside the clone, so dependencies compile once).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec bash "$here/../../test/sdks/rust/build.sh" "$here"
