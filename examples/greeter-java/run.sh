#!/usr/bin/env bash
# Builds the Greeter (cached outside the clone, in ${SDK_BUILD_CACHE:-$HOME/.cache/keel-sdks}/greeter-java/)
# and runs it on $PORT (default 9080).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${SDK_BUILD_CACHE:-$HOME/.cache/keel-sdks}/greeter-java
fail() {
  echo "keel: the Java Greeter needs a JDK >= 17 and Maven ($1; install: apt-get install openjdk-17-jdk-headless maven)" >&2
  exit 1
}
command -v java >/dev/null || fail "no java on PATH"
command -v mvn >/dev/null || fail "no mvn on PATH"
major=$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')
[ "${major:-0}" -ge 17 ] 2>/dev/null || fail "java on PATH is ${major:-unknown}"

mkdir -p "$out"
stamp=$(cd "$here" && find pom.xml src -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
if ! { [ -f "$out/stamp" ] && [ "$(cat "$out/stamp")" = "$stamp" ] && [ -d "$out/lib" ]; }; then
  rm -rf "$out/lib" "$out/stamp"
  echo "keel: building the Java Greeter (log: $out/build.log)" >&2
  if ! mvn -B -Dstyle.color=never -f "$here/pom.xml" -DskipTests \
    -Dkeel.buildDir="$out/target" -Dkeel.libDir="$out/lib" package >"$out/build.log" 2>&1; then
    grep -E '^\[(ERROR|WARNING)\]' "$out/build.log" >&2 || tail -40 "$out/build.log" >&2
    exit 1
  fi
  echo "$stamp" >"$out/stamp"
fi
# Java 23+ warns on Netty's sun.misc.Unsafe use unless it is allowed.
flags=()
[ "$major" -ge 23 ] && flags=(--sun-misc-unsafe-memory-access=allow)
exec java "${flags[@]}" -cp "$out/lib/*" greeter.Greeter
