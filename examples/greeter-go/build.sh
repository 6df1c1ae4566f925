#!/usr/bin/env bash
# Builds the Greeter into ${SDK_BUILD_CACHE:-$HOME/.cache/keel-sdks}/greeter-go/ with the Go SDK tests' build script (the Go check, the cache).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec bash "$here/../../test/sdks/go/build.sh" "$here" "${SDK_BUILD_CACHE:-$HOME/.cache/keel-sdks}/greeter-go/greeter"
