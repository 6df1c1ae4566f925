#!/usr/bin/env bash
# Builds the Greeter into ${SDK_BUILD_CACHE:-$HOME/.cache/keel-sdks}/greeter-java/ with the Java SDK tests' build script (the JDK and
# Maven checks, the hash stamp that skips an unchanged build).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec bash "$here/../../test/sdks/java/build.sh" "$here" "${SDK_BUILD_CACHE:-$HOME/.cache/keel-sdks}/greeter-java"
