#!/usr/bin/env bash
# exec: the process the caller spawned is the service, so its signals reach it.
exec "${SDK_BUILD_CACHE:-$HOME/.cache/keel-sdks}/go/keel-sdk-go" "$@"
