#!/usr/bin/env bash
# The e2e suite on kind: a real Kubernetes cluster in Docker containers, the image built from the
# repository's Dockerfile, the operator installed with the helm chart, then the same suite that
# runs on the local cluster (.venv/bin/pytest e2e) pointed at it.
#
#   e2e/kind/run.sh [PYTEST_ARGS...]          e.g. e2e/kind/run.sh -k streaming
#
# It creates the kind cluster finishable-e2e from e2e/kind/cluster.yaml (both nodes mount the
# data directory at the same path), builds finishable-spark-operator:0.1.0, loads it into the
# nodes, runs `helm install fso charts/finishable-spark-operator` in the namespace finishable, runs
#   E2E_KUBECONFIG=<the cluster's kubeconfig> E2E_DATA_DIR=<dir> E2E_WORK_CLAIM=finishable-work \
#   E2E_IMAGE=finishable-spark-operator:0.1.0 .venv/bin/pytest e2e -v
# and deletes the cluster when it exits, whatever happened.
#
# Environment:
#   E2E_DATA_DIR       directory shared by this machine and every node (created if missing;
#                      default: a new temporary directory); pods write there as uid 1000
#   E2E_NAMESPACE      namespace of the test jobs, created by the suite (default finishable-e2e)
#   KEEP_CLUSTER=1     keep the cluster (and its kubeconfig) for a look afterwards
#   KIND_CLUSTER_NAME  the cluster's name (default finishable-e2e)
#   KIND_NODE_IMAGE    kind's node image (kind create cluster --image), default kind's own
#   SPARK_MASTER       the operator's --spark-master (chart value operator.sparkMaster); default
#                      executors as pods, local[2] runs Spark inside each driver pod
#   PYTEST             the pytest to run (default .venv/bin/pytest)
#
# Exit status:
#   0  the suite ran and passed
#   1  the suite failed, or a step before it did (the step is named on stderr)
#   3  skipped, NOT passed: no Docker engine here (docker is missing or `docker info` fails);
#      kind needs one. CI must treat 3 as "did not run", never as success.
#   4  a tool is missing: kind, kubectl, helm, or the project's .venv (make test creates it)
set -Eeuo pipefail

readonly SKIPPED_NO_DOCKER=3 MISSING_TOOL=4
readonly IMAGE=finishable-spark-operator:0.1.0 RELEASE=fso OPERATOR_NAMESPACE=finishable
readonly WORK_CLAIM=finishable-work

log() {
  printf 'e2e/kind/run.sh: %s\n' "$*" >&2
}

step="checking the tools"
begin() {
  step=$1
  log "$1"
}

skip_without_docker() {
  log "skipped: $1."
  # printf, not cat: this must work when PATH holds nothing at all.
  printf '%s\n' \
    "kind runs its Kubernetes nodes as containers: it needs a running Docker engine." \
    "The same e2e suite runs without Docker on the local cluster (the Kubernetes API emulator" \
    "plus a process kubelet that runs the pods as local processes):" \
    "" \
    "  .venv/bin/pytest e2e" \
    "" \
    "Exit status 3: the e2e run on kind was skipped, not passed." >&2
  exit "$SKIPPED_NO_DOCKER"
}

