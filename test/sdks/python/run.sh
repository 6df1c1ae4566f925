#!/usr/bin/env bash
# Runs the Python SDK test endpoint in the cached venv (build.sh makes it). exec, so the process
# the caller spawned is the server itself and a SIGKILL reaches it.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${SDK_BUILD_CACHE:-$HOME/.cache/keel-sdks}/python/venv/bin/python"
[ -x "$py" ] || "$here/build.sh"
cd "$here"
export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ in the clone
exec "$py" -u main.py
