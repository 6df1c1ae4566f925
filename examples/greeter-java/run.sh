#!/usr/bin/env bash
# Builds the Greeter (build.sh, cached outside the clone) and runs it on $PORT (default 9080).
set -euo pipefail
bash "$(dirname "$0")/build.sh"
major=$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')
# Java 23+ warns on Netty's sun.misc.Unsafe use unless it is allowed.
flags=()
[ "${major:-0}" -ge 23 ] && flags=(--sun-misc-unsafe-memory-access=allow)
exec java "${flags[@]}" -cp "${SDK_BUILD_CACHE:-$HOME/.cache/keel-sdks}/greeter-java/lib/*" greeter.Greeter
