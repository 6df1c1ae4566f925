#!/usr/bin/env bash
# Runs the Java SDK test services (built by build.sh) on 127.0.0.1:$PORT: on Java 25 by
# default, on Java 17 with JAVA_VERSION=17. exec: the process the caller spawned is the JVM.
set -euo pipefail
lib=${SDK_BUILD_CACHE:-$HOME/.cache/keel-sdks}/java/lib
[ -d "$lib" ] || { echo "keel: $lib is missing: run $(dirname "$0")/build.sh first" >&2; exit 1; }
# The first JDK of the version found: the path the machines here have, else any under /usr/lib/jvm.
pick() { for d in "$@"; do [ -x "$d/bin/java" ] && { echo "$d"; return; }; done; echo "$1"; }
case "${JAVA_VERSION:=25}" in
  # SDK >= 2.9 loads its native shared core through the FFM API, which Java 25 warns about
  # unless enabled (harmless before); Netty's off-heap buffers still use sun.misc.Unsafe.
  25) home=${JAVA25_HOME:-$(pick /usr/lib/jvm/temurin-25-jdk-amd64 /usr/lib/jvm/*-25-*)}
      flags=(--enable-native-access=ALL-UNNAMED --sun-misc-unsafe-memory-access=allow) ;;
  17) home=${JAVA17_HOME:-$(pick /usr/lib/jvm/java-17-openjdk-amd64 /usr/lib/jvm/*-17-*)}; flags=() ;;
  *) echo "keel: JAVA_VERSION must be 17 or 25, not $JAVA_VERSION" >&2; exit 1 ;;
esac
[ -x "$home/bin/java" ] || { echo "keel: no Java $JAVA_VERSION at $home (set JAVA${JAVA_VERSION}_HOME)" >&2; exit 1; }
exec "$home/bin/java" "${flags[@]}" -cp "$lib/*" keel.sdks.Main
