#!/bin/sh
# Build the Kubernetes control plane the e2e tier runs on from its Go modules, once per release.
#
# usage: testcluster/tools/build-control-plane.sh [COMPONENT...]
#   COMPONENT: kube-apiserver, kube-controller-manager, kube-scheduler, kubelet
#              (default: the first three)
#
# The release is the one testcluster/controlplane/go.mod requires (k8s.io/kubernetes, with its
# staging modules pinned beside it; go.sum checks every module). The binaries go to
# $FINISHABLE_CACHE/kubernetes-<version>/ (default ~/.cache/finishable): a second run finds them
# there and builds nothing. Prints the path of the directory last, after the versions and the
# minutes the build took.
set -eu

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
MODULE="$ROOT/testcluster/controlplane"
VERSION="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v[0-9]/ { print $2; exit }' "$MODULE/go.mod")"
if [ -z "$VERSION" ]; then
    echo "build-control-plane: no k8s.io/kubernetes version in $MODULE/go.mod" >&2
    exit 1
fi
COMPONENTS="${*:-kube-apiserver kube-controller-manager kube-scheduler}"
for component in $COMPONENTS; do
    case "$component" in
        kube-apiserver|kube-controller-manager|kube-scheduler|kubelet) ;;
        *) echo "build-control-plane: unknown component '$component' (kube-apiserver," \
                "kube-controller-manager, kube-scheduler or kubelet)" >&2
           exit 2 ;;
    esac
done
CACHE="${FINISHABLE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/finishable}/kubernetes-$VERSION"

missing=""
for component in $COMPONENTS; do
    [ -x "$CACHE/$component" ] || missing="$missing $component"
done
if [ -z "$missing" ]; then
    echo "$CACHE"
    exit 0
fi
if ! command -v go >/dev/null 2>&1; then
    echo "build-control-plane: go is needed to build$missing $VERSION (https://go.dev/dl," >&2
    echo "  or 'apt-get install golang'; the module asks for $(sed -n 's/^go //p' "$MODULE/go.mod"))" >&2
    exit 1
fi

minor="$(echo "$VERSION" | cut -d. -f2)"
# What `kubectl version` and the server's /version report: the release, not v0.0.0-master.
PKG=k8s.io/component-base/version
LDFLAGS="-s -w -X $PKG.gitVersion=$VERSION -X $PKG.gitMajor=1 -X $PKG.gitMinor=$minor"
LDFLAGS="$LDFLAGS -X $PKG.gitTreeState=clean -X $PKG.buildDate=1970-01-01T00:00:00Z"
mkdir -p "$CACHE"
echo "build-control-plane: building$missing $VERSION with $(go version | cut -d' ' -f3) into $CACHE" >&2
echo "  (a fresh machine downloads the modules and compiles for several minutes; then cached)" >&2
started="$(date +%s)"
for component in $missing; do
    component_started="$(date +%s)"
    # Static, as Kubernetes releases them; the kubelet links libc (cgo), as it is released too.
    cgo=0; [ "$component" = kubelet ] && cgo=1
    (cd "$MODULE" && CGO_ENABLED=$cgo go build -trimpath -ldflags "$LDFLAGS" \
        -o "$CACHE/$component.partial" "k8s.io/kubernetes/cmd/$component")
    mv "$CACHE/$component.partial" "$CACHE/$component"
    echo "  $component: $(( $(date +%s) - component_started )) s" >&2
done
for component in $COMPONENTS; do
    echo "  $("$CACHE/$component" --version 2>&1 | head -n 1)" >&2
done
echo "build-control-plane: built in $(( $(date +%s) - started )) s" >&2
echo "$CACHE"
