#!/usr/bin/env bash
# Builds the Go SDK test services into ${SDK_BUILD_CACHE:-$HOME/.cache/keel-sdks}/go/, outside the
# clone — or the Go module in $1 into the binary $2 (examples/greeter-go/build.sh does).
# Go's build cache makes a rebuild with nothing changed a quick no-op.
set -euo pipefail
cd "${1:-$(dirname "$0")}"
need=1.25
fail() { echo "keel: the Go SDK tests need Go >= $need (install: https://go.dev/doc/install): $1" >&2; exit 1; }
command -v go >/dev/null || fail "go is not on PATH"
# local: never let go.mod's version make go download a toolchain.
export GOTOOLCHAIN=local
have=$(go env GOVERSION 2>/dev/null) || fail "go env failed"
have=${have#go}
[[ $(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1) == "$need" ]] || fail "found $have"
bin="${2:-${SDK_BUILD_CACHE:-$HOME/.cache/keel-sdks}/go/keel-sdk-go}"
mkdir -p "$(dirname "$bin")"
go build -buildvcs=false -o "$bin" .
