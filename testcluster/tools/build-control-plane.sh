#!/bin/sh
# Build the Kubernetes control plane the e2e tier runs on from its Go modules, once per release.
#
# usage: testcluster/tools/build-control-plane.sh [COMPONENT...]
#   COMPONENT: kube-apiserver, kube-controller-manager, kube-scheduler, etcd (the default), and
#              the real node's: kubelet, kube-proxy, coredns, pause (the pods' sandbox, C)
#
# The releases are those the modules pin: testcluster/controlplane/go.mod (k8s.io/kubernetes,
# its staging modules pinned beside it) and testcluster/controlplane/etcd/go.mod (etcd, in a
# module of its own so that its dependencies leave the Kubernetes pins alone), CoreDNS likewise
# (testcluster/controlplane/coredns/go.mod); go.sum checks every module. pause is Kubernetes' own
# build/pause/linux/pause.c from the k8s.io/kubernetes module, compiled static with cc. The binaries go to $FINISHABLE_CACHE/kubernetes-<version>/ and
# $FINISHABLE_CACHE/etcd-<version>/ (default ~/.cache/finishable): a second run finds them there
# and builds nothing. Prints each binary's path, one per line, after (on stderr) the versions and
# the seconds the build took.
set -eu

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
MODULE="$ROOT/testcluster/controlplane"
CACHE_ROOT="${FINISHABLE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/finishable}"

# version MODULE_DIR GO_MODULE: the version go.mod requires of GO_MODULE
version() {
    awk -v module="$2" '$1 == module && $2 ~ /^v[0-9]/ { print $2; exit }' "$1/go.mod"
}
K8S_VERSION="$(version "$MODULE" k8s.io/kubernetes)"
ETCD_VERSION="$(version "$MODULE/etcd" go.etcd.io/etcd/server/v3)"
COREDNS_VERSION="$(version "$MODULE/coredns" github.com/coredns/coredns)"
if [ -z "$K8S_VERSION" ] || [ -z "$ETCD_VERSION" ] || [ -z "$COREDNS_VERSION" ]; then
    echo "build-control-plane: no k8s.io/kubernetes version in $MODULE/go.mod, no" \
         "go.etcd.io/etcd/server/v3 version in $MODULE/etcd/go.mod or no" \
         "github.com/coredns/coredns version in $MODULE/coredns/go.mod" >&2
    exit 1
fi

# Where each component comes from: its module directory, package and cached path.
module_of() {
    case "$1" in etcd|coredns) echo "$MODULE/$1" ;; *) echo "$MODULE" ;; esac
}
package_of() {
    case "$1" in
        etcd) echo go.etcd.io/etcd/server/v3 ;;
        coredns) echo github.com/coredns/coredns ;;
        *) echo "k8s.io/kubernetes/cmd/$1" ;;
    esac
}
path_of() {
    case "$1" in
        etcd) echo "$CACHE_ROOT/etcd-$ETCD_VERSION/etcd" ;;
        coredns) echo "$CACHE_ROOT/coredns-$COREDNS_VERSION/coredns" ;;
        *) echo "$CACHE_ROOT/kubernetes-$K8S_VERSION/$1" ;;
    esac
}

COMPONENTS="${*:-kube-apiserver kube-controller-manager kube-scheduler etcd}"
for component in $COMPONENTS; do
    case "$component" in
        kube-apiserver|kube-controller-manager|kube-scheduler|etcd) ;;
        kubelet|kube-proxy|coredns|pause) ;;
        *) echo "build-control-plane: unknown component '$component' (kube-apiserver," \
                "kube-controller-manager, kube-scheduler, etcd, kubelet, kube-proxy, coredns" \
                "or pause)" >&2
           exit 2 ;;
    esac
done

missing=""
for component in $COMPONENTS; do
    [ -x "$(path_of "$component")" ] || missing="$missing $component"
done
if [ -n "$missing" ]; then
    if ! command -v go >/dev/null 2>&1; then
        echo "build-control-plane: go is needed to build$missing (Kubernetes $K8S_VERSION," \
             "etcd $ETCD_VERSION; https://go.dev/dl, or 'apt-get install golang'; the modules" \
             "ask for go $(sed -n 's/^go //p' "$MODULE/go.mod"))" >&2
        exit 1
    fi
    minor="$(echo "$K8S_VERSION" | cut -d. -f2)"
    # What `kubectl version` and the server's /version report: the release, not v0.0.0-master.
    PKG=k8s.io/component-base/version
    K8S_FLAGS="-s -w -X $PKG.gitVersion=$K8S_VERSION -X $PKG.gitMajor=1 -X $PKG.gitMinor=$minor"
    K8S_FLAGS="$K8S_FLAGS -X $PKG.gitTreeState=clean -X $PKG.buildDate=1970-01-01T00:00:00Z"
    echo "build-control-plane: building$missing (Kubernetes $K8S_VERSION, etcd $ETCD_VERSION)" \
         "with $(go version | cut -d' ' -f3) into $CACHE_ROOT" >&2
    echo "  (a fresh machine downloads the modules and compiles for minutes; then cached)" >&2
    started="$(date +%s)"
    for component in $missing; do
        component_started="$(date +%s)"
        target="$(path_of "$component")"
        mkdir -p "$(dirname "$target")"
        if [ "$component" = pause ]; then
            source="$(cd "$MODULE" && go mod download -json k8s.io/kubernetes \
                | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')/build/pause/linux/pause.c"
            cc -Os -static -DVERSION="$K8S_VERSION" -o "$target.partial" "$source"
        else
            flags="-s -w"
            case "$component" in etcd|coredns) ;; *) flags="$K8S_FLAGS" ;; esac
            # Static, as they are released; the kubelet links libc (cgo), as it is released too.
            cgo=0; [ "$component" = kubelet ] && cgo=1
            (cd "$(module_of "$component")" && CGO_ENABLED=$cgo go build -trimpath \
                -ldflags "$flags" -o "$target.partial" "$(package_of "$component")")
        fi
        mv "$target.partial" "$target"
        echo "  $component: $(( $(date +%s) - component_started )) s" >&2
    done
    echo "build-control-plane: built in $(( $(date +%s) - started )) s" >&2
fi
for component in $COMPONENTS; do
    case "$component" in
        pause) version_line="$("$(path_of pause)" -v 2>&1 | head -n 1)" ;;
        coredns) version_line="$("$(path_of coredns)" -version 2>&1 | head -n 1)" ;;
        *) version_line="$("$(path_of "$component")" --version 2>&1 | head -n 1)" ;;
    esac
    echo "  $component: $version_line" >&2
done
for component in $COMPONENTS; do
    path_of "$component"
done
