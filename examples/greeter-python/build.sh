#!/usr/bin/env bash
# The virtual environment of the Python SDK tests (cached in ${SDK_BUILD_CACHE:-$HOME/.cache/keel-sdks}/python/venv).
set -euo pipefail
exec bash "$(cd "$(dirname "$0")" && pwd)/../../test/sdks/python/build.sh"
