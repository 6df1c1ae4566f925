#!/usr/bin/env bash
# Builds the Java SDK test services into $SDK_BUILD_CACHE/java (jar + dependency jars in lib/) —
# or the Maven project in $1 into $2 (examples/greeter-java/build.sh does).
# Idempotent: skipped when the hash of pom.xml and src/ matches the last build's.
set -euo pipefail
here=$(cd "${1:-$(dirname "$0")}" && pwd)
out=${2:-${SDK_BUILD_CACHE:-$HOME/.cache/keel-sdks}/java}

need() {
  echo "keel: the Java SDK tests need a JDK >= 17 and Maven ($1; install: apt-get install openjdk-17-jdk-headless maven)" >&2
  exit 1
}
command -v java >/dev/null || need "no java on PATH"
command -v mvn >/dev/null || need "no mvn on PATH"
major=$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')
[ "${major:-0}" -ge 17 ] 2>/dev/null || need "java on PATH is ${major:-unknown}"

mkdir -p "$out"
exec 9>"$out/.lock"
flock 9 # concurrent callers wait for one build

stamp=$(cd "$here" && find pom.xml src -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
if [ -f "$out/stamp" ] && [ "$(cat "$out/stamp")" = "$stamp" ] && [ -d "$out/lib" ]; then
  exit 0
fi

rm -rf "$out/lib" "$out/stamp"
echo "keel: building $here (log: $out/build.log)" >&2
if ! mvn -B -Dstyle.color=never -f "$here/pom.xml" -DskipTests \
  -Dkeel.buildDir="$out/target" -Dkeel.libDir="$out/lib" package >"$out/build.log" 2>&1; then
  grep -E '^\[(ERROR|WARNING)\]' "$out/build.log" >&2 || tail -40 "$out/build.log" >&2
  exit 1
fi
echo "$stamp" >"$out/stamp"