# Only shell builtins until Docker is found: the check must work with an empty PATH.
case ${BASH_SOURCE[0]} in
  */*) here=${BASH_SOURCE[0]%/*} ;;
  *) here=. ;;
esac
here=$(cd "$here" && pwd)
root=$(cd "$here/../.." && pwd)

if ! command -v docker >/dev/null 2>&1; then
  skip_without_docker "docker is not installed (no docker command on PATH)"
fi
if command -v timeout >/dev/null 2>&1; then
  docker_info=(timeout 60 docker info)
else
  docker_info=(docker info)
fi
if ! "${docker_info[@]}" >/dev/null 2>&1; then
  skip_without_docker "the Docker engine is not running or not reachable (docker info failed)"
fi

missing=()
for tool in kind kubectl helm; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if ((${#missing[@]} > 0)); then
  log "missing: ${missing[*]}. Install kind (https://kind.sigs.k8s.io), kubectl and helm (v3)."
  exit "$MISSING_TOOL"
fi
pytest=${PYTEST:-$root/.venv/bin/pytest}
if ! command -v "$pytest" >/dev/null 2>&1; then
  log "missing: $pytest. Run \`make test\` once: it creates .venv with the test dependencies."
  exit "$MISSING_TOOL"
fi

cluster=${KIND_CLUSTER_NAME:-finishable-e2e}
keep=${KEEP_CLUSTER:-0}
created=0 passed=0 own_data=0 work="" kubeconfig="" data_dir=""

diagnose() {
  ((created)) || return 0
  log "the cluster as it is now:"
  kubectl --kubeconfig "$kubeconfig" get fsj,pods,statefulsets -A -o wide >&2 || true
  kubectl --kubeconfig "$kubeconfig" logs --namespace "$OPERATOR_NAMESPACE" --tail 200 \
    --selector "app.kubernetes.io/instance=$RELEASE" >&2 || true
}

on_error() {
  log "failed (status $1) while ${step}: line $2: $3"
  diagnose
  exit 1
}

cleanup() {
  if ((created)) && [[ $keep == 1 ]]; then
    log "kept the cluster $cluster: export KUBECONFIG=$kubeconfig"
    log "delete it with: kind delete cluster --name $cluster"
    return
  fi
  if ((created)); then
    log "deleting the kind cluster $cluster"
    kind delete cluster --name "$cluster" --kubeconfig "$kubeconfig" >/dev/null 2>&1 ||
      log "could not delete the cluster: kind delete cluster --name $cluster"
  fi
  if [[ -n $work ]]; then
    rm -rf "$work"
  fi
  if ((own_data)); then
    if ((passed)) && rm -rf "$data_dir" 2>/dev/null; then
      return
    fi
    log "the jobs' data is left in $data_dir"
  fi
}

trap 'on_error $? $LINENO "$BASH_COMMAND"' ERR
trap cleanup EXIT

work=$(mktemp -d "${TMPDIR:-/tmp}/finishable-kind.XXXXXX")
kubeconfig=$work/kubeconfig
if [[ -n ${E2E_DATA_DIR:-} ]]; then
  mkdir -p "$E2E_DATA_DIR"
  data_dir=$E2E_DATA_DIR
else
  data_dir=$(mktemp -d "${TMPDIR:-/tmp}/finishable-e2e-data.XXXXXX")
  own_data=1
fi
# kind mounts need an absolute path with no symlinks (macOS: /var is /private/var).
data_dir=$(cd "$data_dir" && pwd -P)
# The pods run as uid 1000 and write their input and output there.
chmod a+rwx "$data_dir" 2>/dev/null || log "could not chmod $data_dir: uid 1000 must write there"

while read -r existing; do
  if [[ $existing == "$cluster" ]]; then
    log "a kind cluster named $cluster exists already (kept by KEEP_CLUSTER=1?)."
    log "delete it with \`kind delete cluster --name $cluster\`, or set KIND_CLUSTER_NAME."
    exit 1
  fi
done < <(kind get clusters 2>/dev/null || true)

cd "$root"

begin "building $IMAGE from $root/Dockerfile"
docker build --tag "$IMAGE" "$root"

begin "creating the kind cluster $cluster (data directory $data_dir)"
config=$(<"$here/cluster.yaml")
# shellcheck disable=SC2016 # the placeholder is literal text, replaced here
config=${config//'${E2E_DATA_DIR}'/$data_dir}
printf '%s\n' "$config" >"$work/cluster.yaml"
create=(kind create cluster --name "$cluster" --config "$work/cluster.yaml"
  --kubeconfig "$kubeconfig" --wait 180s)
if [[ -n ${KIND_NODE_IMAGE:-} ]]; then
  create+=(--image "$KIND_NODE_IMAGE")
fi
created=1
"${create[@]}"

begin "loading $IMAGE into the nodes with kind load"
kind load docker-image "$IMAGE" --name "$cluster"

begin "installing the chart with helm (release $RELEASE, namespace $OPERATOR_NAMESPACE)"
install=(helm install "$RELEASE" "$root/charts/finishable-spark-operator"
  --kubeconfig "$kubeconfig" --namespace "$OPERATOR_NAMESPACE" --create-namespace
  --set image.tag=0.1.0 --wait --timeout 5m)
if [[ -n ${SPARK_MASTER:-} ]]; then
  install+=(--set-string "operator.sparkMaster=$SPARK_MASTER")
fi
"${install[@]}"

# A stateful streaming job's work volume must be ReadWriteMany, which kind's local-path storage
# cannot give: a hostPath PersistentVolume on the directory every node mounts stands in for it,
# bound to the claim the suite names in its jobs' spec.workVolume (E2E_WORK_CLAIM).
namespace=${E2E_NAMESPACE:-finishable-e2e}
begin "creating the ReadWriteMany work claim $WORK_CLAIM in $namespace"
mkdir -p "$data_dir/work" && chmod a+rwx "$data_dir/work"
kubectl --kubeconfig "$kubeconfig" create namespace "$namespace"
kubectl --kubeconfig "$kubeconfig" apply -f - <<YAML
apiVersion: v1
kind: PersistentVolume
metadata: {name: finishable-e2e-work}
spec:
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteMany]
  storageClassName: ""
  hostPath: {path: "$data_dir/work", type: Directory}
  claimRef: {namespace: $namespace, name: $WORK_CLAIM}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: $WORK_CLAIM, namespace: $namespace}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: ""
  volumeName: finishable-e2e-work
  resources: {requests: {storage: 10Gi}}
YAML

begin "running the e2e suite against $cluster"
status=0
E2E_KUBECONFIG=$kubeconfig E2E_DATA_DIR=$data_dir E2E_IMAGE=$IMAGE E2E_WORK_CLAIM=$WORK_CLAIM \
  "$pytest" e2e -v "$@" || status=$?
if ((status != 0)); then
  diagnose
  log "the e2e suite failed (pytest exit status $status)"
  exit 1
fi
passed=1
log "the e2e suite passed on kind"
