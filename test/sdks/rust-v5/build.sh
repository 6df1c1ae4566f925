#!/usr/bin/env bash
# Builds the Rust SDK (protocol v5) test services: the same toolchain check and shared target
# directory as the newest SDK's crate (test/sdks/rust/build.sh), run for this crate.
set -euo pipefail
exec bash "$(dirname "$0")/../rust/build.sh" "$(cd "$(dirname "$0")" && pwd)"
