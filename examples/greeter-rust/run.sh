#!/usr/bin/env bash
# Builds the Greeter (build.sh; later runs only check) and runs it on $PORT (default 9080).
set -euo pipefail
bash "$(dirname "$0")/build.sh"
exec "${SDK_BUILD_CACHE:-$HOME/.cache/keel-sdks}/rust-target/release/keel-greeter-rust"
