#!/bin/sh
# Run one test tier and print where its minutes went (`make test`, `make test-all`).
#
# usage: testcluster/tools/run-tier.sh quick|all
#   quick  the tests marked quick (testcluster/tiers.py): what CI and every change run
#   all    every test of both tiers
#
# The one-time setup (the Python environment, the tools the tests run, the image the e2e pods
# run, and for the full tier the Kubernetes control plane built from its Go modules) is timed
# apart from the tests: on a fresh machine it is most of the first run, later runs
# find it cached and pay seconds. WORKERS (default 2) processes run the unit and component tests;
# E2E_RUNTIME (default container) runs the e2e pods as containers of the image, or as sandboxed
# processes (`process`: no container engine, no image step). E2E_CONTROL_PLANE (default real with
# container pods, emulator with process pods) is the local cluster's API: the Kubernetes control
# plane built from its Go modules, or the project's API emulator (no Go build for `make test`).
# E2E_REAL_NODES runs the e2e pods on that many real nodes (kubelet, kube-proxy, CoreDNS,
# containerd; root) under the real control plane; 0 on the project's kubelet. Default: 4 for the
# full tier where it can (root, container pods, the real control plane), 0 otherwise.
set -u

TIER="${1:-}"
case "$TIER" in
    quick) SELECT="--tier quick" ;;
    all) SELECT="--tier all" ;;
    *) echo "usage: $0 quick|all" >&2; exit 2 ;;
esac
MAKE="${MAKE:-make}"
WORKERS="${WORKERS:-2}"
E2E_RUNTIME="${E2E_RUNTIME:-container}"
if [ "$E2E_RUNTIME" = container ]; then E2E_CONTROL_PLANE="${E2E_CONTROL_PLANE:-real}"
else E2E_CONTROL_PLANE="${E2E_CONTROL_PLANE:-emulator}"; fi
if [ -z "${E2E_REAL_NODES:-}" ]; then
    E2E_REAL_NODES=0
    if [ "$TIER" = all ] && [ "$E2E_CONTROL_PLANE" = real ] && [ "$(id -u)" = 0 ]; then
        E2E_REAL_NODES=4
    fi
fi
BIN=.venv/bin
TIMES="$(mktemp)"
trap 'rm -f "$TIMES"' EXIT
STARTED="$(date +%s)"

report() {
    echo
    echo "make $( [ "$TIER" = quick ] && echo test || echo test-all ): where the minutes went"
    while IFS="$(printf '\t')" read -r done_label done_seconds done_result; do
        printf '  %-44s %5d s  %s\n' "$done_label" "$done_seconds" "$done_result"
    done <"$TIMES"
    printf '  %-44s %5d s\n' "total" "$(( $(date +%s) - STARTED ))"
}

# step LABEL COMMAND...: run it, record its seconds; on failure report and stop with its status.
step() {
    label="$1"; shift
    echo "== $label: $*"
    start="$(date +%s)"
    "$@"
    status=$?
    result=ok; [ "$status" = 0 ] || result="FAILED (exit $status)"
    printf '%s\t%s\t%s\n' "$label" "$(( $(date +%s) - start ))" "$result" >>"$TIMES"
    if [ "$status" != 0 ]; then report; exit "$status"; fi
}

step "setup: python environment (.venv)" "$MAKE" -s venv
step "setup: kubectl, helm, prometheus, postgres" "$MAKE" -s tools
step "setup: Spark's S3 connector and the tests' Kafka broker (Maven Central), the project's jar (javac)" "$MAKE" -s jars
if [ "$E2E_RUNTIME" = container ]; then
    step "setup: the image (docker engine, build)" "$MAKE" -s image
fi
# the full tier's component tests start the control plane whatever the e2e flows run on
if [ "$TIER" = all ] || [ "$E2E_CONTROL_PLANE" = real ]; then
    step "setup: the control plane (go build)" "$MAKE" -s control-plane
fi
if [ "$TIER" = all ] || [ "$E2E_REAL_NODES" != 0 ]; then
    step "setup: the real node (go build)" "$MAKE" -s real-node
fi
NODES=""; [ "$E2E_REAL_NODES" = 0 ] || NODES=", $E2E_REAL_NODES real nodes"
step "ruff" "$MAKE" -s lint
step "mypy --strict" "$MAKE" -s typecheck
# shellcheck disable=SC2086  # SELECT is two words
step "unit and component tests ($TIER)" \
    "$BIN/pytest" tests testcluster $SELECT -n "$WORKERS" --dist loadfile
# shellcheck disable=SC2086
step "e2e on the local cluster ($TIER, $E2E_RUNTIME, $E2E_CONTROL_PLANE$NODES)" \
    env E2E_RUNTIME="$E2E_RUNTIME" E2E_CONTROL_PLANE="$E2E_CONTROL_PLANE" \
    E2E_REAL_NODES="$E2E_REAL_NODES" "$BIN/pytest" e2e $SELECT
report
