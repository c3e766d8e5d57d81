#!/bin/sh
# Put Spark's S3 connector (docker/spark-jars.txt: hadoop-aws and the AWS SDK modules it needs)
# into a directory Spark puts on its classpath: pyspark's jars/ (`make jars` does .venv's; the
# image build hands them to the Dockerfile through docker/build-local/jars/).
#
#   docker/spark-jars.sh DEST
#
# Each jar is fetched once from Maven Central (MAVEN_REPOSITORY overrides the URL) into
# ~/.cache/finishable/spark-jars/ and checked against the sha256 the list pins: a mismatch stops
# with an error and keeps nothing. DEST gets a copy of each; jars an earlier list put there and
# this one no longer names are removed (DEST/.finishable-spark-jars lists what was put there).
set -eu

DEST="${1:-}"
[ -n "$DEST" ] || { echo "usage: $0 DEST (pyspark's jars/ directory, say)" >&2; exit 2; }
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
LIST="$ROOT/docker/spark-jars.txt"
REPOSITORY="${MAVEN_REPOSITORY:-https://repo1.maven.org/maven2}"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/finishable/spark-jars"
MANIFEST="$DEST/.finishable-spark-jars"

say() { echo "spark-jars: $*" >&2; }
sha256() { sha256sum "$1" | cut -d' ' -f1; }
fetch() {  # URL FILE
    if command -v curl >/dev/null 2>&1; then curl -fsSL --retry 3 -o "$2" "$1"
    else python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$1" "$2"
    fi
}

mkdir -p "$CACHE" "$DEST"
# Two runs at once (two test runs on a fresh machine) fetch each jar once.
if command -v flock >/dev/null 2>&1; then exec 9>"$CACHE/.lock"; flock 9; fi

names=""
fetched=0
while read -r coordinate pinned; do
    case "$coordinate" in ''|'#'*) continue ;; esac
    group="${coordinate%%:*}"; rest="${coordinate#*:}"
    artifact="${rest%%:*}"; version="${rest#*:}"
    name="$artifact-$version.jar"
    names="$names $name"
    cached="$CACHE/$name"
    if [ ! -f "$cached" ] || [ "$(sha256 "$cached")" != "$pinned" ]; then
        url="$REPOSITORY/$(echo "$group" | tr . /)/$artifact/$version/$name"
        partial="$(mktemp "$CACHE/.$name.XXXXXX")"
        fetch "$url" "$partial" || {
            rm -f "$partial"
            say "cannot fetch $url (Maven Central must be reachable, or set MAVEN_REPOSITORY)"
            exit 1
        }
        got="$(sha256 "$partial")"
        if [ "$got" != "$pinned" ]; then
            rm -f "$partial"
            say "$url has sha256 $got, not the $pinned docker/spark-jars.txt pins"
            exit 1
        fi
        chmod 0644 "$partial"  # mktemp's 0600 would leave it unreadable to the image's user
        mv "$partial" "$cached"
        fetched=$((fetched + 1))
    fi
    if [ ! -f "$DEST/$name" ] || ! cmp -s "$cached" "$DEST/$name"; then
        cp "$cached" "$DEST/$name"
    fi
    chmod 0644 "$DEST/$name"  # Spark's JVM skips a jar it cannot read, as another user
done <"$LIST"
[ "$fetched" = 0 ] || say "fetched $fetched jar(s) from $REPOSITORY into $CACHE (once per machine)"

if [ -f "$MANIFEST" ]; then
    while read -r old; do
        case " $names " in *" $old "*) ;; *) rm -f "$DEST/$old" ;; esac
    done <"$MANIFEST"
fi
# shellcheck disable=SC2086  # one name a line
printf '%s\n' $names >"$MANIFEST"
