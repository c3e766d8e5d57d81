#!/bin/sh
# Build the project's Spark data source (jvm/src: Batch reads through Spark's own file readers,
# docs/batch-runtime.md) and put it where Spark loads jars from.
#
#   jvm/build.sh DEST [SPARK_JARS]
#
# It is compiled with the JDK's javac against SPARK_JARS (default: DEST), the jars of the very
# Spark that runs it (pyspark's, pinned by pyproject.toml), so it cannot drift from it and nothing
# is downloaded. The jar is cached in ~/.cache/finishable/jvm/, keyed by the sources, this script
# and Spark's version: a second build of the same sources costs a copy.
set -eu

DEST="${1:-}"
[ -n "$DEST" ] || { echo "usage: $0 DEST [SPARK_JARS]" >&2; exit 2; }
SPARK_JARS="${2:-$DEST}"
ROOT="$(cd "$(dirname "$0")" && pwd)"
JAR=finishable-spark.jar
say() { echo "jvm: $*" >&2; }

command -v javac >/dev/null 2>&1 || { say "javac (a JDK 17) is needed to build $JAR"; exit 1; }
spark="$(find "$SPARK_JARS/" -maxdepth 1 -name "spark-sql_*.jar" -exec basename {} \; | head -n 1)"
[ -n "$spark" ] || { say "no Spark in $SPARK_JARS (spark-sql_*.jar)"; exit 1; }
key="$( (cat "$0"; echo "$spark"; find "$ROOT/src" -name '*.java' | LC_ALL=C sort | xargs cat) | sha256sum | cut -c1-16)"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/finishable/jvm/$key"
mkdir -p "$CACHE" "$DEST"
if command -v flock >/dev/null 2>&1; then exec 9>"$CACHE/.lock"; flock 9; fi
if [ ! -f "$CACHE/$JAR" ]; then
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    # shellcheck disable=SC2046  # one argument per source file
    javac --release 17 -Werror -Xlint:all,-serial,-processing,-path,-classfile -encoding UTF-8 \
        -cp "$SPARK_JARS/*" -d "$work/classes" $(find "$ROOT/src" -name '*.java')
    jar --create --file "$work/$JAR" -C "$work/classes" .
    chmod 0644 "$work/$JAR"
    mv "$work/$JAR" "$CACHE/$JAR"
    say "built $JAR against $spark into $CACHE (once per change of its sources)"
fi
if [ ! -f "$DEST/$JAR" ] || ! cmp -s "$CACHE/$JAR" "$DEST/$JAR"; then
    # A new file renamed over the old one: a running JVM keeps reading the jar it opened.
    cp "$CACHE/$JAR" "$DEST/.$JAR.$$"
    chmod 0644 "$DEST/.$JAR.$$"  # Spark's JVM skips a jar it cannot read, as another user
    mv -f "$DEST/.$JAR.$$" "$DEST/$JAR"
fi
