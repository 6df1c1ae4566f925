#!/usr/bin/env bash
# Builds the virtual environment the Python SDK services (and examples/greeter-python) run in,
# cached outside the clone. Idempotent: it re-installs only when requirements.txt or the Python
# it was built with changes (a hash stamp), so a warm run is a few checks.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${SDK_BUILD_CACHE:-$HOME/.cache/keel-sdks}/python"
venv="$cache/venv"
need='keel: the Python SDK tests need python3 >= 3.11 with venv (install: apt-get install python3 python3-venv, or pyenv install 3.11)'

py=""
for cand in python3 python3.13 python3.12 python3.11; do
  # Runs each candidate: a pyenv shim for a version that is not installed fails here.
  if command -v "$cand" >/dev/null 2>&1 &&
     "$cand" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; then
    py="$cand"; break
  fi
done
[ -n "$py" ] || { echo "$need" >&2; exit 1; }

want="$({ cat "$here/requirements.txt"; "$py" -c 'import sys; print(sys.version, sys.base_prefix)'; } | sha256sum | cut -d' ' -f1)"
stamp="$venv/.keel-stamp"
fresh() { [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && "$venv/bin/python" -c '' 2>/dev/null; }
fresh && exit 0

mkdir -p "$cache"
# Test files build in parallel: one builds, the others wait for it and find it fresh.
exec 9>"$cache/.lock"
flock 9
fresh && exit 0
rm -rf "$venv"
"$py" -m venv "$venv" || { echo "$need" >&2; exit 1; }
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$here/requirements.txt"
echo "$want" > "$stamp"
