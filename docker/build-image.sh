#!/bin/sh
# Build the project's image, try it, and print its name and size (`make image`).
#
#   docker/build-image.sh [IMAGE]        IMAGE defaults to finishable-spark-operator:0.1.0
#
# The engine is docker (its daemon is started when it is installed but not running, and docker.io
# is installed through apt-get when it is missing and this runs as root), or podman with
# ENGINE=podman. The base image is BASE (default python:3.11-slim-bookworm, the Dockerfile's):
# when it cannot be pulled, a Debian bookworm minbase root file system with Python 3.11 is made
# with mmdebstrap and imported as finishable-base:bookworm instead (BASE=local asks for that one
# at once). The build machine's CA bundle (for networks that re-sign TLS) and the versions of
# .venv (what the tests ran with) are handed to pip inside the build through docker/build-local/,
# never committed, and so are Spark's S3 connector's jars (docker/spark-jars.sh). The classic
# builder builds (DOCKER_BUILDKIT=0).
set -eu

IMAGE="${1:-finishable-spark-operator:0.1.0}"
BASE="${BASE:-python:3.11-slim-bookworm}"
LOCAL_BASE="finishable-base:bookworm"
ENGINE="${ENGINE:-docker}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
LOG_DIR="${TMPDIR:-/tmp}"

say() { echo "build-image: $*" >&2; }
die() { say "$*"; exit 1; }

# as_root and engine run commands without the engine lock's descriptor (9, see lock_engine): a
# process they leave running (dockerd, a daemon a package's install starts, rootless podman's pause
# process) would hold the lock for its whole life and keep later builds waiting.
as_root() {
    if [ "$(id -u)" = 0 ]; then "$@" 8>&- 9>&-
    elif command -v sudo >/dev/null 2>&1; then sudo -n "$@" 8>&- 9>&-
    else return 1; fi
}
engine() { "$ENGINE" "$@" 8>&- 9>&-; }

# Another apt-get (testcluster/tools/install-system-tools.sh of a test run beside this one, say) holds
# dpkg's lock: wait up to ten minutes for it instead of failing at once.
apt_get() { DEBIAN_FRONTEND=noninteractive as_root apt-get -o DPkg::Lock::Timeout=600 "$@"; }
apt_install() {
    command -v apt-get >/dev/null 2>&1 || return 1
    say "installing $*"
    apt_get install -y --no-install-recommends "$@" >/dev/null \
        || { apt_get update -q >/dev/null && apt_get install -y --no-install-recommends "$@" >/dev/null; }
}

# Two builds starting at once (two test runs on a fresh machine) would both install the engine,
# both start dockerd and both make the local base: the second waits until the first has them ready.
lock_engine() {
    command -v flock >/dev/null 2>&1 || return 0
    exec 9>"$LOG_DIR/finishable-build-image.lock"
    flock 9
}
unlock_engine() { exec 9>&-; }

# Two builds of one checkout share docker/build-local/ (their build context): one would remove what
# the other is handing its build. The second waits until the first has built. Descriptor 8 is the
# engine command's to close, as 9 is (a podman pause process would hold it).
lock_context() {
    command -v flock >/dev/null 2>&1 || return 0
    exec 8>"$LOG_DIR/finishable-build-context.$(printf %s "$ROOT" | cksum | cut -d' ' -f1).lock"
    flock 8
}
unlock_context() { exec 8>&-; }

engine_ready() {
    case "$ENGINE" in
        docker)
            if engine info >/dev/null 2>&1; then return 0; fi
            # A docker client alone (no daemon) is common: the daemon comes with docker.io.
            command -v dockerd >/dev/null 2>&1 || apt_install docker.io \
                || die "no docker daemon here and none can be installed (apt-get install docker.io), or set ENGINE=podman"
            say "starting dockerd (log: $LOG_DIR/finishable-dockerd.log)"
            as_root sh -c "nohup dockerd --storage-driver=overlay2 >'$LOG_DIR/finishable-dockerd.log' 2>&1 &" \
                || die "docker's daemon is not running and cannot be started here (not root)"
            tries=0
            until engine info >/dev/null 2>&1; do
                tries=$((tries + 1))
                [ "$tries" -lt 60 ] || die "dockerd did not start: $(tail -5 "$LOG_DIR/finishable-dockerd.log")"
                sleep 1
            done ;;
        podman)
            command -v podman >/dev/null 2>&1 || apt_install podman \
                || die "podman is missing: install it (apt-get install podman)" ;;
        *) die "ENGINE must be docker or podman, not '$ENGINE'" ;;
    esac
}

