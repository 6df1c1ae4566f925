#!/usr/bin/env bash
# Builds the virtual environment (shared with test/sdks/python, cached in
# ${SDK_BUILD_CACHE:-$HOME/.cache/keel-sdks}/python/venv) and runs the Greeter on $PORT (default 9080).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bash "$here/build.sh"
cd "$here"
export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ in the clone
exec "${SDK_BUILD_CACHE:-$HOME/.cache/keel-sdks}/python/venv/bin/python" -u greeter.py
