#!/usr/bin/env bash
# Installs the Apache Kafka broker of pom.xml (Maven Central, by package name) into
# ${KEEL_KAFKA_HOME:-~/.cache/keel-kafka/<version>-<pom digest>}/libs, once; prints that directory.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/pom.xml")"
digest="$(sha256sum "$here/pom.xml" | cut -c1-12)"
home="${KEEL_KAFKA_HOME:-$HOME/.cache/keel-kafka/$version-$digest}"
if [ ! -f "$home/.complete" ]; then
  command -v mvn >/dev/null 2>&1 || { echo "install.sh: Maven (mvn) is needed to fetch Apache Kafka $version" >&2; exit 1; }
  rm -rf "$home/libs"
  mkdir -p "$home/libs"
  # Maven 3.8's default maven-dependency-plugin (2.8) predates includeScope handling: pinned.
  mvn -q -B -Dstyle.color=never -f "$here/pom.xml" org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$home/libs" >&2
  touch "$home/.complete"
fi
echo "$home"