local_base() {
    if engine image inspect "$LOCAL_BASE" >/dev/null 2>&1; then return 0; fi
    command -v mmdebstrap >/dev/null 2>&1 || apt_install mmdebstrap \
        || die "mmdebstrap is needed to make a base image (apt-get install mmdebstrap), or set BASE"
    say "making $LOCAL_BASE with mmdebstrap (Debian bookworm minbase, python3, python3-venv)"
    tarball="$(mktemp "$LOG_DIR/finishable-base.XXXXXX.tar")"
    as_root mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates \
        bookworm "$tarball" \
        || { rm -f "$tarball"; die "mmdebstrap failed"; }
    engine import "$tarball" "$LOCAL_BASE" >/dev/null
    rm -f "$tarball"
}

lock_engine
engine_ready
if [ "$BASE" = local ]; then
    local_base; BASE="$LOCAL_BASE"
elif ! engine image inspect "$BASE" >/dev/null 2>&1 && ! engine pull -q "$BASE" >/dev/null 2>&1; then
    say "cannot pull $BASE: building on a local base instead"
    local_base; BASE="$LOCAL_BASE"
fi
unlock_engine

HANDED="$ROOT/docker/build-local"
lock_context
trap 'rm -rf "$HANDED/ca-certificates.crt" "$HANDED/constraints.txt" "$HANDED/jars"' EXIT
sh "$ROOT/docker/spark-jars.sh" "$HANDED/jars" || die "Spark's S3 connector could not be fetched"
# The project's own data source (jvm/), compiled against the Spark the tests run (.venv's pyspark,
# the version constraints.txt pins below).
spark_jars="$("$ROOT/.venv/bin/python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))' 2>/dev/null)" \
    || die "no .venv with pyspark to compile jvm/ against: run make venv first"
sh "$ROOT/jvm/build.sh" "$HANDED/jars" "$spark_jars" || die "jvm/ could not be built"
for bundle in "${SSL_CERT_FILE:-}" /etc/ssl/certs/ca-certificates.crt; do
    if [ -n "$bundle" ] && [ -s "$bundle" ]; then cp "$bundle" "$HANDED/ca-certificates.crt"; break; fi
done
if [ -x "$ROOT/.venv/bin/python" ]; then  # the versions the tests run with
    "$ROOT/.venv/bin/python" -m pip freeze --exclude-editable --quiet >"$HANDED/constraints.txt" 2>/dev/null \
        || rm -f "$HANDED/constraints.txt"
fi

say "building $IMAGE on $BASE with $ENGINE"
# One log per build: two builds at once would write over each other's.
build_log="$LOG_DIR/finishable-image-build.$$.log"
DOCKER_BUILDKIT=0 "$ENGINE" build --build-arg "BASE=$BASE" -t "$IMAGE" "$ROOT" >"$build_log" 2>&1 8>&- \
    || die "the build failed; its log ($build_log): $(tail -20 "$build_log")"
rm -rf "$build_log" "$HANDED/ca-certificates.crt" "$HANDED/constraints.txt" "$HANDED/jars"
trap - EXIT  # from here they may be another build's
unlock_context

user="$("$ENGINE" run --rm --entrypoint id "$IMAGE" -u)"
[ "$user" = 1000 ] || die "the image runs as uid $user, not 1000"
"$ENGINE" run --rm "$IMAGE" finishable version >&2 || die "finishable version failed in $IMAGE"
size="$("$ENGINE" image inspect -f '{{.Size}}' "$IMAGE")"
echo "$IMAGE $((size / 1000000)) MB"
