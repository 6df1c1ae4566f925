#!/usr/bin/env bash
# Builds the Go SDK test services into ${SDK_BUILD_CACHE:-$HOME/.cache/keel-sdks}/go/, outside the clone.
# Go's build cache makes a rebuild with nothing changed a quick no-op.
set -euo pipefail
cd "$(dirname "$0")"
need=1.25
fail() { echo "keel: the Go SDK tests need Go >= $need (install: https://go.dev/doc/install): $1" >&2; exit 1; }
command -v go >/dev/null || fail "go is not on PATH"
# local: never let go.mod's version make go download a toolchain.
export GOTOOLCHAIN=local
have=$(go env GOVERSION 2>/dev/null) || fail "go env failed"
have=${have#go}
[[ $(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1) == "$need" ]] || fail "found $have"
out="${SDK_BUILD_CACHE:-$HOME/.cache/keel-sdks}/go"
mkdir -p "$out"
go build -buildvcs=false -o "$out/keel-sdk-go" .
