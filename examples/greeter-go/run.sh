#!/usr/bin/env bash
# Builds the Greeter (cached outside the clone, in ${SDK_BUILD_CACHE:-$HOME/.cache/keel-sdks}/greeter-go/)
# and runs it on $PORT (default 9080).
set -euo pipefail
cd "$(dirname "$0")"
need=1.25
fail() { echo "keel: the Go Greeter needs Go >= $need (install: https://go.dev/doc/install): $1" >&2; exit 1; }
command -v go >/dev/null || fail "go is not on PATH"
# local: never let go.mod's version make go download a toolchain.
export GOTOOLCHAIN=local
have=$(go env GOVERSION 2>/dev/null) || fail "go env failed"
have=${have#go}
[[ $(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1) == "$need" ]] || fail "found $have"
bin="${SDK_BUILD_CACHE:-$HOME/.cache/keel-sdks}/greeter-go/greeter"
mkdir -p "$(dirname "$bin")"
go build -buildvcs=false -o "$bin" .
exec "$bin"
