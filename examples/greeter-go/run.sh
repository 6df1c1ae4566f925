#!/usr/bin/env bash
# Builds the Greeter (build.sh, cached outside the clone) and runs it on $PORT (default 9080).
set -euo pipefail
bash "$(dirname "$0")/build.sh"
exec "${SDK_BUILD_CACHE:-$HOME/.cache/keel-sdks}/greeter-go/greeter"
